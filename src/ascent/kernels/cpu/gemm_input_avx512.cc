// Activation quantization to int8 (gemm_input.cc's quantize_span) with AVX-512. The same IEEE operations per element
// in the same order (max of |x s|, then (x s) / d rounded by the same magic number, truncated, clamped), so
// bitwise the scalar result, only faster. Scalar preparation is a visible share of an int8 prefill, and a decode
// step prepares its token on one thread while the other waits. The non-finite test rides in the max pass
// (vfpclassps on the vector already loaded) rather than in passes of its own. Also the q4r codes' placement and
// the codes' sums per 32 columns (int4's offsets), data movement and integer sums only.
#include <immintrin.h>

#include <cstdint>
#include <limits>

#include "ascent/kernels/cpu/gemm.h"

#include "ascent/kernels/cpu/simd_avx512_begin.h"

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq")

namespace ascent::kernels {
namespace {

// Elements k..k+15 of x (times s where given), zero past n.
inline __m512 load_scaled(const float* x, const float* s, int64_t n, int64_t k) {
  const auto m = static_cast<__mmask16>(n - k >= 16 ? 0xffff : (1u << (n - k)) - 1);
  const __m512 v = _mm512_maskz_loadu_ps(m, x + k);
  return s != nullptr ? _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, s + k)) : v;
}

// Lanes of v that are a NaN or an infinity (vfpclassps: QNaN, +inf, -inf, SNaN).
inline __mmask16 nonfinite(__m512 v) {
  return _mm512_fpclass_ps_mask(v, 0x01 | 0x08 | 0x10 | 0x80);
}

}  // namespace

float quantize_span_avx512(const float* x, const float* s, int64_t n, int8_t* q, int32_t* sum) {
  __m512 amax = _mm512_setzero_ps();
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  __mmask16 bad = 0;
  for (int64_t k = 0; k < n; k += 16) {
    const __m512 v = load_scaled(x, s, n, k);
    bad |= nonfinite(v);
    // max(|v|, amax) with |v| first: a NaN value is skipped, as std::max(amax, |v|) skips it.
    amax = _mm512_max_ps(_mm512_and_ps(v, abs_mask), amax);
  }
  if (bad != 0) return std::numeric_limits<float>::quiet_NaN();
  const float d = _mm512_reduce_max_ps(amax) / 127.0f;
  const __m512 id = _mm512_set1_ps(inverse_scale(d));
  const __m512 round = _mm512_set1_ps(12582912.0f);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  __m512i total = _mm512_setzero_si512();
  for (int64_t k = 0; k < n; k += 16) {
    const auto m = static_cast<__mmask16>(n - k >= 16 ? 0xffff : (1u << (n - k)) - 1);
    const __m512 v = _mm512_mul_ps(load_scaled(x, s, n, k), id);
    const __m512i r = _mm512_cvttps_epi32(_mm512_sub_ps(_mm512_add_ps(v, round), round));
    const __m512i c = _mm512_min_epi32(_mm512_max_epi32(r, lo), hi);
    _mm_mask_storeu_epi8(q + k, m, _mm512_cvtepi32_epi8(c));
    total = _mm512_add_epi32(total, c);
  }
  if (sum != nullptr) *sum = _mm512_reduce_add_epi32(total);
  return d;
}

namespace {

// Each of 16 vectors reduced to its largest lane, in lane order: lane i of the result is the max of a[i]'s lanes. A
// tree of 128-bit and 32-bit shuffles (45 instructions where 16 separate reductions take ~130); max is exact, so any
// order gives the separate reductions' values.
inline __m512 lane_maxima16(const __m512 a[16]) {
  __m512 m[8], p[4], s[2];
  for (int k = 0; k < 8; ++k) {  // quarters: a[2k] (0|2, 1|3), a[2k+1] (0|2, 1|3)
    m[k] = _mm512_max_ps(_mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0x44),
                         _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0xee));
  }
  for (int k = 0; k < 4; ++k) {  // quarter j: a[4k + j]'s four partial lanes
    p[k] = _mm512_max_ps(_mm512_shuffle_f32x4(m[2 * k], m[2 * k + 1], 0x88),
                         _mm512_shuffle_f32x4(m[2 * k], m[2 * k + 1], 0xdd));
  }
  for (int k = 0; k < 2; ++k) {  // within each quarter: p[2k] (0|2, 1|3), p[2k+1] (0|2, 1|3)
    s[k] =
        _mm512_max_ps(_mm512_shuffle_ps(p[2 * k], p[2 * k + 1], 0x44), _mm512_shuffle_ps(p[2 * k], p[2 * k + 1], 0xee));
  }
  // Lane 4j + l: the max of a[4l + j]; put back in order.
  const __m512 t = _mm512_max_ps(_mm512_shuffle_ps(s[0], s[1], 0x88), _mm512_shuffle_ps(s[0], s[1], 0xdd));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), t);
}

