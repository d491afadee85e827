// ascent tokenize: ids (or pieces) of a text under a model's or a vocabulary file's tokenizer.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "ascent/base/error.h"
#include "ascent/cli/commands.h"
#include "ascent/model/model_tokenizer.h"

namespace ascent::cli {
namespace {

struct Options {
  std::string model, vocab, prompt, text_file;
  bool pieces = false, add_special = false, parse_special = false;
};

void run(const Options& o) {
  ASCENT_CHECK(o.model.empty() != o.vocab.empty(), "give exactly one of -m and --vocab");
  std::unique_ptr<tokenizer::Tokenizer> tok;
  if (!o.vocab.empty()) {
    tok = std::make_unique<tokenizer::Tokenizer>(model::load_vocab(o.vocab, 0));
  } else {
    auto m = model::Model::load(o.model);
    tok = model::load_tokenizer(*m, "");
  }
  std::string text = o.prompt;
  if (!o.text_file.empty()) {
    std::ifstream in(o.text_file, std::ios::binary);
    ASCENT_CHECK(in.good(), "{}: cannot open", o.text_file);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  const auto ids = tok->encode(text, o.add_special && tok->vocab().add_bos, o.parse_special);
  std::string line;
  for (int32_t id : ids) line += (o.pieces ? tok->piece(id) : std::to_string(id)) + " ";
  if (!line.empty()) line.pop_back();
  std::printf("%s\n", line.c_str());
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
  c->add_flag("--add-special", o->add_special, "add BOS as the vocabulary says");
  c->add_flag("--parse-special", o->parse_special, "turn special-token text into special tokens");
  c->callback([o] { run(*o); });
}

}  // namespace ascent::cli
