#include "ascent/graph/node_cost.h"

namespace ascent::graph {

NodeCost node_cost(const Node& n, const std::vector<Node>& nodes, int64_t T, int64_t n_out, int64_t n_past,
                   int64_t kv_bytes) {
  int64_t bytes = 0, flops = 0;
  const int64_t rows = n.selected ? n_out : T;
  const int64_t out = rows * n.cols * 4;
  auto in_bytes = [&](size_t k) {
    const Node& src = nodes[static_cast<size_t>(n.inputs[k])];
    return (src.selected ? n_out : T) * src.cols * 4;  // f32 activations and i32 ids alike
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
  return {bytes, flops};
}

std::string node_shapes(const Node& n, const std::vector<Node>& nodes, int64_t T, int64_t n_out) {
  std::string s;
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    const Node& src = nodes[static_cast<size_t>(n.inputs[k])];
    s += (k ? ", " : "") + shape_str({src.selected ? n_out : T, src.cols});
  }
  for (const Tensor* w : n.weights) {
    if (w != nullptr && w->shape.size() == 2) s += ", " + shape_str(w->shape) + " " + std::string(dtype_name(w->dtype));
  }
  return s + " -> " + shape_str({n.selected ? n_out : T, n.cols});
}

}  // namespace ascent::graph