// One 32-value block's codes from its two vectors and multiplier id, as quantize_span_avx512 forms them.
inline void block_codes(__m512 v0, __m512 v1, __m512 id, int8_t* q) {
  const __m512 round = _mm512_set1_ps(12582912.0f);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  const __m512i c0 = _mm512_min_epi32(
      _mm512_max_epi32(_mm512_cvttps_epi32(_mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(v0, id), round), round)), lo), hi);
  const __m512i c1 = _mm512_min_epi32(
      _mm512_max_epi32(_mm512_cvttps_epi32(_mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(v1, id), round), round)), lo), hi);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtepi32_epi8(c0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtepi32_epi8(c1));
}

}  // namespace

// Sixteen blocks at xb: their maxima in one vector (lane_maxima16), one division for their scales and one for the
// multipliers, their sums from the stored codes (code_sums32_avx512): codes at q, scales at d, sums at sum. A block at
// a time, the reductions and two scalar divisions per block took most of a decode step's activation preparation for
// the GGUF formats.
void quantize_blocks32x16_avx512(const float* xb, int8_t* q, float* d, int32_t* sum) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  __m512 amax[16];
  uint32_t bad = 0;  // bit i: block i holds a NaN or an infinity
  for (int i = 0; i < 16; ++i) {
    const __m512 v0 = _mm512_loadu_ps(xb + 32 * i), v1 = _mm512_loadu_ps(xb + 32 * i + 16);
    bad |= static_cast<uint32_t>((nonfinite(v0) | nonfinite(v1)) != 0) << i;
    // As quantize_span_avx512: max(|v|, amax) with |v| first, from amax = 0.
    amax[i] =
        _mm512_max_ps(_mm512_and_ps(v1, abs_mask), _mm512_max_ps(_mm512_and_ps(v0, abs_mask), _mm512_setzero_ps()));
  }
  const __m512 db = _mm512_div_ps(lane_maxima16(amax), _mm512_set1_ps(127.0f));
  // inverse_scale, lane-wise: 1 / d, or 0 where that is infinite (d = 0 or subnormal).
  const __m512 inv = _mm512_div_ps(_mm512_set1_ps(1.0f), db);
  alignas(64) float id[16];
  _mm512_store_ps(id, _mm512_mask_mov_ps(inv, _mm512_fpclass_ps_mask(inv, 0x08 | 0x10), _mm512_setzero_ps()));
  _mm512_storeu_ps(d, db);
  for (int i = 0; i < 16; ++i) {
    block_codes(_mm512_loadu_ps(xb + 32 * i), _mm512_loadu_ps(xb + 32 * i + 16), _mm512_set1_ps(id[i]), q + 32 * i);
  }
  code_sums32_avx512(q, 16, sum);
  for (; bad != 0; bad &= bad - 1) {  // not ours to quantize: the poisoned blocks (gemm.h)
    const int i = __builtin_ctz(bad);
    d[i] = poison_span(kQBlock, q + 32 * i, sum + i);
  }
}

void code_sums32_avx512(const int8_t* q, int64_t nb, int32_t* out) {
  // vpsadbw against zero sums 8 unsigned bytes per 64-bit lane; the codes flipped to u = q + 128 give each lane
  // sum(q) + 1024, a 32-column block's four lanes sum(q) + 4096.
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m512i lanes =
        _mm512_sad_epu8(_mm512_xor_si512(_mm512_loadu_si512(q + 32 * b), flip), _mm512_setzero_si512());
    // Pairs of lanes within each 128 bits, then pairs of 128-bit quarters: quarter 0 holds block b, quarter 2 b + 1.
    const __m512i pairs = _mm512_add_epi64(lanes, _mm512_shuffle_epi32(lanes, static_cast<_MM_PERM_ENUM>(0x4e)));
    const __m512i blocks = _mm512_add_epi64(pairs, _mm512_shuffle_i64x2(pairs, pairs, 0xb1));
    out[b] = static_cast<int32_t>(_mm_cvtsi128_si64(_mm512_castsi512_si128(blocks)) - 4096);
    out[b + 1] = static_cast<int32_t>(_mm_cvtsi128_si64(_mm512_extracti64x2_epi64(blocks, 2)) - 4096);
  }
  if (b < nb) code_sums32_avx2(q + 32 * b, nb - b, out + b);  // an odd last block: half a vector
}

void q4r_codes_avx512(const int8_t* q, int64_t Kp, int8_t* out) {
  // Dword i * 8 + c of a 512-column group (block i's bytes 4c..4c+3) for the 16 blocks i of one column group c.
  const __m512i blocks =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), _mm512_set1_epi32(8));
  for (int64_t g = 0; g < Kp / kQ4RGroup; ++g) {
    const int8_t* src = q + g * kQ4RGroup;
    int8_t* dst = out + g * kQ4RGroup;
    for (int c = 0; c < 8; ++c) {  // bytes 4c..4c+3 of each block: chunk j = c % 4, part c / 4 (low, high nibbles)
      const __m512i v = _mm512_i32gather_epi32(_mm512_add_epi32(blocks, _mm512_set1_epi32(c)), src, 4);
      _mm512_storeu_si512(dst + (c % 4) * 128 + (c / 4) * 64, v);
    }
  }
}

}  // namespace ascent::kernels

#include "ascent/kernels/cpu/simd_avx512_end.h"
