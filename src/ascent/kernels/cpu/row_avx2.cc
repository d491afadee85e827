// AVX2/F16C variants of the two inner loops every matmul runs: widening a weight row to f32 and the f32 dot
// product. Both give bitwise the reference's results — conversions are exact, and the dot keeps the reference's
// eight partial sums with separate multiply and add (no FMA contraction) and its final reduction order — so the
// ISA choice never changes a logit. The AVX-512 variant uses these too until it has kernels of its own.
#include <immintrin.h>

#include <cstring>

#include "ascent/kernels/cpu/row_ops.h"

namespace ascent::kernels {

__attribute__((target("avx2"))) float dot_f32_avx2(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  alignas(32) float p[8];
  _mm256_store_ps(p, acc);
  for (int j = 0; i < n; ++i, ++j) p[j] += a[i] * b[i];
  return ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7]));
}

__attribute__((target("avx2,f16c"))) void dequantize_row_avx2(DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case DType::F16: {
      const auto* s = static_cast<const uint16_t*>(src);
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
      }
      for (; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::BF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) {
        const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
      }
      for (; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::Q8_0: {
      const auto* b = static_cast<const BlockQ8_0*>(src);
      for (int64_t k = 0; k < n / kQBlock; ++k) {
        const __m256 d = _mm256_set1_ps(f16_to_f32(b[k].d));
        for (int j = 0; j < kQBlock; j += 8) {
          int64_t q8;
          std::memcpy(&q8, b[k].qs + j, 8);
          const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(q8)));
          _mm256_storeu_ps(dst + k * kQBlock + j, _mm256_mul_ps(d, q));
        }
      }
      return;
    }
    case DType::Q4_0: {
      const auto* b = static_cast<const BlockQ4_0*>(src);
      const __m256i eight = _mm256_set1_epi32(8);
      for (int64_t k = 0; k < n / kQBlock; ++k) {
        const __m256 d = _mm256_set1_ps(f16_to_f32(b[k].d));
        for (int j = 0; j < kQBlock / 2; j += 8) {
          int64_t q8;
          std::memcpy(&q8, b[k].qs + j, 8);
          const __m256i bytes = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(q8));
          const __m256i lo = _mm256_sub_epi32(_mm256_and_si256(bytes, _mm256_set1_epi32(0x0f)), eight);
          const __m256i hi = _mm256_sub_epi32(_mm256_srli_epi32(bytes, 4), eight);
          _mm256_storeu_ps(dst + k * kQBlock + j, _mm256_mul_ps(d, _mm256_cvtepi32_ps(lo)));
          _mm256_storeu_ps(dst + k * kQBlock + j + 16, _mm256_mul_ps(d, _mm256_cvtepi32_ps(hi)));
        }
      }
      return;
    }
    default:
      dequantize_row(t, src, dst, n);
  }
}

}  // namespace ascent::kernels

namespace ascent::kernels {
namespace {

// One step of the reference dot: acc[j] += a[i + j] * w[i + j] for eight lanes, multiply then add.
__attribute__((target("avx2"))) inline __m256 step(__m256 acc, const float* a, __m256 w) {
  return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a), w));
}

}  // namespace

__attribute__((target("avx2,f16c"))) float dot_stored_avx2(const float* x, DType t, const void* row, int64_t n) {
  // Widening and multiplying element by element in the reference's lane order gives the reference's sum without
  // writing the widened row to memory first.
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  switch (t) {
    case DType::F32:
      return dot_f32_avx2(x, static_cast<const float*>(row), n);
    case DType::F16: {
      const auto* s = static_cast<const uint16_t*>(row);
      for (; i + 8 <= n; i += 8) {
        acc = step(acc, x + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
      }
      break;
    }
    case DType::BF16: {
      const auto* s = static_cast<const uint16_t*>(row);
      for (; i + 8 <= n; i += 8) {
        const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
        acc = step(acc, x + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
      }
      break;
    }
    case DType::Q8_0: {
      const auto* b = static_cast<const BlockQ8_0*>(row);
      for (int64_t k = 0; k < n / kQBlock; ++k) {
        const __m256 d = _mm256_set1_ps(f16_to_f32(b[k].d));
        for (int j = 0; j < kQBlock; j += 8) {
          int64_t q8;
          std::memcpy(&q8, b[k].qs + j, 8);
          const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(q8)));
          acc = step(acc, x + k * kQBlock + j, _mm256_mul_ps(d, q));
        }
      }
      i = n;
      break;
    }
    case DType::Q4_0: {
      const auto* b = static_cast<const BlockQ4_0*>(row);
      const __m256i eight = _mm256_set1_epi32(8), low = _mm256_set1_epi32(0x0f);
      for (int64_t k = 0; k < n / kQBlock; ++k) {
        const __m256 d = _mm256_set1_ps(f16_to_f32(b[k].d));
        for (int half = 0; half < 2; ++half) {  // elements 0..15 (low nibbles), then 16..31 (high nibbles)
          for (int j = 0; j < kQBlock / 2; j += 8) {
            int64_t q8;
            std::memcpy(&q8, b[k].qs + j, 8);
            const __m256i bytes = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(q8));
            const __m256i q = half == 0 ? _mm256_and_si256(bytes, low) : _mm256_srli_epi32(bytes, 4);
            const __m256 w = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(q, eight)));
            acc = step(acc, x + k * kQBlock + half * 16 + j, w);
          }
        }
      }
      i = n;
      break;
    }
    default:
      break;
  }
  alignas(32) float p[8];
  _mm256_store_ps(p, acc);
  if (i < n) {  // f16/bf16 tails (quantized rows are whole blocks)
    float tail[8];
    widen_row(t, static_cast<const uint8_t*>(row) + storage_bytes(t, i), tail, n - i);
    for (int j = 0; i < n; ++i, ++j) p[j] += x[i] * tail[j];
  }
  return ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7]));
}

}  // namespace ascent::kernels
