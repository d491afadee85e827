// ascent logits: runs token ids through a model and writes every position's logits as a float32 .npy (T, vocab).
// A debugging and testing tool: the suite compares these files with PyTorch references. --step feeds the ids in
// pieces of that many tokens, exercising the KV cache the way generation does.
#include <algorithm>
#include <cstdio>

#include "ascent/base/error.h"
#include "ascent/cli/commands.h"
#include "ascent/model/model.h"
#include "ascent/tensor/npy.h"

namespace ascent::cli {
namespace {

void run(const std::string& model_path, const std::string& ids_text, const std::string& out, int64_t step,
         int threads) {
  set_threads(threads);
  auto m = model::Model::load(model_path);
  const auto ids = parse_ids(ids_text, "--prompt-ids");
  ASCENT_CHECK(!ids.empty(), "--prompt-ids: no ids given");
  m->set_context(static_cast<int64_t>(ids.size()));
  const int64_t V = m->config().vocab, T = static_cast<int64_t>(ids.size());
  Tensor all = make_owned(DType::F32, {T, V});  // (T, V)
  auto* dst = static_cast<float*>(const_cast<void*>(all.data));
  const int64_t s = step > 0 ? step : T;
  for (int64_t i = 0; i < T; i += s) {
    const int64_t n = std::min(s, T - i);
    auto logits = m->forward(std::span<const int32_t>(ids.data() + i, static_cast<size_t>(n)), /*all_logits=*/true);
    std::copy(logits.begin(), logits.end(), dst + i * V);
  }
  write_npy(out, all);
}

}  // namespace

void add_logits(CLI::App& app) {
  struct Opt {
    std::string model, ids, out;
    int64_t step = 0;
    int threads = 0;
  };
  auto o = std::make_shared<Opt>();
  auto* c = app.add_subcommand("logits", "write all-position logits of token ids to a .npy file");
  c->add_option("-m,--model", o->model, "HF folder, .gguf or llama2.c .bin")->required();
  c->add_option("--prompt-ids", o->ids, "token ids")->required();
  c->add_option("-o,--output", o->out, "output .npy")->required();
  c->add_option("--step", o->step, "feed this many tokens per forward call (0: all at once)");
  c->add_option("-t,--threads", o->threads, "threads (0: all cores)");
  c->callback([o] { run(o->model, o->ids, o->out, o->step, o->threads); });
}

}  // namespace ascent::cli
