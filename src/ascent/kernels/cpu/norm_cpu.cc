// Reference RMSNorm (whole-row or per-group) and LayerNorm and their backward, threaded over rows. Sums are taken in
// double so the result does not depend on accumulation order (to within a double's rounding, far below a float's).
// LayerNorm's rows dispatch by ISA to norm_avx512.cc, which gives these functions' bits.
#include <cmath>
#include <utility>
#include <vector>

#include "ascent/base/error.h"
#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/isa.h"
#include "ascent/kernels/cpu/ops.h"
#include "ascent/kernels/cpu/row_ops.h"
#include "ascent/kernels/cpu/row_sums.h"

namespace ascent::kernels {
namespace {

// Eight interleaved double partial sums of f(i) over i < n, added in a fixed order. One serial chain of double adds
// waits out each add's latency: it took about half of a decode step's RMSNorm, and made LayerNorm's backward the
// slowest op per element of a training step.
template <class F>
double sum8(int64_t n, F&& f) {
  double part[8] = {};
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    for (int j = 0; j < 8; ++j) part[j] += f(c + j);
  }
  double s = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  for (; c < n; ++c) s += f(c);
  return s;
}

// The sum of squares of xr[0, n).
double sum_squares(const float* xr, int64_t n) {
  return sum8(n, [&](int64_t i) { return static_cast<double>(xr[i]) * xr[i]; });
}

void check_group(int64_t C, int64_t group) {
  ASCENT_CHECK(group > 0 && C % group == 0, "rms_norm: row width {} is not a multiple of group {}", C, group);
}

// A row's mean and 1 / sqrt(var + eps), as layer_norm_forward takes them.
std::pair<double, double> layer_norm_stats_ref(const float* xr, int64_t C, float eps) {
  const double mean = sum8(C, [&](int64_t i) { return static_cast<double>(xr[i]); }) / static_cast<double>(C);
  const double var = sum8(C, [&](int64_t i) { return (xr[i] - mean) * (xr[i] - mean); });
  return {mean, 1.0 / std::sqrt(var / static_cast<double>(C) + eps)};
}

std::pair<double, double> layer_norm_stats(const float* xr, int64_t C, float eps) {
  return active_isa() == Isa::Avx512 ? layer_norm_stats_avx512(xr, C, eps) : layer_norm_stats_ref(xr, C, eps);
}

// One row of layer_norm_backward: dx's row, and the row's dw and db terms added to acc[0, C) and acc[C, 2C).
void layer_norm_backward_row_ref(const float* xr, const float* dyr, const float* w, int64_t C, float eps, double* acc,
                                 float* dxr) {
  const auto n = static_cast<double>(C);
  // Plain names, not a structured binding: clang 14 (the fuzz build) cannot capture a binding in a lambda.
  const std::pair<double, double> stats = layer_norm_stats_ref(xr, C, eps);
  const double mean = stats.first, inv = stats.second;
  const double sum_g = sum8(C, [&](int64_t i) { return static_cast<double>(dyr[i]) * w[i]; });
  const double sum_gx = sum8(C, [&](int64_t i) { return static_cast<double>(dyr[i]) * w[i] * ((xr[i] - mean) * inv); });
  for (int64_t i = 0; i < C; ++i) {
    const double xhat = (xr[i] - mean) * inv;
    acc[i] += dyr[i] * xhat;
    acc[C + i] += dyr[i];
  }
  const double mg = sum_g / n, mgx = sum_gx / n;
  for (int64_t i = 0; i < C; ++i) {
    const double xhat = (xr[i] - mean) * inv;
    dxr[i] = static_cast<float>(inv * (static_cast<double>(dyr[i]) * w[i] - mg - xhat * mgx));
  }
}

}  // namespace

