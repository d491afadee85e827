// The memory planner and plan cache: reuse never aliases a live buffer, planned peak is below the unplanned sum,
// and one plan is compiled per shape bucket; the KV cache's element types.
#include <gtest/gtest.h>

#include <string>

#include "ascent/graph/executor.h"
#include "ascent/graph/memory_plan.h"

namespace ascent::graph {
namespace {

Tensor ones(int64_t n) {
  Tensor t = make_owned(DType::F32, {n});
  auto* p = static_cast<float*>(const_cast<void*>(t.data));
  for (int64_t i = 0; i < n; ++i) p[i] = 1.0f;
  return t;
}

TEST(MemoryPlan, ReusesDeadBuffersWithoutAliasingLiveOnes) {
  Tensor table = make_owned(DType::F32, {10, 8});
  Tensor w = ones(8);
  Graph g;
  Value x = g.embedding(table, g.tokens(), "embd");
  for (int i = 0; i < 6; ++i) x = g.add(x, g.silu(g.rms_norm(x, w, 1e-5f, "n"), "s"), "r");
  g.set_output(x);
  const MemoryPlan planned = plan_memory(g, 16, /*reuse=*/true, /*inplace=*/false);
  const MemoryPlan unplanned = plan_memory(g, 16, /*reuse=*/false);
  EXPECT_EQ(planned.unplanned_bytes, unplanned.arena_bytes);
  EXPECT_LT(planned.arena_bytes, unplanned.arena_bytes / 2);
  // No node's output may overlap any buffer that is still to be read when the node runs.
  const auto& nodes = g.nodes();
  std::vector<int> last(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    last[i] = static_cast<int>(i);
    for (int in : nodes[i].inputs) last[static_cast<size_t>(in)] = static_cast<int>(i);
  }
  last[static_cast<size_t>(g.output())] = static_cast<int>(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (last[j] < static_cast<int>(i)) continue;
      const int64_t a0 = planned.offsets[i], a1 = a0 + node_bytes(nodes[i], 16);
      const int64_t b0 = planned.offsets[j], b1 = b0 + node_bytes(nodes[j], 16);
      EXPECT_TRUE(a1 <= b0 || b1 <= a0) << "node " << i << " overlaps live node " << j;
    }
  }
}

TEST(MemoryPlan, InPlaceOnlyOverTheInputThatDiesThere) {
  Tensor table = make_owned(DType::F32, {10, 8});
  Tensor w = ones(8);
  Graph g;
  Value x = g.embedding(table, g.tokens(), "embd");
  Value a = g.silu(x, "a");        // x dies here: a may take x's buffer
  Value b = g.mul_vec(a, w, "b");  // a dies here
  Value c = g.add(b, x, "c");      // x is read again here
  g.set_output(c);
  const MemoryPlan p = plan_memory(g, 4);
  // x is still needed by c, so silu may not overwrite it; mul_vec may overwrite a.
  EXPECT_NE(p.offsets[static_cast<size_t>(a.id)], p.offsets[static_cast<size_t>(x.id)]);
  EXPECT_EQ(p.offsets[static_cast<size_t>(b.id)], p.offsets[static_cast<size_t>(a.id)]);
  const MemoryPlan no_inplace = plan_memory(g, 4, /*reuse=*/true, /*inplace=*/false);
  EXPECT_NE(no_inplace.offsets[static_cast<size_t>(b.id)], no_inplace.offsets[static_cast<size_t>(a.id)]);
}

TEST(Executor, CompilesOnePlanPerBucket) {
  Tensor table = make_owned(DType::F32, {10, 4});
  Graph g;
  Value x = g.embedding(table, g.tokens(), "embd");
  g.set_output(g.silu(x, "s"));
  Executor ex(g);
  KvCache kv(0, 64, 4);
  std::vector<int32_t> ids = {1, 2, 3, 4, 5};
  ex.run(ids, 0, kv);
  ex.run(std::span<const int32_t>(ids).first(4), 0, kv);  // 4 and 5 tokens: buckets 4 and 8
  ex.run(ids, 0, kv);
  EXPECT_EQ(ex.plans_compiled(), 2);
  EXPECT_EQ(shape_bucket(1), 1);
  EXPECT_EQ(shape_bucket(5), 8);
  EXPECT_EQ(shape_bucket(512), 512);
}

TEST(Graph, RejectsMismatchedShapesWithTheNodeName) {
  Tensor w = make_owned(DType::F32, {16, 8});
  Graph g;
  Value x = g.embedding(make_owned(DType::F32, {4, 4}), g.tokens(), "embd");
  try {
    g.matmul(x, w, nullptr, "blk.0.attn_q");
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.attn_q"), std::string::npos) << e.what();
  }
}

// The error a KvCache accessor of the wrong element type throws (and a type a cache cannot hold), or "" if none.
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(KvCache, HoldsF32OrF16AndRefusesTheOtherAccessors) {
  KvCache f16(2, 300, 16, DType::F16);
  EXPECT_EQ(f16.dtype(), DType::F16);
  EXPECT_NE(f16.k_f16(1), nullptr);
  EXPECT_NE(f16.v_f16(1), nullptr);
  EXPECT_NE(error_of([&] { f16.k(0); }).find("asked for its f32 data, but it holds f16"), std::string::npos);
  KvCache f32(2, 300, 16);
  EXPECT_EQ(f32.dtype(), DType::F32);
  EXPECT_NE(error_of([&] { f32.v_f16(0); }).find("asked for its f16 data, but it holds f32"), std::string::npos);
  EXPECT_NE(error_of([] { KvCache(1, 16, 8, DType::Q8_0); }).find("type q8_0 is not f32 or f16"), std::string::npos);
}

}  // namespace
}  // namespace ascent::graph
