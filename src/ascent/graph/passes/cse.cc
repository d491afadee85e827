// Common-subexpression elimination: a node identical to an earlier one (same op, inputs, weights and
// attributes) is replaced by it. Attention nodes write the KV cache and are never merged.
#include <cstring>

#include "ascent/graph/passes.h"

namespace ascent::graph {
namespace {

bool same(const Node& a, const Node& b) {
  return a.op == b.op && a.inputs == b.inputs && a.weights == b.weights && a.cols == b.cols &&
         a.selected == b.selected && a.is_int == b.is_int && a.eps == b.eps && a.group == b.group &&
         a.heads == b.heads && a.kv_heads == b.kv_heads && a.head_dim == b.head_dim && a.scale == b.scale &&
         a.window == b.window && a.layer == b.layer && a.rope_style == b.rope_style && a.inv_freq == b.inv_freq;
}

}  // namespace

Graph eliminate_common_subexpressions(const Graph& g) {
  std::vector<Node> nodes = g.nodes();
  std::vector<int> alias(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    alias[i] = static_cast<int>(i);
    for (int& in : nodes[i].inputs) in = alias[static_cast<size_t>(in)];
    if (nodes[i].op == Op::Attention || nodes[i].op == Op::AttentionFused) continue;
    for (size_t j = 0; j < i; ++j) {
      if (alias[j] == static_cast<int>(j) && same(nodes[i], nodes[j])) {
        alias[i] = static_cast<int>(j);
        break;
      }
    }
  }
  // The duplicates now have no readers; dead-node removal drops them.
  return eliminate_dead_nodes(Graph::from_nodes(std::move(nodes), alias[static_cast<size_t>(g.output())]));
}

}  // namespace ascent::graph