void rms_norm_forward(const float* x, int64_t T, int64_t C, const float* w, float eps, int64_t group, float* y) {
  check_group(C, group);
  const int64_t G = C / group;
  ThreadPool::global().parallel_for(T * G, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * group;
      float* yr = y + r * group;
      // Every line of the row and the weights requested at once. In decode, the matmul's threads just wrote the row,
      // half of it on the other core (which may sit on another die). The sum below would otherwise meet those misses
      // one after another.
      prefetch_span(xr, group * static_cast<int64_t>(sizeof(float)));
      if (w != nullptr) prefetch_span(w, group * static_cast<int64_t>(sizeof(float)));
      const double ss = sum_squares(xr, group);
      const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(group) + eps));
      if (w == nullptr) {
        for (int64_t i = 0; i < group; ++i) yr[i] = xr[i] * inv;
      } else {
        for (int64_t i = 0; i < group; ++i) yr[i] = (xr[i] * inv) * w[i];
      }
    }
  });
}

void layer_norm_forward(const float* x, int64_t T, int64_t C, const float* w, const float* b, float eps, float* y) {
  ThreadPool::global().parallel_for(T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* xr = x + t * C;
      float* yr = y + t * C;
      const auto [mean, inv_d] = layer_norm_stats(xr, C, eps);
      const auto inv = static_cast<float>(inv_d);
      const auto m = static_cast<float>(mean);
      for (int64_t i = 0; i < C; ++i) yr[i] = (xr[i] - m) * inv * w[i] + (b != nullptr ? b[i] : 0.0f);
    }
  });
}

// Per group of n values, with xhat = x * inv and g = dy * w: dx = inv * (g - xhat * mean(g * xhat)), dw += dy * xhat.
// Each row's sums read dy before its dx is written, so dx may alias dy.
void rms_norm_backward(const float* x, int64_t T, int64_t C, const float* w, float eps, int64_t group, const float* dy,
                       float* dx, float* dw) {
  check_group(C, group);
  const auto n = static_cast<double>(group);
  const std::vector<double> sums =
      sum_over_rows(T * (C / group), w != nullptr ? group : 0, [&](int64_t r, double* acc) {
        const float* xr = x + r * group;
        const float* dyr = dy + r * group;
        const double inv = 1.0 / std::sqrt(sum_squares(xr, group) / n + eps);
        double dot = 0.0;
        for (int64_t i = 0; i < group; ++i) {
          const double xhat = xr[i] * inv;
          const double g = w != nullptr ? static_cast<double>(dyr[i]) * w[i] : dyr[i];
          dot += g * xhat;
          if (w != nullptr) acc[i] += dyr[i] * xhat;
        }
        const double m = dot / n;
        float* dxr = dx + r * group;
        for (int64_t i = 0; i < group; ++i) {
          const double g = w != nullptr ? static_cast<double>(dyr[i]) * w[i] : dyr[i];
          dxr[i] = static_cast<float>(inv * (g - xr[i] * inv * m));
        }
      });
  if (w != nullptr) {
    for (int64_t i = 0; i < group; ++i) dw[i] += static_cast<float>(sums[static_cast<size_t>(i)]);
  }
}

// Per row, with xhat = (x - mean) * inv and g = dy * w: dx = inv * (g - mean(g) - xhat * mean(g * xhat)),
// dw += dy * xhat, db += dy. Each row's sums read dy before its dx is written, so dx may alias dy.
void layer_norm_backward(const float* x, int64_t T, int64_t C, const float* w, float eps, const float* dy, float* dx,
                         float* dw, float* db) {
  const bool simd = active_isa() == Isa::Avx512;
  const std::vector<double> sums = sum_over_rows(T, 2 * C, [&](int64_t t, double* acc) {
    (simd ? layer_norm_backward_row_avx512 : layer_norm_backward_row_ref)(x + t * C, dy + t * C, w, C, eps, acc,
                                                                          dx + t * C);
  });
  for (int64_t i = 0; i < C; ++i) {
    dw[i] += static_cast<float>(sums[static_cast<size_t>(i)]);
    db[i] += static_cast<float>(sums[static_cast<size_t>(C + i)]);
  }
}

}  // namespace ascent::kernels
