// One reader per model source format. Each fills a ModelConfig and a WeightSet with canonical tensor names and
// leaves shape checking to the graph builder; finalize_weights() then brings every format to the same form.
#pragma once

#include <string>

#include <memory>
#include "ascent/model/config.h"
#include "ascent/model/gguf.h"
#include "ascent/model/weights.h"

namespace ascent::model {

// A Hugging Face folder's config.json, and generation_config.json's end ids where the folder has one.
void read_hf_config(const std::string& dir, ModelConfig& cfg);
// A Hugging Face folder: config.json plus model.safetensors or model.safetensors.index.json with shards.
void load_hf(const std::string& dir, ModelConfig& cfg, WeightSet& w);
// A GGUF file with llama, qwen2, qwen3 or gpt2 architecture metadata.
void load_gguf(const GgufFile& f, ModelConfig& cfg, WeightSet& w);
// A llama2.c checkpoint (.bin: 7 int32 header, then f32 weights).
void load_llama2c(const std::string& path, ModelConfig& cfg, WeightSet& w);

enum class Format;
struct EmbeddedTokenizer;
// Detects the format of PATH and runs its reader (no post-processing). `gguf` receives the parsed GGUF header
// when the file is one, `embedded` (if not null) an Ascent file's tokenizer. Returns the folder or file that the
// tensors came from.
std::string read_checkpoint(const std::string& path, Format& format, ModelConfig& cfg, WeightSet& w,
                            std::unique_ptr<GgufFile>& gguf, EmbeddedTokenizer* embedded = nullptr);

// Common post-processing: ties embeddings, splits GPT-2's fused QKV into views, converts norm weights and biases
// to f32 (they are small and the kernels read them as f32).
void finalize_weights(const ModelConfig& cfg, WeightSet& w);

struct FoundVocab;
// Writes cfg and w as a GGUF file llama.cpp can load, with matrices stored as `dtype` (1-D tensors stay f32), and the
// vocabulary when one was found (model_tokenizer.h: add_gguf_vocab). Llama and Mistral Q/K rows are permuted to
// GGUF's interleaved RoPE layout, as llama.cpp's converter does.
void write_gguf_model(const ModelConfig& cfg, const WeightSet& w, DType dtype, const std::string& path,
                      const FoundVocab* vocab = nullptr);

}  // namespace ascent::model
