// Runs a Graph. Plans (memory offsets) are compiled once per shape bucket of T — the next power of two — and
// cached, the CPU counterpart of a CUDA-graph pool; every call then runs the nodes in order on reference kernels
// over one arena.
#pragma once

#include <cstdint>
#include <map>
#include <span>

#include "ascent/base/aligned.h"
#include "ascent/graph/ir.h"
#include "ascent/graph/kv_cache.h"
#include "ascent/graph/memory_plan.h"

namespace ascent::graph {

int64_t shape_bucket(int64_t n_tokens);

class Executor {
 public:
  explicit Executor(const Graph& g) : graph_(g) {}

  // Runs the graph for tokens at positions n_past.. n_past + T - 1, appending to `kv`. Returns the output rows
  // ((T or 1) x output cols), valid until the next run.
  std::span<const float> run(std::span<const int32_t> tokens, int64_t n_past, KvCache& kv);

  int64_t plans_compiled() const { return plans_compiled_; }
  const MemoryPlan& plan_for(int64_t n_tokens);

 private:
  const Graph& graph_;
  std::map<int64_t, MemoryPlan> plans_;
  int64_t plans_compiled_ = 0;
  Arena arena_;
  std::vector<int32_t> positions_;
};

}  // namespace ascent::graph
