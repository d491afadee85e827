// Small AVX2 helpers shared by the AVX2 kernel files (horizontal sums, exp). Include only after
// `#pragma GCC target("avx2,fma")`: the functions are compiled for AVX2 in each including file (hence the anonymous
// namespace).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace ascent::kernels {
namespace {

// e^x within about 1 ulp: x = n ln2 + r, |r| <= ln2 / 2, a degree-7 polynomial for e^r, times 2^n built in the
// exponent bits. Below -87.33 gives exactly 0 (so e^-inf = 0, which attention's masked lanes rely on); from 88.72
// up, +inf; NaN stays NaN.
inline __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.33f);
  const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  // max/min with x second let NaN through; the clamp keeps n in [-126, 128] (128 gives the bits of +inf).
  x = _mm256_min_ps(_mm256_set1_ps(88.72f), _mm256_max_ps(lo, x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, _mm256_castsi256_ps(bits)));
}

// Sum of the 8 lanes in a fixed order (halves, then quarters, ...).
inline float hsum8(__m256 v) {
  __m128 b = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  b = _mm_add_ps(b, _mm_movehl_ps(b, b));
  b = _mm_add_ss(b, _mm_movehdup_ps(b));
  return _mm_cvtss_f32(b);
}

// Sum of the 8 int32 lanes (exact, so in any order).
inline int32_t hsum8_epi32(__m256i v) {
  __m128i b = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  b = _mm_add_epi32(b, _mm_shuffle_epi32(b, 0x4e));
  b = _mm_add_epi32(b, _mm_shuffle_epi32(b, 0xb1));
  return _mm_cvtsi128_si32(b);
}

inline float hmax8(__m256 v) {
  __m128 b = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  b = _mm_max_ps(b, _mm_movehl_ps(b, b));
  b = _mm_max_ss(b, _mm_movehdup_ps(b));
  return _mm_cvtss_f32(b);
}

}  // namespace
}  // namespace ascent::kernels
