// The first memory planner: every activation gets an offset in one arena, and a buffer is reused once the last
// node that reads it has run (liveness over the topological order, first-fit placement). Sizes come from the
// shape bucket the plan is for, so any T up to the bucket runs within it.
#pragma once

#include <cstdint>
#include <vector>

#include "ascent/graph/ir.h"

namespace ascent::graph {

// The row counts a plan is sized for: T (rows) and the output rows past a LastRow node (out, Batch::n_out), each a
// shape bucket.
struct ShapeBucket {
  ShapeBucket(int64_t rows_, int64_t out_ = 1) : rows(rows_), out(out_) {}  // NOLINT: a bare T converts
  int64_t rows, out;
  auto operator<=>(const ShapeBucket&) const = default;
};

struct MemoryPlan {
  int64_t bucket = 0;            // T the plan was sized for
  int64_t out_bucket = 1;        // output rows it was sized for
  std::vector<int64_t> offsets;  // per node: byte offset in the arena
  int64_t arena_bytes = 0;       // peak with reuse
  int64_t unplanned_bytes = 0;   // sum of all buffers: what one allocation per node would take
};

// reuse=false gives every node its own region (the baseline the planner is measured against). inplace lets an
// element-wise op (or a matmul accumulating into its residual) take over the buffer of an input that dies there.
MemoryPlan plan_memory(const Graph& g, ShapeBucket bucket, bool reuse = true, bool inplace = true);

// Which input of n may share n's buffer (-1: none): row-wise ops that read each element before writing it.
int inplace_input(const Node& n);

// Bytes one node's output (plus its scratch) occupies for the bucket's rows.
int64_t node_bytes(const Node& n, ShapeBucket bucket);

}  // namespace ascent::graph
