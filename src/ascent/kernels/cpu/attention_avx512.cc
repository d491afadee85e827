// AVX-512 causal attention with grouped-query heads and sliding window: the reference's algorithm (scores, max,
// exp, normalised sum of values per query row and head) with 16-lane dot products, a vectorised exp and FMA
// accumulation of values in registers. Each (row, head) is computed alone, in an order that depends only on its
// position, so results do not depend on how many rows run together (batch invariance).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/ops.h"

#pragma GCC push_options
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma")

#include "ascent/kernels/cpu/simd_avx512.h"

namespace ascent::kernels {
namespace {

constexpr int64_t kMaxHeadDim = 256;  // D up to 16 registers of 16 lanes

// e^x for x <= 0 (scores minus their max), within about 1 ulp: x = n ln2 + r, |r| <= ln2 / 2, a degree-7
// polynomial for e^r, then scaled by 2^n. Values below -87 give 0.
inline __m512 exp_neg(__m512 x) {
  const __m512 tiny = _mm512_set1_ps(-87.0f);
  const __mmask16 underflow = _mm512_cmp_ps_mask(x, tiny, _CMP_LT_OQ);
  x = _mm512_max_ps(x, tiny);
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

void attention_forward_avx512(const float* q, const float* k, const float* v, const AttentionDims& d, float* out) {
  const int64_t D = d.head_dim, group = d.n_heads / d.n_kv_heads;
  const int64_t q_stride = d.n_heads * D, kv_stride = d.n_kv_heads * D;
  const int64_t chunks = (D + 15) / 16;
  const auto tail = static_cast<__mmask16>(D % 16 == 0 ? 0xffff : (1u << (D % 16)) - 1);
  ThreadPool::global().parallel_for(d.n_tokens * d.n_heads, [&](int64_t i0, int64_t i1) {
    std::vector<float> scores(static_cast<size_t>(d.n_past + d.n_tokens + 16));  // (S,)
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i / d.n_heads, h = i % d.n_heads, kvh = h / group;
      const int64_t pos = d.n_past + t;
      const int64_t first = d.window > 0 ? std::max<int64_t>(0, pos - d.window + 1) : 0;
      const int64_t S = pos + 1 - first;
      const float* qh = q + t * q_stride + h * D;
      const float* kh = k + first * kv_stride + kvh * D;
      const float* vh = v + first * kv_stride + kvh * D;
      __m512 qv[kMaxHeadDim / 16];
      for (int64_t c = 0; c < chunks; ++c) {
        qv[c] = _mm512_maskz_loadu_ps(c == chunks - 1 ? tail : 0xffff, qh + c * 16);
      }
      // Scores and their max.
      float mx = -INFINITY;
      for (int64_t j = 0; j < S; ++j) {
        const float* kj = kh + j * kv_stride;
        __m512 acc = _mm512_mul_ps(qv[0], _mm512_maskz_loadu_ps(chunks == 1 ? tail : 0xffff, kj));
        for (int64_t c = 1; c < chunks; ++c) {
          acc = _mm512_fmadd_ps(qv[c], _mm512_maskz_loadu_ps(c == chunks - 1 ? tail : 0xffff, kj + c * 16), acc);
        }
        const float s = hsum(acc) * d.scale;
        scores[static_cast<size_t>(j)] = s;
        mx = std::max(mx, s);
      }
      // Probabilities (unnormalised) and their sum, 16 at a time.
      const __m512 mxv = _mm512_set1_ps(mx);
      __m512 sumv = _mm512_setzero_ps();
      for (int64_t j = 0; j < S; j += 16) {
        const auto m = static_cast<__mmask16>(S - j >= 16 ? 0xffff : (1u << (S - j)) - 1);
        const __m512 p =
            _mm512_maskz_mov_ps(m, exp_neg(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, scores.data() + j), mxv)));
        _mm512_mask_storeu_ps(scores.data() + j, m, p);
        sumv = _mm512_add_ps(sumv, p);
      }
      const float inv = 1.0f / hsum(sumv);
      // Weighted sum of values, accumulated in registers.
      __m512 o[kMaxHeadDim / 16];
      for (int64_t c = 0; c < chunks; ++c) o[c] = _mm512_setzero_ps();
      for (int64_t j = 0; j < S; ++j) {
        const __m512 p = _mm512_set1_ps(scores[static_cast<size_t>(j)]);
        const float* vj = vh + j * kv_stride;
        for (int64_t c = 0; c < chunks; ++c) {
          o[c] = _mm512_fmadd_ps(p, _mm512_maskz_loadu_ps(c == chunks - 1 ? tail : 0xffff, vj + c * 16), o[c]);
        }
      }
      float* oh = out + t * q_stride + h * D;
      const __m512 invv = _mm512_set1_ps(inv);
      for (int64_t c = 0; c < chunks; ++c) {
        _mm512_mask_storeu_ps(oh + c * 16, c == chunks - 1 ? tail : 0xffff, _mm512_mul_ps(o[c], invv));
      }
    }
  });
}

}  // namespace ascent::kernels

#pragma GCC diagnostic pop
#pragma GCC pop_options
