// ascent logits: runs token ids through a model and writes every position's logits as a float32 .npy (T, vocab). A
// debugging and testing tool: the suite compares these files with PyTorch references.
// --step feeds the ids in pieces of that many tokens, exercising the KV cache the way generation does. --twice runs
// each piece, rewinds the cache and runs it again, writing the second run's logits (ascent bench re-runs its decode
// steps so). --beside N runs the ids as one sequence of a batch with N others (of other lengths and contents), to check
// batch invariance.
// --paged runs them as the serving engine does: a pool of KV blocks shared with the --beside others, a scrambled block
// table, a few tokens per step.
// The runtime flags (--no-mmap, --passes, --profile, ...) are generate's, so a difference can be
// narrowed down to a load mode or pass.
#include <algorithm>
#include <cstdio>

#include "ascent/base/error.h"
#include "ascent/cli/commands.h"
#include "ascent/cli/runtime_flags.h"
#include "ascent/graph/kv_cache.h"
#include "ascent/model/model.h"
#include "ascent/tensor/npy.h"

namespace ascent::cli {
namespace {

// The others' ids: 1..2T tokens from a fixed LCG.
std::vector<std::vector<int32_t>> others(int64_t n, int64_t T, int64_t V) {
  std::vector<std::vector<int32_t>> seqs;
  uint64_t state = 12345;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int32_t> other(static_cast<size_t>(1 + (i * 5 + 3) % (2 * T)));
    for (auto& id : other) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      id = static_cast<int32_t>((state >> 33) % static_cast<uint64_t>(V));
    }
    seqs.push_back(std::move(other));
  }
  return seqs;
}

// The ids as one sequence of the serving engine's kind: a shared pool of blocks of `block` positions, each sequence's
// table taking blocks from the pool's end first and the sequences' blocks interleaved; every step runs up to 5 of each
// sequence's remaining tokens (ours with every row's logits, the others' last rows only). Returns (T, V).
std::vector<float> paged_logits(const model::Model& m, std::span<const int32_t> ids, int64_t block, int64_t beside) {
  const int64_t V = m.config().vocab, T = static_cast<int64_t>(ids.size());
  std::vector<std::vector<int32_t>> seqs = others(beside, T, V);
  const size_t ours = static_cast<size_t>(beside / 2);
  seqs.insert(seqs.begin() + static_cast<int64_t>(ours), std::vector<int32_t>(ids.begin(), ids.end()));
  int64_t per_seq = 0;
  for (const auto& s : seqs) per_seq = std::max<int64_t>(per_seq, (static_cast<int64_t>(s.size()) + block - 1) / block);
  const auto n_seqs = static_cast<int64_t>(seqs.size());
  graph::KvCache pool(static_cast<int>(m.config().n_layers), per_seq * n_seqs, m.kv_width(), m.kv_type(), block);
  std::vector<std::vector<int32_t>> tables(seqs.size());
  for (int64_t i = 0; i < per_seq; ++i) {
    for (int64_t s = 0; s < n_seqs; ++s) {
      tables[static_cast<size_t>(s)].push_back(static_cast<int32_t>(per_seq * n_seqs - 1 - (i * n_seqs + s)));
    }
  }
  graph::Executor ex(m.generation_graph(), m.passes());
  std::vector<float> out(static_cast<size_t>(T * V));
  std::vector<int64_t> done(seqs.size(), 0);
  for (bool more = true; more;) {
    std::vector<graph::Segment> segs;
    std::vector<size_t> who;
    for (size_t s = 0; s < seqs.size(); ++s) {
      const int64_t n = std::min<int64_t>(5, static_cast<int64_t>(seqs[s].size()) - done[s]);
      if (n <= 0) continue;
      segs.push_back({std::span<const int32_t>(seqs[s].data() + done[s], static_cast<size_t>(n)), done[s], &pool,
                      tables[s], /*all_rows=*/s == ours});
      who.push_back(s);
    }
    more = !segs.empty();
    if (!more) break;
    const auto logits = ex.run_batch(segs);
    int64_t row = 0;
    for (size_t k = 0; k < segs.size(); ++k) {
      const auto n = static_cast<int64_t>(segs[k].tokens.size());
      if (who[k] == ours) {
        std::copy(logits.begin() + row * V, logits.begin() + (row + n) * V, out.begin() + done[ours] * V);
        row += n;
      } else {
        row += 1;
      }
      done[who[k]] += n;
    }
  }
  return out;
}

void run(const std::string& model_path, const std::string& ids_text, const std::string& out, int64_t step, bool twice,
         int64_t beside, int64_t paged, int threads, RuntimeFlags& runtime) {
  // Negative counts would read as 0 (all at once, alone): refused, before the model loads.
  ASCENT_CHECK(step >= 0, "--step: must be 0 (all at once) or more, got {}", step);
  ASCENT_CHECK(beside >= 0, "--beside: must be 0 (alone) or more, got {}", beside);
  ASCENT_CHECK(beside == 0 || (step == 0 && !twice), "--beside cannot be combined with --step or --twice");
  // A batch-invariance check beside a few others: 2^31 of them would run for ever before anything failed.
  ASCENT_CHECK(beside <= 255, "--beside: at most 255 other sequences, got {}", beside);
  ASCENT_CHECK(paged >= 0 && paged % 16 == 0, "--paged: the block size must be a positive multiple of 16, got {}",
               paged);
  ASCENT_CHECK(paged == 0 || (step == 0 && !twice), "--paged cannot be combined with --step or --twice");
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
  if (paged > 0) {
    const std::vector<float> logits = paged_logits(*m, ids, paged, beside);
    std::copy(logits.begin(), logits.end(), dst);
    write_npy(out, all);
    runtime.finish();
    return;
  }
  if (beside > 0) {
    // N other sequences of 1..2T tokens with ids from a fixed LCG; ours goes in the middle of the batch.
    std::vector<std::vector<int32_t>> seqs = others(beside, T, V);
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
    int64_t step = 0, beside = 0, paged = 0;
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
  c->add_option("--paged", o->paged,
                "run them as the server does, in a shared pool of KV blocks of this many positions");
  c->add_option("-t,--threads", o->threads, "threads (0: all cores)");
  o->runtime.add_to(c);
  c->callback([o] { run(o->model, o->ids, o->out, o->step, o->twice, o->beside, o->paged, o->threads, o->runtime); });
}

}  // namespace ascent::cli
