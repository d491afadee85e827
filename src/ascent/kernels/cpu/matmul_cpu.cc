// Reference matmul and embedding for every weight storage type: each weight row is converted to f32 once, then
// dotted with every activation row. Work is split over output columns so decode (T = 1) uses every thread.
#include <cmath>
#include <vector>

#include "ascent/base/error.h"
#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/ops.h"
#include "ascent/kernels/cpu/row_ops.h"

namespace ascent::kernels {

float dot_f32(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  }
  for (int j = 0; i < n; ++i, ++j) acc[j] += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

namespace {

// Row n of w as f32: in place for f32 weights, otherwise widened into buf (K floats).
const float* weight_row(const Tensor& w, int64_t n, std::vector<float>& buf) {
  const int64_t K = w.shape[1];
  if (w.dtype == DType::F32) return w.f32() + n * K;
  widen_row(w.dtype, w.row_ptr(n), buf.data(), K);
  return buf.data();
}

}  // namespace

void matmul_forward(const float* x, int64_t T, const Tensor& w, const float* bias, float* y, const float* residual) {
  ASCENT_CHECK(w.shape.size() == 2, "matmul: weight must be 2-D, got {}", shape_str(w.shape));
  const int64_t N = w.shape[0], K = w.shape[1];
  ThreadPool::global().parallel_for(N, [&](int64_t n0, int64_t n1) {
    std::vector<float> row(static_cast<size_t>(K));  // (K,) one weight row in f32
    // A single activation row reads each weight row once: dot it in its stored type instead of widening it.
    const bool direct = T == 1 && has_dot_stored();
    for (int64_t n = n0; n < n1; ++n) {
      if (direct) {
        const float v = dot_stored(x, w.dtype, w.row_ptr(n), K) + (bias != nullptr ? bias[n] : 0.0f);
        y[n] = residual != nullptr ? residual[n] + v : v;
        continue;
      }
      const float* wr = weight_row(w, n, row);
      const float b = bias != nullptr ? bias[n] : 0.0f;
      for (int64_t t = 0; t < T; ++t) {
        const float v = dot_row(x + t * K, wr, K) + b;
        y[t * N + n] = residual != nullptr ? residual[t * N + n] + v : v;
      }
    }
  });
}

void matmul_multi_forward(const float* x, int64_t T, std::span<const Tensor* const> ws,
                          std::span<const float* const> biases, std::span<float* const> outs) {
  ASCENT_CHECK(ws.size() == biases.size() && ws.size() == outs.size(),
               "matmul_multi: {} weights, {} biases, {} outputs", ws.size(), biases.size(), outs.size());
  std::vector<int64_t> first(ws.size() + 1, 0);  // global output column where each weight starts
  for (size_t i = 0; i < ws.size(); ++i) {
    ASCENT_CHECK(ws[i]->shape.size() == 2 && ws[i]->shape[1] == ws[0]->shape[1],
                 "matmul_multi: weight {} has shape {}, expected (N, {})", i, shape_str(ws[i]->shape), ws[0]->shape[1]);
    first[i + 1] = first[i] + ws[i]->shape[0];
  }
  const int64_t K = ws[0]->shape[1];
  ThreadPool::global().parallel_for(first.back(), [&](int64_t g0, int64_t g1) {
    std::vector<float> row(static_cast<size_t>(K));
    size_t i = 0;
    for (int64_t g = g0; g < g1; ++g) {
      while (g >= first[i + 1]) ++i;
      const Tensor& w = *ws[i];
      const int64_t n = g - first[i], N = w.shape[0];
      const float* wr = weight_row(w, n, row);
      const float b = biases[i] != nullptr ? biases[i][n] : 0.0f;
      for (int64_t t = 0; t < T; ++t) outs[i][t * N + n] = dot_row(x + t * K, wr, K) + b;
    }
  });
}

void matmul_swiglu_forward(const float* x, int64_t T, const Tensor& wg, const Tensor& wu, float* y) {
  ASCENT_CHECK(wg.shape == wu.shape && wg.shape.size() == 2, "matmul_swiglu: gate {} and up {} differ",
               shape_str(wg.shape), shape_str(wu.shape));
  const int64_t N = wg.shape[0], K = wg.shape[1];
  ThreadPool::global().parallel_for(N, [&](int64_t n0, int64_t n1) {
    std::vector<float> grow(static_cast<size_t>(K)), urow(static_cast<size_t>(K));
    for (int64_t n = n0; n < n1; ++n) {
      const float* g = weight_row(wg, n, grow);
      const float* u = weight_row(wu, n, urow);
      for (int64_t t = 0; t < T; ++t) {
        const float gv = dot_row(x + t * K, g, K), uv = dot_row(x + t * K, u, K);
        y[t * N + n] = gv / (1.0f + std::exp(-gv)) * uv;  // the same expression as swiglu_forward
      }
    }
  });
}

void embedding_forward(const Tensor& table, std::span<const int32_t> ids, float* out) {
  const int64_t V = table.rows(), C = table.cols();
  for (size_t t = 0; t < ids.size(); ++t) {
    ASCENT_CHECK(ids[t] >= 0 && ids[t] < V, "token id {} at position {} is outside the vocabulary (size {})", ids[t], t,
                 V);
  }
  ThreadPool::global().parallel_for(static_cast<int64_t>(ids.size()), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) widen_row(table.dtype, table.row_ptr(ids[t]), out + t * C, C);
  });
}

}  // namespace ascent::kernels
