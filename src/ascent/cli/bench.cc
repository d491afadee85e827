// ascent bench: llama-bench-style throughput — prefill (ppP) and decode (tgN) tokens/s as median and range over
// runs, after an untimed warm-up run, optionally after D tokens already in the KV cache (-d, named "ppP @ dD" as
// llama-bench does) — with each figure as a share of this machine's roofline: prefill against the peak of the
// instruction its matmuls use (matmul operations per token), decode against read bandwidth (weight bytes streamed
// per token plus the KV cache rows each step attends over), each token against a read measured beside it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

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
  int64_t prefill = 512, decode = 128, depth = 0;
  int threads = 0, runs = 5;
  bool jsonl = false, warmup = true;
  RooflineFlags roofline;
  RuntimeFlags runtime;
};

struct Result {
  std::string test;
  double median = 0, min = 0, max = 0, roofline_pct = 0;
  std::vector<double> samples;    // each timed run's t/s, in run order (llama-bench's samples_ts)
  std::vector<double> read_gbps;  // decode: each run's read (its tokens' reads weighted by their times), in run order
};

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Bytes of the matrices every token streams (the embedding table is gathered, not streamed; int8/int4 scales
// count), their elements, and the storage type holding most of them.
void weight_traffic(const model::Model& m, double& bytes, double& elems, DType& main_type) {
  bytes = elems = 0;
  std::map<DType, double> by_type;
  for (const auto& [name, t] : m.weights().all()) {
    if (t.shape.size() != 2 || name == "token_embd.weight" || name == "position_embd.weight") continue;
    bytes += static_cast<double>(t.nbytes());
    if (is_int_weight(t.dtype)) {
      bytes += 4.0 * static_cast<double>(int_weight_scale_count(t.dtype, t.shape[0], t.shape[1], t.group));
    }
    elems += static_cast<double>(t.numel());
    by_type[t.dtype] += static_cast<double>(t.numel());
  }
  main_type = DType::F32;
  double most = -1;
  for (const auto& [t, n] : by_type) {
    if (n > most) {
      most = n;
      main_type = t;
    }
  }
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

void run(Options& o) {
  set_threads(o.threads);
  ASCENT_CHECK(o.prefill >= 0 && o.decode >= 0 && o.prefill + o.decode > 0, "-p and -n must be >= 0, not both 0");
  ASCENT_CHECK(o.depth >= 0, "-d: the depth must be >= 0, got {}", o.depth);
  ASCENT_CHECK(o.runs >= 1, "-r: at least one run, got {}", o.runs);
  // The decode read probe's buffer (see below) is allocated before the weights, so that it gets huge pages however
  // a large --no-mmap model leaves memory (on 4 KiB pages the same reads run ~15% slower here).
  std::unique_ptr<prof::ReadProbe> probe;
  if (o.decode > 0 && !o.roofline.gbps_given()) probe = std::make_unique<prof::ReadProbe>();
  o.runtime.before_load();
  auto m = model::Model::load(o.model, o.runtime.load_options());
  const auto& cfg = m->config();
  const int64_t ctx = o.depth + std::max(o.prefill, o.decode + 1);
  ASCENT_CHECK(ctx <= cfg.max_seq, "-d/-p/-n need {} positions, more than the model's context {}", ctx, cfg.max_seq);
  m->set_context(ctx);
  o.runtime.after_load(*m);
  o.roofline.resolve();  // and again after the runs
  double wbytes, welems;
  DType main_type;
  weight_traffic(*m, wbytes, welems, main_type);
  std::mt19937 rng(7);
  auto random_ids = [&](int64_t n) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (auto& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(cfg.vocab));
    return ids;
  };
  using Clock = std::chrono::steady_clock;
  std::vector<double> pp_tps, tg_tps;
  // Starts a run: an empty cache, then -d tokens in it (untimed).
  auto fill_depth = [&] {
    m->reset();
    if (o.depth > 0) m->forward(random_ids(o.depth), /*all_logits=*/false);
  };
  if (o.prefill > 0) {
    // The warm-up run pays for first touches (the mapped weights, scratch buffers) as llama-bench's does.
    for (int r = o.warmup ? -1 : 0; r < o.runs; ++r) {
      const auto ids = random_ids(o.prefill);
      fill_depth();
      const auto t0 = Clock::now();
      m->forward(ids, /*all_logits=*/false);
      if (r >= 0)
        pp_tps.push_back(static_cast<double>(o.prefill) / std::chrono::duration<double>(Clock::now() - t0).count());
    }
  }
  // Decode is judged token by token against a read of memory measured between the tokens (the fastest of six 32 MiB
  // reads on the same threads, two with each of prof::sum_bytes' prefetches, ~3 ms, not timed), unless
  // --roofline-gbps gives the bandwidth: this host class's memory rate moves between states (30 and 60 GB/s here)
  // within tens of milliseconds, so even reads just before and after a whole run (as here before session 15) judged
  // runs that had spent part of their time in the other state, showing 60% or 100% of what the memory gave them. Each
  // token counts against the mean of the reads on its two sides (a token during which the state flipped had some of
  // each; the read before it came before its untimed first run, below); a run's read is the tokens' reads weighted by
  // their times, and its share is the bytes it streamed over the bytes that read would have delivered in that time.
  // Shorter reads ramp up for a larger part of their time: on the Zen 5 host, two 8 MiB halves read 65-69 GB/s where 32
  // and 64 MiB halves, alternated with them, read 72-75 (bf16 decode then showed 93-107% of the read instead of
  // 85-91%); 32 MiB halves read as much as 64 MiB ones.
  constexpr int64_t kProbeWindow = int64_t{64} << 20;
  std::vector<double> tg_gbps;  // per timed decode run: the time-weighted read its tokens were judged against
  if (o.decode > 0) {
    for (int r = o.warmup ? -1 : 0; r < o.runs; ++r) {
      fill_depth();
      int32_t tok = static_cast<int32_t>(cfg.bos_id >= 0 && cfg.bos_id < cfg.vocab ? cfg.bos_id : 0);
      const bool timed = r >= 0;
      const int64_t steps = timed ? o.decode : std::min<int64_t>(o.decode, 8);  // warm-up: a few tokens
      double seconds = 0, read_seconds = 0;                                     // read_seconds: GB/s x s
      double before = probe && timed ? probe->window_gbps(kProbeWindow) : 0;
      for (int64_t i = 0; i < steps; ++i) {
        if (probe && timed) {
          // The probe just read 192 MiB through every cache: with probes after every second token, the token right
          // after one ran 0.6-0.9 ms (7-9%) slower than the token after it in two of three runs (int4 tl16; the later
          // one faster in 457 of 576 pairs), the probe's cost, not decode's. So the step first runs untimed, the
          // cache is rewound, and the timed run follows a token, as in a continuous decode (and llama-bench's tg).
          m->forward(std::span<const int32_t>(&tok, 1), /*all_logits=*/false);
          m->rewind(m->n_past() - 1);
        }
        const auto t0 = Clock::now();
        auto logits = m->forward(std::span<const int32_t>(&tok, 1), /*all_logits=*/false);
        tok = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
        seconds += dt;
        if (probe && timed) {
          const double after = probe->window_gbps(kProbeWindow);
          read_seconds += dt * 0.5 * (before + after);
          before = after;
        }
      }
      if (timed) {
        tg_tps.push_back(static_cast<double>(o.decode) / seconds);
        if (probe) tg_gbps.push_back(read_seconds / seconds);
      }
    }
  }
  o.roofline.remeasure();
  // Prefill is judged against the peak of the instruction its matmuls use: int8 dot products (VNNI, else AVX2's
  // vpmaddubsw: prof::Roofline::int8_isa) for the integer formats (GGUF block and K-quants included), bf16 dot
  // products for bf16, FP32 FMA otherwise (and whenever the CPU lacks the former).
  std::string peak_name = "fp32 FMA";
  double peak = o.roofline.gflops;
  const bool integer = is_int_weight(main_type) || is_quantized(main_type) || is_kquant(main_type);
  if (integer && o.roofline.int8_gops > 0) {
    peak_name = "int8 dot";
    peak = o.roofline.int8_gops;
  } else if (main_type == DType::BF16 && o.roofline.bf16_gflops > 0) {
    peak_name = "bf16 dot";
    peak = o.roofline.bf16_gflops;
  }
  std::vector<Result> results;
  // 2 operations per weight element per token is the matmul work; attention adds little at these lengths.
  const std::string at = o.depth > 0 ? " @ d" + std::to_string(o.depth) : "";
  if (o.prefill > 0) {
    results.push_back(summarize("pp" + std::to_string(o.prefill) + at, pp_tps, 100.0 * 2.0 * welems / (peak * 1e9)));
  }
  if (o.decode > 0) {
    // Step i attends over depth + i + 1 cached positions (K and V rows of every layer, f32 or f16: --kv-type).
    const double kv_elem = static_cast<double>(block_bytes(o.runtime.load_options().kv_type));
    const double kv_row_bytes = 2.0 * static_cast<double>(cfg.n_layers * cfg.n_kv_heads * cfg.head_dim) * kv_elem;
    const double kv_bytes = (static_cast<double>(o.depth) + 0.5 * static_cast<double>(o.decode + 1)) * kv_row_bytes;
    results.push_back(
        summarize("tg" + std::to_string(o.decode) + at, tg_tps, 100.0 * (wbytes + kv_bytes) / (o.roofline.gbps * 1e9)));
    if (!tg_gbps.empty()) {
      std::vector<double> shares;
      for (size_t i = 0; i < tg_tps.size(); ++i)
        shares.push_back(100.0 * (wbytes + kv_bytes) * tg_tps[i] / (tg_gbps[i] * 1e9));
      results.back().roofline_pct = median_of(shares);
      results.back().read_gbps = tg_gbps;
    }
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
          "{\"test\":\"%s\",\"tps_median\":%.4f,\"tps_min\":%.4f,\"tps_max\":%.4f,\"roofline_pct\":%.6f,"
          "\"samples_tps\":%s%s}\n",
          r.test.c_str(), r.median, r.min, r.max, r.roofline_pct, array(r.samples).c_str(),
          r.read_gbps.empty() ? "" : (",\"read_gbps\":" + array(r.read_gbps)).c_str());
    }
    return;
  }
  std::printf("model: %s (%s, %.1f M params, %.1f MiB of matrices), %d threads, %d runs\n", o.model.c_str(),
              model::arch_name(cfg.arch), static_cast<double>(m->parameter_count()) / 1e6, wbytes / (1 << 20),
              ThreadPool::global().size(), o.runs);
  std::printf("roofline: %.1f GB/s read, %.1f GFLOP/s fp32", o.roofline.gbps, o.roofline.gflops);
  if (o.roofline.int8_gops > 0) std::printf(", %.1f GOP/s int8 dot", o.roofline.int8_gops);
  if (o.roofline.bf16_gflops > 0) std::printf(", %.1f GFLOP/s bf16 dot", o.roofline.bf16_gflops);
  std::printf("\nmatrices: %s, KV cache %s; prefill %% of the %s peak, decode %% of read bandwidth\n",
              std::string(dtype_name(main_type)).c_str(), o.runtime.kv_type.c_str(), peak_name.c_str());
  if (!tg_gbps.empty()) {
    std::printf(
        "decode runs: each token against the read bandwidth measured beside it, runs' reads %.1f-%.1f GB/s (median "
        "of the shares)\n",
        *std::min_element(tg_gbps.begin(), tg_gbps.end()), *std::max_element(tg_gbps.begin(), tg_gbps.end()));
  }
  std::printf("| test | t/s median | min | max | roofline |\n|---|---|---|---|---|\n");
  for (const auto& r : results) {
    std::printf("| %s | %.2f | %.2f | %.2f | %.1f%% |\n", r.test.c_str(), r.median, r.min, r.max, r.roofline_pct);
  }
}

}  // namespace

void add_bench(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* c = app.add_subcommand("bench", "prefill and decode throughput against this machine's roofline");
  c->add_option("-m,--model", o->model, kModelHelp)->required();
  c->add_option("-p,--n-prompt", o->prefill, "prefill tokens (0: skip)")->capture_default_str();
  c->add_option("-n,--n-gen", o->decode, "decode tokens (0: skip)")->capture_default_str();
  c->add_option("-d,--n-depth", o->depth, "tokens already in the KV cache when each run starts")->capture_default_str();
  c->add_option("-r,--repetitions", o->runs, "runs per test")->capture_default_str();
  c->add_option("-t,--threads", o->threads, "threads (0: all cores)");
  c->add_flag("--jsonl", o->jsonl, "one JSON object per test");
  c->add_flag("!--cold", o->warmup, "time every run, the first included (no untimed warm-up run)");
  o->roofline.add_to(c);
  o->runtime.add_to(c);
  c->callback([o] { run(*o); });
}

}  // namespace ascent::cli
