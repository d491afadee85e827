// The gate and up projections of the same input, feeding swiglu and nothing else, become one node that reads
// the input once and never materialises the two (T, ffn) intermediates.
#include "ascent/graph/passes.h"

namespace ascent::graph {

Graph fuse_swiglu(const Graph& g) {
  std::vector<Node> nodes = g.nodes();
  const auto uses = use_counts(g);
  auto plain_matmul = [&](int id) {
    const Node& m = nodes[static_cast<size_t>(id)];
    return m.op == Op::MatMul && m.inputs.size() == 1 && m.weights[1] == nullptr && uses[static_cast<size_t>(id)] == 1;
  };
  for (auto& n : nodes) {
    if (n.op != Op::SwiGLU || !plain_matmul(n.inputs[0]) || !plain_matmul(n.inputs[1])) continue;
    const Node& gate = nodes[static_cast<size_t>(n.inputs[0])];
    const Node& up = nodes[static_cast<size_t>(n.inputs[1])];
    if (gate.inputs[0] != up.inputs[0] || gate.weights[0]->shape != up.weights[0]->shape) continue;
    Node fused;
    fused.op = Op::MatMulSwiGLU;
    fused.name = n.name;
    fused.inputs = {gate.inputs[0]};
    fused.weights = {gate.weights[0], up.weights[0]};
    fused.cols = n.cols;
    fused.selected = n.selected;
    n = fused;
  }
  return eliminate_dead_nodes(Graph::from_nodes(std::move(nodes), g.output()));
}

}  // namespace ascent::graph
