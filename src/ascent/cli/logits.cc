// ascent logits: runs token ids through a model and writes every position's logits as a float32 .npy (T, vocab). A
// debugging and testing tool: the suite compares these files with PyTorch references.
// --step feeds the ids in pieces of that many tokens, exercising the KV cache the way generation does. --twice runs
// each piece, rewinds the cache and runs it again, writing the second run's logits (ascent bench re-runs its decode
// steps so). --beside N runs the ids as one sequence of a batch with N others (of other lengths and contents), to check
// batch invariance. The runtime flags (--no-mmap, --passes, --profile, ...) are generate's, so a difference can be
// narrowed down to a load mode or pass.
#include <algorithm>
#include <cstdio>

#include "ascent/base/error.h"
#include "ascent/cli/commands.h"
#include "ascent/cli/runtime_flags.h"
#include "ascent/model/model.h"
#include "ascent/tensor/npy.h"

namespace ascent::cli {
namespace {

void run(const std::string& model_path, const std::string& ids_text, const std::string& out, int64_t step, bool twice,
         int64_t beside, int threads, RuntimeFlags& runtime) {
  // Negative counts would read as 0 (all at once, alone): refused, before the model loads.
  ASCENT_CHECK(step >= 0, "--step: must be 0 (all at once) or more, got {}", step);
  ASCENT_CHECK(beside >= 0, "--beside: must be 0 (alone) or more, got {}", beside);
  ASCENT_CHECK(beside == 0 || (step == 0 && !twice), "--beside cannot be combined with --step or --twice");
  // A batch-invariance check beside a few others: 2^31 of them would run for ever before anything failed.
  ASCENT_CHECK(beside <= 255, "--beside: at most 255 other sequences, got {}", beside);
  check_output_folder(out);
  const auto ids = parse_ids(ids_text, "--prompt-ids");
  ASCENT_CHECK(!ids.empty(), "--prompt-ids: no ids given");
  set_threads(threads);
  runtime.before_load();
  auto m = model::Model::load(model_path, runtime.load_options());
  model::Session s(*m);
  runtime.after_load(s);
  s.set_context(static_cast<int64_t>(ids.size()));
  const int64_t V = m->config().vocab, T = static_cast<int64_t>(ids.size());
  check_ids_in_vocab(ids, V, "--prompt-ids");
  Tensor all = make_owned(DType::F32, {T, V});  // (T, V)
  auto* dst = static_cast<float*>(const_cast<void*>(all.data));
  if (beside > 0) {
    // N other sequences of 1..2T tokens with ids from a fixed LCG; ours goes in the middle of the batch.
    std::vector<std::vector<int32_t>> seqs;
    uint64_t state = 12345;
    for (int64_t i = 0; i < beside; ++i) {
      std::vector<int32_t> other(static_cast<size_t>(1 + (i * 5 + 3) % (2 * T)));
      for (auto& id : other) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        id = static_cast<int32_t>((state >> 33) % static_cast<uint64_t>(V));
      }
      seqs.push_back(std::move(other));
    }
    const size_t at = static_cast<size_t>(beside / 2);
    seqs.insert(seqs.begin() + static_cast<int64_t>(at), ids);
    int64_t longest = 0, first_row = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      longest = std::max<int64_t>(longest, static_cast<int64_t>(seqs[i].size()));
      if (i < at) first_row += static_cast<int64_t>(seqs[i].size());
    }
    s.set_context(longest);
    auto logits = s.forward_batch(seqs);
    std::copy(logits.begin() + first_row * V, logits.begin() + (first_row + T) * V, dst);
    write_npy(out, all);
    runtime.finish();
    return;
  }
  const int64_t stride = step > 0 ? step : T;
  for (int64_t i = 0; i < T; i += stride) {
    const int64_t n = std::min(stride, T - i);
    const std::span<const int32_t> piece(ids.data() + i, static_cast<size_t>(n));
    if (twice) {
      s.forward(piece, /*all_logits=*/true);
      s.rewind(i);
    }
    auto logits = s.forward(piece, /*all_logits=*/true);
    std::copy(logits.begin(), logits.end(), dst + i * V);
  }
  write_npy(out, all);
  runtime.finish();
}

}  // namespace

void add_logits(CLI::App& app) {
  struct Opt {
    std::string model, ids, out;
    int64_t step = 0, beside = 0;
    bool twice = false;
    int threads = 0;
    RuntimeFlags runtime;
  };
  auto o = std::make_shared<Opt>();
  auto* c = app.add_subcommand("logits", "write all-position logits of token ids to a .npy file");
  c->add_option("-m,--model", o->model, kModelHelp)->required();
  c->add_option("--prompt-ids", o->ids, "token ids")->required();
  c->add_option("-o,--output", o->out, "output .npy")->required();
  c->add_option("--step", o->step, "feed this many tokens per forward call (0: all at once)");
  c->add_flag("--twice", o->twice, "run each piece twice, rewinding the cache between; write the second run's logits");
  c->add_option("--beside", o->beside, "run the ids in one batch beside this many other sequences");
  c->add_option("-t,--threads", o->threads, "threads (0: all cores)");
  o->runtime.add_to(c);
  c->callback([o] { run(o->model, o->ids, o->out, o->step, o->twice, o->beside, o->threads, o->runtime); });
}

}  // namespace ascent::cli
