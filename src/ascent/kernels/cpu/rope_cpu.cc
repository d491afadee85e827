// Reference rotary position embedding in both pair layouts, and its backward (the opposite rotation). Angles are
// computed in f32 as pos * inv_freq, the way Hugging Face computes them, so logits match PyTorch to rounding.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ascent/base/error.h"
#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/ops.h"

namespace ascent::kernels {
namespace {

// cos and sin of every (row, pair) angle of the last call on this thread, with the positions and frequencies they
// were taken for. A decode step ropes q and k of every layer at the same position with the same frequencies. So the
// 2 x layers calls share one set of angles, whose std::cos and std::sin per pair are most of a decode rope call's
// work. The same std::cos/std::sin values either way: no bits move.
struct RopeAngles {
  std::vector<int32_t> pos;
  std::vector<float> freq;
  std::vector<float> cos, sin;  // (T, half)
};

const RopeAngles& angles_for(std::span<const int32_t> pos, std::span<const float> inv_freq) {
  thread_local RopeAngles a;
  if (std::ranges::equal(a.pos, pos) && std::ranges::equal(a.freq, inv_freq)) return a;
  const auto half = static_cast<int64_t>(inv_freq.size()), T = static_cast<int64_t>(pos.size());
  a.pos.assign(pos.begin(), pos.end());
  a.freq.assign(inv_freq.begin(), inv_freq.end());
  a.cos.resize(static_cast<size_t>(T * half));
  a.sin.resize(static_cast<size_t>(T * half));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(pos[static_cast<size_t>(t)]) * inv_freq[static_cast<size_t>(i)];
      a.cos[static_cast<size_t>(t * half + i)] = std::cos(angle);
      a.sin[static_cast<size_t>(t * half + i)] = std::sin(angle);
    }
  }
  return a;
}

// One head (xh: D = 2 * half floats) rotated by the angles cs, sn (inverse: by their opposites, the transpose of
// the rotation, which is its backward).
inline void rope_head(float* xh, const float* cs, const float* sn, int64_t half, RopeStyle style,
                      bool inverse = false) {
  for (int64_t i = 0; i < half; ++i) {
    const int64_t ia = style == RopeStyle::Half ? i : 2 * i;
    const int64_t ib = style == RopeStyle::Half ? i + half : 2 * i + 1;
    const float x0 = xh[ia], x1 = xh[ib];
    const float s = inverse ? -sn[i] : sn[i];
    xh[ia] = x0 * cs[i] - x1 * s;
    xh[ib] = x1 * cs[i] + x0 * s;
  }
}

void check_rope(int64_t D, std::span<const float> inv_freq) {
  ASCENT_CHECK(D % 2 == 0, "rope: head dim {} must be even", D);
  ASCENT_CHECK(static_cast<int64_t>(inv_freq.size()) == D / 2, "rope: {} frequencies for head dim {}", inv_freq.size(),
               D);
}

void rope_rows(float* x, int64_t T, int64_t H, int64_t D, std::span<const int32_t> pos, std::span<const float> inv_freq,
               RopeStyle style, bool inverse) {
  check_rope(D, inv_freq);
  ASCENT_CHECK(static_cast<int64_t>(pos.size()) == T, "rope: {} positions for {} rows", pos.size(), T);
  const int64_t half = D / 2;
  const RopeAngles& a = angles_for(pos, inv_freq);  // the caller's: workers only read it
  ThreadPool::global().parallel_for(T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* cs = a.cos.data() + t * half;
      const float* sn = a.sin.data() + t * half;
      for (int64_t h = 0; h < H; ++h) rope_head(x + t * H * D + h * D, cs, sn, half, style, inverse);
    }
  });
}

}  // namespace

void rope_heads(float* x_row, int64_t h0, int64_t h1, int64_t D, int32_t pos, std::span<const float> inv_freq,
                RopeStyle style) {
  check_rope(D, inv_freq);
  const RopeAngles& a = angles_for(std::span<const int32_t>(&pos, 1), inv_freq);  // this thread's
  for (int64_t h = h0; h < h1; ++h) rope_head(x_row + h * D, a.cos.data(), a.sin.data(), D / 2, style);
}

void rope_forward(float* x, int64_t T, int64_t H, int64_t D, std::span<const int32_t> pos,
                  std::span<const float> inv_freq, RopeStyle style) {
  rope_rows(x, T, H, D, pos, inv_freq, style, /*inverse=*/false);
}

void rope_backward(float* dx, int64_t T, int64_t H, int64_t D, std::span<const int32_t> pos,
                   std::span<const float> inv_freq, RopeStyle style) {
  rope_rows(dx, T, H, D, pos, inv_freq, style, /*inverse=*/true);
}

}  // namespace ascent::kernels
