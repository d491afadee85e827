// Dead-node removal: keeps only nodes the output depends on, renumbered in their original order. Fusions leave
// the nodes they absorbed without readers; this pass drops them.
#include "ascent/graph/passes.h"

namespace ascent::graph {

Graph eliminate_dead_nodes(const Graph& g) {
  const auto& nodes = g.nodes();
  std::vector<bool> live(nodes.size(), false);
  live[static_cast<size_t>(g.output())] = true;
  for (size_t i = nodes.size(); i-- > 0;) {
    if (!live[i]) continue;
    for (int in : nodes[i].inputs) live[static_cast<size_t>(in)] = true;
  }
  std::vector<int> remap(nodes.size(), -1);
  std::vector<Node> kept;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!live[i]) continue;
    Node n = nodes[i];
    for (int& in : n.inputs) in = remap[static_cast<size_t>(in)];
    remap[i] = static_cast<int>(kept.size());
    kept.push_back(std::move(n));
  }
  return Graph::from_nodes(std::move(kept), remap[static_cast<size_t>(g.output())]);
}

}  // namespace ascent::graph
