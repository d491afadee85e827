// rms_norm_bare followed by mul_vec (its only reader) becomes one rms_norm with the weight: one pass over the
// row instead of two, and one buffer fewer.
#include "ascent/graph/passes.h"

namespace ascent::graph {

Graph fuse_norm(const Graph& g) {
  std::vector<Node> nodes = g.nodes();
  const auto uses = use_counts(g);
  for (auto& n : nodes) {
    if (n.op != Op::MulVec) continue;
    const Node& r = nodes[static_cast<size_t>(n.inputs[0])];
    if (r.op != Op::RmsNorm || r.weights[0] != nullptr || uses[static_cast<size_t>(n.inputs[0])] != 1) continue;
    if (n.weights[0]->numel() != r.group) continue;
    Node fused = r;
    fused.name = n.name;
    fused.weights = {n.weights[0]};
    n = fused;
  }
  return eliminate_dead_nodes(Graph::from_nodes(std::move(nodes), g.output()));
}

}  // namespace ascent::graph
