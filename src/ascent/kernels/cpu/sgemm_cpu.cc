#include <cmath>
#include <vector>

#include "ascent/base/cpu_features.h"
#include "ascent/base/error.h"
#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/isa.h"
#include "ascent/kernels/cpu/sgemm.h"
#include "ascent/tensor/dtype.h"

namespace ascent::kernels {
namespace {

inline float at(const GemmOperand& x, int64_t r, int64_t c) {
  return x.transposed ? x.data[c * x.ld + r] : x.data[r * x.ld + c];
}

// sgemm.h's order: s = beta * c (0 when beta = 0), then one fma per k in order.
void rows(int64_t m0, int64_t m1, int64_t N, int64_t K, const GemmOperand& a, const GemmOperand& b, float beta,
          float* c, int64_t ldc) {
  for (int64_t i = m0; i < m1; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float& out = c[i * ldc + j];
      float s = beta == 0.0f ? 0.0f : beta * out;
      for (int64_t k = 0; k < K; ++k) s = std::fma(at(a, i, k), at(b, k, j), s);
      out = s;
    }
}

// A stored operand of `rows` x `cols` with each element rounded by `round` (to bf16 or fp16 and widened back), densely
// (ld = cols).
template <class Round>
std::vector<float> rounded(const GemmOperand& x, int64_t rows, int64_t cols, Round round) {
  std::vector<float> r(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) r[static_cast<size_t>(i * cols + j)] = round(x.data[i * x.ld + j]);
  }
  return r;
}

// sgemm on rounded dense copies of A and B: what the variants without a kernel of their own for a rounding compute.
template <class Round>
void sgemm_rounded(int64_t M, int64_t N, int64_t K, const GemmOperand& a, const GemmOperand& b, float beta, float* c,
                   int64_t ldc, Round round) {
  const std::vector<float> ar = rounded(a, a.transposed ? K : M, a.transposed ? M : K, round);
  const std::vector<float> br = rounded(b, b.transposed ? N : K, b.transposed ? K : N, round);
  sgemm(M, N, K, {ar.data(), a.transposed ? M : K, a.transposed}, {br.data(), b.transposed ? K : N, b.transposed}, beta,
        c, ldc);
}

void check_shapes(const char* fn, int64_t M, int64_t N, int64_t K, const GemmOperand& a, const GemmOperand& b,
                  int64_t ldc) {
  ASCENT_CHECK(M >= 0 && N >= 0 && K >= 0, "{}: negative shape M={} N={} K={}", fn, M, N, K);
  ASCENT_CHECK(a.ld >= (a.transposed ? M : K) && b.ld >= (b.transposed ? K : N) && ldc >= N,
               "{}: a row stride (lda={}, ldb={}, ldc={}) is shorter than its row for M={} N={} K={}", fn, a.ld, b.ld,
               ldc, M, N, K);
}

using SgemmFn = void (*)(int64_t, int64_t, int64_t, GemmOperand, GemmOperand, float, float*, int64_t);

// The product on the variant active_isa() picks; false under Ref, whose loop the caller runs.
bool run_simd(SgemmFn avx512, SgemmFn avx2, int64_t M, int64_t N, int64_t K, const GemmOperand& a, const GemmOperand& b,
              float beta, float* c, int64_t ldc) {
  switch (active_isa()) {
    case Isa::Avx512:
      avx512(M, N, K, a, b, beta, c, ldc);
      return true;
    case Isa::Avx2:
      avx2(M, N, K, a, b, beta, c, ldc);
      return true;
    case Isa::Ref:
      break;
  }
  return false;
}

}  // namespace

void sgemm_ref(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, float beta, float* c, int64_t ldc) {
  check_shapes("sgemm", M, N, K, a, b, ldc);
  rows(0, M, N, K, a, b, beta, c, ldc);
}

void sgemm(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, float beta, float* c, int64_t ldc) {
  check_shapes("sgemm", M, N, K, a, b, ldc);
  if (run_simd(sgemm_avx512, sgemm_avx2, M, N, K, a, b, beta, c, ldc)) return;
  ThreadPool::global().parallel_for(M, [&](int64_t m0, int64_t m1) { rows(m0, m1, N, K, a, b, beta, c, ldc); });
}

void sgemm_bf16(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, float beta, float* c, int64_t ldc) {
  check_shapes("sgemm_bf16", M, N, K, a, b, ldc);
  if (active_isa() == Isa::Avx512 && cpu_features().avx512_bf16) return sgemm_bf16_avx512(M, N, K, a, b, beta, c, ldc);
  sgemm_rounded(M, N, K, a, b, beta, c, ldc, bf16_rounded);
}

void sgemm_f16(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, float beta, float* c, int64_t ldc) {
  check_shapes("sgemm_f16", M, N, K, a, b, ldc);
  if (run_simd(sgemm_f16_avx512, sgemm_f16_avx2, M, N, K, a, b, beta, c, ldc)) return;
  sgemm_rounded(M, N, K, a, b, beta, c, ldc, f16_rounded);
}

}  // namespace ascent::kernels
