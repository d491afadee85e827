// Each graph pass on a small graph built for it: what it fuses or removes, and what it must leave alone.
#include <gtest/gtest.h>

#include <algorithm>

#include "ascent/graph/passes.h"

namespace ascent::graph {
namespace {

Tensor vec(int64_t n) {
  return make_owned(DType::F32, {n});
}
Tensor mat(int64_t r, int64_t c) {
  return make_owned(DType::F32, {r, c});
}

int count(const Graph& g, Op op) {
  return static_cast<int>(std::count_if(g.nodes().begin(), g.nodes().end(), [&](const Node& n) { return n.op == op; }));
}

struct Fixture {
  Tensor table = mat(16, 8), w8 = vec(8), wg = mat(12, 8), wu = mat(12, 8), wd = mat(8, 12);
  Tensor wq = mat(8, 8), wk = mat(4, 8), wv = mat(4, 8), wqn = vec(4), wkn = vec(4);
  std::vector<float> inv_freq = std::vector<float>(2, 0.5f);
};

TEST(Passes, FuseNormJoinsNormAndScale) {
  Fixture f;
  Graph g;
  Value x = g.embedding(f.table, g.tokens(), "e");
  Value n = g.mul_vec(g.rms_norm_bare(x, 1e-5f, 8, "n.norm"), f.w8, "n");
  g.set_output(n);
  const Graph out = fuse_norm(g);
  EXPECT_EQ(count(out, Op::MulVec), 0);
  ASSERT_EQ(count(out, Op::RmsNorm), 1);
  EXPECT_EQ(out.nodes().back().weights[0], &f.w8);
  // A bare norm with a second reader must stay as it is.
  Graph g2;
  Value x2 = g2.embedding(f.table, g2.tokens(), "e");
  Value bare = g2.rms_norm_bare(x2, 1e-5f, 8, "n.norm");
  g2.set_output(g2.add(g2.mul_vec(bare, f.w8, "n"), bare, "sum"));
  EXPECT_EQ(count(fuse_norm(g2), Op::MulVec), 1);
}

TEST(Passes, FuseSwigluMergesGateAndUp) {
  Fixture f;
  Graph g;
  Value x = g.embedding(f.table, g.tokens(), "e");
  Value m = g.swiglu(g.matmul(x, f.wg, nullptr, "gate"), g.matmul(x, f.wu, nullptr, "up"), "act");
  g.set_output(g.matmul(m, f.wd, nullptr, "down"));
  const Graph out = fuse_swiglu(g);
  EXPECT_EQ(count(out, Op::MatMulSwiGLU), 1);
  EXPECT_EQ(count(out, Op::SwiGLU), 0);
  EXPECT_EQ(count(out, Op::MatMul), 1);  // only down remains
}

TEST(Passes, FuseResidualFoldsTheAdd) {
  Fixture f;
  Graph g;
  Value x = g.embedding(f.table, g.tokens(), "e");
  Value y = g.add(x, g.matmul(x, f.wq, nullptr, "proj"), "residual");
  g.set_output(y);
  const Graph out = fuse_residual(g);
  EXPECT_EQ(count(out, Op::Add), 0);
  ASSERT_EQ(out.nodes().back().op, Op::MatMul);
  EXPECT_EQ(out.nodes().back().inputs.size(), 2u);
  EXPECT_EQ(out.nodes().back().name, "proj");
}

TEST(Passes, FuseAttentionTakesProjectionsNormAndRope) {
  Fixture f;
  Graph g;
  Value x = g.embedding(f.table, g.tokens(), "e");
  Value pos = g.positions();
  Value q = g.matmul(x, f.wq, nullptr, "q"), k = g.matmul(x, f.wk, nullptr, "k"), v = g.matmul(x, f.wv, nullptr, "v");
  q = g.rms_norm_grouped(q, f.wqn, 1e-6f, 4, "qn");
  k = g.rms_norm_grouped(k, f.wkn, 1e-6f, 4, "kn");
  q = g.rope(q, pos, 2, 4, f.inv_freq, RopeStyle::Half, "rq");
  k = g.rope(k, pos, 1, 4, f.inv_freq, RopeStyle::Half, "rk");
  g.set_output(g.attention(q, k, v, 0, 2, 1, 4, 0.5f, 0, "attn"));
  const Graph out = fuse_attention(g);
  EXPECT_EQ(count(out, Op::AttentionFused), 1);
  EXPECT_EQ(count(out, Op::MatMul) + count(out, Op::Rope) + count(out, Op::RmsNorm), 0);
  const Node& a = out.nodes().back();
  EXPECT_EQ(a.weights[6], &f.wqn);
  EXPECT_EQ(a.scratch_floats_per_row, 16);
}

TEST(Passes, DeadNodesAreRemovedAndCommonOnesMerged) {
  Fixture f;
  Graph g;
  Value x = g.embedding(f.table, g.tokens(), "e");
  g.silu(x, "unused");
  Value a = g.matmul(x, f.wq, nullptr, "a1");
  Value b = g.matmul(x, f.wq, nullptr, "a2");  // the same computation again
  g.set_output(g.add(a, b, "sum"));
  const Graph dce = eliminate_dead_nodes(g);
  EXPECT_EQ(count(dce, Op::Silu), 0);
  EXPECT_EQ(dce.nodes().size(), g.nodes().size() - 1);
  const Graph cse = eliminate_common_subexpressions(g);
  EXPECT_EQ(count(cse, Op::MatMul), 1);
  EXPECT_EQ(cse.nodes().back().inputs[0], cse.nodes().back().inputs[1]);
}

TEST(Passes, ParseSwitchesPassesOffOneByOne) {
  const PassOptions p = parse_passes("-fuse,-plan,+fuse-norm", "test");
  EXPECT_TRUE(p.fuse_norm);
  EXPECT_FALSE(p.fuse_swiglu);
  EXPECT_FALSE(p.plan);
  EXPECT_TRUE(p.dce);
  EXPECT_FALSE(parse_passes("-all", "test").cse);
  try {
    parse_passes("-fusion", "ASCENT_PASSES");
    ADD_FAILURE() << "an unknown pass was accepted";
  } catch (const std::exception& e) {
    EXPECT_EQ(std::string(e.what()).rfind("ASCENT_PASSES: unknown pass 'fusion'", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace ascent::graph
