#include "ascent/train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ascent/base/atomic_write.h"
#include "ascent/base/error.h"
#include "ascent/base/log.h"
#include "ascent/base/read_file.h"
#include "ascent/base/thread_pool.h"
#include "ascent/model/model_tokenizer.h"
#include "ascent/prof/roofline.h"
#include "ascent/train/checkpoint.h"
#include "ascent/train/dataset.h"
#include "ascent/train/loss_plot.h"
#include "ascent/train/train_model.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace ascent::train {
namespace {

using Clock = std::chrono::steady_clock;

// What a run reports as it goes (stderr; stdout stays free).
template <class... Args>
void say(fmt::format_string<Args...> f, Args&&... args) {
  std::fprintf(stderr, "train: %s\n", fmt::format(f, std::forward<Args>(args)...).c_str());
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t n = static_cast<int64_t>(s + 0.5);
  if (n >= 3600) return fmt::format("{}h{:02d}m", n / 3600, n / 60 % 60);
  if (n >= 60) return fmt::format("{}m{:02d}s", n / 60, n % 60);
  return fmt::format("{}s", n);
}

// Model FLOPs of one token's forward and backward: 6 per matmul weight, plus causal attention's score and value
// products (2 x 2 x seq/2 x width per layer forward, three times that with backward). Recomputation is not counted, as
// MFU defines it.
double flops_per_token(const model::ModelConfig& c, const ParamSet& p, int64_t seq) {
  double matmul = 0;
  for (const Param& q : p.params())
    if (q.value.shape.size() == 2 && q.name != "position_embd.weight" &&
        !(q.name == "token_embd.weight" && !c.tied_embeddings))
      matmul += static_cast<double>(q.numel());
  const double attn = 6.0 * static_cast<double>(c.n_layers * seq * c.n_heads * c.head_dim);
  return 6.0 * matmul + attn;
}

// Keeps the log's lines up to `step` (those a resumed run has already computed) and drops the rest.
std::vector<json> kept_log(const std::string& path, int64_t step) {
  std::vector<json> out;
  if (!fs::exists(path)) return out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.contains("step")) break;  // a line cut short by a kill: the rest is recomputed
    if (j["step"].get<int64_t>() > step) break;
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace

graph::Numerics numerics_for(Precision p, bool fp16) {
  graph::Numerics n;
  const graph::Half half = fp16 ? graph::Half::F16 : graph::Half::Bf16;
  switch (p) {
    case Precision::O0:
      break;
    case Precision::O1:
      n.matmul = graph::Half::Bf16;
      break;
    case Precision::O2:
      n.matmul = graph::Half::Bf16;
      n.activations = graph::Half::Bf16;
      break;
    case Precision::O3:
      // fp16 has no matmul instruction here: its matmuls round their operands, the weights too, to fp16 and multiply
      // them in f32, each product exact.
      n.matmul = half;
      n.activations = half;
      n.norms_too = true;
      n.activation_grads = half;
      break;
  }
  return n;
}

void run_training(const TrainConfig& c, const RunOptions& o) {
  if (c.threads > 0) ThreadPool::set_global_threads(c.threads);
  const int threads = ThreadPool::global().size();
  const tokenizer::Vocab vocab =
      with_context("tokenizer " + c.tokenizer, [&] { return model::load_vocab(c.tokenizer, 0); });
  const TokenData train_data = TokenData::open(c.data_dir, "train");
  train_data.check_tokenizer(vocab, c.tokenizer);
  const TokenData val_data = TokenData::open(c.data_dir, "val");

  std::unique_ptr<TrainModel> m;
  if (!c.init_from.empty()) {
    m = load_train_model(c.init_from, c.recompute);
    ASCENT_CHECK(m->config().vocab >= train_data.vocab_size(),
                 "{}: the data's vocabulary ({} tokens) is larger than {}'s embedding ({} rows)", c.data_dir,
                 train_data.vocab_size(), c.init_from, m->config().vocab);
  } else {
    model::ModelConfig cfg = c.model;
    cfg.vocab = static_cast<int64_t>(vocab.pieces.size());
    if (vocab.bos_id >= 0) cfg.bos_id = vocab.bos_id;
    if (vocab.eos_id >= 0) cfg.eos_id = vocab.eos_id;
    model::validate_config(cfg, c.path);
    m = std::make_unique<TrainModel>(cfg, ParamSet::init(cfg, c.init_seed), c.recompute);
  }
  m->autodiff().set_numerics(numerics_for(c.precision, c.fp16));
  const model::ModelConfig& mc = m->config();
  ASCENT_CHECK(c.seq_len <= mc.max_seq, "{}: train.seq_len {} is longer than the model's {} positions", c.path,
               c.seq_len, mc.max_seq);
  ParamSet& params = m->params();
  AdamW opt(params, c.adamw);
  BatchSampler sampler(train_data, c.seq_len, c.seed, c.num_shards, c.shard_id);

  const std::string ckroot = (fs::path(c.output) / "checkpoints").string();
  const std::string log_path = (fs::path(c.output) / "log.jsonl").string();
  std::error_code ec;
  ASCENT_CHECK(!fs::exists(c.output, ec) || fs::is_directory(c.output, ec),
               "{}: output {} exists and is not a folder; choose a folder for the run", c.path, c.output);
  ASCENT_CHECK(o.resume || list_checkpoints(ckroot).empty(),
               "{}: holds checkpoints of an earlier run; pass --resume to continue it, or choose another output",
               c.output);
  fs::create_directories(c.output, ec);
  ASCENT_CHECK(!ec, "{}: output {}: the folder cannot be created: {}", c.path, c.output, ec.message());
  TrainerState st;
  st.seed = c.seed;
  st.loss_scale = c.fp16 ? c.loss_scale_init : 1.0;
  if (o.resume) {
    const std::string latest = latest_checkpoint(ckroot);
    if (latest.empty()) {
      say("{}: no checkpoint yet; starting from step 0", c.output);
    } else {
      st = restore_checkpoint(latest, mc, params, opt);
      ASCENT_CHECK(st.seed == c.seed, "{}: the checkpoint was written with train.seed {}, the config says {}", latest,
                   st.seed, c.seed);
      sampler.seek(st.data_position);
      say("resumed from {} (step {})", latest, st.step);
    }
  }
  std::vector<std::pair<int64_t, double>> train_curve, val_curve;
  {
    // The log up to the restored step, rewritten whole; each later step appends one line.
    std::string text;
    for (const json& j : kept_log(log_path, st.step)) {
      text += j.dump() + "\n";
      if (j.contains("loss")) train_curve.emplace_back(j["step"].get<int64_t>(), j["loss"].get<double>());
      if (j.contains("val_loss")) val_curve.emplace_back(j["step"].get<int64_t>(), j["val_loss"].get<double>());
    }
    write_file_atomic(log_path, {std::span<const char>(text)});
  }
  {
    const std::string cfg_text = read_file(c.path);
    write_file_atomic((fs::path(c.output) / "config.yaml").string(), {std::span<const char>(cfg_text)});
  }
  std::FILE* log = std::fopen(log_path.c_str(), "a");
  ASCENT_CHECK(log != nullptr, "{}: cannot append: {}", log_path, std::strerror(errno));
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> log_closer(log, &std::fclose);

  const double peak = [&] {
    const prof::Roofline r = prof::measure_roofline(threads, int64_t{32} << 20);
    return c.precision == Precision::O0 ? r.fp32_gflops_all : std::max(r.bf16_gflops_all, r.fp32_gflops_all);
  }();
  const double flops_tok = flops_per_token(mc, params, c.seq_len);
  const int64_t B = c.batch_size, T = c.seq_len, tokens_per_step = B * T * c.grad_accum;
  say("model: {} {} layers x {} wide, {} parameters; {} x {} tokens x {} accumulation; precision {}; recompute {}; "
      "planned peak activations {:.1f} MiB; {} threads",
      model::arch_name(mc.arch), mc.n_layers, mc.dim, params.count(), B, T, c.grad_accum, precision_name(c.precision),
      graph::recompute_name(c.recompute), static_cast<double>(m->autodiff().planned_peak_bytes(B, T)) / (1 << 20),
      threads);
  {
    std::string peaks;
    for (graph::Recompute r : {graph::Recompute::None, graph::Recompute::Selective, graph::Recompute::Full}) {
      peaks += fmt::format("{}{} {:.1f} MiB", peaks.empty() ? "" : ", ", graph::recompute_name(r),
                           static_cast<double>(m->planned_peak_bytes(r, B, T)) / (1 << 20));
    }
    say("the planner's peak activations by recompute setting: {}", peaks);
  }

  std::vector<int32_t> in(static_cast<size_t>(B * T)), tgt(static_cast<size_t>(B * T));
  auto validate = [&]() -> double {
    const int64_t windows = val_data.windows(T);
    if (windows == 0) return NAN;
    graph::LossSum total;
    for (int64_t b = 0, first = 0; b < c.eval_batches && first < windows; ++b) {
      const int64_t rows = val_data.read_windows(first, T, in, tgt);
      first += rows;
      const graph::LossSum l = m->autodiff().loss(std::span(in).first(static_cast<size_t>(rows * T)),
                                                  std::span(tgt).first(static_cast<size_t>(rows * T)), rows);
      total.sum += l.sum;
      total.count += l.count;
    }
    return total.sum / static_cast<double>(total.count);
  };
  if (val_data.windows(T) == 0) log::warn("{}: the val split is shorter than one window; no validation", c.data_dir);

  const auto run_start = Clock::now();
  const int64_t first_step = st.step;
  double last_loss = NAN;
  std::map<std::string, double> phase;  // seconds per part of a step, for ASCENT_LOG=debug
  while (st.step < c.steps) {
    const auto t0 = Clock::now();
    params.zero_grad();  // marks only: the zeros are written by the first write that adds, or before the norm
    graph::LossSum total;
    const float scale = static_cast<float>(st.loss_scale / static_cast<double>(tokens_per_step));
    for (int64_t a = 0; a < c.grad_accum; ++a) {
      sampler.next(in, tgt);
      const graph::LossSum l = m->autodiff().forward_backward(in, tgt, B, scale);
      total.sum += l.sum;
      total.count += l.count;
    }
    const auto t1 = Clock::now();
    phase["forward and backward"] += std::chrono::duration<double>(t1 - t0).count();
    GradCheck g = scale_and_check(params, 1.0 / st.loss_scale);
    phase["gradient norm"] += seconds_since(t1);
    if (st.step + 1 == c.inject_overflow_step) {
      params.params()[0].grad[0] = INFINITY;  // what an fp16 overflow in backward leaves behind
      params.params()[0].grad_state = GradState::Live;
      g = scale_and_check(params, 1.0);
    }
    const double lr = c.schedule.at(st.step);
    const bool skipped = !g.non_finite.empty();
    if (skipped) {
      log::warn("step {}: the gradient of {} is not finite; step skipped{}", st.step + 1, g.non_finite,
                c.fp16 ? fmt::format(", loss scale {} -> {}", st.loss_scale, st.loss_scale / 2) : "");
      if (c.fp16) st.loss_scale /= 2;
      st.clean_steps = 0;
    } else {
      const auto t2 = Clock::now();
      opt.step(params, lr, clip_factor(g.norm, c.grad_clip));
      phase["adamw"] += seconds_since(t2);
      if (c.fp16 && ++st.clean_steps >= c.loss_scale_window) {
        st.loss_scale *= 2;
        st.clean_steps = 0;
      }
    }
    ++st.step;
    st.data_position = sampler.position();
    const double dt = seconds_since(t0);
    const double loss = total.sum / static_cast<double>(total.count);
    last_loss = loss;
    const double tps = static_cast<double>(tokens_per_step) / dt;
    const double mfu = peak > 0 ? tps * flops_tok / (peak * 1e9) : 0;
    json line = {{"step", st.step},     {"loss", loss}, {"lr", lr},          {"grad_norm", g.norm},
                 {"tokens_per_s", tps}, {"mfu", mfu},   {"skipped", skipped}};
    if (c.fp16) line["loss_scale"] = st.loss_scale;
    train_curve.emplace_back(st.step, loss);
    const bool eval_now = c.eval_interval > 0 && (st.step % c.eval_interval == 0 || st.step == c.steps);
    double val = NAN;
    if (eval_now) {
      val = validate();
      if (std::isfinite(val)) val_curve.emplace_back(st.step, val);
    }
    std::fputs((line.dump() + "\n").c_str(), log);
    if (eval_now && std::isfinite(val))
      std::fputs((json{{"step", st.step}, {"val_loss", val}}.dump() + "\n").c_str(), log);
    std::fflush(log);
    const double elapsed = seconds_since(run_start);
    const double eta = elapsed / static_cast<double>(st.step - first_step) * static_cast<double>(c.steps - st.step);
    const std::string status =
        fmt::format("step {}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:.0f} tok/s | MFU {:.1f}% | ETA {}",
                    st.step, c.steps, loss, lr, g.norm, tps, 100 * mfu, duration(eta));
    if (o.progress) {
      std::fprintf(stderr, "\r\033[K%s", status.c_str());
      if (eval_now && std::isfinite(val)) std::fprintf(stderr, "\n  validation loss %.4f\n", val);
    } else if (st.step % c.log_interval == 0 || st.step == c.steps || eval_now) {
      std::fprintf(stderr, "%s%s\n", status.c_str(),
                   eval_now && std::isfinite(val) ? fmt::format(" | val loss {:.4f}", val).c_str() : "");
    }
    if ((c.checkpoint_interval > 0 && st.step % c.checkpoint_interval == 0) || st.step == c.steps) {
      const std::string dir = write_checkpoint(ckroot, mc, params, opt, st, c.tokenizer);
      prune_checkpoints(ckroot, c.keep_checkpoints);
      if (o.progress) std::fprintf(stderr, "\n");
      say("checkpoint {}", dir);
    }
  }
  if (st.step == first_step) {
    say("nothing to do: the run in {} has already taken its {} steps", c.output, c.steps);
    return;
  }
  write_loss_plot((fs::path(c.output) / "loss.svg").string(), train_curve, val_curve);
  for (const auto& [op, sec] : m->autodiff().op_seconds()) log::debug("{:>40}: {:8.3f} s", op, sec);
  for (const auto& [part, sec] : phase) log::debug("{:>40}: {:8.3f} s", part, sec);
  if (o.progress) std::fprintf(stderr, "\n");
  say("done: {} steps ({} of them in {}), last loss {:.4f}, final checkpoint {}", st.step, st.step - first_step,
      duration(seconds_since(run_start)), last_loss, latest_checkpoint(ckroot));
}

}  // namespace ascent::train
