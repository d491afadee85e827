// Reference CPU kernels: plain C++, threaded over rows or output columns with the global ThreadPool. They define
// what every faster variant must reproduce. Activations are f32, row-major, shapes noted as (rows, cols);
// weights may be stored as f32, f16, bf16, q8_0 or q4_0 and are read in place.
//
// Batch invariance: every output row depends only on its own input row (and, for attention, its own position),
// and the summation order inside a row never depends on the row count or thread count.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "ascent/kernels/cpu/row_ops.h"
#include "ascent/kernels/op_attrs.h"
#include "ascent/tensor/dtype.h"
#include "ascent/tensor/tensor.h"

namespace ascent::kernels {

// out (T, C) = table[ids[t]] for a table (V, C) of any storage type. Throws naming the id if out of range.
void embedding_forward(const Tensor& table, std::span<const int32_t> ids, float* out);

// y (T, N) = residual (T, N) + (x (T, K) @ w (N, K)^T + bias (N)); bias and residual may be null. y may alias
// residual (the residual stream updated in place), never x.
void matmul_forward(const float* x, int64_t T, const Tensor& w, const float* bias, float* y,
                    const float* residual = nullptr);
// Several matmuls over the same x as one: one pass of work split over all their output columns together (the
// merged Q/K/V projection). outs[i] is (T, ws[i].N); biases[i] may be null.
void matmul_multi_forward(const float* x, int64_t T, std::span<const Tensor* const> ws,
                          std::span<const float* const> biases, std::span<float* const> outs);
// y (T, N) = silu(x @ wg^T) * (x @ wu^T): the gate and up projections with SwiGLU, one node.
void matmul_swiglu_forward(const float* x, int64_t T, const Tensor& wg, const Tensor& wu, float* y);
// The matmuls above read a weight's backend copy where the load made one (Tensor::packed), with the same results. For
// one decode (T = 1) call on `threads` threads, over the weights it streams (matmul_forward: its one;
// matmul_multi_forward: its list; matmul_swiglu_forward: gate, up), rows cuts[i][t] .. cuts[i][t + 1] of ws[i] are
// those thread t owns and streams first (it may then steal from another's). A load that places each thread's rows of
// every call one after another (model/weight_layout.h) gives each thread one sequential run through a token's weights.
std::vector<std::vector<int64_t>> decode_row_shares(std::span<const Tensor* const> ws, int threads);
// y (T, C) = x * w[c % P] for a weight vector of P elements (P divides C): a norm's scale, per row or per head.
void mul_vec_forward(const float* x, int64_t T, int64_t C, const float* w, int64_t P, float* y);

// Normalises each group of `group` consecutive values of each row of x (T, C): group == C is an ordinary
// RMSNorm, group == head_dim is Qwen3's per-head q/k norm. w has `group` elements, or is null for the bare
// normalisation. y may alias x.
void rms_norm_forward(const float* x, int64_t T, int64_t C, const float* w, float eps, int64_t group, float* y);
// y (T, C) = (x - mean) / sqrt(var + eps) * w + b
void layer_norm_forward(const float* x, int64_t T, int64_t C, const float* w, const float* b, float eps, float* y);

// Rotates each head of x (T, H*D) in place by angle pos[t] * inv_freq[i], i < D/2.
void rope_forward(float* x, int64_t T, int64_t H, int64_t D, std::span<const int32_t> pos,
                  std::span<const float> inv_freq, RopeStyle style);
// rope_forward for heads [h0, h1) of one row (x_row: H*D floats) at position pos, on the calling thread alone (no pool
// call: a pool thread may run it), with rope_forward's arithmetic, so the same bits.
void rope_heads(float* x_row, int64_t h0, int64_t h1, int64_t D, int32_t pos, std::span<const float> inv_freq,
                RopeStyle style);

struct AttentionDims {
  int64_t n_tokens;    // T: new query rows
  int64_t n_past;      // positions already in the cache before these tokens
  int64_t n_heads;     // Hq
  int64_t n_kv_heads;  // Hkv; Hq % Hkv == 0 (grouped-query attention)
  int64_t head_dim;    // D
  float scale;         // usually 1/sqrt(D)
  int64_t window;      // sliding window in positions (0: unlimited)
  int64_t kv_block;    // the caches' layout: 0, rows (positions, Hkv*D); B > 0 (a multiple of 16), kv_offset's blocks
  bool k_tiles;        // K's blocks hold key tiles (k_offset); needs kv_block > 0 and an even D
  // The sequence's block table (paged caches): position j lies in cache block blocks[j / kv_block]. Null: block
  // j / kv_block, one sequence's cache from its start.
  const int32_t* blocks = nullptr;
};
// The cache block holding position j (kv_block > 0).
inline int64_t kv_block_of(const AttentionDims& d, int64_t j) {
  return d.blocks != nullptr ? d.blocks[j / d.kv_block] : j / d.kv_block;
}
// Where position j of kv head h lies in a K or V cache (floats from its start). kv_block = B > 0 stores B positions
// per block, each block (Hkv, B, D). One head's rows of a block are then one contiguous run, which a decode step's
// thread (one kv head at a time) streams. In rows (positions, Hkv*D) they would be D floats every Hkv*D, a stride
// the hardware prefetchers do not follow.
inline int64_t kv_offset(const AttentionDims& d, int64_t j, int64_t h) {
  if (d.kv_block == 0) return (j * d.n_kv_heads + h) * d.head_dim;
  return ((kv_block_of(d, j) * d.n_kv_heads + h) * d.kv_block + j % d.kv_block) * d.head_dim;
}
// Floats between positions j and j + 1 of one head within a block (for kv_block = 0, anywhere): key tiles of up to
// 16 positions starting at a multiple of their size never cross a block.
inline int64_t kv_row_stride(const AttentionDims& d) {
  return d.kv_block == 0 ? d.n_kv_heads * d.head_dim : d.head_dim;
}
// With k_tiles, K's blocks hold each head's positions in groups of kKeyGroup, each group (D, kKeyGroup): dimension
// c of position j at k_offset(d, j, h) + kKeyGroup * c. The SIMD kernels take a tile of keys' scores as one vector
// per dimension, and read it in place from groups. From a cache of rows they would transpose it out of the keys at
// every step, a large share of a decode step's attention time.
constexpr int64_t kKeyGroup = 16;
inline int64_t k_offset(const AttentionDims& d, int64_t j, int64_t h) {
  if (!d.k_tiles) return kv_offset(d, j, h);
  return ((kv_block_of(d, j) * d.n_kv_heads + h) * d.kv_block + j % d.kv_block / kKeyGroup * kKeyGroup) * d.head_dim +
         j % kKeyGroup;
}
inline int64_t k_dim_stride(const AttentionDims& d) {
  return d.k_tiles ? kKeyGroup : 1;
}
// Stores position j of kv head h (k_row, v_row: its D floats of K and of V) where caches laid out as d says keep it.
inline void kv_store(const AttentionDims& d, float* k, float* v, int64_t j, int64_t h, const float* k_row,
                     const float* v_row) {
  float* kd = k + k_offset(d, j, h);
  for (int64_t c = 0; c < d.head_dim; ++c) kd[c * k_dim_stride(d)] = k_row[c];
  std::copy(v_row, v_row + d.head_dim, v + kv_offset(d, j, h));
}
// The same into f16 caches (IEEE half bits), each value rounded to nearest even (f32_to_f16): half the bytes for
// attention to read, at f16's precision (11 significant bits), as llama.cpp's default cache and vLLM's f16 one keep.
inline void kv_store(const AttentionDims& d, uint16_t* k, uint16_t* v, int64_t j, int64_t h, const float* k_row,
                     const float* v_row) {
  narrow_row_f16(v_row, d.head_dim, v + kv_offset(d, j, h));
  uint16_t* kd = k + k_offset(d, j, h);
  uint16_t kh[64];  // K's values rounded a piece at a time, then spread k_dim_stride apart
  for (int64_t c0 = 0; c0 < d.head_dim; c0 += 64) {
    const int64_t n = std::min<int64_t>(64, d.head_dim - c0);
    narrow_row_f16(k_row + c0, n, kh);
    for (int64_t c = 0; c < n; ++c) kd[(c0 + c) * k_dim_stride(d)] = kh[c];
  }
}
// A single token's step for kv head h before attention reads it (decode): RoPE of that head's query heads and key,
// and the append of its K and V rows to the cache. It runs on the thread that then attends over head h, so the rows
// it writes are in that core's cache when it reads them. The heads' steps also run in parallel, not serially on the
// caller before the attention call.
using HeadPrepare = std::function<void(int64_t kv_head)>;
// Causal attention of q (T, Hq*D) over k, v caches laid out as d.kv_block and d.k_tiles say whose first n_past + T
// positions are valid. Query t sits at position n_past + t. out is (T, Hq*D). prepare (T = 1 only) runs once per kv
// head, before anything reads that head's queries or cache.
void attention_forward(const float* q, const float* k, const float* v, const AttentionDims& d, float* out,
                       const HeadPrepare& prepare = {});
// The same over f16 caches (written by kv_store's f16 form; K in key tiles: d.k_tiles). Each cached value is widened
// exactly, so the result has the bits the f32 form gives for caches holding the same (f16-representable) values.
void attention_forward(const float* q, const uint16_t* k, const uint16_t* v, const AttentionDims& d, float* out,
                       const HeadPrepare& prepare = {});

// Row-wise softmax of x (R, C) into y.
void softmax_forward(const float* x, int64_t R, int64_t C, float* y);

void silu_forward(const float* x, int64_t n, float* y);
// GELU with the tanh approximation (GPT-2's "gelu_new").
void gelu_tanh_forward(const float* x, int64_t n, float* y);
// y = silu(gate) * up
void swiglu_forward(const float* gate, const float* up, int64_t n, float* y);
void add_forward(const float* a, const float* b, int64_t n, float* y);
void mul_forward(const float* a, const float* b, int64_t n, float* y);

// ---- Training: each forward's backward, defined beside it (llm.c's pairing). d* are gradients of the loss. Input
// gradients (dx, dq, ...) are written, replacing what was there; parameter gradients (dw, db, dtable) are added to, so
// gradient accumulation and tied weights need no extra pass. Every weight here is an f32 array the trainer owns.

// dtable (V, C) += dy (T, C) scattered by ids (T). Throws naming the id if out of range.
void embedding_backward(std::span<const int32_t> ids, const float* dy, int64_t C, float* dtable, int64_t V);
// dx (T, C) = dy * w[c % P]; dw (P) += sum over rows and repeats of dy * x.
void mul_vec_backward(const float* x, int64_t T, int64_t C, const float* w, int64_t P, const float* dy, float* dx,
                      float* dw);
// rms_norm_forward's backward per `group` values (w null: the bare normalisation, dw unused). dx may alias dy.
void rms_norm_backward(const float* x, int64_t T, int64_t C, const float* w, float eps, int64_t group, const float* dy,
                       float* dx, float* dw);
// layer_norm_forward's backward: dx (T, C) =; dw, db (C) +=. dx may alias dy.
void layer_norm_backward(const float* x, int64_t T, int64_t C, const float* w, float eps, const float* dy, float* dx,
                         float* dw, float* db);
// rope_forward's backward in place: dx (T, H*D) holds dy on entry (rotation by the opposite angle).
void rope_backward(float* dx, int64_t T, int64_t H, int64_t D, std::span<const int32_t> pos,
                   std::span<const float> inv_freq, RopeStyle style);

// Causal self-attention over a training batch: `batch` sequences of `seq` rows each, row b*seq + t at position t.
// q (B*T, Hq*D), k and v (B*T, Hkv*D), out (B*T, Hq*D); grouped-query as attention_forward (Hq % Hkv == 0).
struct AttentionTrainDims {
  int64_t batch, seq, n_heads, n_kv_heads, head_dim;
  float scale;
  int64_t window;  // 0: unlimited
};
void attention_train_forward(const float* q, const float* k, const float* v, const AttentionTrainDims& d, float* out);
// Flash-style: the softmax is recomputed from q and k, never stored; out is the forward's output. dq (B*T, Hq*D),
// dk and dv (B*T, Hkv*D) are written.
void attention_backward(const float* q, const float* k, const float* v, const float* out, const float* dout,
                        const AttentionTrainDims& d, float* dq, float* dk, float* dv);

// dx (n) = dy * gelu_tanh'(x). dx may alias dy.
void gelu_tanh_backward(const float* x, const float* dy, int64_t n, float* dx);
// y = silu(gate) * up: dgate (n), dup (n) written. They may alias dy, not gate or up.
void swiglu_backward(const float* gate, const float* up, const float* dy, int64_t n, float* dgate, float* dup);

// The language-model head and its loss in one: logits = x (R, C) @ w (V, C)^T, computed `chunk` rows at a time so the
// (R, V) logits are never held whole. The default chunk, 128 rows, holds 26 MB of logits at GPT-2's vocabulary, and
// re-reads and re-writes dw once per chunk (154 MB there): 128 rows ran the GPT-2 head 1.15x faster than 64, and 256
// (the whole 4 x 64 batch at once) only 1.07x faster again. Rows whose target is negative are ignored. Returns the sum
// over counted rows of -log softmax(logits)[target] (in double). With dx non-null also the gradient of loss_scale *
// that sum: dx (R, C) written, dw (V, C) added to; dw_zero says dw holds zeros, so the first chunk writes it without
// reading it. Throws naming the row when a target is >= V.
double lm_head_cross_entropy(const float* x, int64_t R, int64_t C, const float* w, int64_t V,
                             std::span<const int32_t> targets, float loss_scale, float* dx, float* dw,
                             bool dw_zero = false, int64_t chunk = 128);

// f32 dot product with a fixed summation order (8 interleaved partial sums), shared by the kernels above.
float dot_f32(const float* a, const float* b, int64_t n);

}  // namespace ascent::kernels
