// Small AVX-512 helpers shared by the AVX-512 kernel files. Include only after `#pragma GCC target("avx512f...")`:
// the functions are compiled for AVX-512 in each including file (hence the anonymous namespace).
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

inline int32_t hsum_epi32(__m512i v) {
  const __m256i a = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
  __m128i b = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
  b = _mm_add_epi32(b, _mm_shuffle_epi32(b, 0x4e));
  b = _mm_add_epi32(b, _mm_shuffle_epi32(b, 0xb1));
  return _mm_cvtsi128_si32(b);
}

}  // namespace
}  // namespace ascent::kernels
