// Ascent's quantized model file: a safetensors container that any safetensors reader can list. It holds
//   - plain tensors (F32/F16/BF16) under their canonical GGUF-style names ("blk.0.attn_norm.weight");
//   - each I8/I4 matrix NAME as three entries:
//     NAME, the U8 offset-binary codes in tensor/dtype.h's layout (I8 (N, row bytes), rows padded; I4 (blocks of 16
//     rows, bytes per block));
//     NAME.scale (F32; I8 (N,), I4 (blocks, groups, 16));
//     NAME.input_scale (F32, (K,)), in activation-aware models only;
//   - the tokenizer's own file as the U8 tensor "ascent.tokenizer";
//   - __metadata__ strings:
//     "format" = "ascent";
//     "ascent.version" = 2 (version 1 stored int4 row-major: such files load unless they hold int4);
//     "ascent.config", the model config as JSON;
//     "ascent.quant", the one format of every linear layer (int8, int4, bf16);
//     "ascent.tensors", JSON name -> {type, shape, group};
//     "ascent.tokenizer_kind" (tokenizer.json, tokenizer.bin, gguf; empty without a tokenizer): which reader the
//     loader gives the embedded tokenizer.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "ascent/model/config.h"
#include "ascent/model/weights.h"

namespace ascent::model {

struct AscentFileInfo {
  std::string quant;           // int8, int4 or bf16
  std::string tokenizer_kind;  // empty when the file holds no tokenizer
};

// True when PATH is a safetensors file whose metadata says format "ascent"; throws ascent::Error naming PATH when its
// header cannot be read (too short, a length past the end, not a JSON object).
bool is_ascent_file(const std::string& path);

void write_ascent_model(const ModelConfig& cfg, const WeightSet& w, const std::string& quant,
                        std::span<const char> tokenizer, const std::string& tokenizer_kind, const std::string& path);

// Reads config and weights (views into the mapping); `tokenizer` receives the embedded tokenizer bytes (a view
// valid while w holds the file). The file is mapped and every tensor used in place. Every field is checked: a
// corrupted or truncated file fails naming the file and the tensor or field at fault.
AscentFileInfo read_ascent_model(const std::string& path, ModelConfig& cfg, WeightSet& w,
                                 std::span<const uint8_t>& tokenizer);

}  // namespace ascent::model
