// AVX2/F16C row widening for the embedding lookup, and rounding to f16 for an f16 KV cache: bitwise the reference's
// results (the widening is exact; F16C's rounding to nearest even is f32_to_f16's). (Matmuls have their own engine,
// gemm.h; attention its own, attention_flash.h.)
#include <immintrin.h>

#include <cstring>

#include "ascent/kernels/cpu/row_ops.h"

namespace ascent::kernels {

namespace {

// Widens stored weights exactly as dequantize_row does. The type is a template parameter so that each row loop is
// compiled per type with no dispatch inside it; quantized rows are widened a block (four vectors) at a time so the
// block's scale is read once.
template <DType t>
constexpr bool kBlocked = t == DType::Q8_0 || t == DType::Q4_0;

// Elements i..i+7 of an f16 or bf16 row.
template <DType t>
__attribute__((target("avx2,f16c"))) inline __m256 widen8(const void* row, int64_t i) {
  const auto* s = static_cast<const uint16_t*>(row) + i;
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
  if constexpr (t == DType::F16) {
    return _mm256_cvtph_ps(h);
  } else {
    static_assert(t == DType::BF16);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

// The 32 elements of block k of a Q8_0 or Q4_0 row, in order.
template <DType t>
__attribute__((target("avx2,f16c"))) inline void widen_block(const void* row, int64_t k, __m256 v[4]) {
  if constexpr (t == DType::Q8_0) {
    const BlockQ8_0& b = static_cast<const BlockQ8_0*>(row)[k];
    const __m256 d = _mm256_set1_ps(f16_to_f32(b.d));
    for (int j = 0; j < 4; ++j) {
      int64_t q8;
      std::memcpy(&q8, b.qs + 8 * j, 8);
      v[j] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(q8))));
    }
  } else {
    static_assert(t == DType::Q4_0);
    // Elements 0..15 are the low nibbles of qs[0..15], elements 16..31 the high nibbles.
    const BlockQ4_0& b = static_cast<const BlockQ4_0*>(row)[k];
    const __m256 d = _mm256_set1_ps(f16_to_f32(b.d));
    const __m256i eight = _mm256_set1_epi32(8), low = _mm256_set1_epi32(0x0f);
    for (int j = 0; j < 2; ++j) {
      int64_t q8;
      std::memcpy(&q8, b.qs + 8 * j, 8);
      const __m256i bytes = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(q8));
      v[j] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(bytes, low), eight)));
      v[j + 2] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(bytes, 4), eight)));
    }
  }
}

// Calls fn(i, widened elements i..i+7) for every whole vector of the row in order; returns the first element
// not covered (f16/bf16 rows may end mid-vector; quantized rows are whole blocks).
template <DType t, class Fn>
__attribute__((target("avx2,f16c"))) inline int64_t for_each8(const void* row, int64_t n, Fn& fn) {
  if constexpr (kBlocked<t>) {
    __m256 v[4];
    for (int64_t k = 0; k < n / kQBlock; ++k) {
      widen_block<t>(row, k, v);
      for (int j = 0; j < 4; ++j) fn(k * kQBlock + 8 * j, v[j]);
    }
    return n / kQBlock * kQBlock;
  } else {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) fn(i, widen8<t>(row, i));
    return i;
  }
}

// The two things done with widened vectors (lambdas would not inherit the AVX2 target).
struct Store {
  float* dst;
  __attribute__((target("avx2"))) void operator()(int64_t at, __m256 w) const { _mm256_storeu_ps(dst + at, w); }
};

template <DType t>
__attribute__((target("avx2,f16c"))) void widen_row_t(const void* src, float* dst, int64_t n) {
  Store store{dst};
  const int64_t i = for_each8<t>(src, n, store);
  if (i < n) dequantize_row(t, static_cast<const uint8_t*>(src) + storage_bytes(t, i), dst + i, n - i);
}

}  // namespace

void dequantize_row_avx2(DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case DType::F16:
      return widen_row_t<DType::F16>(src, dst, n);
    case DType::BF16:
      return widen_row_t<DType::BF16>(src, dst, n);
    case DType::Q8_0:
      return widen_row_t<DType::Q8_0>(src, dst, n);
    case DType::Q4_0:
      return widen_row_t<DType::Q4_0>(src, dst, n);
    default:
      return dequantize_row(t, src, dst, n);
  }
}

__attribute__((target("avx2,f16c"))) void narrow_row_f16_avx2(const float* x, int64_t n, uint16_t* y) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    // F16C keeps a NaN's payload where f32_to_f16 makes every NaN the same quiet one: a group holding one goes the
    // scalar way, so NaN's bits match too.
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0) {
      for (int64_t j = i; j < i + 8; ++j) y[j] = f32_to_f16(x[j]);
      continue;
    }
    const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), h);
  }
  for (; i < n; ++i) y[i] = f32_to_f16(x[i]);
}

}  // namespace ascent::kernels
