#include "ascent/graph/node_calls.h"

#include <cstring>

#include "ascent/base/error.h"
#include "ascent/kernels/cpu/ops.h"

namespace ascent::graph {
namespace {

const float* f32_or_null(const Tensor* t) {
  return t != nullptr ? t->f32() : nullptr;
}

// An attention node's new rows: q (T, Hq*D), k and v (T, Hkv*D). rope_q and rope_k are set when RoPE has yet to
// rotate them (a decode step defers it to each kv head's prepare step).
struct NewRows {
  const float *q = nullptr, *k = nullptr, *v = nullptr;
  float *rope_q = nullptr, *rope_k = nullptr;
};

// AttentionFused's first steps: Q, K and V as one merged matmul into the scratch after the output, q/k norm, and
// RoPE unless the batch is a decode step.
NewRows project_qkv(const NodeCall& c) {
  const Node& n = c.node;
  const int64_t qw = n.heads * n.head_dim, kvw = n.kv_heads * n.head_dim;
  float* sq = c.out + c.rows * n.cols;  // q (T, qw), then k (T, kvw), then v (T, kvw)
  float* sk = sq + c.rows * qw;
  float* sv = sk + c.rows * kvw;
  const Tensor* ws[3] = {n.weights[0], n.weights[1], n.weights[2]};
  const float* bs[3] = {f32_or_null(n.weights[3]), f32_or_null(n.weights[4]), f32_or_null(n.weights[5])};
  float* os[3] = {sq, sk, sv};
  for (const Tensor* w : ws) c.observe(*w, c.in[0]);
  kernels::matmul_multi_forward(c.in[0], c.rows, ws, bs, os);
  if (n.weights[6] != nullptr) {
    kernels::rms_norm_forward(sq, c.rows, qw, n.weights[6]->f32(), n.eps, n.head_dim, sq);
    kernels::rms_norm_forward(sk, c.rows, kvw, n.weights[7]->f32(), n.eps, n.head_dim, sk);
  }
  NewRows r{sq, sk, sv, nullptr, nullptr};
  if (n.inv_freq != nullptr && c.batch.decode) {
    r.rope_q = sq;
    r.rope_k = sk;
  } else if (n.inv_freq != nullptr) {
    kernels::rope_forward(sq, c.rows, n.heads, n.head_dim, c.batch.positions, *n.inv_freq, n.rope_style);
    kernels::rope_forward(sk, c.rows, n.kv_heads, n.head_dim, c.batch.positions, *n.inv_freq, n.rope_style);
  }
  return r;
}

// Segment s's new rows to where its cache keeps them (in the cache's element type), then its attention over the
// cache. In a decode step each kv head's RoPE and append run inside the attention call (kernels::HeadPrepare).
template <class Elem>
void attend_segment(const NodeCall& c, size_t s, const NewRows& r, Elem* kc, Elem* vc) {
  const Node& n = c.node;
  const Segment& seg = c.batch.segments[s];
  const int64_t qw = n.heads * n.head_dim, kvw = n.kv_heads * n.head_dim;
  const int64_t r0 = c.batch.first_row[s], rows = c.batch.first_row[s + 1] - r0, past = seg.n_past;
  const kernels::AttentionDims d{rows,
                                 past,
                                 n.heads,
                                 n.kv_heads,
                                 n.head_dim,
                                 n.scale,
                                 n.window,
                                 seg.kv->block(),
                                 /*k_tiles=*/seg.kv->k_tiles(n.head_dim),
                                 seg.blocks.empty() ? nullptr : seg.blocks.data()};
  float* out = c.out + r0 * qw;
  if (c.batch.decode) {
    const int64_t group = n.heads / n.kv_heads;
    const int32_t pos = c.batch.positions[static_cast<size_t>(r0)];
    const kernels::HeadPrepare prepare = [&](int64_t h) {
      if (r.rope_q != nullptr) {
        kernels::rope_heads(r.rope_q + r0 * qw, h * group, (h + 1) * group, n.head_dim, pos, *n.inv_freq, n.rope_style);
        kernels::rope_heads(r.rope_k + r0 * kvw, h, h + 1, n.head_dim, pos, *n.inv_freq, n.rope_style);
      }
      const int64_t src = r0 * kvw + h * n.head_dim;
      kernels::kv_store(d, kc, vc, past, h, r.k + src, r.v + src);
    };
    kernels::attention_forward(r.q + r0 * qw, kc, vc, d, out, prepare);
    return;
  }
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t h = 0; h < n.kv_heads; ++h) {
      const int64_t src = (r0 + t) * kvw + h * n.head_dim;
      kernels::kv_store(d, kc, vc, past + t, h, r.k + src, r.v + src);
    }
  }
  kernels::attention_forward(r.q + r0 * qw, kc, vc, d, out);
}

}  // namespace

