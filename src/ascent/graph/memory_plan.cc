#include "ascent/graph/memory_plan.h"

#include <algorithm>
#include <map>

#include "ascent/base/aligned.h"
#include "ascent/base/error.h"

namespace ascent::graph {

int64_t node_bytes(const Node& n, ShapeBucket bucket) {
  const int64_t rows = n.selected ? bucket.out : bucket.rows;
  return static_cast<int64_t>(align_up(static_cast<size_t>(rows * (n.cols + n.scratch_floats_per_row) * 4)));
}

int inplace_input(const Node& n) {
  switch (n.op) {
    case Op::Add:
    case Op::Mul:
    case Op::Silu:
    case Op::GeluTanh:
    case Op::SwiGLU:
    case Op::MulVec:
    case Op::Rope:
    case Op::RmsNorm:
    case Op::LayerNorm:
    case Op::Softmax:
      return 0;
    case Op::MatMul:
      return n.inputs.size() == 2 ? 1 : -1;  // the residual, never x
    default:
      return -1;
  }
}

MemoryPlan plan_memory(const Graph& g, ShapeBucket bucket, bool reuse, bool inplace) {
  ASCENT_CHECK(g.output() >= 0, "graph has no output");
  const auto& nodes = g.nodes();
  const int n = static_cast<int>(nodes.size());
  MemoryPlan plan;
  plan.bucket = bucket.rows;
  plan.out_bucket = bucket.out;
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
    const Node& node = nodes[static_cast<size_t>(i)];
    const int k = inplace ? inplace_input(node) : -1;
    if (k >= 0) {
      const int src = node.inputs[static_cast<size_t>(k)];
      const int64_t src_off = plan.offsets[static_cast<size_t>(src)];
      auto it = live.find(src_off);
      // Only when this node is the input's last reader and the buffers have the same size.
      if (last_use[static_cast<size_t>(src)] == i && it != live.end() && it->second.first == size &&
          node_bytes(nodes[static_cast<size_t>(src)], bucket) == size && !nodes[static_cast<size_t>(src)].is_int) {
        it->second.second = last_use[static_cast<size_t>(i)];
        plan.offsets[static_cast<size_t>(i)] = src_off;
        continue;
      }
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
