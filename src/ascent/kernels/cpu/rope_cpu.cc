// Reference rotary position embedding in both pair layouts. Angles are computed in f32 as pos * inv_freq, the way
// Hugging Face computes them, so logits match PyTorch to rounding.
#include <cmath>

#include "ascent/base/error.h"
#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/ops.h"

namespace ascent::kernels {

void rope_forward(float* x, int64_t T, int64_t H, int64_t D, std::span<const int32_t> pos,
                  std::span<const float> inv_freq, RopeStyle style) {
  ASCENT_CHECK(D % 2 == 0, "rope: head dim {} must be even", D);
  ASCENT_CHECK(static_cast<int64_t>(inv_freq.size()) == D / 2, "rope: {} frequencies for head dim {}", inv_freq.size(),
               D);
  ASCENT_CHECK(static_cast<int64_t>(pos.size()) == T, "rope: {} positions for {} rows", pos.size(), T);
  const int64_t half = D / 2;
  ThreadPool::global().parallel_for(T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        const float angle = static_cast<float>(pos[t]) * inv_freq[i];
        const float c = std::cos(angle), s = std::sin(angle);
        for (int64_t h = 0; h < H; ++h) {
          float* xh = x + t * H * D + h * D;
          const int64_t a = style == RopeStyle::Half ? i : 2 * i;
          const int64_t b = style == RopeStyle::Half ? i + half : 2 * i + 1;
          const float x0 = xh[a], x1 = xh[b];
          xh[a] = x0 * c - x1 * s;
          xh[b] = x1 * c + x0 * s;
        }
      }
    }
  });
}

}  // namespace ascent::kernels