std::span<const int32_t> NodeCall::ints(size_t k) const {
  return nodes[static_cast<size_t>(node.inputs[k])].op == Op::Tokens ? batch.tokens : batch.positions;
}

void embedding_call(const NodeCall& c) {
  kernels::embedding_forward(*c.node.weights[0], c.ints(0), c.out);
}

void matmul_call(const NodeCall& c) {
  const Node& n = c.node;
  c.observe(*n.weights[0], c.in[0]);
  kernels::matmul_forward(c.in[0], c.rows, *n.weights[0], f32_or_null(n.weights[1]), c.out,
                          n.inputs.size() > 1 ? c.in[1] : nullptr);
}

void matmul_swiglu_call(const NodeCall& c) {
  const Node& n = c.node;
  c.observe(*n.weights[0], c.in[0]);
  c.observe(*n.weights[1], c.in[0]);
  kernels::matmul_swiglu_forward(c.in[0], c.rows, *n.weights[0], *n.weights[1], c.out);
}

void rms_norm_call(const NodeCall& c) {
  const Node& n = c.node;
  kernels::rms_norm_forward(c.in[0], c.rows, n.cols, f32_or_null(n.weights[0]), n.eps, n.group, c.out);
}

void layer_norm_call(const NodeCall& c) {
  const Node& n = c.node;
  kernels::layer_norm_forward(c.in[0], c.rows, n.cols, n.weights[0]->f32(), f32_or_null(n.weights[1]), n.eps, c.out);
}

void mul_vec_call(const NodeCall& c) {
  const Node& n = c.node;
  kernels::mul_vec_forward(c.in[0], c.rows, n.cols, n.weights[0]->f32(), n.weights[0]->numel(), c.out);
}

void rope_call(const NodeCall& c) {
  const Node& n = c.node;
  if (c.out != c.in[0]) std::memcpy(c.out, c.in[0], static_cast<size_t>(c.count()) * sizeof(float));
  kernels::rope_forward(c.out, c.rows, n.heads, n.head_dim, c.ints(1), *n.inv_freq, n.rope_style);
}

void attention_call(const NodeCall& c) {
  const Node& n = c.node;
  const KvCache& kv0 = *c.batch.segments[0].kv;
  ASCENT_CHECK(n.kv_heads * n.head_dim == kv0.kv_width() && n.layer < kv0.n_layers(),
               "KV cache shape does not fit layer {}", n.layer);
  const NewRows r = n.op == Op::Attention ? NewRows{c.in[0], c.in[1], c.in[2], nullptr, nullptr} : project_qkv(c);
  for (size_t s = 0; s < c.batch.segments.size(); ++s) {  // each sequence attends over its own cache
    KvCache& kv = *c.batch.segments[s].kv;
    if (kv.dtype() == DType::F16) {
      attend_segment(c, s, r, kv.k_f16(n.layer), kv.v_f16(n.layer));
    } else {
      attend_segment(c, s, r, kv.k(n.layer), kv.v(n.layer));
    }
  }
}

void silu_call(const NodeCall& c) {
  kernels::silu_forward(c.in[0], c.count(), c.out);
}

void gelu_tanh_call(const NodeCall& c) {
  kernels::gelu_tanh_forward(c.in[0], c.count(), c.out);
}

void swiglu_call(const NodeCall& c) {
  kernels::swiglu_forward(c.in[0], c.in[1], c.count(), c.out);
}

void add_call(const NodeCall& c) {
  kernels::add_forward(c.in[0], c.in[1], c.count(), c.out);
}

void mul_call(const NodeCall& c) {
  kernels::mul_forward(c.in[0], c.in[1], c.count(), c.out);
}

void softmax_call(const NodeCall& c) {
  kernels::softmax_forward(c.in[0], c.rows, c.node.cols, c.out);
}

void last_row_call(const NodeCall& c) {
  const Node& src = c.nodes[static_cast<size_t>(c.node.inputs[0])];
  ASCENT_CHECK(!src.selected, "{}: its input has already been cut to the output rows", c.node.name);
  const auto cols = static_cast<size_t>(c.node.cols);
  for (int64_t i = 0; i < c.batch.n_out; ++i) {  // ascending rows: a copy never overwrites a row yet to be read
    std::memmove(c.out + i * c.node.cols, c.in[0] + c.batch.out_rows[static_cast<size_t>(i)] * c.node.cols,
                 cols * sizeof(float));
  }
}

}  // namespace ascent::graph
