#include "ascent/quant/awq.h"

#include <algorithm>
#include <cmath>

#include "ascent/base/error.h"
#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/ops.h"
#include "ascent/tensor/quantize.h"

namespace ascent::quant {
namespace {

// Y (R, N) = X W^T in f32 through the matmul engine (w widened to f32 first, so no activation rounding).
std::vector<float> outputs(const Tensor& w32, const CalibRows& c) {
  std::vector<float> y(static_cast<size_t>(c.rows() * w32.shape[0]));
  kernels::matmul_forward(c.x.data(), c.rows(), w32, nullptr, y.data());
  return y;
}

double rel_err(const std::vector<float>& ref, const std::vector<float>& got) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(ref[i]) - got[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0.0 ? num / den : num;
}

}  // namespace

void CalibRows::add(const float* rows_x, int64_t n, int64_t k) {
  if (K == 0) {
    K = k;
    abs_sum.assign(static_cast<size_t>(k), 0.0);
  }
  ASCENT_CHECK(k == K, "calibration: rows of {} values for a layer with {} inputs", k, K);
  for (int64_t r = 0; r < n; ++r) {
    const float* row = rows_x + r * k;
    for (int64_t i = 0; i < k; ++i) abs_sum[static_cast<size_t>(i)] += std::fabs(row[i]);
    if (rows() < cap) x.insert(x.end(), row, row + k);
  }
  seen += n;
}

AwqResult awq_int4(const Tensor& w, int group, const CalibRows& c) {
  ASCENT_CHECK(w.shape.size() == 2 && c.K == w.shape[1] && c.rows() > 0,
               "awq: weight {} and {} calibration rows of {} values do not fit", shape_str(w.shape), c.rows(), c.K);
  const int64_t N = w.shape[0], K = w.shape[1];
  const Tensor w32 = to_f32(w);
  const std::vector<float> ref = outputs(w32, c);
  AwqResult best;
  best.q = quantize_int4(w32, group);
  best.err_rtn = best.err_scaled = rel_err(ref, outputs(to_f32(best.q), c));
  std::vector<float> mean(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) {
    mean[static_cast<size_t>(k)] = static_cast<float>(c.abs_sum[static_cast<size_t>(k)] / static_cast<double>(c.seen));
  }
  std::vector<float> inv_s(static_cast<size_t>(K)), best_inv;
  constexpr int kGrid = 20;
  for (int a = 1; a <= kGrid; ++a) {
    const float alpha = static_cast<float>(a) / kGrid;
    // s = mean^alpha, normalised so its geometric middle is 1 (keeps the weights' range in place).
    float lo = INFINITY, hi = 0.0f;
    for (int64_t k = 0; k < K; ++k) {
      const float s = std::pow(std::max(mean[static_cast<size_t>(k)], 1e-4f), alpha);
      inv_s[static_cast<size_t>(k)] = s;
      lo = std::min(lo, s);
      hi = std::max(hi, s);
    }
    const float mid = std::sqrt(lo * hi);
    for (float& v : inv_s) v = mid / v;  // input_scale = 1 / s
    Tensor q = quantize_int4(w32, group, inv_s);
    const double e = rel_err(ref, outputs(to_f32(q), c));
    if (e < best.err_scaled) {
      best.err_scaled = e;
      best.alpha = alpha;
      best.q = q;
      best_inv = inv_s;
    }
  }
  // Clip search per (row, group): the ratio of the range that minimises that group's contribution to the output
  // error, sum over rows r of (X_r,g . (w_g - q_g))^2, given the chosen scale.
  const int64_t Kp = padded_cols(DType::I4, K), G = Kp / group, R = c.rows();
  std::vector<float> clip(static_cast<size_t>(N * G), 1.0f);
  std::vector<float> xs(static_cast<size_t>(R * Kp), 0.0f);  // (R, Kp) calibration rows times input_scale
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t k = 0; k < K; ++k) {
      xs[static_cast<size_t>(r * Kp + k)] =
          c.x[static_cast<size_t>(r * K + k)] * (best_inv.empty() ? 1.0f : best_inv[static_cast<size_t>(k)]);
    }
  }
  ThreadPool::global().parallel_for(N, [&](int64_t n0, int64_t n1) {
    std::vector<float> row(static_cast<size_t>(Kp), 0.0f), deq(static_cast<size_t>(group));
    std::vector<uint8_t> codes(static_cast<size_t>(group));
    for (int64_t n = n0; n < n1; ++n) {
      row_to_f32(w32, n, row.data());
      if (!best_inv.empty()) {
        for (int64_t k = 0; k < K; ++k) row[static_cast<size_t>(k)] /= best_inv[static_cast<size_t>(k)];
      }
      for (int64_t g = 0; g < G; ++g) {
        const float* wg = row.data() + g * group;
        double best_e = INFINITY;
        for (int step = 0; step <= 10; ++step) {
          const float ratio = 1.0f - 0.05f * static_cast<float>(step);
          const float d = quantize_int4_group(wg, group, ratio, codes.data());
          for (int j = 0; j < group; ++j)
            deq[static_cast<size_t>(j)] = wg[j] - d * static_cast<float>(codes[static_cast<size_t>(j)] - 8);
          double e = 0.0;
          for (int64_t r = 0; r < R; ++r) {
            const float* xr = xs.data() + r * Kp + g * group;
            double dot = 0.0;
            for (int j = 0; j < group; ++j) dot += static_cast<double>(xr[j]) * deq[static_cast<size_t>(j)];
            e += dot * dot;
          }
          if (e < best_e) {
            best_e = e;
            clip[static_cast<size_t>(n * G + g)] = ratio;
          }
        }
      }
    }
  });
  Tensor clipped = quantize_int4(w32, group, best_inv, clip);
  best.err_final = rel_err(ref, outputs(to_f32(clipped), c));
  if (best.err_final < best.err_scaled) {
    best.q = clipped;
  } else {
    best.err_final = best.err_scaled;  // clipping did not pay on these rows
  }
  return best;
}

}  // namespace ascent::quant
