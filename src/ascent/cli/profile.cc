// ascent profile: runs a prefill of P tokens and N decode steps with the tracer on. Then it prints where the time went
// (top ops with share, achieved GB/s and GFLOP/s, % of this machine's roofline), what fusion did to the node count per
// layer, and what the memory planner saved.
#include <algorithm>
#include <cstdio>
#include <map>
#include <random>

#include "ascent/base/error.h"
#include "ascent/base/thread_pool.h"
#include "ascent/cli/commands.h"
#include "ascent/cli/runtime_flags.h"
#include "ascent/graph/memory_plan.h"

namespace ascent::cli {
namespace {

struct Options {
  std::string model;
  int64_t prefill = 128, decode = 16;
  int threads = 0;
  bool dry_run = false;
  RooflineFlags roofline;
  RuntimeFlags runtime;
};

int layer_nodes(const graph::Graph& g) {
  return static_cast<int>(std::count_if(g.nodes().begin(), g.nodes().end(),
                                        [](const graph::Node& n) { return n.name.rfind("blk.0.", 0) == 0; }));
}

// How the decode steps' matmul calls went, thread by thread: the share of rows each took, the rate it streamed weights
// at while it had rows, and how long it waited in calls it had nothing (left) to do in. Then the calls' share of the
// decode time; the rest is the steps between them (norms, RoPE, attention, quantizing inputs).
void print_decode_threads(const prof::Tracer& tracer, double t0, double decode_us, int64_t steps) {
  struct Thread {
    int64_t rows = 0, bytes = 0;
    double busy_us = 0, wait_us = 0;
  };
  std::vector<Thread> th(static_cast<size_t>(ThreadPool::global().size()));
  int64_t calls = 0, rows = 0;
  double call_us = 0;
  for (const prof::PoolCall& c : tracer.calls()) {
    if (c.ts_us < t0) continue;
    ++calls;
    rows += c.rows;
    call_us += c.dur_us;
    std::vector<double> busy(th.size(), 0.0);
    for (const prof::ThreadSpan& s : c.threads) {
      if (static_cast<size_t>(s.thread) >= th.size()) continue;
      Thread& t = th[static_cast<size_t>(s.thread)];
      t.rows += s.rows;
      t.bytes += s.bytes;
      t.busy_us += s.dur_us;
      busy[static_cast<size_t>(s.thread)] = s.dur_us;
    }
    for (size_t i = 0; i < th.size(); ++i) th[i].wait_us += c.dur_us - busy[i];
  }
  if (calls == 0) return;
  std::printf("\ndecode matmul calls: %lld in %lld steps, %.1f%% of the decode time (the steps between them %.1f%%)\n",
              static_cast<long long>(calls), static_cast<long long>(steps), 100.0 * call_us / decode_us,
              100.0 * (1.0 - call_us / decode_us));
  std::printf("%-8s %7s %9s %10s %9s\n", "thread", "rows", "busy ms", "GB/s busy", "wait ms");
  for (size_t i = 0; i < th.size(); ++i) {
    const Thread& t = th[i];
    std::printf("%-8zu %6.1f%% %9.2f %10.2f %9.2f\n", i,
                100.0 * static_cast<double>(t.rows) / static_cast<double>(rows), t.busy_us / 1e3,
                t.busy_us > 0 ? static_cast<double>(t.bytes) / t.busy_us / 1e3 : 0.0, t.wait_us / 1e3);
  }
}

void run(Options& o) {
  set_threads(o.threads);
  ASCENT_CHECK(o.prefill >= 1, "-p: prefill must be at least 1 token, got {}", o.prefill);
  ASCENT_CHECK(o.decode >= 0, "-n: must be >= 0, got {}", o.decode);
  o.runtime.before_load();
  auto m = model::Model::load(o.model, o.runtime.load_options());
  model::Session s(*m);
  const auto& cfg = m->config();
  ASCENT_CHECK(o.prefill + o.decode <= cfg.max_seq, "-p + -n = {} exceeds the model's context {}", o.prefill + o.decode,
               cfg.max_seq);
  s.set_context(o.prefill + o.decode);

  const graph::Graph& raw = m->unoptimized_graph();
  const graph::Graph& opt = m->generation_graph();
  std::printf("nodes_per_layer_before_fusion = %d\n", layer_nodes(raw));
  std::printf("nodes_per_layer_after_fusion = %d\n", layer_nodes(opt));
  std::printf("nodes_total = %zu -> %zu\n", raw.nodes().size(), opt.nodes().size());
  const int64_t bucket = graph::shape_bucket(o.prefill);
  const auto& passes = m->passes();
  const auto planned = graph::plan_memory(opt, bucket, passes.plan, passes.plan && passes.inplace);
  const auto unplanned = graph::plan_memory(opt, bucket, /*reuse=*/false);
  std::printf("peak_activation_bytes_planned = %lld\n", static_cast<long long>(planned.arena_bytes));
  std::printf("peak_activation_bytes_unplanned = %lld\n", static_cast<long long>(unplanned.arena_bytes));
  std::printf("planner_saving = %.1f%%\n",
              100.0 * (1.0 - static_cast<double>(planned.arena_bytes) / static_cast<double>(unplanned.arena_bytes)));
  std::fflush(stdout);
  if (o.dry_run) return;

  o.roofline.resolve();
  prof::Tracer tracer;
  const int64_t before = s.plans_compiled();
  o.runtime.after_load(s);
  const int64_t warm = s.plans_compiled() - before;
  s.set_tracer(&tracer);
  std::mt19937 rng(1);
  std::vector<int32_t> ids(static_cast<size_t>(o.prefill));
  for (auto& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(cfg.vocab));
  ids[0] = cfg.bos_id >= 0 && cfg.bos_id < cfg.vocab ? cfg.bos_id : 0;
  auto logits = s.forward(ids, /*all_logits=*/false);
  const double decode_t0 = tracer.now_us();
  for (int64_t i = 0; i < o.decode; ++i) {
    const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    logits = s.forward(std::span<const int32_t>(&next, 1), /*all_logits=*/false);
  }
  const double decode_us = tracer.now_us() - decode_t0;
  s.set_tracer(nullptr);

  struct Agg {
    int64_t calls = 0, bytes = 0, flops = 0;
    double us = 0;
  };
  std::map<std::string, Agg> by_op;
  double total = 0;
  for (const auto& e : tracer.events()) {
    auto& a = by_op[e.op];
    ++a.calls;
    a.bytes += e.bytes;
    a.flops += e.flops;
    a.us += e.dur_us;
    total += e.dur_us;
  }
  std::vector<std::pair<std::string, Agg>> top(by_op.begin(), by_op.end());
  std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.second.us > b.second.us; });
  std::printf("\nroofline: %.1f GB/s read, %.1f GFLOP/s fp32 (%d threads)\n", o.roofline.gbps, o.roofline.gflops,
              ThreadPool::global().size());
  std::printf("%-16s %7s %10s %7s %9s %10s %9s\n", "op", "calls", "ms", "share", "GB/s", "GFLOP/s", "roofline");
  for (size_t i = 0; i < top.size() && i < 10; ++i) {
    const auto& [op, a] = top[i];
    const double s = a.us * 1e-6;
    const double ideal = std::max(static_cast<double>(a.bytes) / (o.roofline.gbps * 1e9),
                                  static_cast<double>(a.flops) / (o.roofline.gflops * 1e9));
    std::printf("%-16s %7lld %10.2f %6.1f%% %9.2f %10.2f %8.1f%%\n", op.c_str(), static_cast<long long>(a.calls),
                a.us / 1e3, 100.0 * a.us / total, static_cast<double>(a.bytes) / s / 1e9,
                static_cast<double>(a.flops) / s / 1e9, 100.0 * ideal / s);
  }
  if (o.decode > 0) print_decode_threads(tracer, decode_t0, decode_us, o.decode);
  std::printf("\nnodes_executed = %zu (%zu per run)\n", tracer.events().size(),
              tracer.events().size() / static_cast<size_t>(1 + o.decode));
  std::printf("plans_compiled = %lld (%lld at warm-up, %lld during the run)\n",
              static_cast<long long>(s.plans_compiled()), static_cast<long long>(warm),
              static_cast<long long>(tracer.plans_compiled()));
  if (!o.runtime.profile.empty()) tracer.write_chrome_trace(o.runtime.profile);
  if (!o.runtime.memory_csv.empty()) tracer.write_memory_csv(o.runtime.memory_csv);
}

}  // namespace

void add_profile(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* c = app.add_subcommand("profile", "where the time and memory of a prefill and decode steps go");
  c->add_option("-m,--model", o->model, kModelHelp)->required();
  c->add_option("-p,--prefill", o->prefill, "prefill tokens")->capture_default_str();
  c->add_option("-n,--n-decode", o->decode, "decode steps")->capture_default_str();
  c->add_option("-t,--threads", o->threads, "threads (0: all cores)");
  c->add_flag("--dry-run", o->dry_run, "print the graph and memory figures only; run nothing");
  o->roofline.add_to(c);
  o->runtime.add_to(c);
  c->callback([o] { run(*o); });
}

}  // namespace ascent::cli
