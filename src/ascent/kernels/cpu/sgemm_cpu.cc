#include "ascent/kernels/cpu/sgemm.h"

#include "ascent/base/thread_pool.h"

namespace ascent::kernels {
namespace {

inline float at(const GemmOperand& x, int64_t r, int64_t c) {
  return x.transposed ? x.data[c * x.ld + r] : x.data[r * x.ld + c];
}

void rows(int64_t m0, int64_t m1, int64_t N, int64_t K, const GemmOperand& a, const GemmOperand& b, float beta,
          float* c, int64_t ldc) {
  for (int64_t i = m0; i < m1; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float s = 0.0f;
      for (int64_t k = 0; k < K; ++k) s += at(a, i, k) * at(b, k, j);
      float& out = c[i * ldc + j];
      out = beta == 0.0f ? s : beta * out + s;
    }
}

}  // namespace

void sgemm_ref(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, float beta, float* c, int64_t ldc) {
  rows(0, M, N, K, a, b, beta, c, ldc);
}

void sgemm(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, float beta, float* c, int64_t ldc) {
  ThreadPool::global().parallel_for(M, [&](int64_t m0, int64_t m1) { rows(m0, m1, N, K, a, b, beta, c, ldc); });
}

}  // namespace ascent::kernels
