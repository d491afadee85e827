// Element-wise ops and softmax (SiLU, SwiGLU and GELU through the ISA's row loops, row_ops.h; the rest reference), and
// the backward of those a training step uses. Element-wise loops are split in contiguous chunks across threads.
#include <algorithm>
#include <cmath>

#include "ascent/base/error.h"
#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/ops.h"
#include "ascent/kernels/cpu/row_ops.h"
#include "ascent/kernels/cpu/row_sums.h"

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
  for_each_chunk(n, [&](int64_t a, int64_t b) { gelu_tanh_row(x + a, b - a, y + a); });
}

void gelu_tanh_backward(const float* x, const float* dy, int64_t n, float* dx) {
  for_each_chunk(n, [&](int64_t a, int64_t b) { gelu_tanh_backward_row(x + a, dy + a, b - a, dx + a); });
}

void swiglu_forward(const float* gate, const float* up, int64_t n, float* y) {
  for_each_chunk(n, [&](int64_t a, int64_t b) { swiglu_row(gate + a, up + a, b - a, y + a); });
}

void swiglu_backward(const float* gate, const float* up, const float* dy, int64_t n, float* dgate, float* dup) {
  for_each_chunk(
      n, [&](int64_t a, int64_t b) { swiglu_backward_row(gate + a, up + a, dy + a, b - a, dgate + a, dup + a); });
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

void mul_vec_backward(const float* x, int64_t T, int64_t C, const float* w, int64_t P, const float* dy, float* dx,
                      float* dw) {
  ASCENT_CHECK(P > 0 && C % P == 0, "mul_vec_backward: row width {} is not a multiple of the weight's {}", C, P);
  // x and dy seen as (T * C / P, P): dw sums each column's products over those rows.
  const std::vector<double> sums = sum_over_rows(T * (C / P), P, [&](int64_t r, double* acc) {
    for (int64_t p = 0; p < P; ++p) acc[p] += static_cast<double>(dy[r * P + p]) * x[r * P + p];
  });
  for (int64_t p = 0; p < P; ++p) dw[p] += static_cast<float>(sums[static_cast<size_t>(p)]);
  for_each_chunk(T * C, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) dx[i] = dy[i] * w[(i % C) % P];
  });
}

void mul_forward(const float* a, const float* b, int64_t n, float* y) {
  for_each_chunk(n, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) y[i] = a[i] * b[i];
  });
}

}  // namespace ascent::kernels
