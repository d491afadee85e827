// Element-wise ops and softmax (SiLU and SwiGLU through the ISA's row loop, row_ops.h; the rest reference).
// Element-wise loops are split in contiguous chunks across threads.
#include <algorithm>
#include <cmath>

#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/ops.h"
#include "ascent/kernels/cpu/row_ops.h"

namespace ascent::kernels {
namespace {

template <class Fn>
void for_each_chunk(int64_t n, Fn&& fn) {
  // Small arrays are not worth waking workers for.
  if (n < 16384) {
    fn(0, n);
    return;
  }
  ThreadPool::global().parallel_for(n, fn);
}

}  // namespace

void softmax_forward(const float* x, int64_t R, int64_t C, float* y) {
  ThreadPool::global().parallel_for(R, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * C;
      float* yr = y + r * C;
      const float mx = *std::max_element(xr, xr + C);
      double sum = 0.0;
      for (int64_t i = 0; i < C; ++i) {
        yr[i] = std::exp(xr[i] - mx);
        sum += yr[i];
      }
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t i = 0; i < C; ++i) yr[i] *= inv;
    }
  });
}

void silu_forward(const float* x, int64_t n, float* y) {
  for_each_chunk(n, [&](int64_t a, int64_t b) { silu_row(x + a, b - a, y + a); });
}

void gelu_tanh_forward(const float* x, int64_t n, float* y) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for_each_chunk(n, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) {
      const float v = x[i];
      y[i] = 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
    }
  });
}

void swiglu_forward(const float* gate, const float* up, int64_t n, float* y) {
  for_each_chunk(n, [&](int64_t a, int64_t b) { swiglu_row(gate + a, up + a, b - a, y + a); });
}

void add_forward(const float* a, const float* b, int64_t n, float* y) {
  for_each_chunk(n, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) y[i] = a[i] + b[i];
  });
}

void mul_vec_forward(const float* x, int64_t T, int64_t C, const float* w, int64_t P, float* y) {
  for_each_chunk(T * C, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) y[i] = x[i] * w[(i % C) % P];
  });
}

void mul_forward(const float* a, const float* b, int64_t n, float* y) {
  for_each_chunk(n, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) y[i] = a[i] * b[i];
  });
}

}  // namespace ascent::kernels
