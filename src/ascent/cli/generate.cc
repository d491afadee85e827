// ascent generate: text (or ids) from a prompt with any supported model.
#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "ascent/base/error.h"
#include "ascent/base/log.h"
#include "ascent/cli/commands.h"
#include "ascent/cli/runtime_flags.h"
#include "ascent/engine/generator.h"
#include "ascent/model/model_tokenizer.h"
#include "ascent/model/session.h"

namespace ascent::cli {
namespace {

struct Options {
  std::string model, prompt, prompt_ids, tokenizer, logit_bias;
  int64_t n_predict = 128;
  engine::SamplingParams sampling;
  bool print_ids = false;
  int threads = 0;
  RuntimeFlags runtime;
  int64_t ctx = 0;
  bool ctx_given = false;  // -c on the command line (else the prompt and -n, at most the model's context)
};

// "ID:BIAS,ID:BIAS,...". The sampler checks the ranges; this refuses what is not a pair of numbers.
std::vector<std::pair<int32_t, float>> parse_logit_bias(const std::string& text) {
  std::vector<std::pair<int32_t, float>> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t end = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, end - pos);
    const size_t colon = item.find(':');
    int32_t id = 0;
    float bias = 0;
    size_t id_len = 0, bias_len = 0;
    try {
      id = std::stoi(item.substr(0, colon), &id_len);
      bias = std::stof(item.substr(colon + 1), &bias_len);
    } catch (const std::exception&) {
      id_len = bias_len = 0;
    }
    ASCENT_CHECK(colon != std::string::npos && id_len == colon && id_len > 0 && bias_len == item.size() - colon - 1,
                 "--logit-bias: '{}' is not ID:BIAS (e.g. \"15:-100,30:2.5\")", item);
    out.emplace_back(id, bias);
    pos = end + 1;
  }
  return out;
}

void run(Options& o) {
  // The flags' own checks before the model loads (seconds for a large one).
  ASCENT_CHECK(o.prompt.empty() || o.prompt_ids.empty(), "give either -p or --prompt-ids, not both");
  ASCENT_CHECK(o.n_predict >= 0, "-n: must be >= 0, got {}", o.n_predict);
  ASCENT_CHECK(!o.ctx_given || o.ctx >= 0, "-c: must be 0 (the model's context) or more, got {}", o.ctx);
  if (!o.logit_bias.empty()) o.sampling.logit_bias = parse_logit_bias(o.logit_bias);
  engine::Sampler sampler(o.sampling);
  set_threads(o.threads);
  o.runtime.before_load();
  std::vector<int32_t> prompt;
  if (!o.prompt_ids.empty()) prompt = parse_ids(o.prompt_ids, "--prompt-ids");
  auto m = model::Model::load(o.model, o.runtime.load_options());
  model::Session s(*m);
  if (o.ctx_given) check_ctx_flag(o.ctx, m->config().max_seq);
  check_ids_in_vocab(prompt, m->config().vocab, "--prompt-ids");
  for (const auto& [id, bias] : o.sampling.logit_bias) {
    ASCENT_CHECK(id < m->config().vocab, "--logit-bias: token id {} is outside the vocabulary of {} ids", id,
                 m->config().vocab);
  }
  std::unique_ptr<tokenizer::Tokenizer> tok;
  const bool need_tokenizer = !o.prompt.empty() || !o.print_ids;
  try {
    tok = model::load_tokenizer(*m, o.tokenizer);
  } catch (const Error&) {
    if (need_tokenizer) throw;
  }
  if (!o.prompt.empty()) prompt = tok->encode(o.prompt, /*add_special=*/true);
  if (prompt.empty()) prompt.push_back(tok ? tok->bos() : m->config().bos_id);
  // -c 0 is the model's whole context, as in llama.cpp.
  const int64_t want = !o.ctx_given ? static_cast<int64_t>(prompt.size()) + o.n_predict
                       : o.ctx == 0 ? m->config().max_seq
                                    : o.ctx;
  s.set_context(std::min<int64_t>(std::max<int64_t>(want, 1), m->config().max_seq));

  o.runtime.after_load(s);
  tokenizer::Utf8Stream stream;
  int32_t prev = prompt.back();
  // The tokenizer's eos, and every end id the model's files list (Llama 3.x Instruct ends turns with <|eot_id|>).
  std::vector<int32_t> stop{tok ? tok->eos() : m->config().eos_id};
  stop.insert(stop.end(), m->config().end_ids.begin(), m->config().end_ids.end());
  engine::GenerateStats stats;
  auto out = engine::generate(
      s, prompt, o.n_predict, sampler, stop,
      [&](int32_t id) {
        if (o.print_ids || !tok) return;
        const bool strip = prev == tok->bos() && tok->vocab().kind == tokenizer::VocabKind::Spm;
        const std::string text = stream.push(tok->decode_token(id, strip));
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
        prev = id;
      },
      &stats);
  if (o.print_ids) {
    std::string line;
    for (int32_t id : prompt) line += std::to_string(id) + " ";
    for (int32_t id : out) line += std::to_string(id) + " ";
    if (!line.empty()) line.pop_back();
    std::printf("%s\n", line.c_str());
  } else {
    const std::string rest = stream.flush();
    std::printf("%s\n", rest.c_str());
  }
  std::fflush(stdout);  // the text ends before the speed line on a shared terminal
  o.runtime.finish();
  std::fprintf(stderr, "prompt: %lld tokens, %.1f t/s | generated: %lld tokens, %.1f t/s\n",
               static_cast<long long>(stats.prompt_tokens),
               stats.prompt_seconds > 0 ? stats.prompt_tokens / stats.prompt_seconds : 0.0,
               static_cast<long long>(stats.generated_tokens),
               stats.generate_seconds > 0 ? stats.generated_tokens / stats.generate_seconds : 0.0);
  // Fewer tokens than -n asked for, and not for an end of text: say so rather than stop without a word.
  if (stats.context_full) {
    log::warn("stopped at the context length of {} positions: {} of the {} tokens -n asked for", s.context(),
              stats.generated_tokens, o.n_predict);
  }
}

}  // namespace

