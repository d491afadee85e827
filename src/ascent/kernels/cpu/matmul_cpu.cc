// Reference matmul and embedding for every weight storage type: each weight row is converted to f32 once, then
// dotted with every activation row. Work is split over output columns so decode (T = 1) uses every thread.
#include <vector>

#include "ascent/base/error.h"
#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/ops.h"

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

void matmul_forward(const float* x, int64_t T, const Tensor& w, const float* bias, float* y) {
  ASCENT_CHECK(w.shape.size() == 2, "matmul: weight must be 2-D, got {}", shape_str(w.shape));
  const int64_t N = w.shape[0], K = w.shape[1];
  ThreadPool::global().parallel_for(N, [&](int64_t n0, int64_t n1) {
    std::vector<float> row(static_cast<size_t>(K));  // (K,) one weight row in f32
    for (int64_t n = n0; n < n1; ++n) {
      const float* wr = row.data();
      if (w.dtype == DType::F32) {
        wr = w.f32() + n * K;
      } else {
        dequantize_row(w.dtype, w.row_ptr(n), row.data(), K);
      }
      const float b = bias != nullptr ? bias[n] : 0.0f;
      for (int64_t t = 0; t < T; ++t) y[t * N + n] = dot_f32(x + t * K, wr, K) + b;
    }
  });
}

void embedding_forward(const Tensor& table, std::span<const int32_t> ids, float* out) {
  const int64_t V = table.rows(), C = table.cols();
  for (size_t t = 0; t < ids.size(); ++t) {
    ASCENT_CHECK(ids[t] >= 0 && ids[t] < V, "token id {} at position {} is outside the vocabulary (size {})", ids[t],
                 t, V);
  }
  ThreadPool::global().parallel_for(static_cast<int64_t>(ids.size()), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) dequantize_row(table.dtype, table.row_ptr(ids[t]), out + t * C, C);
  });
}

}  // namespace ascent::kernels
