// Model: a loaded checkpoint (any supported format), its graphs and the KV cache of one sequence. forward() runs
// new tokens after those already cached and returns their logits.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ascent/graph/executor.h"
#include "ascent/graph/passes.h"
#include "ascent/model/config.h"
#include "ascent/model/gguf.h"
#include "ascent/model/weights.h"
#include "ascent/prof/tracer.h"

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
  // The KV cache's element type: DType::F32, or DType::F16 (`--kv-type f16`: half the cache's memory and the bytes a
  // decode step's attention reads, each K and V value rounded to f16 as it is stored; needs an even head size).
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

  // Context length of the KV cache (default min(max_seq, 4096)); resets the sequence.
  void set_context(int64_t n_ctx);
  int64_t context() const { return n_ctx_; }

  // Runs tokens at positions n_past()..; returns logits (T, vocab) or, unless all_logits, (1, vocab) for the last.
  std::span<const float> forward(std::span<const int32_t> tokens, bool all_logits);
  int64_t n_past() const { return n_past_; }
  // Runs several new sequences (each from position 0, in caches of its own) as one batch, and returns every
  // row's logits (sum of lengths, vocab), sequence after sequence. The single-sequence cache is untouched.
  std::span<const float> forward_batch(std::span<const std::vector<int32_t>> sequences);
  void reset() { n_past_ = 0; }
  // Keeps the cache's first n positions (0 <= n <= n_past()): the next forward runs at position n and overwrites
  // what followed, as after a rejected draft or an edited turn (ascent bench re-runs a decode step so).
  void rewind(int64_t n);
  int64_t plans_compiled() const;

  // The generation graph before and after the passes (node counts for profiles and tests).
  const graph::Graph& unoptimized_graph() const { return *graph_raw_; }
  const graph::Graph& generation_graph() const { return *graph_last_; }
  const graph::PassOptions& passes() const { return passes_; }
  // Records every executed node from now on (null to stop).
  void set_tracer(prof::Tracer* t);
  // Sees every matmul's weight and input before it runs (quantization calibration); empty to stop.
  void set_matmul_observer(graph::Executor::MatmulObserver f);
  // Compiles the plans of every shape bucket up to max_tokens now (first-token latency moves to start-up).
  void warm_up(int64_t max_tokens);

 private:
  Model() = default;
  // The executor of the graph that keeps every row's logits, built on first use.
  graph::Executor& all_rows_executor();

  std::string path_;
  Format format_ = Format::HuggingFace;
  ModelConfig cfg_;
  WeightSet weights_;
  std::unique_ptr<GgufFile> gguf_;
  EmbeddedTokenizer embedded_tokenizer_;
  std::vector<float> inv_freq_;
  graph::PassOptions passes_;
  prof::Tracer* tracer_ = nullptr;
  graph::Executor::MatmulObserver observer_;
  std::optional<graph::Graph> graph_raw_, graph_last_, graph_all_;
  std::unique_ptr<graph::Executor> exec_last_, exec_all_;
  std::unique_ptr<graph::KvCache> kv_;
  std::vector<std::unique_ptr<graph::KvCache>> batch_kv_;
  int64_t n_ctx_ = 0;
  int64_t n_past_ = 0;
  DType kv_type_ = DType::F32;
};

}  // namespace ascent::model
