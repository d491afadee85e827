// The first memory planner: every activation gets an offset in one arena, and a buffer is reused once the last
// node that reads it has run (liveness over the topological order, first-fit placement). Sizes come from the
// shape bucket the plan is for, so any T up to the bucket runs within it.
#pragma once

#include <cstdint>
#include <vector>

#include "ascent/graph/ir.h"

namespace ascent::graph {

struct MemoryPlan {
  int64_t bucket = 0;            // T the plan was sized for
  std::vector<int64_t> offsets;  // per node: byte offset in the arena
  int64_t arena_bytes = 0;       // peak with reuse
  int64_t unplanned_bytes = 0;   // sum of all buffers: what one allocation per node would take
};

// reuse=false gives every node its own region (the baseline the planner is measured against). inplace lets an
// element-wise op (or a matmul accumulating into its residual) take over the buffer of an input that dies there.
MemoryPlan plan_memory(const Graph& g, int64_t bucket, bool reuse = true, bool inplace = true);

// Which input of n may share n's buffer (-1: none): row-wise ops that read each element before writing it.
int inplace_input(const Node& n);

// Bytes one node's output (plus its scratch) occupies for T = bucket.
int64_t node_bytes(const Node& n, int64_t bucket);

}  // namespace ascent::graph
