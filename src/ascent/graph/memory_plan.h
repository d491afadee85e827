// The first memory planner: every activation gets an offset in one arena, and a buffer is reused once the last
// node that reads it has run (liveness over the topological order, first-fit placement). Sizes come from the
// shape bucket the plan is for, so any T up to the bucket runs within it.
#pragma once

#include <cstdint>
#include <vector>

#include "ascent/graph/ir.h"

namespace ascent::graph {

struct MemoryPlan {
  int64_t bucket = 0;               // T the plan was sized for
  std::vector<int64_t> offsets;     // per node: byte offset in the arena
  int64_t arena_bytes = 0;          // peak with reuse
  int64_t unplanned_bytes = 0;      // sum of all buffers: what one allocation per node would take
};

// reuse=false gives every node its own region (the baseline the planner is measured against).
MemoryPlan plan_memory(const Graph& g, int64_t bucket, bool reuse = true);

// Bytes one node's output occupies for T = bucket.
int64_t node_bytes(const Node& n, int64_t bucket);

}  // namespace ascent::graph
