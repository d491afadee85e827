// ascent bench: llama-bench-style throughput. Prefill (ppP) and decode (tgN) tokens/s, as median and range over
// runs, after an untimed warm-up run. With -d, each run starts with D tokens already in the KV cache (named
// "ppP @ dD", as llama-bench does). Each figure is also a share of this machine's roofline. Prefill counts matmul
// operations per token against the peak of the instruction its matmuls use. Decode counts the bytes a token reads
// (its weights plus the KV cache rows each step attends over) against read bandwidth: each run against the best
// read measured between its tokens. -p, -n, -d and -t take lists, as llama-bench's: the model loads once per thread
// count.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ascent/base/error.h"
#include "ascent/base/thread_pool.h"
#include "ascent/cli/commands.h"
#include "ascent/cli/runtime_flags.h"
#include "ascent/prof/roofline.h"
#include "ascent/tensor/quantize.h"

namespace ascent::cli {
namespace {

struct Options {
  std::string model;
  // Each a list, as llama-bench's: every thread count runs every depth's prefill and decode tests.
  std::vector<int64_t> prefill{512}, decode{128}, depth{0};
  std::vector<int> threads{0};
  int runs = 5;
  bool jsonl = false, warmup = true;
  RooflineFlags roofline;
  RuntimeFlags runtime;
};

struct Result {
  std::string test;
  int64_t n_prompt = 0, n_gen = 0, n_depth = 0;
  int threads = 0;
  double median = 0, min = 0, max = 0, roofline_pct = 0;
  std::vector<double> samples;    // each timed run's t/s, in run order (llama-bench's samples_ts)
  std::vector<double> read_gbps;  // decode: each run's read (the best measured between its tokens), in run order
  double token_bytes = 0;         // decode: the bytes a token reads on average (weights, KV rows), as judged
};

// What one thread count's tests were judged against, for the text output.
struct Group {
  int threads = 0;
  double gbps = 0, gflops = 0, int8_gops = 0, bf16_gflops = 0;
  std::string peak_name;
  std::vector<double> tg_gbps;  // every decode run's read
};

// One thread count's tests (run_threads): its results, what they were judged against, and the model they ran.
struct ThreadsRun {
  model::ModelConfig cfg;
  double wbytes = 0;  // weight bytes a decode token streams
  Group group;
  std::vector<Result> results;
};

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// The matrices every token streams (the embedding table is gathered, not streamed).
struct WeightTraffic {
  double bytes = 0;  // int8/int4 scales count
  double elems = 0;
  DType main_type = DType::F32;  // the storage type holding most of the elements
};

WeightTraffic weight_traffic(const model::Model& m) {
  WeightTraffic w;
  std::map<DType, double> by_type;
  for (const auto& [name, t] : m.weights().all()) {
    if (t.shape.size() != 2 || name == "token_embd.weight" || name == "position_embd.weight") continue;
    w.bytes += static_cast<double>(t.nbytes());
    if (is_int_weight(t.dtype)) {
      w.bytes += 4.0 * static_cast<double>(int_weight_scale_count(t.dtype, t.shape[0], t.shape[1], t.group));
    }
    w.elems += static_cast<double>(t.numel());
    by_type[t.dtype] += static_cast<double>(t.numel());
  }
  double most = -1;
  for (const auto& [t, n] : by_type) {
    if (n > most) {
      most = n;
      w.main_type = t;
    }
  }
  return w;
}

Result summarize(std::string test, std::vector<double> tps, double pct_per_tps) {
  Result r;
  r.samples = tps;
  std::sort(tps.begin(), tps.end());
  r.test = std::move(test);
  r.min = tps.front();
  r.max = tps.back();
  r.median = median_of(tps);
  r.roofline_pct = r.median * pct_per_tps;
  return r;
}

// The tests of one thread count: the model loaded for it (its matrices placed for that many threads), the roofline
// measured on those threads (unless given), then for each depth each prefill and each decode length.
ThreadsRun run_threads(Options& o, int threads, prof::ReadProbe* probe) {
  set_threads(threads);
  ThreadsRun out;
  Group& g = out.group;
  RooflineFlags roofline = o.roofline;  // measured per thread count: a peak on one thread is not one on two
  auto m = model::Model::load(o.model, o.runtime.load_options());
  model::Session s(*m);
  const auto& cfg = m->config();
  out.cfg = cfg;
  const int64_t ctx = *std::ranges::max_element(o.depth) +
                      std::max(*std::ranges::max_element(o.prefill), *std::ranges::max_element(o.decode) + 1);
  ASCENT_CHECK(ctx <= cfg.max_seq, "-d/-p/-n need {} positions, more than the model's context {}", ctx, cfg.max_seq);
  s.set_context(ctx);
  o.runtime.after_load(s);
  roofline.resolve();  // and again after the runs
  const WeightTraffic traffic = weight_traffic(*m);
  out.wbytes = traffic.bytes;
  const double wbytes = traffic.bytes, welems = traffic.elems;
  const DType main_type = traffic.main_type;
  std::mt19937 rng(7);
  auto random_ids = [&](int64_t n) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (auto& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(cfg.vocab));
    return ids;
  };
  using Clock = std::chrono::steady_clock;
  struct Timed {
    int64_t prefill = 0, decode = 0, depth = 0;
    std::vector<double> tps, gbps;
  };
  std::vector<Timed> timed_tests;
  for (const int64_t depth : o.depth) {
    // Starts a run: an empty cache, then `depth` tokens in it (untimed).
    auto fill_depth = [&] {
      s.reset();
      if (depth > 0) s.forward(random_ids(depth), /*all_logits=*/false);
    };
    for (const int64_t prefill : o.prefill) {
      if (prefill == 0) continue;
      Timed t{.prefill = prefill, .decode = 0, .depth = depth, .tps = {}, .gbps = {}};
      // The warm-up run pays for first touches (the mapped weights, scratch buffers) as llama-bench's does.
      for (int r = o.warmup ? -1 : 0; r < o.runs; ++r) {
        const auto ids = random_ids(prefill);
        fill_depth();
        const auto t0 = Clock::now();
        s.forward(ids, /*all_logits=*/false);
        if (r >= 0)
          t.tps.push_back(static_cast<double>(prefill) / std::chrono::duration<double>(Clock::now() - t0).count());
      }
      timed_tests.push_back(std::move(t));
    }
    // Decode is judged run by run against the best read of memory measured between its tokens, unless
    // --roofline-gbps gives the bandwidth. The read (prof::ReadProbe) is the fastest of six 32 MiB reads on the same
    // threads, two with each of prof::sum_bytes' prefetches (~3 ms, untimed), after every token. A host's memory rate
    // can move between states within tens of milliseconds, and one such read catches one moment, slow or fast.
    // Judged against the reads on its two sides, a token that streamed in a fast moment between two slow reads
    // would show more than 100% of "the read". The best of a run's reads is the fastest a plain read was served
    // during the run: a ceiling none of its tokens can beat. Reads shorter than 32
    // MiB ramp up for more of their time and read less.
    constexpr int64_t kProbeWindow = int64_t{64} << 20;
    for (const int64_t decode : o.decode) {
      if (decode == 0) continue;
      Timed t{.prefill = 0, .decode = decode, .depth = depth, .tps = {}, .gbps = {}};
      for (int r = o.warmup ? -1 : 0; r < o.runs; ++r) {
        fill_depth();
        int32_t tok = static_cast<int32_t>(cfg.bos_id >= 0 && cfg.bos_id < cfg.vocab ? cfg.bos_id : 0);
        const bool timed = r >= 0;
        const int64_t steps = timed ? decode : std::min<int64_t>(decode, 8);  // warm-up: a few tokens
        double seconds = 0;
        if (probe && timed) {
          probe->reset_best();
          probe->window_gbps(kProbeWindow);
        }
        for (int64_t i = 0; i < steps; ++i) {
          if (probe && timed) {
            // The probe just read 192 MiB through every cache, which slows the token right after it by several
            // percent: the probe's cost, not decode's. So the step first runs untimed and the cache is rewound. The
            // timed step then follows a token, as in a continuous decode (and llama-bench's tg).
            s.forward(std::span<const int32_t>(&tok, 1), /*all_logits=*/false);
            s.rewind(s.n_past() - 1);
          }
          const auto t0 = Clock::now();
          auto logits = s.forward(std::span<const int32_t>(&tok, 1), /*all_logits=*/false);
          tok = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
          const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
          seconds += dt;
          if (probe && timed) probe->window_gbps(kProbeWindow);
        }
        if (timed) {
          t.tps.push_back(static_cast<double>(decode) / seconds);
          if (probe) t.gbps.push_back(probe->best_gbps());
        }
      }
      timed_tests.push_back(std::move(t));
    }
  }
  roofline.remeasure();
  // Prefill is judged against the peak of the instruction its matmuls use. The integer formats (GGUF block and
  // K-quants included) use int8 dot products: VNNI, else AVX2's vpmaddubsw (prof::Roofline::int8_isa). bf16 uses
  // bf16 dot products. Anything else, or a CPU without those, is judged against FP32 FMA.
  g.threads = ThreadPool::global().size();
  g.gbps = roofline.gbps;
  g.gflops = roofline.gflops;
  g.int8_gops = roofline.int8_gops;
  g.bf16_gflops = roofline.bf16_gflops;
  g.peak_name = "fp32 FMA";
  double peak = roofline.gflops;
  const bool integer = is_int_weight(main_type) || is_quantized(main_type) || is_kquant(main_type);
  if (integer && roofline.int8_gops > 0) {
    g.peak_name = "int8 dot";
    peak = roofline.int8_gops;
  } else if (main_type == DType::BF16 && roofline.bf16_gflops > 0) {
    g.peak_name = "bf16 dot";
    peak = roofline.bf16_gflops;
  }
  g.peak_name = std::string(dtype_name(main_type)) + " matrices, prefill % of the " + g.peak_name + " peak";
  for (const Timed& t : timed_tests) {
    const std::string at = t.depth > 0 ? " @ d" + std::to_string(t.depth) : "";
    Result r;
    if (t.prefill > 0) {
      // 2 operations per weight element per token is the matmul work; attention adds little at these lengths.
      r = summarize("pp" + std::to_string(t.prefill) + at, t.tps, 100.0 * 2.0 * welems / (peak * 1e9));
    } else {
      // Step i attends over depth + i + 1 cached positions (K and V rows of every layer, f32 or f16: --kv-type).
      const double kv_elem = static_cast<double>(block_bytes(o.runtime.load_options().kv_type));
      const double kv_row_bytes = 2.0 * static_cast<double>(cfg.n_layers * cfg.n_kv_heads * cfg.head_dim) * kv_elem;
      const double kv_bytes = (static_cast<double>(t.depth) + 0.5 * static_cast<double>(t.decode + 1)) * kv_row_bytes;
      r = summarize("tg" + std::to_string(t.decode) + at, t.tps, 100.0 * (wbytes + kv_bytes) / (roofline.gbps * 1e9));
      r.token_bytes = wbytes + kv_bytes;
      if (!t.gbps.empty()) {
        std::vector<double> shares;
        for (size_t i = 0; i < t.tps.size(); ++i)
          shares.push_back(100.0 * (wbytes + kv_bytes) * t.tps[i] / (t.gbps[i] * 1e9));
        r.roofline_pct = median_of(shares);
        r.read_gbps = t.gbps;
        g.tg_gbps.insert(g.tg_gbps.end(), t.gbps.begin(), t.gbps.end());
      }
    }
    r.n_prompt = t.prefill;
    r.n_gen = t.decode;
    r.n_depth = t.depth;
    r.threads = g.threads;
    out.results.push_back(std::move(r));
  }
  return out;
}

void run(Options& o) {
  auto all_non_negative = [](const auto& v) { return std::ranges::all_of(v, [](auto x) { return x >= 0; }); };
  auto any_positive = [](const auto& v) { return std::ranges::any_of(v, [](auto x) { return x > 0; }); };
  ASCENT_CHECK(!o.prefill.empty() && !o.decode.empty() && all_non_negative(o.prefill) && all_non_negative(o.decode) &&
                   (any_positive(o.prefill) || any_positive(o.decode)),
               "-p and -n must be >= 0, not all 0");
  ASCENT_CHECK(!o.depth.empty() && all_non_negative(o.depth), "-d: the depth must be >= 0, got {}",
               fmt::join(o.depth, ","));
  ASCENT_CHECK(o.runs >= 1, "-r: at least one run, got {}", o.runs);
  ASCENT_CHECK(!o.threads.empty(), "-t: give at least one thread count");
  // One trace or memory log per run of the program: with several thread counts each load would replace the last's.
  ASCENT_CHECK(o.threads.size() == 1 || (o.runtime.profile.empty() && o.runtime.memory_csv.empty()),
               "--profile and --memory-csv record one thread count, and -t gives {}", o.threads.size());
  for (const int t : o.threads) set_threads(t);  // every count refused before any model loads, not after minutes
  // The decode read probe's buffer (see below) is allocated before the weights, so that it gets huge pages however
  // a large --no-mmap model leaves memory. On 4 KiB pages the same reads run slower.
  std::unique_ptr<prof::ReadProbe> probe;
  if (any_positive(o.decode) && !o.roofline.gbps_given()) probe = std::make_unique<prof::ReadProbe>();
  o.runtime.before_load();
  std::vector<Result> results;
  std::vector<Group> groups;
  model::ModelConfig cfg;
  double wbytes = 0;
  for (const int t : o.threads) {
    // -t 0 is every core, whatever count ran before it.
    ThreadsRun tr =
        run_threads(o, t > 0 ? t : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())), probe.get());
    cfg = tr.cfg;
    wbytes = tr.wbytes;
    groups.push_back(std::move(tr.group));
    std::ranges::move(tr.results, std::back_inserter(results));
  }
  o.runtime.finish();
  if (o.jsonl) {
    auto array = [](const std::vector<double>& v) {
      std::string s = "[";
      for (size_t i = 0; i < v.size(); ++i) s += fmt::format("{}{:.4f}", i ? "," : "", v[i]);
      return s + "]";
    };
    for (const auto& r : results) {
      std::printf(
          "{\"test\":\"%s\",\"n_prompt\":%lld,\"n_gen\":%lld,\"n_depth\":%lld,\"n_threads\":%d,\"tps_median\":%.4f,"
          "\"tps_min\":%.4f,\"tps_max\":%.4f,\"roofline_pct\":%.6f,\"samples_tps\":%s%s%s}\n",
          r.test.c_str(), static_cast<long long>(r.n_prompt), static_cast<long long>(r.n_gen),
          static_cast<long long>(r.n_depth), r.threads, r.median, r.min, r.max, r.roofline_pct,
          array(r.samples).c_str(), r.read_gbps.empty() ? "" : (",\"read_gbps\":" + array(r.read_gbps)).c_str(),
          r.n_gen > 0 ? fmt::format(",\"token_bytes\":{:.0f}", r.token_bytes).c_str() : "");
    }
    return;
  }
  std::printf("model: %s (%s, %.1f MiB of matrices), %d runs per test, KV cache %s\n", o.model.c_str(),
              model::arch_name(cfg.arch), wbytes / (1 << 20), o.runs, o.runtime.kv_type.c_str());
  for (const Group& g : groups) {
    std::printf("%d threads: roofline %.1f GB/s read, %.1f GFLOP/s fp32", g.threads, g.gbps, g.gflops);
    if (g.int8_gops > 0) std::printf(", %.1f GOP/s int8 dot", g.int8_gops);
    if (g.bf16_gflops > 0) std::printf(", %.1f GFLOP/s bf16 dot", g.bf16_gflops);
    std::printf("; %s, decode %% of read bandwidth\n", g.peak_name.c_str());
    if (!g.tg_gbps.empty()) {
      std::printf(
          "%d threads: decode runs: each against the best read measured between its tokens, runs' reads %.1f-%.1f "
          "GB/s (median of the shares)\n",
          g.threads, *std::ranges::min_element(g.tg_gbps), *std::ranges::max_element(g.tg_gbps));
    }
  }
  std::printf("| threads | test | t/s median | min | max | roofline |\n|---|---|---|---|---|---|\n");
  for (const auto& r : results) {
    std::printf("| %d | %s | %.2f | %.2f | %.2f | %.1f%% |\n", r.threads, r.test.c_str(), r.median, r.min, r.max,
                r.roofline_pct);
  }
}

}  // namespace

void add_bench(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* c = app.add_subcommand("bench", "prefill and decode throughput against this machine's roofline");
  c->add_option("-m,--model", o->model, kModelHelp)->required();
  c->add_option("-p,--n-prompt", o->prefill, "prefill tokens, or a comma-separated list (0: skip)")
      ->delimiter(',')
      ->capture_default_str();
  c->add_option("-n,--n-gen", o->decode, "decode tokens, or a list (0: skip)")->delimiter(',')->capture_default_str();
  c->add_option("-d,--n-depth", o->depth, "tokens already in the KV cache when each run starts, or a list")
      ->delimiter(',')
      ->capture_default_str();
  c->add_option("-r,--repetitions", o->runs, "runs per test")->capture_default_str();
  c->add_option("-t,--threads", o->threads, "threads (0: all cores), or a list: the model loads once for each")
      ->delimiter(',');
  c->add_flag("--jsonl", o->jsonl, "one JSON object per test");
  c->add_flag("!--cold", o->warmup, "time every run, the first included (no untimed warm-up run)");
  o->roofline.add_to(c);
  o->runtime.add_to(c);
  c->callback([o] { run(*o); });
}

}  // namespace ascent::cli