void add_generate(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* c = app.add_subcommand("generate", "generate text from a prompt");
  c->add_option("-m,--model", o->model, kModelHelp)->required();
  c->add_option("-p,--prompt", o->prompt, "prompt text");
  c->add_option("--prompt-ids", o->prompt_ids, "prompt as token ids, e.g. \"1 2 3\"");
  c->add_option("-n,--n-predict", o->n_predict, "tokens to generate")->capture_default_str();
  c->add_option("--temp", o->sampling.temperature, "temperature (0: greedy)")->capture_default_str();
  c->add_option("--top-k", o->sampling.top_k, "top-k (0: off)")->capture_default_str();
  c->add_option("--top-p", o->sampling.top_p, "top-p (1: off)")->capture_default_str();
  c->add_option("--min-p", o->sampling.min_p, "min-p (0: off)")->capture_default_str();
  c->add_option("--repeat-penalty", o->sampling.repeat_penalty, "repetition penalty (1: off)")->capture_default_str();
  c->add_option("--repeat-last-n", o->sampling.repeat_last_n, "tokens the penalty looks back (-1: all)")
      ->capture_default_str();
  c->add_option("--presence-penalty", o->sampling.presence_penalty,
                "subtracted once from each generated token's logit (OpenAI's; in [-2, 2])")
      ->capture_default_str();
  c->add_option("--frequency-penalty", o->sampling.frequency_penalty,
                "subtracted per occurrence from each generated token's logit (OpenAI's; in [-2, 2])")
      ->capture_default_str();
  c->add_option("--logit-bias", o->logit_bias, "added to the logits of the ids named, e.g. \"15:-100,30:2.5\"");
  c->add_option("--seed", o->sampling.seed, "random seed")->capture_default_str();
  c->add_option("--tokenizer", o->tokenizer, "tokenizer.bin, tokenizer.json, .gguf or folder");
  c->add_option("-c,--ctx-size", o->ctx, "context length (0: the model's; default: prompt + n, at most the model's)");
  c->add_flag("--print-ids", o->print_ids, "print the prompt and generated ids on one line instead of text");
  c->add_option("-t,--threads", o->threads, "threads (0: all cores)");
  o->runtime.add_to(c);
  c->callback([c, o] {
    o->ctx_given = c->count("-c") > 0;
    run(*o);
  });
}

}  // namespace ascent::cli
