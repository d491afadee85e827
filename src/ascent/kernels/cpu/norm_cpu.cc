// Reference RMSNorm (whole-row or per-group) and LayerNorm, threaded over rows. Sums are taken in double so the
// result does not depend on accumulation order (to within a double's rounding, far below a float's).
#include <cmath>

#include "ascent/base/error.h"
#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/ops.h"
#include "ascent/kernels/cpu/row_ops.h"

namespace ascent::kernels {

void rms_norm_forward(const float* x, int64_t T, int64_t C, const float* w, float eps, int64_t group, float* y) {
  ASCENT_CHECK(group > 0 && C % group == 0, "rms_norm: row width {} is not a multiple of group {}", C, group);
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
      // Eight interleaved partial sums in a fixed order: one serial chain of double adds would take about half of a
      // decode step's norm, and as much per row in prefill.
      double part[8] = {};
      int64_t c = 0;
      for (; c + 8 <= group; c += 8) {
        for (int j = 0; j < 8; ++j) part[j] += static_cast<double>(xr[c + j]) * xr[c + j];
      }
      double ss = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
      for (; c < group; ++c) ss += static_cast<double>(xr[c]) * xr[c];
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
      double sum = 0.0;
      for (int64_t i = 0; i < C; ++i) sum += xr[i];
      const double mean = sum / static_cast<double>(C);
      double var = 0.0;
      for (int64_t i = 0; i < C; ++i) var += (xr[i] - mean) * (xr[i] - mean);
      const float inv = static_cast<float>(1.0 / std::sqrt(var / static_cast<double>(C) + eps));
      const float m = static_cast<float>(mean);
      for (int64_t i = 0; i < C; ++i) yr[i] = (xr[i] - m) * inv * w[i] + (b != nullptr ? b[i] : 0.0f);
    }
  });
}

}  // namespace ascent::kernels
