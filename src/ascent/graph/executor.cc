#include "ascent/graph/executor.h"

#include <algorithm>
#include <cstring>

#include "ascent/base/error.h"
#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/ops.h"

namespace ascent::graph {
namespace {

// What one node moves and computes, for the profile (weights counted once per call; attention reads kv_bytes per
// cached K or V value).
void node_cost(const Node& n, const std::vector<Node>& nodes, int64_t T, int64_t n_past, int64_t kv_bytes,
               int64_t& bytes, int64_t& flops) {
  const int64_t rows = n.single_row ? 1 : T;
  const int64_t out = rows * n.cols * 4;
  auto in_bytes = [&](size_t k) {
    const Node& src = nodes[static_cast<size_t>(n.inputs[k])];
    return (src.single_row ? 1 : T) * src.cols * 4;  // f32 activations and i32 ids alike
  };
  auto attention_flops = [&](int64_t heads, int64_t d) { return 4 * rows * (n_past + (rows + 1) / 2) * heads * d; };
  bytes = out;
  flops = rows * n.cols;
  switch (n.op) {
    case Op::MatMul:
    case Op::MatMulSwiGLU: {
      const int64_t K = n.weights[0]->shape[1];
      const int64_t mats = n.op == Op::MatMulSwiGLU ? 2 : 1;
      flops = 2 * rows * n.cols * K * mats;
      bytes = out + in_bytes(0) + mats * n.weights[0]->nbytes() + (n.inputs.size() > 1 ? out : 0);
      break;
    }
    case Op::AttentionFused: {
      const int64_t K = n.weights[0]->shape[1];
      int64_t wbytes = 0;
      for (int i = 0; i < 3; ++i) wbytes += n.weights[static_cast<size_t>(i)]->nbytes();
      flops = 2 * rows * n.scratch_floats_per_row * K + attention_flops(n.heads, n.head_dim);
      bytes = out + in_bytes(0) + wbytes + 2 * (n_past + rows) * n.kv_heads * n.head_dim * kv_bytes;
      break;
    }
    case Op::Attention:
      flops = attention_flops(n.heads, n.head_dim);
      bytes = out + in_bytes(0) + 2 * (n_past + rows) * n.kv_heads * n.head_dim * kv_bytes;
      break;
    case Op::Embedding:
      bytes = 2 * out;
      flops = 0;
      break;
    default:
      for (size_t k = 0; k < n.inputs.size(); ++k) bytes += in_bytes(k);
      break;
  }
}

std::string shapes_of(const Node& n, const std::vector<Node>& nodes, int64_t T) {
  std::string s;
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    const Node& src = nodes[static_cast<size_t>(n.inputs[k])];
    s += (k ? ", " : "") + shape_str({src.single_row ? 1 : T, src.cols});
  }
  for (const Tensor* w : n.weights) {
    if (w != nullptr && w->shape.size() == 2) s += ", " + shape_str(w->shape) + " " + std::string(dtype_name(w->dtype));
  }
  return s + " -> " + shape_str({n.single_row ? 1 : T, n.cols});
}

}  // namespace

int64_t shape_bucket(int64_t n_tokens) {
  int64_t b = 1;
  while (b < n_tokens) b *= 2;
  return b;
}

const MemoryPlan& Executor::plan_for(int64_t n_tokens) {
  const int64_t bucket = shape_bucket(n_tokens);
  auto it = plans_.find(bucket);
  if (it == plans_.end()) {
    it = plans_.emplace(bucket, plan_memory(graph_, bucket, options_.plan, options_.plan && options_.inplace)).first;
    ++plans_compiled_;
    if (tracer_ != nullptr) tracer_->count_plan_compiled();
  }
  return it->second;
}

void Executor::warm_up(int64_t max_tokens) {
  for (int64_t b = 1; b <= shape_bucket(max_tokens); b *= 2) plan_for(b);
  std::size_t largest = 0;
  for (const auto& [b, p] : plans_) largest = std::max(largest, static_cast<size_t>(p.arena_bytes));
  arena_.reserve(largest);
}

