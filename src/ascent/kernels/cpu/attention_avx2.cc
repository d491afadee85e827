// AVX2 flash attention: the algorithm in attention_flash.h over 8-lane vectors (tiles of 8 keys).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/ops.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

#include "ascent/kernels/cpu/simd_avx2.h"

#include "ascent/kernels/cpu/attention_backward_simd.h"
#include "ascent/kernels/cpu/attention_flash.h"

namespace ascent::kernels {
namespace {

struct V256 {
  using F = __m256;
  static constexpr int64_t kLanes = 8;
  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float x) { return _mm256_set1_ps(x); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static F load(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }  // f16, widened exactly
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  static F exp(F x) { return exp8(x); }
  static float reduce_max(F x) { return hmax8(x); }
  static bool any_greater(F x, float m) {
    return _mm256_movemask_ps(_mm256_cmp_ps(x, _mm256_set1_ps(m), _CMP_GT_OQ)) != 0;
  }
  static float hsum(F x) { return hsum8(x); }
  // dst[c * 8 + i] = src[i * ld + c] for i, c < 8: 8 keys' 8 dimensions into 8 lane-per-key vectors.
  static void transpose(const float* src, int64_t ld, float* dst) {
    __m256 r[8], t[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ld);
    for (int i = 0; i < 8; i += 2) {
      t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
      r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
      r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
      r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
      r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int j = 0; j < 4; ++j) {
      _mm256_storeu_ps(dst + j * 8, _mm256_permute2f128_ps(r[j], r[j + 4], 0x20));
      _mm256_storeu_ps(dst + (j + 4) * 8, _mm256_permute2f128_ps(r[j], r[j + 4], 0x31));
    }
  }
  static F scores(F acc, float scale, int64_t key0, int64_t first, int64_t last) {
    const __m256i lane =
        _mm256_add_epi32(_mm256_set1_epi32(static_cast<int32_t>(key0)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256i valid =
        _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(first)), lane),
                            _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(last) + 1), lane));
    return _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_mul_ps(acc, _mm256_set1_ps(scale)),
                            _mm256_castsi256_ps(valid));
  }
};

}  // namespace

void attention_forward_avx2(const float* q, const float* k, const float* v, const AttentionDims& d, float* out,
                            const HeadPrepare& prepare) {
  flash_attention<V256>(q, k, v, d, out, prepare);
}

void attention_forward_avx2(const float* q, const uint16_t* k, const uint16_t* v, const AttentionDims& d, float* out,
                            const HeadPrepare& prepare) {
  flash_attention<V256>(q, k, v, d, out, prepare);
}

void attention_backward_avx2(const float* q, const float* k, const float* v, const float* out, const float* dout,
                             const AttentionTrainDims& d, float* dq, float* dk, float* dv) {
  attention_backward_simd<V256>(q, k, v, out, dout, d, dq, dk, dv);
}

}  // namespace ascent::kernels

#pragma GCC pop_options
