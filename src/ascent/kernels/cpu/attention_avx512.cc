// AVX-512 flash attention: the algorithm in attention_flash.h over 16-lane vectors (tiles of 16 keys).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/ops.h"

#include "ascent/kernels/cpu/simd_avx512_begin.h"

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")

#include "ascent/kernels/cpu/simd_avx512.h"

#include "ascent/kernels/cpu/attention_backward_simd.h"
#include "ascent/kernels/cpu/attention_flash.h"

namespace ascent::kernels {
namespace {

struct V512 {
  using F = __m512;
  static constexpr int64_t kLanes = 16;
  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static F load(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }  // f16, widened exactly
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }
  static F exp(F x) { return exp_ps(x); }
  static float reduce_max(F x) { return _mm512_reduce_max_ps(x); }
  static bool any_greater(F x, float m) { return _mm512_cmp_ps_mask(x, _mm512_set1_ps(m), _CMP_GT_OQ) != 0; }
  static float hsum(F x) { return kernels::hsum(x); }
  // dst[c * 16 + i] = src[i * ld + c] for i, c < 16: 16 keys' 16 dimensions into 16 lane-per-key vectors.
  static void transpose(const float* src, int64_t ld, float* dst) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * ld);
    for (int i = 0; i < 16; i += 2) {  // pairs of keys interleaved by element
      t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {  // four keys per 128-bit lane: dimensions 4m .. 4m + 3
      r[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
      r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
      r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
      r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 16; i += 8) {  // then 128-bit lanes across groups of four keys
      for (int j = 0; j < 4; ++j) {
        t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0x88);
        t[i + j + 4] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0xdd);
      }
    }
    for (int j = 0; j < 8; ++j) {
      r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
      r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd);
    }
    for (int j = 0; j < 16; ++j) _mm512_storeu_ps(dst + j * 16, r[j]);  // r[j]: dimension j of the 16 keys
  }
  static F scores(F acc, float scale, int64_t key0, int64_t first, int64_t last) {
    const __m512i lane = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(key0)),
                                          _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    const __mmask16 valid =
        _mm512_cmp_epi32_mask(lane, _mm512_set1_epi32(static_cast<int32_t>(first)), _MM_CMPINT_NLT) &
        _mm512_cmp_epi32_mask(lane, _mm512_set1_epi32(static_cast<int32_t>(last)), _MM_CMPINT_LE);
    return _mm512_mask_mul_ps(_mm512_set1_ps(-INFINITY), valid, acc, _mm512_set1_ps(scale));
  }
};

}  // namespace

void attention_forward_avx512(const float* q, const float* k, const float* v, const AttentionDims& d, float* out,
                              const HeadPrepare& prepare) {
  flash_attention<V512>(q, k, v, d, out, prepare);
}

void attention_forward_avx512(const float* q, const uint16_t* k, const uint16_t* v, const AttentionDims& d, float* out,
                              const HeadPrepare& prepare) {
  flash_attention<V512>(q, k, v, d, out, prepare);
}

void attention_backward_avx512(const float* q, const float* k, const float* v, const float* out, const float* dout,
                               const AttentionTrainDims& d, float* dq, float* dk, float* dv) {
  attention_backward_simd<V512>(q, k, v, out, dout, d, dq, dk, dv);
}

}  // namespace ascent::kernels

#include "ascent/kernels/cpu/simd_avx512_end.h"