std::span<const float> Executor::run(std::span<const int32_t> tokens, int64_t n_past, KvCache& kv) {
  const Segment one{tokens, n_past, &kv};
  return run_batch(std::span<const Segment>(&one, 1));
}

std::span<const float> Executor::run_batch(std::span<const Segment> segments) {
  ASCENT_CHECK(!segments.empty(), "nothing to run: no sequences");
  std::span<const int32_t> tokens = segments[0].tokens;
  if (segments.size() > 1) {
    tokens_.clear();
    for (const Segment& s : segments) tokens_.insert(tokens_.end(), s.tokens.begin(), s.tokens.end());
    tokens = tokens_;
  }
  const int64_t T = static_cast<int64_t>(tokens.size());
  positions_.resize(static_cast<size_t>(T));
  std::vector<int64_t> seg_row(segments.size() + 1, 0);  // first row of each segment
  for (size_t s = 0; s < segments.size(); ++s) {
    const Segment& g = segments[s];
    const auto n = static_cast<int64_t>(g.tokens.size());
    ASCENT_CHECK(n > 0, "nothing to run: sequence {} has no tokens", s);
    ASCENT_CHECK(g.kv != nullptr && g.n_past >= 0 && g.n_past + n <= g.kv->max_seq(),
                 "sequence of {} tokens exceeds the context length {} of the KV cache", g.n_past + n,
                 g.kv != nullptr ? g.kv->max_seq() : 0);
    seg_row[s + 1] = seg_row[s] + n;
    for (int64_t t = 0; t < n; ++t)
      positions_[static_cast<size_t>(seg_row[s] + t)] = static_cast<int32_t>(g.n_past + t);
  }
  const int64_t n_past = segments[0].n_past;
  // Per cached K or V value, for the profile (a segment without a cache runs no attention).
  const int64_t kv_bytes = segments[0].kv != nullptr ? block_bytes(segments[0].kv->dtype()) : 4;
  const MemoryPlan& plan = plan_for(T);
  if (static_cast<size_t>(plan.arena_bytes) > arena_.capacity()) arena_.reserve(static_cast<size_t>(plan.arena_bytes));

  const auto& nodes = graph_.nodes();
  auto buf = [&](int id) { return reinterpret_cast<float*>(arena_.data() + plan.offsets[static_cast<size_t>(id)]); };
  auto ints = [&](int id) -> std::span<const int32_t> {
    return nodes[static_cast<size_t>(id)].op == Op::Tokens ? tokens : std::span<const int32_t>(positions_);
  };
  auto f32_or_null = [](const Tensor* t) { return t != nullptr ? t->f32() : nullptr; };

  const prof::TracerScope tracing(tracer_);  // the matmul kernels file their pool calls under the node running
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    const int id = static_cast<int>(i);
    const int64_t rows = n.single_row ? 1 : T;
    float* out = buf(id);
    const auto in = [&](size_t k) { return buf(n.inputs[k]); };
    const int64_t count = rows * n.cols;
    if (tracer_ != nullptr) tracer_->set_node(n.name);
    const double t0 = tracer_ != nullptr ? tracer_->now_us() : 0.0;
    try {
      switch (n.op) {
        case Op::Tokens:
        case Op::Positions:
          break;  // read directly from the call's spans
        case Op::Embedding:
          kernels::embedding_forward(*n.weights[0], ints(n.inputs[0]), out);
          break;
        case Op::MatMul:
          if (observer_) observer_(*n.weights[0], in(0), rows);
          kernels::matmul_forward(in(0), rows, *n.weights[0], f32_or_null(n.weights[1]), out,
                                  n.inputs.size() > 1 ? in(1) : nullptr);
          break;
        case Op::MatMulSwiGLU:
          if (observer_) {
            observer_(*n.weights[0], in(0), rows);
            observer_(*n.weights[1], in(0), rows);
          }
          kernels::matmul_swiglu_forward(in(0), rows, *n.weights[0], *n.weights[1], out);
          break;
        case Op::RmsNorm:
          kernels::rms_norm_forward(in(0), rows, n.cols, f32_or_null(n.weights[0]), n.eps, n.group, out);
          break;
        case Op::LayerNorm:
          kernels::layer_norm_forward(in(0), rows, n.cols, n.weights[0]->f32(), f32_or_null(n.weights[1]), n.eps, out);
          break;
        case Op::MulVec:
          kernels::mul_vec_forward(in(0), rows, n.cols, n.weights[0]->f32(), n.weights[0]->numel(), out);
          break;
        case Op::Rope:
          if (out != in(0)) std::memcpy(out, in(0), static_cast<size_t>(count) * sizeof(float));
          kernels::rope_forward(out, rows, n.heads, n.head_dim, ints(n.inputs[1]), *n.inv_freq, n.rope_style);
          break;
        case Op::Attention:
        case Op::AttentionFused: {
          const int64_t kvw = n.kv_heads * n.head_dim, qw = n.heads * n.head_dim;
          const KvCache& kv0 = *segments[0].kv;
          ASCENT_CHECK(kvw == kv0.kv_width() && n.layer < kv0.n_layers(), "KV cache shape does not fit layer {}",
                       n.layer);
          const float *q = nullptr, *k = nullptr, *v = nullptr;
          // One token per sequence (decode; every sequence has at least one): each kv head's RoPE and append run
          // inside the attention call, on the thread that attends over that head (kernels::HeadPrepare), rather
          // than on this thread before it.
          const bool per_head = T == static_cast<int64_t>(segments.size());
          float* rope_q = nullptr;  // the rows RoPE has yet to rotate, when per_head defers it
          float* rope_k = nullptr;
          if (n.op == Op::Attention) {
            q = in(0);
            k = in(1);
            v = in(2);
          } else {
            // Scratch after the output: q (T, qw), k (T, kvw), v (T, kvw).
            float* sq = out + rows * n.cols;
            float* sk = sq + rows * qw;
            float* sv = sk + rows * kvw;
            const Tensor* ws[3] = {n.weights[0], n.weights[1], n.weights[2]};
            const float* bs[3] = {f32_or_null(n.weights[3]), f32_or_null(n.weights[4]), f32_or_null(n.weights[5])};
            float* os[3] = {sq, sk, sv};
            if (observer_) {
              for (const Tensor* w : ws) observer_(*w, in(0), rows);
            }
            kernels::matmul_multi_forward(in(0), rows, ws, bs, os);
            if (n.weights[6] != nullptr) {
              kernels::rms_norm_forward(sq, rows, qw, n.weights[6]->f32(), n.eps, n.head_dim, sq);
              kernels::rms_norm_forward(sk, rows, kvw, n.weights[7]->f32(), n.eps, n.head_dim, sk);
            }
            if (n.inv_freq != nullptr && per_head) {
              rope_q = sq;
              rope_k = sk;
            } else if (n.inv_freq != nullptr) {
              kernels::rope_forward(sq, rows, n.heads, n.head_dim, positions_, *n.inv_freq, n.rope_style);
              kernels::rope_forward(sk, rows, n.kv_heads, n.head_dim, positions_, *n.inv_freq, n.rope_style);
            }
            q = sq;
            k = sk;
            v = sv;
          }
          for (size_t s = 0; s < segments.size(); ++s) {  // each sequence attends over its own cache
            KvCache& kv = *segments[s].kv;
            const int64_t r0 = seg_row[s], Ts = seg_row[s + 1] - r0, past = segments[s].n_past;
            const kernels::AttentionDims d{Ts,
                                           past,
                                           n.heads,
                                           n.kv_heads,
                                           n.head_dim,
                                           n.scale,
                                           n.window,
                                           kv.block(),
                                           /*k_tiles=*/kv.k_tiles(n.head_dim)};
            // The new rows, head by head, to where the cache's layout keeps them (in its element type), then the
            // attention over the cache.
            auto append_and_attend = [&](auto* kc, auto* vc) {
              if (per_head) {
                const int64_t group = n.heads / n.kv_heads;
                const int32_t pos = positions_[static_cast<size_t>(r0)];
                const kernels::HeadPrepare prepare = [&](int64_t h) {
                  if (rope_q != nullptr) {
                    kernels::rope_heads(rope_q + r0 * qw, h * group, (h + 1) * group, n.head_dim, pos, *n.inv_freq,
                                        n.rope_style);
                    kernels::rope_heads(rope_k + r0 * kvw, h, h + 1, n.head_dim, pos, *n.inv_freq, n.rope_style);
                  }
                  const int64_t src = r0 * kvw + h * n.head_dim;
                  kernels::kv_store(d, kc, vc, past, h, k + src, v + src);
                };
                kernels::attention_forward(q + r0 * qw, kc, vc, d, out + r0 * qw, prepare);
                return;
              }
              for (int64_t t = 0; t < Ts; ++t) {
                for (int64_t h = 0; h < n.kv_heads; ++h) {
                  const int64_t src = (r0 + t) * kvw + h * n.head_dim;
                  kernels::kv_store(d, kc, vc, past + t, h, k + src, v + src);
                }
              }
              kernels::attention_forward(q + r0 * qw, kc, vc, d, out + r0 * qw);
            };
            if (kv.dtype() == DType::F16) {
              append_and_attend(kv.k_f16(n.layer), kv.v_f16(n.layer));
            } else {
              append_and_attend(kv.k(n.layer), kv.v(n.layer));
            }
          }
          break;
        }
        case Op::Silu:
          kernels::silu_forward(in(0), count, out);
          break;
        case Op::GeluTanh:
          kernels::gelu_tanh_forward(in(0), count, out);
          break;
        case Op::SwiGLU:
          kernels::swiglu_forward(in(0), in(1), count, out);
          break;
        case Op::Add:
          kernels::add_forward(in(0), in(1), count, out);
          break;
        case Op::Mul:
          kernels::mul_forward(in(0), in(1), count, out);
          break;
        case Op::Softmax:
          kernels::softmax_forward(in(0), rows, n.cols, out);
          break;
        case Op::LastRow: {
          ASCENT_CHECK(segments.size() == 1, "a batch of {} sequences needs the graph that keeps every row",
                       segments.size());
          const Node& src = nodes[static_cast<size_t>(n.inputs[0])];
          const int64_t src_rows = src.single_row ? 1 : T;
          std::memmove(out, in(0) + (src_rows - 1) * n.cols, static_cast<size_t>(n.cols) * sizeof(float));
          break;
        }
      }
    } catch (const Error& e) {
      throw Error(n.name + ": " + e.what());
    }
    if (tracer_ != nullptr && n.op != Op::Tokens && n.op != Op::Positions) {
      prof::TraceEvent e;
      e.name = n.name;
      e.op = op_name(n.op);
      e.shapes = shapes_of(n, nodes, T);
      node_cost(n, nodes, T, n_past, kv_bytes, e.bytes, e.flops);
      e.ts_us = t0;
      e.dur_us = tracer_->now_us() - t0;
      e.threads = ThreadPool::global().size();
      tracer_->add(std::move(e));
    }
  }
  if (tracer_ != nullptr) tracer_->sample_memory(plan.arena_bytes);
  const Node& o = nodes[static_cast<size_t>(graph_.output())];
  return {buf(graph_.output()), static_cast<size_t>((o.single_row ? 1 : T) * o.cols)};
}

}  // namespace ascent::graph
