// ascent convert: writes any supported model as GGUF (f32, f16, bf16, q8_0 or q4_0 matrices) with its vocabulary, so
// that llama.cpp loads the file alone.
#include <cstdio>

#include "ascent/base/error.h"
#include "ascent/cli/commands.h"
#include "ascent/model/check_weights.h"
#include "ascent/model/loaders.h"
#include "ascent/model/model.h"
#include "ascent/model/model_tokenizer.h"

namespace ascent::cli {
namespace {

void run(const std::string& in, const std::string& out, const std::string& type, const std::string& tokenizer) {
  check_output_name(out, ".gguf");
  check_output_folder(out);
  const DType dtype = with_context("--type", [&] { return parse_dtype(type); });
  model::Format format;
  model::ModelConfig cfg;
  model::WeightSet w;
  std::unique_ptr<model::GgufFile> gguf;
  model::EmbeddedTokenizer embedded;
  const std::string source = model::read_checkpoint(in, format, cfg, w, gguf, &embedded);
  model::check_weight_values(w);  // a NaN or infinite weight is refused by name, not carried into the new file
  const model::FoundVocab vocab = model::find_vocab({.format = format,
                                                     .path = in,
                                                     .source = source,
                                                     .vocab_size = cfg.vocab,
                                                     .gguf = gguf.get(),
                                                     .embedded = &embedded},
                                                    tokenizer, /*parse_gguf=*/false);
  model::write_gguf_model(cfg, w, dtype, out, &vocab);
  std::printf("wrote %s (%s)\n", out.c_str(), std::string(dtype_name(dtype)).c_str());
  if (vocab.from.empty()) {
    std::printf("note: %s holds no vocabulary (%s); llama.cpp will need one\n", out.c_str(), vocab.missing.c_str());
  }
}

}  // namespace

void add_convert(CLI::App& app) {
  auto in = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto type = std::make_shared<std::string>("f16");
  auto tokenizer = std::make_shared<std::string>();
  auto* c = app.add_subcommand("convert", "convert a model to GGUF");
  c->add_option("-m,--model", *in, kModelHelp)->required();
  c->add_option("-o,--output", *out, "output .gguf")->required();
  c->add_option("--type", *type, "f32, f16, bf16, q8_0 or q4_0")->capture_default_str();
  c->add_option("--tokenizer", *tokenizer, "vocabulary to embed (default: the model's own)");
  c->callback([in, out, type, tokenizer] { run(*in, *out, *type, *tokenizer); });
}

}  // namespace ascent::cli
