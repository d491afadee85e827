// The attention block as one node. The Q, K and V projections of the same input run as one merged matmul (one pass of
// work over all their output rows). Then the optional q/k norm, RoPE, the KV-cache append and attention run on scratch
// memory owned by the node. The intermediate q/k/v tensors disappear from the plan.
#include "ascent/graph/passes.h"

namespace ascent::graph {
namespace {

struct Branch {
  int matmul = -1, norm = -1, rope = -1;
};

// Walks back from an attention input through an optional rope and an optional (fused) grouped rms_norm to the
// projecting matmul; every link must have the attention as its only reader.
bool trace(const std::vector<Node>& nodes, const std::vector<int>& uses, int id, bool allow_rope, Branch& b) {
  auto single = [&](int i) { return uses[static_cast<size_t>(i)] == 1; };
  const Node* n = &nodes[static_cast<size_t>(id)];
  if (allow_rope && n->op == Op::Rope) {
    if (!single(id)) return false;
    b.rope = id;
    id = n->inputs[0];
    n = &nodes[static_cast<size_t>(id)];
  }
  if (allow_rope && n->op == Op::RmsNorm && n->weights[0] != nullptr) {
    if (!single(id)) return false;
    b.norm = id;
    id = n->inputs[0];
    n = &nodes[static_cast<size_t>(id)];
  }
  if (n->op != Op::MatMul || n->inputs.size() != 1 || !single(id)) return false;
  b.matmul = id;
  return true;
}

}  // namespace

Graph fuse_attention(const Graph& g) {
  std::vector<Node> nodes = g.nodes();
  const auto uses = use_counts(g);
  for (auto& n : nodes) {
    if (n.op != Op::Attention) continue;
    Branch q, k, v;
    if (!trace(nodes, uses, n.inputs[0], true, q) || !trace(nodes, uses, n.inputs[1], true, k) ||
        !trace(nodes, uses, n.inputs[2], false, v)) {
      continue;
    }
    const Node &mq = nodes[static_cast<size_t>(q.matmul)], &mk = nodes[static_cast<size_t>(k.matmul)],
               &mv = nodes[static_cast<size_t>(v.matmul)];
    if (mq.inputs[0] != mk.inputs[0] || mq.inputs[0] != mv.inputs[0]) continue;
    if ((q.rope < 0) != (k.rope < 0) || (q.norm < 0) != (k.norm < 0)) continue;
    if (q.norm >= 0 && (nodes[static_cast<size_t>(q.norm)].group != n.head_dim ||
                        nodes[static_cast<size_t>(k.norm)].group != n.head_dim ||
                        nodes[static_cast<size_t>(q.norm)].eps != nodes[static_cast<size_t>(k.norm)].eps)) {
      continue;
    }
    Node fused = n;
    fused.op = Op::AttentionFused;
    fused.inputs = {mq.inputs[0]};
    fused.inv_freq = nullptr;
    if (q.rope >= 0) {
      const Node& rq = nodes[static_cast<size_t>(q.rope)];
      const Node& rk = nodes[static_cast<size_t>(k.rope)];
      if (rq.inputs[1] != rk.inputs[1] || rq.inv_freq != rk.inv_freq || rq.rope_style != rk.rope_style) continue;
      fused.inputs.push_back(rq.inputs[1]);
      fused.inv_freq = rq.inv_freq;
      fused.rope_style = rq.rope_style;
    }
    const Tensor* qn = q.norm >= 0 ? nodes[static_cast<size_t>(q.norm)].weights[0] : nullptr;
    const Tensor* kn = k.norm >= 0 ? nodes[static_cast<size_t>(k.norm)].weights[0] : nullptr;
    if (q.norm >= 0) fused.eps = nodes[static_cast<size_t>(q.norm)].eps;
    fused.weights = {mq.weights[0], mk.weights[0], mv.weights[0], mq.weights[1], mk.weights[1], mv.weights[1], qn, kn};
    fused.scratch_floats_per_row = mq.cols + mk.cols + mv.cols;
    n = fused;
  }
  return eliminate_dead_nodes(Graph::from_nodes(std::move(nodes), g.output()));
}

}  // namespace ascent::graph
