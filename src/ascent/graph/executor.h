// Runs a Graph. Plans (memory offsets) are compiled once per shape bucket of T — the next power of two — and
// cached, the CPU counterpart of a CUDA-graph pool; every call then runs the nodes in order over one arena, each
// through its op's function (node_calls.h). With a tracer attached, each node's time, bytes and FLOPs are recorded.
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

  // Runs the graph for tokens at positions n_past.. n_past + T - 1, appending to `kv`. Returns the output rows
  // ((T or 1) x output cols), valid until the next run.
  std::span<const float> run(std::span<const int32_t> tokens, int64_t n_past, KvCache& kv);

  // Several sequences in one run: their rows are stacked (matmuls and norms see them all at once) and each
  // attends over its own cache. Needs a graph that keeps every row (no LastRow). Returns (sum of T, cols).
  using Segment = graph::Segment;
  std::span<const float> run_batch(std::span<const Segment> segments);

  int64_t plans_compiled() const { return plans_compiled_; }
  const MemoryPlan& plan_for(int64_t n_tokens);
  // Compiles the plans of every bucket up to max_tokens now, so first requests do not pay for them.
  void warm_up(int64_t max_tokens);
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
  std::map<int64_t, MemoryPlan> plans_;
  int64_t plans_compiled_ = 0;
  Arena arena_;
  std::vector<int32_t> positions_;
  std::vector<int32_t> tokens_;  // the batch's tokens, stacked
  std::vector<int64_t> rows_;    // the batch's first row of each segment, then T
  prof::Tracer* tracer_ = nullptr;
  MatmulObserver observer_;
};

}  // namespace ascent::graph
