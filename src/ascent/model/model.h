// Model: a loaded checkpoint (any supported format) and its generation graph. Immutable once loaded, so any number
// of sequences and threads share it: what belongs to a sequence (its KV cache, positions, sampler) and what belongs to
// a thread running the graph (an executor's arena and plans) lives outside, in a Session (session.h) for one
// sequence or in the serving engine (engine/engine.h) for many.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ascent/graph/ir.h"
#include "ascent/graph/passes.h"
#include "ascent/model/config.h"
#include "ascent/model/gguf.h"
#include "ascent/model/weights.h"

namespace ascent::model {

enum class Format { HuggingFace, Gguf, Llama2c, Ascent };
const char* format_name(Format f);

// The tokenizer file an Ascent quantized model carries (model/ascent_file.h), a view into the mapped model.
struct EmbeddedTokenizer {
  std::span<const uint8_t> bytes;
  std::string kind;  // tokenizer.json, tokenizer.bin or gguf
};

// How Model::load treats the weights.
struct LoadOptions {
  // Q8_0, Q4_0, Q4_K and Q6_K matrices are copied, once, into the layouts the AVX-512 kernels read faster
  // (kernels/cpu/packed_formats.h) when those kernels run (Q4_0, Q4_K, Q6_K also for the AVX2 kernels). false
  // (`--no-repack`) keeps every matrix in the file's layout, used in place from the mapping: resident memory grows only
  // with the pages decode touches, the page cache is shared between processes, and decode and prefill run the slower
  // kernels.
  bool repack = true;
  // The matrices the load copies (repacked ones; with --no-mmap, every integer or GGUF matmul weight) are placed by
  // thread (weight_layout.h): each decode thread's rows of every matmul one after another, for the thread count the
  // global pool has at load. false (`--no-thread-layout`) keeps each matrix in one piece.
  bool thread_layout = true;
  // The KV cache's element type sessions and the engine use unless told otherwise: DType::F32, or DType::F16
  // (`--kv-type f16`: half the cache's memory and the bytes a decode step's attention reads, each K and V value rounded
  // to f16 as it is stored; needs an even head size).
  DType kv_type = DType::F32;
  // Every weight's values are read once before the load goes on, and one that is not finite (check_weights.h) fails
  // it, naming the tensor and the position (`--check-tensors`). Reads the whole file: off by default, as in llama.cpp.
  bool check_tensors = false;
};

class Model {
 public:
  // PATH: an HF folder (or a .safetensors file inside one), a .gguf file or a llama2.c .bin. Errors name the file
  // and the fault.
  static std::unique_ptr<Model> load(const std::string& path, LoadOptions options = {});

  const ModelConfig& config() const { return cfg_; }
  const WeightSet& weights() const { return weights_; }
  const std::string& path() const { return path_; }
  Format format() const { return format_; }
  // The parsed GGUF header when the model came from a GGUF file (its vocabulary lives there).
  const GgufFile* gguf() const { return gguf_.get(); }
  const EmbeddedTokenizer& embedded_tokenizer() const { return embedded_tokenizer_; }
  int64_t parameter_count() const;

  // The context a session gets unless told otherwise: the model's positions, at most 4096.
  int64_t default_context() const;
  // Refuses a context of n_ctx positions (not positive, or past GPT-2's learned positions), naming `what`.
  void check_context(int64_t n_ctx, const char* what) const;
  DType kv_type() const { return kv_type_; }
  // K and V values per position per layer (n_kv_heads x head_dim).
  int64_t kv_width() const { return cfg_.n_kv_heads * cfg_.head_dim; }

  // The generation graph before and after the passes (node counts for profiles and tests). Executors run the latter.
  const graph::Graph& unoptimized_graph() const { return *graph_raw_; }
  const graph::Graph& generation_graph() const { return *graph_; }
  const graph::PassOptions& passes() const { return passes_; }

 private:
  Model() = default;

  std::string path_;
  Format format_ = Format::HuggingFace;
  ModelConfig cfg_;
  WeightSet weights_;
  std::unique_ptr<GgufFile> gguf_;
  EmbeddedTokenizer embedded_tokenizer_;
  std::vector<float> inv_freq_;
  graph::PassOptions passes_;
  std::optional<graph::Graph> graph_raw_, graph_;
  DType kv_type_ = DType::F32;
};

}  // namespace ascent::model
