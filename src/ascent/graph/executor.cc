#include "ascent/graph/executor.h"

#include <algorithm>
#include <cstring>

#include "ascent/base/error.h"

namespace ascent::graph {

int64_t shape_bucket(int64_t n_tokens) {
  int64_t b = 1;
  while (b < n_tokens) b *= 2;
  return b;
}

const MemoryPlan& Executor::plan_for(int64_t n_tokens) {
  const int64_t bucket = shape_bucket(n_tokens);
  auto it = plans_.find(bucket);
  if (it == plans_.end()) {
    it = plans_.emplace(bucket, plan_memory(graph_, bucket)).first;
    ++plans_compiled_;
  }
  return it->second;
}

std::span<const float> Executor::run(std::span<const int32_t> tokens, int64_t n_past, KvCache& kv) {
  const int64_t T = static_cast<int64_t>(tokens.size());
  ASCENT_CHECK(T > 0, "nothing to run: no tokens");
  ASCENT_CHECK(n_past >= 0 && n_past + T <= kv.max_seq(),
               "sequence of {} tokens exceeds the context length {} of the KV cache", n_past + T, kv.max_seq());
  const MemoryPlan& plan = plan_for(T);
  arena_.reserve(static_cast<size_t>(plan.arena_bytes));
  positions_.resize(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) positions_[static_cast<size_t>(t)] = static_cast<int32_t>(n_past + t);

  const auto& nodes = graph_.nodes();
  auto buf = [&](int id) { return reinterpret_cast<float*>(arena_.data() + plan.offsets[static_cast<size_t>(id)]); };
  auto ints = [&](int id) -> std::span<const int32_t> {
    return nodes[static_cast<size_t>(id)].op == Op::Tokens ? tokens : std::span<const int32_t>(positions_);
  };

  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    const int id = static_cast<int>(i);
    const int64_t rows = n.single_row ? 1 : T;
    float* out = buf(id);
    const auto in = [&](size_t k) { return buf(n.inputs[k]); };
    const int64_t count = rows * n.cols;
    try {
      switch (n.op) {
        case Op::Tokens:
        case Op::Positions:
          break;  // read directly from the call's spans
        case Op::Embedding:
          kernels::embedding_forward(*n.weights[0], ints(n.inputs[0]), out);
          break;
        case Op::MatMul:
          kernels::matmul_forward(in(0), rows, *n.weights[0], n.weights[1] ? n.weights[1]->f32() : nullptr, out);
          break;
        case Op::RmsNorm:
          kernels::rms_norm_forward(in(0), rows, n.cols, n.weights[0]->f32(), n.eps, n.group, out);
          break;
        case Op::LayerNorm:
          kernels::layer_norm_forward(in(0), rows, n.cols, n.weights[0]->f32(),
                                      n.weights[1] ? n.weights[1]->f32() : nullptr, n.eps, out);
          break;
        case Op::Rope:
          std::memcpy(out, in(0), static_cast<size_t>(count) * sizeof(float));
          kernels::rope_forward(out, rows, n.heads, n.head_dim, ints(n.inputs[1]), *n.inv_freq, n.rope_style);
          break;
        case Op::Attention: {
          const int64_t kvw = n.kv_heads * n.head_dim;
          ASCENT_CHECK(kvw == kv.kv_width() && n.layer < kv.n_layers(), "KV cache shape does not fit layer {}",
                       n.layer);
          std::memcpy(kv.k(n.layer) + n_past * kvw, in(1), static_cast<size_t>(T * kvw) * sizeof(float));
          std::memcpy(kv.v(n.layer) + n_past * kvw, in(2), static_cast<size_t>(T * kvw) * sizeof(float));
          const kernels::AttentionDims d{T, n_past, n.heads, n.kv_heads, n.head_dim, n.scale, n.window};
          kernels::attention_forward(in(0), kv.k(n.layer), kv.v(n.layer), d, out);
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
          const Node& src = nodes[static_cast<size_t>(n.inputs[0])];
          const int64_t src_rows = src.single_row ? 1 : T;
          std::memcpy(out, in(0) + (src_rows - 1) * n.cols, static_cast<size_t>(n.cols) * sizeof(float));
          break;
        }
      }
    } catch (const Error& e) {
      throw Error(n.name + ": " + e.what());
    }
  }
  const Node& o = nodes[static_cast<size_t>(graph_.output())];
  return {buf(graph_.output()), static_cast<size_t>((o.single_row ? 1 : T) * o.cols)};
}

}  // namespace ascent::graph
