// Quantizes a loaded model into Ascent's format (model/ascent_file.h). Every linear layer's matrix (attention,
// feed-forward, output head) becomes int8 (per row), int4 (per group; activation-aware with calibration text) or bf16.
// Token embeddings become f16 (bf16 for --type bf16); norms and biases stay f32. Reports each matrix's error.
#pragma once

#include <functional>
#include <string>

#include "ascent/model/model.h"

namespace ascent::model {

struct QuantizeOptions {
  std::string type;        // int8, int4, bf16
  int group = 128;         // int4 group size: 32, 64 or 128
  std::string calib_path;  // text file for activation-aware int4 (empty: round to nearest)
  int64_t calib_tokens = 2048;
  std::string tokenizer_path;  // tokenizer for the calibration text and to embed (default: the model's own)
};

struct LayerReport {
  std::string name;
  Shape shape;
  std::string format;         // "int8", "int4 g128", "bf16"
  double weight_err = 0.0;    // || W - Wq || / || W ||
  double out_err_rtn = -1.0;  // with calibration: relative output error, round to nearest
  double out_err = -1.0;      // ... and with the activation-aware choice
  float alpha = 0.0f;
};

// True for the names of matrices the graph multiplies by (not embeddings).
bool is_linear_weight(const std::string& name);

// Throws, naming the flag, when the options cannot go together or the calibration text cannot be read: the checks
// quantize_model makes first, for a caller to make before it loads the model.
void check_quantize_options(const QuantizeOptions& opt);

void quantize_model(Model& m, const QuantizeOptions& opt, const std::string& out,
                    const std::function<void(const LayerReport&)>& report);

}  // namespace ascent::model
