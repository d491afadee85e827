// Small AVX-512 helpers shared by the AVX-512 kernel files (horizontal sums, exp). Include only after `#pragma GCC
// target("avx512f...")`: the functions are compiled for AVX-512 in each including file (hence the anonymous namespace).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace ascent::kernels {
namespace {

// Sum of the 16 lanes in a fixed order (halves, then quarters, ...), the same for every caller.
inline float hsum(__m512 v) {
  const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  b = _mm_add_ps(b, _mm_movehl_ps(b, b));
  b = _mm_add_ss(b, _mm_movehdup_ps(b));
  return _mm_cvtss_f32(b);
}

// hsum of the 512-bit register whose lanes 0-7 are lo and 8-15 hi: the reduction for kernels that keep a 512-bit
// tile's accumulator as two 256-bit halves, so their sum is bitwise the tile's.
inline float hsum(__m256 lo, __m256 hi) {
  return hsum(_mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1));
}

inline int32_t hsum_epi32(__m512i v) {
  const __m256i a = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
  __m128i b = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
  b = _mm_add_epi32(b, _mm_shuffle_epi32(b, 0x4e));
  b = _mm_add_epi32(b, _mm_shuffle_epi32(b, 0xb1));
  return _mm_cvtsi128_si32(b);
}

// e^x within about 1 ulp: x = n ln2 + r, |r| <= ln2 / 2 (ln2 split in two for an exact n ln2), a degree-7
// polynomial for e^r, then scaled by 2^n. Below -87 gives exactly 0 (so e^-inf = 0, which attention's masked
// lanes rely on); above 88.73 gives +inf; NaN stays NaN.
inline __m512 exp_ps(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.0f), hi = _mm512_set1_ps(88.75f);
  const __mmask16 underflow = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  x = _mm512_min_ps(hi, _mm512_max_ps(lo, x));  // operands in this order let NaN through
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~underflow), _mm512_scalef_ps(p, n));
}

}  // namespace
}  // namespace ascent::kernels
