// AVX-512 flash attention: the algorithm in attention_flash.h over 16-lane vectors (tiles of 16 keys).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/ops.h"

#pragma GCC push_options
// GCC 12's AVX-512 intrinsics trip -Wmaybe-uninitialized inside the system header (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma")

#include "ascent/kernels/cpu/simd_avx512.h"

#include "ascent/kernels/cpu/attention_flash.h"

namespace ascent::kernels {
namespace {

struct V512 {
  using F = __m512;
  static constexpr int64_t kLanes = 16;
  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F exp(F x) { return exp_ps(x); }
  static float reduce_max(F x) { return _mm512_reduce_max_ps(x); }
  static float hsum(F x) { return kernels::hsum(x); }
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

void attention_forward_avx512(const float* q, const float* k, const float* v, const AttentionDims& d, float* out) {
  flash_attention<V512>(q, k, v, d, out);
}

}  // namespace ascent::kernels

#pragma GCC diagnostic pop
#pragma GCC pop_options
