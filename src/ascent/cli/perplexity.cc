// ascent perplexity: exp(mean negative log-likelihood) over non-overlapping windows of a text file. Each window
// is evaluated from an empty cache; every token after the window's first is scored.
#include <cmath>
#include <cstdio>

#include "ascent/base/error.h"
#include "ascent/base/read_file.h"
#include "ascent/cli/commands.h"
#include "ascent/cli/runtime_flags.h"
#include "ascent/engine/sampler.h"
#include "ascent/model/model_tokenizer.h"
#include "ascent/model/session.h"

namespace ascent::cli {
namespace {

struct Options {
  std::string model, file, tokenizer;
  int64_t ctx = 512;
  bool ctx_given = false;  // -c on the command line (else 512, or the model's context where that is shorter)
  int64_t chunks = 0;
  int threads = 0;
  RuntimeFlags runtime;
};

void run(Options& o) {
  // The flags' own bounds and the text file before the model loads (seconds for a large one).
  ASCENT_CHECK(o.ctx >= 2, "-c: context must be at least 2, got {}", o.ctx);
  ASCENT_CHECK(o.chunks >= 0, "--chunks: must be 0 (all windows) or more, got {}", o.chunks);
  const std::string text = read_file(o.file);
  set_threads(o.threads);
  o.runtime.before_load();
  auto m = model::Model::load(o.model, o.runtime.load_options());
  model::Session s(*m);
  if (o.ctx_given) check_ctx_flag(o.ctx, m->config().max_seq);
  auto tok = model::load_tokenizer(*m, o.tokenizer);
  const std::vector<int32_t> ids = tok->encode(text, /*add_special=*/false);
  const int64_t ctx = std::min(o.ctx, m->config().max_seq);
  ASCENT_CHECK(static_cast<int64_t>(ids.size()) >= 2, "{}: the text has fewer than 2 tokens", o.file);
  s.set_context(ctx);
  o.runtime.after_load(s);
  int64_t n_windows = std::max<int64_t>(1, static_cast<int64_t>(ids.size()) / ctx);
  if (o.chunks > 0) n_windows = std::min(n_windows, o.chunks);
  const int64_t V = m->config().vocab;
  double nll = 0.0;
  int64_t count = 0;
  for (int64_t w = 0; w < n_windows; ++w) {
    const int64_t begin = w * ctx;
    const int64_t len = std::min<int64_t>(ctx, static_cast<int64_t>(ids.size()) - begin);
    std::span<const int32_t> window(ids.data() + begin, static_cast<size_t>(len));
    s.reset();
    auto logits = s.forward(window, /*all_logits=*/true);
    for (int64_t t = 0; t + 1 < len; ++t) {
      const float* row = logits.data() + t * V;
      with_context(fmt::format("{}: window {}, position {}", o.file, w + 1, t), [&] {
        engine::check_logits({row, static_cast<size_t>(V)});
      });
      float mx = row[0];
      for (int64_t v = 1; v < V; ++v) mx = std::max(mx, row[v]);
      double sum = 0.0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
      nll += -(static_cast<double>(row[window[static_cast<size_t>(t + 1)]]) - mx - std::log(sum));
      ++count;
    }
    std::fprintf(stderr, "[%lld/%lld] ppl so far %.4f\n", static_cast<long long>(w + 1),
                 static_cast<long long>(n_windows), std::exp(nll / static_cast<double>(count)));
  }
  o.runtime.finish();
  std::printf("tokens = %lld\n", static_cast<long long>(count));
  std::printf("ppl = %.4f\n", std::exp(nll / static_cast<double>(count)));
}

}  // namespace

void add_perplexity(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* c = app.add_subcommand("perplexity", "perplexity of a model over a text file");
  c->add_option("-m,--model", o->model, kModelHelp)->required();
  c->add_option("-f,--file", o->file, "text file")->required();
  c->add_option("-c,--ctx-size", o->ctx, "window length in tokens (default: 512, or the model's context if shorter)");
  c->add_option("--chunks", o->chunks, "evaluate at most this many windows (0: all)");
  c->add_option("--tokenizer", o->tokenizer, "tokenizer.bin, tokenizer.json, .gguf or folder");
  c->add_option("-t,--threads", o->threads, "threads (0: all cores)");
  o->runtime.add_to(c);
  c->callback([c, o] {
    o->ctx_given = c->count("-c") > 0;
    run(*o);
  });
}

}  // namespace ascent::cli
