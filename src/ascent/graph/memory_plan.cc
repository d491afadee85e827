#include "ascent/graph/memory_plan.h"

#include <algorithm>
#include <map>

#include "ascent/base/aligned.h"
#include "ascent/base/error.h"

namespace ascent::graph {

int64_t node_bytes(const Node& n, int64_t bucket) {
  const int64_t rows = n.single_row ? 1 : bucket;
  return static_cast<int64_t>(align_up(static_cast<size_t>(rows * n.cols * 4)));
}

MemoryPlan plan_memory(const Graph& g, int64_t bucket, bool reuse) {
  ASCENT_CHECK(g.output() >= 0, "graph has no output");
  const auto& nodes = g.nodes();
  const int n = static_cast<int>(nodes.size());
  MemoryPlan plan;
  plan.bucket = bucket;
  plan.offsets.assign(static_cast<size_t>(n), 0);

  std::vector<int> last_use(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    last_use[static_cast<size_t>(i)] = i;
    for (int in : nodes[static_cast<size_t>(i)].inputs) last_use[static_cast<size_t>(in)] = i;
  }
  last_use[static_cast<size_t>(g.output())] = n;  // the output outlives the run

  std::map<int64_t, std::pair<int64_t, int>> live;  // offset -> (size, last use)
  for (int i = 0; i < n; ++i) {
    const int64_t size = node_bytes(nodes[static_cast<size_t>(i)], bucket);
    plan.unplanned_bytes += size;
    if (!reuse) {
      plan.offsets[static_cast<size_t>(i)] = plan.arena_bytes;
      plan.arena_bytes += size;
      continue;
    }
    // Free buffers whose last reader ran before this node. A buffer read by node i itself stays live while i
    // writes its output, so no op ever reads and writes overlapping memory.
    for (auto it = live.begin(); it != live.end();) {
      it = it->second.second < i ? live.erase(it) : std::next(it);
    }
    int64_t offset = 0;
    for (const auto& [off, entry] : live) {
      if (off - offset >= size) break;
      offset = std::max(offset, off + entry.first);
    }
    live[offset] = {size, last_use[static_cast<size_t>(i)]};
    plan.offsets[static_cast<size_t>(i)] = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + size);
  }
  return plan;
}

}  // namespace ascent::graph
