// Graph passes: each rewrites a Graph into an equivalent one, in its own file (passes/*.cc) with its own unit
// test. Fusions only regroup work — every fused kernel evaluates the same expressions in the same order as the
// ops it replaces — so outputs stay bitwise identical; the suite checks every pass on and off.
#pragma once

#include <string>

#include "ascent/graph/ir.h"

namespace ascent::graph {

struct PassOptions {
  bool fuse_norm = true;       // rms_norm_bare + mul_vec -> rms_norm with weight
  bool fuse_attention = true;  // Q/K/V matmuls (one merged matmul) + q/k norm + RoPE + attention -> one node
  bool fuse_swiglu = true;     // gate and up matmuls + swiglu -> one node
  bool fuse_residual = true;   // matmul + residual add -> matmul accumulating into the residual
  bool dce = true;             // dead-node removal
  bool cse = true;             // common-subexpression elimination
  bool plan = true;            // memory planning: buffers reused by liveness (off: one region per node)
  bool inplace = true;         // element-wise ops and residual matmuls write over an input that dies there
};

// Parses "-fuse,-plan" style lists: names fuse (all fusions), fuse-norm, fuse-attention, fuse-swiglu,
// fuse-residual, dce, cse, plan, inplace, all; "-" turns a pass off, "+" or nothing turns it on. Empty: all on.
// `source` names where the list came from ("--passes", "ASCENT_PASSES") in the error an unknown name gets.
PassOptions parse_passes(const std::string& spec, const char* source);
// The defaults for this process: ASCENT_PASSES from the environment, overridden by set_default_passes (--passes), in
// which case the environment is not read at all.
const PassOptions& default_passes();
void set_default_passes(const PassOptions& p);

Graph fuse_norm(const Graph& g);
Graph fuse_attention(const Graph& g);
Graph fuse_swiglu(const Graph& g);
Graph fuse_residual(const Graph& g);
Graph eliminate_dead_nodes(const Graph& g);
Graph eliminate_common_subexpressions(const Graph& g);
// All enabled rewrites, in order; planning options are applied later by plan_memory.
Graph optimize(const Graph& g, const PassOptions& p);

// Helpers the passes share: how many nodes read each node (the output counts as read once).
std::vector<int> use_counts(const Graph& g);

}  // namespace ascent::graph
