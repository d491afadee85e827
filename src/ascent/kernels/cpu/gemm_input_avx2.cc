// Activation quantization to int8 (gemm_input.cc's quantize_span) with AVX2, for CPUs without AVX-512. The same IEEE
// operations per element as the scalar code (max of |x s|, then (x s) / d rounded by the same magic number,
// truncated, clamped), so bitwise its result. A decode step prepares its single token on one thread while the other
// waits, so the scalar loops' cost shows in every step. The non-finite test rides in the max pass, on the vector
// already loaded. Also the q4r codes' placement (data movement only) as an 8 x 8 transpose of 32-bit words, and the
// codes' sums per 32 columns.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <limits>

#include "ascent/kernels/cpu/gemm.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")

#include "ascent/kernels/cpu/simd_avx2.h"

namespace ascent::kernels {
namespace {

constexpr float kRound = 12582912.0f;  // 1.5 x 2^23: adding and subtracting it rounds to nearest even (gemm_input.cc)

// Lanes below left (< 8) set: the valid part of a tail vector (maskload zeroes the others).
inline __m256i tail_mask(int64_t left) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(left)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Elements k..k+7 of x (times s where given), zero past n.
inline __m256 load_scaled(const float* x, const float* s, int64_t n, int64_t k) {
  if (n - k >= 8) {
    const __m256 v = _mm256_loadu_ps(x + k);
    return s != nullptr ? _mm256_mul_ps(v, _mm256_loadu_ps(s + k)) : v;
  }
  const __m256i m = tail_mask(n - k);
  const __m256 v = _mm256_maskload_ps(x + k, m);
  return s != nullptr ? _mm256_mul_ps(v, _mm256_maskload_ps(s + k, m)) : v;
}

// max(|v|, amax): with |v| first a NaN value is skipped, as std::max(amax, |v|) skips it, so amax never turns NaN.
inline __m256 max_abs(__m256 v, __m256 amax) {
  return _mm256_max_ps(_mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))), amax);
}

// Lanes of v that are a NaN or an infinity (all exponent bits set), as all-ones.
inline __m256i nonfinite(__m256 v) {
  const __m256i exp = _mm256_set1_epi32(0x7f800000);
  return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(v), exp), exp);
}

// One vector's codes: v x id rounded to nearest even, clamped to [-127, 127] (a NaN converts to INT_MIN and clamps
// to -127, as the scalar cast does on x86).
inline __m256i codes8(__m256 v, __m256 id) {
  const __m256 round = _mm256_set1_ps(kRound);
  const __m256i r = _mm256_cvttps_epi32(_mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(v, id), round), round));
  return _mm256_min_epi32(_mm256_max_epi32(r, _mm256_set1_epi32(-127)), _mm256_set1_epi32(127));
}

// Four vectors of int32 codes (each in [-127, 127]) as 32 bytes in order: the packs interleave 128-bit halves, the
// permute puts them back.
inline __m256i pack32(__m256i c0, __m256i c1, __m256i c2, __m256i c3) {
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(c0, c1), _mm256_packs_epi32(c2, c3));
  return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// One 32-value block's codes (four vectors at xb) with multiplier id, stored at q.
inline void block_codes(const float* xb, __m256 id, int8_t* q) {
  __m256i c[4];
  for (int j = 0; j < 4; ++j) c[j] = codes8(_mm256_loadu_ps(xb + 8 * j), id);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), pack32(c[0], c[1], c[2], c[3]));
}

}  // namespace

float quantize_span_avx2(const float* x, const float* s, int64_t n, int8_t* q, int32_t* sum) {
  __m256 amax = _mm256_setzero_ps();
  __m256i bad = _mm256_setzero_si256();
  for (int64_t k = 0; k < n; k += 8) {
    const __m256 v = load_scaled(x, s, n, k);
    bad = _mm256_or_si256(bad, nonfinite(v));
    amax = max_abs(v, amax);
  }
  if (!_mm256_testz_si256(bad, bad)) return std::numeric_limits<float>::quiet_NaN();
  const float d = hmax8(amax) / 127.0f;
  const __m256 id = _mm256_set1_ps(inverse_scale(d));
  __m256i total = _mm256_setzero_si256();
  for (int64_t k = 0; k < n; k += 32) {
    __m256i c[4];
    for (int i = 0; i < 4; ++i) {
      c[i] = codes8(load_scaled(x, s, n, k + 8 * i), id);  // zero past n: code 0, nothing added to the sum
      total = _mm256_add_epi32(total, c[i]);
    }
    const __m256i bytes = pack32(c[0], c[1], c[2], c[3]);
    if (n - k >= 32) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + k), bytes);
    } else {  // the last n % 32 codes only: q may end there
      alignas(32) int8_t tail[32];
      _mm256_store_si256(reinterpret_cast<__m256i*>(tail), bytes);
      std::memcpy(q + k, tail, static_cast<size_t>(n - k));
    }
  }
  if (sum != nullptr) *sum = hsum8_epi32(total);
  return d;
}

