// Causal attention with grouped-query heads and an optional sliding window, over a KV cache of f32 or f16. Here are
// the reference (one (query row, head) pair per work item, scores materialised, sums in double), and the dispatch to
// the flash-style SIMD variants (attention_flash.h through attention_avx2.cc / attention_avx512.cc).
#include <algorithm>
#include <cmath>
#include <vector>

#include "ascent/base/error.h"
#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/isa.h"
#include "ascent/kernels/cpu/ops.h"

namespace ascent::kernels {

void attention_forward_avx512(const float* q, const float* k, const float* v, const AttentionDims& d, float* out,
                              const HeadPrepare& prepare);
void attention_forward_avx2(const float* q, const float* k, const float* v, const AttentionDims& d, float* out,
                            const HeadPrepare& prepare);
void attention_forward_avx512(const float* q, const uint16_t* k, const uint16_t* v, const AttentionDims& d, float* out,
                              const HeadPrepare& prepare);
void attention_forward_avx2(const float* q, const uint16_t* k, const uint16_t* v, const AttentionDims& d, float* out,
                            const HeadPrepare& prepare);

namespace {

void check_dims(const AttentionDims& d, const HeadPrepare& prepare) {
  ASCENT_CHECK(!prepare || d.n_tokens == 1, "attention: a per-head prepare step is for one token, not {}", d.n_tokens);
  ASCENT_CHECK(d.n_kv_heads > 0 && d.n_heads % d.n_kv_heads == 0,
               "attention: {} query heads is not a multiple of {} kv heads", d.n_heads, d.n_kv_heads);
  ASCENT_CHECK(d.kv_block >= 0 && d.kv_block % kKeyGroup == 0, "attention: kv_block {} is not a multiple of {}",
               d.kv_block, kKeyGroup);
  ASCENT_CHECK(!d.k_tiles || (d.kv_block > 0 && d.head_dim % 2 == 0),
               "attention: K in key tiles needs blocks (kv_block {}) and an even head size (D {})", d.kv_block,
               d.head_dim);
  ASCENT_CHECK(d.blocks == nullptr || d.kv_block > 0, "attention: a block table needs a cache in blocks");
}

inline float widen(float x) {
  return x;
}
inline float widen(uint16_t h) {
  return f16_to_f32(h);
}

// The reference: one (query row, head) pair per work item, scores materialised, sums in double.
template <class E>
void attention_ref(const float* q, const E* k, const E* v, const AttentionDims& d, float* out) {
  const int64_t D = d.head_dim, group = d.n_heads / d.n_kv_heads;
  const int64_t q_stride = d.n_heads * D;
  ThreadPool::global().parallel_for(d.n_tokens * d.n_heads, [&](int64_t i0, int64_t i1) {
    std::vector<float> scores(static_cast<size_t>(d.n_past + d.n_tokens));  // (S,)
    std::vector<float> kj(static_cast<size_t>(D));                          // (D,): one key, gathered
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i / d.n_heads, h = i % d.n_heads, kvh = h / group;
      const int64_t pos = d.n_past + t;
      const int64_t first = d.window > 0 ? std::max<int64_t>(0, pos - d.window + 1) : 0;
      const float* qh = q + t * q_stride + h * D;
      float mx = -INFINITY;
      for (int64_t j = first; j <= pos; ++j) {
        // Gathered into one row first, so that dot_f32 sums in the same order for every layout.
        const E* kr = k + k_offset(d, j, kvh);
        for (int64_t c = 0; c < D; ++c) kj[static_cast<size_t>(c)] = widen(kr[c * k_dim_stride(d)]);
        scores[j] = dot_f32(qh, kj.data(), D) * d.scale;
        mx = std::max(mx, scores[j]);
      }
      double sum = 0.0;
      for (int64_t j = first; j <= pos; ++j) {
        scores[j] = std::exp(scores[j] - mx);
        sum += scores[j];
      }
      const float inv = static_cast<float>(1.0 / sum);
      float* oh = out + t * q_stride + h * D;
      std::fill(oh, oh + D, 0.0f);
      for (int64_t j = first; j <= pos; ++j) {
        const float p = scores[j] * inv;
        const E* vj = v + kv_offset(d, j, kvh);
        for (int64_t c = 0; c < D; ++c) oh[c] += p * widen(vj[c]);
      }
    }
  });
}

// The reference runs every head's prepare step first, on the calling thread (its work items are (row, query head)
// pairs, several per kv head).
void prepare_all(const AttentionDims& d, const HeadPrepare& prepare) {
  if (!prepare) return;
  for (int64_t h = 0; h < d.n_kv_heads; ++h) prepare(h);
}

}  // namespace

void attention_forward(const float* q, const float* k, const float* v, const AttentionDims& d, float* out,
                       const HeadPrepare& prepare) {
  check_dims(d, prepare);
  if (active_isa() == Isa::Avx512) return attention_forward_avx512(q, k, v, d, out, prepare);
  if (active_isa() == Isa::Avx2) return attention_forward_avx2(q, k, v, d, out, prepare);
  prepare_all(d, prepare);
  attention_ref(q, k, v, d, out);
}

void attention_forward(const float* q, const uint16_t* k, const uint16_t* v, const AttentionDims& d, float* out,
                       const HeadPrepare& prepare) {
  check_dims(d, prepare);
  // The SIMD kernels read f16 keys only in place, as key tiles (they transpose f32 rows alone).
  ASCENT_CHECK(d.k_tiles, "attention: an f16 cache needs K in key tiles (kv_block {}, D {}, k_tiles off)", d.kv_block,
               d.head_dim);
  if (active_isa() == Isa::Avx512) return attention_forward_avx512(q, k, v, d, out, prepare);
  if (active_isa() == Isa::Avx2) return attention_forward_avx2(q, k, v, d, out, prepare);
  prepare_all(d, prepare);
  attention_ref(q, k, v, d, out);
}

}  // namespace ascent::kernels
