// Pass options and the order passes run in.
#include <cstdlib>
#include <optional>

#include "ascent/base/error.h"
#include "ascent/graph/passes.h"

namespace ascent::graph {
namespace {

// Parsed on first use, and only where set_default_passes has not replaced it: --passes overrides ASCENT_PASSES, so a
// bad value left in the environment does not fail a run that names its passes on the command line.
const PassOptions& environment_passes() {
  static const PassOptions p = [] {
    const char* env = std::getenv("ASCENT_PASSES");
    return env ? parse_passes(env, "ASCENT_PASSES") : PassOptions{};
  }();
  return p;
}

std::optional<PassOptions>& overridden_passes() {
  static std::optional<PassOptions> p;
  return p;
}

}  // namespace

PassOptions parse_passes(const std::string& spec, const char* source) {
  PassOptions p;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t end = spec.find(',', start);
    if (end == std::string::npos) end = spec.size();
    std::string item = spec.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    bool on = true;
    if (item[0] == '-' || item[0] == '+') {
      on = item[0] == '+';
      item.erase(0, 1);
    }
    if (item == "fuse") {
      p.fuse_norm = p.fuse_attention = p.fuse_swiglu = p.fuse_residual = on;
    } else if (item == "all") {
      p.fuse_norm = p.fuse_attention = p.fuse_swiglu = p.fuse_residual = p.dce = p.cse = p.plan = p.inplace = on;
    } else if (item == "fuse-norm") {
      p.fuse_norm = on;
    } else if (item == "fuse-attention") {
      p.fuse_attention = on;
    } else if (item == "fuse-swiglu") {
      p.fuse_swiglu = on;
    } else if (item == "fuse-residual") {
      p.fuse_residual = on;
    } else if (item == "dce") {
      p.dce = on;
    } else if (item == "cse") {
      p.cse = on;
    } else if (item == "plan") {
      p.plan = on;
    } else if (item == "inplace") {
      p.inplace = on;
    } else {
      fail(
          "{}: unknown pass '{}' (fuse, fuse-norm, fuse-attention, fuse-swiglu, fuse-residual, dce, cse, plan, "
          "inplace, all)",
          source, item);
    }
  }
  return p;
}

const PassOptions& default_passes() {
  const auto& over = overridden_passes();
  return over ? *over : environment_passes();
}
void set_default_passes(const PassOptions& p) {
  overridden_passes() = p;
}

std::vector<int> use_counts(const Graph& g) {
  std::vector<int> uses(g.nodes().size(), 0);
  for (const auto& n : g.nodes()) {
    for (int in : n.inputs) ++uses[static_cast<size_t>(in)];
  }
  if (g.output() >= 0) ++uses[static_cast<size_t>(g.output())];
  return uses;
}

Graph optimize(const Graph& g, const PassOptions& p) {
  Graph out = g;
  if (p.cse) out = eliminate_common_subexpressions(out);
  if (p.fuse_norm) out = fuse_norm(out);
  if (p.fuse_attention) out = fuse_attention(out);
  if (p.fuse_swiglu) out = fuse_swiglu(out);
  if (p.fuse_residual) out = fuse_residual(out);
  if (p.dce) out = eliminate_dead_nodes(out);
  return out;
}

}  // namespace ascent::graph