namespace {

// Each of 8 vectors reduced to its largest lane, in lane order: lane i of the result is the max of a[i]'s lanes (as
// lane_maxima16 in gemm_input_avx512.cc; max is exact, so the separate reductions' values).
inline __m256 lane_maxima8(const __m256 a[8]) {
  __m256 m[4], s[2];
  for (int k = 0; k < 4; ++k) {  // halves: a[2k] (low | high), a[2k+1] (low | high)
    m[k] = _mm256_max_ps(_mm256_permute2f128_ps(a[2 * k], a[2 * k + 1], 0x20),
                         _mm256_permute2f128_ps(a[2 * k], a[2 * k + 1], 0x31));
  }
  for (int k = 0; k < 2; ++k) {  // within each half: m[2k] (0|2, 1|3), m[2k+1] (0|2, 1|3)
    s[k] =
        _mm256_max_ps(_mm256_shuffle_ps(m[2 * k], m[2 * k + 1], 0x44), _mm256_shuffle_ps(m[2 * k], m[2 * k + 1], 0xee));
  }
  // Lane 4h + k: the max of a[2k + h]; put back in order.
  const __m256 t = _mm256_max_ps(_mm256_shuffle_ps(s[0], s[1], 0x88), _mm256_shuffle_ps(s[0], s[1], 0xdd));
  return _mm256_permutevar8x32_ps(t, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

}  // namespace

// Eight blocks at xb, as quantize_blocks32x16_avx512 takes sixteen: their maxima in one vector, one division each for
// their scales and multipliers, their sums from the stored codes: codes at q, scales at d, sums at sum.
void quantize_blocks32x8_avx2(const float* xb, int8_t* q, float* d, int32_t* sum) {
  __m256 amax[8];
  uint32_t bad = 0;  // bit i: block i holds a NaN or an infinity
  for (int i = 0; i < 8; ++i) {
    __m256 m = _mm256_setzero_ps();
    __m256i nf = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      const __m256 v = _mm256_loadu_ps(xb + 32 * i + 8 * j);
      nf = _mm256_or_si256(nf, nonfinite(v));
      m = max_abs(v, m);
    }
    bad |= static_cast<uint32_t>(!_mm256_testz_si256(nf, nf)) << i;
    amax[i] = m;
  }
  const __m256 db = _mm256_div_ps(lane_maxima8(amax), _mm256_set1_ps(127.0f));
  // inverse_scale, lane-wise: 1 / d, or 0 where that is infinite (d = 0 or subnormal).
  const __m256 inv = _mm256_div_ps(_mm256_set1_ps(1.0f), db);
  const __m256 abs_inv = _mm256_and_ps(inv, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
  const __m256 finite = _mm256_cmp_ps(abs_inv, _mm256_set1_ps(std::numeric_limits<float>::infinity()), _CMP_NEQ_UQ);
  alignas(32) float id[8];
  _mm256_store_ps(id, _mm256_and_ps(inv, finite));
  _mm256_storeu_ps(d, db);
  for (int i = 0; i < 8; ++i) block_codes(xb + 32 * i, _mm256_set1_ps(id[i]), q + 32 * i);
  code_sums32_avx2(q, 8, sum);
  for (; bad != 0; bad &= bad - 1) {  // not ours to quantize: the poisoned blocks (gemm.h)
    const int i = __builtin_ctz(bad);
    d[i] = poison_span(kQBlock, q + 32 * i, sum + i);
  }
}

void code_sums32_avx2(const int8_t* q, int64_t nb, int32_t* out) {
  // As code_sums32_avx512: vpsadbw over the codes flipped to q + 128, four 8-byte lanes of sum(q) + 1024 per block.
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i lanes =
        _mm256_sad_epu8(_mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * b)), flip),
                        _mm256_setzero_si256());
    __m128i t = _mm_add_epi64(_mm256_castsi256_si128(lanes), _mm256_extracti128_si256(lanes, 1));
    t = _mm_add_epi64(t, _mm_unpackhi_epi64(t, t));
    out[b] = static_cast<int32_t>(_mm_cvtsi128_si64(t) - 4096);
  }
}

void q4r_codes_avx2(const int8_t* q, int64_t Kp, int8_t* out) {
  // Per 512-column group and half h (blocks 8h..8h+7), row i of an 8 x 8 matrix of 32-bit words is block 8h + i's
  // 32 codes. Its transpose's row c (word c of each block: bytes 4c..4c+3) goes to chunk c % 4, part c / 4, lanes
  // 8h..8h+7. That is gemm.h's order, where q4r_codes_avx512 gathers them.
  for (int64_t g = 0; g < Kp / kQ4RGroup; ++g) {
    for (int h = 0; h < 2; ++h) {
      const int8_t* src = q + g * kQ4RGroup + 256 * h;
      int8_t* dst = out + g * kQ4RGroup + 32 * h;
      __m256i r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 32 * i));
      __m256i t[8], u[8];
      for (int i = 0; i < 4; ++i) {  // pairs of rows interleaved by word
        t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
      }
      for (int i = 0; i < 2; ++i) {  // then by pairs of words: u[4i + c] holds words c and c + 4 of rows 4i..4i+3
        u[4 * i + 0] = _mm256_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
      }
      for (int c = 0; c < 4; ++c) {  // words c (low 128-bit halves) and c + 4 (high) of all 8 rows
        const __m256i lo = _mm256_permute2x128_si256(u[c], u[4 + c], 0x20);
        const __m256i hi = _mm256_permute2x128_si256(u[c], u[4 + c], 0x31);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 128 * c), lo);       // word c: chunk c, part 0
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 128 * c + 64), hi);  // word c + 4: chunk c, part 1
      }
    }
  }
}

}  // namespace ascent::kernels

#pragma GCC pop_options
