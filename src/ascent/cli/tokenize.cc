// ascent tokenize: ids (or pieces) of a text under a model's or a vocabulary file's tokenizer.
#include <chrono>
#include <cstdio>

#include "ascent/base/error.h"
#include "ascent/base/read_file.h"
#include "ascent/cli/commands.h"
#include "ascent/model/model_tokenizer.h"

namespace ascent::cli {
namespace {

struct Options {
  std::string model, vocab, prompt, text_file, separator;
  bool pieces = false, add_special = false, parse_special = false, decode = false, timing = false;
};

void run(const Options& o) {
  ASCENT_CHECK(o.model.empty() != o.vocab.empty(), "give exactly one of -m and --vocab");
  // Both given, one would be dropped without a word.
  ASCENT_CHECK(o.prompt.empty() || o.text_file.empty(), "give either -p or --text-file, not both");
  std::unique_ptr<tokenizer::Tokenizer> tok;
  if (!o.vocab.empty()) {
    tokenizer::Vocab v = model::load_vocab(o.vocab, 0);
    // The tokenizer's own checks (its pre-tokenizer regex compiles) name the file they came from.
    tok = with_context(o.vocab, [&] { return std::make_unique<tokenizer::Tokenizer>(std::move(v)); });
  } else {
    auto m = model::Model::load(o.model, {.repack = false});  // only its tokenizer is needed
    tok = model::load_tokenizer(*m, "");
  }
  std::string text = o.prompt;
  if (!o.text_file.empty()) {
    text = read_file(o.text_file);
  }
  // With --separator, the input holds many texts (or, with --decode, one line of ids per text): one run, one
  // vocabulary load, one output line (or text) per input.
  std::vector<std::string> parts;
  if (o.separator.empty()) {
    parts.push_back(text);
  } else {
    const std::string sep = o.decode ? "\n" : o.separator;
    size_t start = 0;
    for (size_t at; (at = text.find(sep, start)) != std::string::npos; start = at + sep.size()) {
      parts.push_back(text.substr(start, at - start));
    }
    parts.push_back(text.substr(start));
  }
  const auto t0 = std::chrono::steady_clock::now();
  size_t n_ids = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (o.decode) {
      const auto ids = parse_ids(parts[i], o.text_file.empty() ? "-p" : o.text_file.c_str());
      for (int32_t id : ids) {
        ASCENT_CHECK(id < tok->size(), "token id {} is outside the vocabulary (size {})", id, tok->size());
      }
      const std::string out = (i > 0 ? o.separator : "") + tok->decode(ids);
      std::fwrite(out.data(), 1, out.size(), stdout);
      continue;
    }
    const auto ids = with_context(o.text_file.empty() ? "-p" : o.text_file,
                                  [&] { return tok->encode(parts[i], o.add_special, o.parse_special); });
    n_ids += ids.size();
    if (o.timing) continue;
    std::string line;
    for (int32_t id : ids) line += (o.pieces ? tok->piece(id) : std::to_string(id)) + " ";
    if (!line.empty()) line.pop_back();
    std::printf("%s\n", line.c_str());
  }
  if (o.timing) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("encoded %zu bytes into %zu tokens in %.3f s: %.2f MB/s\n", text.size(), n_ids, s,
                static_cast<double>(text.size()) / s / 1e6);
  }
}

}  // namespace

void add_tokenize(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* c = app.add_subcommand("tokenize", "print the token ids of a text");
  c->add_option("-m,--model", o->model, "model whose tokenizer to use");
  c->add_option("--vocab", o->vocab, ".gguf, tokenizer.json, tokenizer.bin or folder");
  c->add_option("-p,--prompt", o->prompt, "text");
  c->add_option("--text-file", o->text_file, "read the text from a file");
  c->add_flag("--pieces", o->pieces, "print pieces instead of ids");
  c->add_flag("--add-special", o->add_special,
              "add the special tokens the vocabulary adds: its BOS, and any after the text");
  c->add_flag("--parse-special", o->parse_special, "turn special-token text into special tokens");
  c->add_option("--separator", o->separator, "the input holds many texts split by this string; one line each");
  c->add_flag("--timing", o->timing, "print encode speed instead of the ids (the vocabulary load is not timed)");
  c->add_flag("--decode", o->decode, "the input is token ids: print their text (exact bytes, no newline)");
  c->callback([o] { run(*o); });
}

}  // namespace ascent::cli
