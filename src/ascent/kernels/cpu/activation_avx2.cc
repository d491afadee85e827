// AVX2 SiLU and SwiGLU rows: the reference's expression x / (1 + e^-x) (times up) with an 8-lane exp
// (simd_avx2.h, about 1 ulp) and an exact division. The unfused graph ops and the fused matmul + SwiGLU call the same
// row function.
#include <immintrin.h>

#include "ascent/kernels/cpu/row_ops.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")

#include "ascent/kernels/cpu/simd_avx2.h"

namespace ascent::kernels {
namespace {

inline __m256 silu8(__m256 x) {
  const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

inline __m256i tail_mask8(int64_t left) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left < 8 ? left : 8)), idx);
}

}  // namespace

void silu_row_avx2(const float* x, int64_t n, float* y) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, silu8(_mm256_loadu_ps(x + i)));
  if (i < n) {
    const __m256i m = tail_mask8(n - i);
    _mm256_maskstore_ps(y + i, m, silu8(_mm256_maskload_ps(x + i, m)));
  }
}

void swiglu_row_avx2(const float* gate, const float* up, int64_t n, float* y) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_mul_ps(silu8(_mm256_loadu_ps(gate + i)), _mm256_loadu_ps(up + i)));
  }
  if (i < n) {
    const __m256i m = tail_mask8(n - i);
    _mm256_maskstore_ps(y + i, m, _mm256_mul_ps(silu8(_mm256_maskload_ps(gate + i, m)), _mm256_maskload_ps(up + i, m)));
  }
}

}  // namespace ascent::kernels

#pragma GCC pop_options
