// What a node moves and computes, for profiles: bytes and FLOPs of one run of T rows (n_out of them past a LastRow)
// after n_past cached positions, and the shapes it took.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ascent/graph/ir.h"

namespace ascent::graph {

struct NodeCost {
  int64_t bytes = 0;
  int64_t flops = 0;
};

// Weights count once per call; attention reads kv_bytes per cached K or V value.
NodeCost node_cost(const Node& n, const std::vector<Node>& nodes, int64_t T, int64_t n_out, int64_t n_past,
                   int64_t kv_bytes);
// "(T, K), (N, K) q4_0 -> (T, N)": the node's inputs, its matrices and its output.
std::string node_shapes(const Node& n, const std::vector<Node>& nodes, int64_t T, int64_t n_out);

}  // namespace ascent::graph
