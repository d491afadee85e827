// ascent convert: writes any supported model as GGUF (f32, f16, bf16, q8_0 or q4_0 matrices).
#include <cstdio>

#include "ascent/base/error.h"
#include "ascent/cli/commands.h"
#include "ascent/model/check_weights.h"
#include "ascent/model/loaders.h"
#include "ascent/model/model.h"

namespace ascent::cli {
namespace {

void run(const std::string& in, const std::string& out, const std::string& type) {
  check_output_name(out, ".gguf");
  check_output_folder(out);
  const DType dtype = with_context("--type", [&] { return parse_dtype(type); });
  model::Format format;
  model::ModelConfig cfg;
  model::WeightSet w;
  std::unique_ptr<model::GgufFile> gguf;
  model::read_checkpoint(in, format, cfg, w, gguf);
  model::check_weight_values(w);  // a NaN or infinite weight is refused by name, not carried into the new file
  model::write_gguf_model(cfg, w, dtype, out);
  std::printf("wrote %s (%s)\n", out.c_str(), std::string(dtype_name(dtype)).c_str());
}

}  // namespace

void add_convert(CLI::App& app) {
  auto in = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto type = std::make_shared<std::string>("f16");
  auto* c = app.add_subcommand("convert", "convert a model to GGUF");
  c->add_option("-m,--model", *in, kModelHelp)->required();
  c->add_option("-o,--output", *out, "output .gguf")->required();
  c->add_option("--type", *type, "f32, f16, bf16, q8_0 or q4_0")->capture_default_str();
  c->callback([in, out, type] { run(*in, *out, *type); });
}

}  // namespace ascent::cli
