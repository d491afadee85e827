// Causal attention with grouped-query heads and an optional sliding window, over a KV cache of f32 or f16. Here are
// the reference (one (query row, head) pair per work item, scores materialised, sums in double), and the dispatch to
// the flash-style SIMD variants (attention_flash.h through attention_avx2.cc / attention_avx512.cc). Also training's
// batched forward (attention_forward per sequence) and its backward.
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
void attention_backward_avx512(const float* q, const float* k, const float* v, const float* out, const float* dout,
                               const AttentionTrainDims& d, float* dq, float* dk, float* dv);
void attention_backward_avx2(const float* q, const float* k, const float* v, const float* out, const float* dout,
                             const AttentionTrainDims& d, float* dq, float* dk, float* dv);

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

namespace {

void check_train_dims(const AttentionTrainDims& d) {
  ASCENT_CHECK(d.batch >= 0 && d.seq >= 0 && d.head_dim > 0 && d.window >= 0,
               "attention (training): bad dims batch {} seq {} head_dim {} window {}", d.batch, d.seq, d.head_dim,
               d.window);
  ASCENT_CHECK(d.n_kv_heads > 0 && d.n_heads % d.n_kv_heads == 0,
               "attention (training): {} query heads is not a multiple of {} kv heads", d.n_heads, d.n_kv_heads);
}

}  // namespace

void attention_train_forward(const float* q, const float* k, const float* v, const AttentionTrainDims& d, float* out) {
  check_train_dims(d);
  if (d.seq == 0) return;
  // One sequence's k and v rows are a cache of rows (kv_block 0) holding exactly its positions.
  const AttentionDims sd{d.seq,          /*n_past=*/0,     d.n_heads, d.n_kv_heads, d.head_dim, d.scale, d.window,
                         /*kv_block=*/0, /*k_tiles=*/false};
  const int64_t q_size = d.seq * d.n_heads * d.head_dim, kv_size = d.seq * d.n_kv_heads * d.head_dim;
  for (int64_t b = 0; b < d.batch; ++b) {
    attention_forward(q + b * q_size, k + b * kv_size, v + b * kv_size, sd, out + b * q_size);
  }
}

// One work item per (sequence, kv head): the query heads of its group all add to that head's dk and dv, which it
// then owns alone, so threads never share an output and each sum runs in one fixed order. Per query row the scores
// and softmax are recomputed from q and k; with p the probabilities and D_t = dout_t . out_t,
// ds_j = p_j (dout_t . v_j - D_t), dq_t = scale sum_j ds_j k_j, dk_j += scale ds_j q_t, dv_j += p_j dout_t.
// The reference takes the sums over keys and query rows in double; the SIMD variants (attention_backward_simd.h),
// the same items in f32.
void attention_backward(const float* q, const float* k, const float* v, const float* out, const float* dout,
                        const AttentionTrainDims& d, float* dq, float* dk, float* dv) {
  check_train_dims(d);
  if (active_isa() == Isa::Avx512) return attention_backward_avx512(q, k, v, out, dout, d, dq, dk, dv);
  if (active_isa() == Isa::Avx2) return attention_backward_avx2(q, k, v, out, dout, d, dq, dk, dv);
  const int64_t T = d.seq, D = d.head_dim, group = d.n_heads / d.n_kv_heads;
  const int64_t q_stride = d.n_heads * D, kv_stride = d.n_kv_heads * D;
  ThreadPool::global().parallel_for(d.batch * d.n_kv_heads, [&](int64_t i0, int64_t i1) {
    std::vector<float> p(static_cast<size_t>(T));
    std::vector<double> dk_acc(static_cast<size_t>(T * D)), dv_acc(static_cast<size_t>(T * D));
    std::vector<double> dq_acc(static_cast<size_t>(D));
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t row0 = i / d.n_kv_heads * T, kvh = i % d.n_kv_heads;
      const float* kh = k + row0 * kv_stride + kvh * D;  // key j of this head: kh + j * kv_stride
      const float* vh = v + row0 * kv_stride + kvh * D;
      std::fill(dk_acc.begin(), dk_acc.end(), 0.0);
      std::fill(dv_acc.begin(), dv_acc.end(), 0.0);
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        for (int64_t t = 0; t < T; ++t) {
          const int64_t at = (row0 + t) * q_stride + h * D;
          const float *qt = q + at, *ot = out + at, *gt = dout + at;
          const int64_t first = d.window > 0 ? std::max<int64_t>(0, t - d.window + 1) : 0;
          float mx = -INFINITY;
          for (int64_t j = first; j <= t; ++j) {
            p[j] = dot_f32(qt, kh + j * kv_stride, D) * d.scale;
            mx = std::max(mx, p[j]);
          }
          double sum = 0.0;
          for (int64_t j = first; j <= t; ++j) {
            p[j] = std::exp(p[j] - mx);
            sum += p[j];
          }
          const double inv = 1.0 / sum;
          const double Dt = dot_f32(gt, ot, D);
          std::fill(dq_acc.begin(), dq_acc.end(), 0.0);
          for (int64_t j = first; j <= t; ++j) {
            const float* kj = kh + j * kv_stride;
            const double pj = p[j] * inv;
            const double ds = pj * (dot_f32(gt, vh + j * kv_stride, D) - Dt);
            double* dkj = dk_acc.data() + j * D;
            double* dvj = dv_acc.data() + j * D;
            for (int64_t c = 0; c < D; ++c) {
              dq_acc[c] += ds * kj[c];
              dkj[c] += ds * qt[c];
              dvj[c] += pj * gt[c];
            }
          }
          float* dqt = dq + at;
          for (int64_t c = 0; c < D; ++c) dqt[c] = static_cast<float>(d.scale * dq_acc[c]);
        }
      }
      for (int64_t j = 0; j < T; ++j) {
        float* dkj = dk + (row0 + j) * kv_stride + kvh * D;
        float* dvj = dv + (row0 + j) * kv_stride + kvh * D;
        for (int64_t c = 0; c < D; ++c) {
          dkj[c] = static_cast<float>(d.scale * dk_acc[j * D + c]);
          dvj[c] = static_cast<float>(dv_acc[j * D + c]);
        }
      }
    }
  });
}

}  // namespace ascent::kernels
