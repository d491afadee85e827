// Runs a Graph over a batch of sequences' segments (node_calls.h: Segment). Plans (memory offsets) are compiled once
// per shape bucket — T and the output rows, each rounded up to a power of two — and cached, the CPU counterpart of a
// CUDA-graph pool; every call then runs the nodes in order over one arena, each through its op's function
// (node_calls.h). With a tracer attached, each node's time, bytes and FLOPs are recorded.
// An Executor holds its arena and plans: one per thread that runs the graph; the graph (and model) are shared.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>

#include "ascent/base/aligned.h"
#include "ascent/graph/ir.h"
#include "ascent/graph/kv_cache.h"
#include "ascent/graph/memory_plan.h"
#include "ascent/graph/node_calls.h"
#include "ascent/graph/passes.h"
#include "ascent/prof/tracer.h"

namespace ascent::graph {

int64_t shape_bucket(int64_t n_tokens);

class Executor {
 public:
  explicit Executor(const Graph& g, PassOptions options = default_passes()) : graph_(g), options_(options) {}

  // Runs one sequence's tokens at positions n_past.. n_past + T - 1, appending to `kv` (no block table). Returns the
  // output rows (T, or past a LastRow 1 unless all_rows, x output cols), valid until the next run.
  std::span<const float> run(std::span<const int32_t> tokens, int64_t n_past, KvCache& kv, bool all_rows = false);

  // Several sequences in one run: their rows are stacked (matmuls and norms see them all at once) and each attends
  // over its own positions of the cache. Returns the output rows each segment asks for, stacked in segment order:
  // (n_out, cols). Each row has the bits it has when its sequence runs alone (the kernels' batch invariance).
  using Segment = graph::Segment;
  std::span<const float> run_batch(std::span<const Segment> segments);

  int64_t plans_compiled() const { return plans_compiled_; }
  const MemoryPlan& plan_for(int64_t n_tokens, int64_t n_out = 1);
  // Compiles the plans of every bucket up to max_tokens rows and max_out output rows now, so first requests do not
  // pay for them.
  void warm_up(int64_t max_tokens, int64_t max_out = 1);
  void set_tracer(prof::Tracer* t) { tracer_ = t; }
  using MatmulObserver = graph::MatmulObserver;
  void set_matmul_observer(MatmulObserver f) { observer_ = std::move(f); }

 private:
  // The batch's stacked tokens and positions (kept in tokens_, positions_, rows_) and whether it is a decode step.
  Batch describe(std::span<const Segment> segments);
  // Runs node i of the graph for the batch, with its buffers in the arena laid out by plan.
  void run_node(size_t i, const Batch& b, const MemoryPlan& plan);

  const Graph& graph_;
  PassOptions options_;
  std::map<ShapeBucket, MemoryPlan> plans_;
  int64_t plans_compiled_ = 0;
  Arena arena_;
  std::vector<int32_t> positions_;
  std::vector<int32_t> tokens_;    // the batch's tokens, stacked
  std::vector<int64_t> rows_;      // the batch's first row of each segment, then T
  std::vector<int64_t> out_rows_;  // the rows whose outputs the run returns
  prof::Tracer* tracer_ = nullptr;
  MatmulObserver observer_;
};

}  // namespace ascent::graph
