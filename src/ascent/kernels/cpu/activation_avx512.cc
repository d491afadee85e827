// AVX-512 SiLU and SwiGLU rows: the reference's expression x / (1 + e^-x) (times up) with a vector exp
// (simd_avx512.h, about 1 ulp) and an exact division. The unfused graph ops and the fused matmul + SwiGLU call the
// same row function, so switching fusion off leaves results bitwise unchanged.
#include <immintrin.h>

#include "ascent/kernels/cpu/row_ops.h"

#pragma GCC push_options
// GCC 12's AVX-512 intrinsics leave undefined pass-through operands that trip -Wmaybe-uninitialized inside the
// system header (GCC bug 105593), as in gemm_avx512_common.h.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma")

#include "ascent/kernels/cpu/simd_avx512.h"

namespace ascent::kernels {
namespace {

inline __m512 silu16(__m512 x) {
  const __m512 e = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), x));
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

inline __mmask16 tail_mask(int64_t left) {
  return static_cast<__mmask16>(left >= 16 ? 0xffff : (1u << left) - 1);
}

}  // namespace

void silu_row_avx512(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, silu16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

void swiglu_row_avx512(const float* gate, const float* up, int64_t n, float* y) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 g = silu16(_mm512_maskz_loadu_ps(m, gate + i));
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(g, _mm512_maskz_loadu_ps(m, up + i)));
  }
}

}  // namespace ascent::kernels

#pragma GCC diagnostic pop
#pragma GCC pop_options
