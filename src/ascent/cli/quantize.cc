// ascent quantize: writes Ascent's quantized model (int8, int4 or bf16 matrices in a safetensors container) and
// prints each matrix's quantization error.
#include <cstdio>

#include "ascent/base/error.h"
#include "ascent/cli/commands.h"
#include "ascent/model/model.h"
#include "ascent/model/quantize_model.h"

namespace ascent::cli {
namespace {

void run(const std::string& in, const std::string& out, const model::QuantizeOptions& opt) {
  check_output_name(out, ".safetensors");
  check_output_folder(out);
  // Read once, row by row: no decode to place for. A weight that is not finite would quantize to a NaN scale (int8,
  // int4) or stay NaN (bf16): refused here, by name, rather than written.
  auto m = model::Model::load(in, {.thread_layout = false, .check_tensors = true});
  std::printf("%-28s %-14s %-9s %10s %s\n", "tensor", "shape", "format", "weight err",
              opt.calib_path.empty() ? "" : "output err: nearest -> calibrated (alpha)");
  double sum = 0.0;
  int n = 0;
  model::quantize_model(*m, opt, out, [&](const model::LayerReport& r) {
    std::printf("%-28s %-14s %-9s %10.5f", r.name.c_str(), shape_str(r.shape).c_str(), r.format.c_str(), r.weight_err);
    if (r.out_err >= 0) std::printf("   %.5f -> %.5f (%.2f)", r.out_err_rtn, r.out_err, r.alpha);
    std::printf("\n");
    std::fflush(stdout);
    sum += r.weight_err;
    ++n;
  });
  std::printf("wrote %s: %d matrices as %s, mean weight error %.5f\n", out.c_str(), n, opt.type.c_str(),
              n > 0 ? sum / n : 0.0);
}

}  // namespace

void add_quantize(CLI::App& app) {
  auto in = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto opt = std::make_shared<model::QuantizeOptions>();
  opt->type = "int8";
  auto* c = app.add_subcommand("quantize", "quantize a model's matrices to int8, int4 or bf16 (Ascent format)");
  c->add_option("-m,--model", *in, kModelHelp)->required();
  c->add_option("-o,--output", *out, "output .safetensors")->required();
  c->add_option("--type", opt->type, "int8, int4 or bf16")->capture_default_str();
  c->add_option("--group", opt->group, "int4 group size: 32, 64 or 128")->capture_default_str();
  c->add_option("--calib", opt->calib_path, "text file: activation-aware int4 (AWQ-style scale and clip search)");
  c->add_option("--calib-tokens", opt->calib_tokens, "calibration tokens to use")->capture_default_str();
  c->add_option("--tokenizer", opt->tokenizer_path, "tokenizer for calibration and to embed (default: the model's)");
  c->callback([c, in, out, opt] {
    // --group has a default, so a given one with another type would otherwise be dropped without a word.
    if (c->count("--group") > 0 && opt->type != "int4") {
      throw CLI::ValidationError("--group",
                                 "applies to --type int4 only; int8 keeps one scale per output row and bf16 "
                                 "none (for int8 in blocks of 32, `ascent convert --type q8_0` writes GGUF "
                                 "Q8_0, which runs natively)");
    }
    // Before the model loads (seconds for a large one) and before the report's header: a bad combination is a usage
    // error (exit 2) that names its flag.
    try {
      model::check_quantize_options(*opt);
    } catch (const Error& e) {
      throw CLI::ValidationError(e.what());
    }
    run(*in, *out, *opt);
  });
}

}  // namespace ascent::cli
