#include "ascent/model/model.h"

#include <filesystem>

#include "ascent/base/error.h"
#include "ascent/base/thread_pool.h"
#include "ascent/graph/kv_cache.h"
#include "ascent/graph/passes.h"
#include "ascent/kernels/cpu/isa.h"
#include "ascent/model/ascent_file.h"
#include "ascent/model/check_weights.h"
#include "ascent/model/loaders.h"
#include "ascent/model/transformer.h"
#include "ascent/model/weight_layout.h"

namespace ascent::model {

namespace fs = std::filesystem;

const char* format_name(Format f) {
  switch (f) {
    case Format::HuggingFace:
      return "huggingface";
    case Format::Gguf:
      return "gguf";
    case Format::Llama2c:
      return "llama2.c";
    case Format::Ascent:
      return "ascent";
  }
  return "?";
}

std::string read_checkpoint(const std::string& path, Format& format, ModelConfig& cfg, WeightSet& w,
                            std::unique_ptr<GgufFile>& gguf, EmbeddedTokenizer* embedded) {
  std::error_code ec;
  ASCENT_CHECK(fs::exists(path, ec), "{}: no such file or directory", path);
  std::string source = path;
  if (fs::is_directory(path, ec)) {
    format = Format::HuggingFace;
  } else if (fs::path(path).extension() == ".safetensors" && is_ascent_file(path)) {
    format = Format::Ascent;
  } else if (fs::path(path).extension() == ".safetensors") {
    format = Format::HuggingFace;
    const fs::path parent = fs::path(path).parent_path();
    source = parent.empty() ? fs::path(".").string() : parent.string();
    ASCENT_CHECK(fs::exists(fs::path(source) / "config.json", ec),
                 "{}: not an Ascent file (its metadata has no format \"ascent\") and not in a Hugging Face folder "
                 "({} has no config.json)",
                 path, source);
  } else {
    // A .gguf name is taken at its word, so a damaged magic is reported as such rather than as a bad llama2.c file.
    const bool gguf_name = fs::path(path).extension() == ".gguf";
    format = gguf_name || has_gguf_magic(path) ? Format::Gguf : Format::Llama2c;
  }
  w = WeightSet(source);
  switch (format) {
    case Format::HuggingFace:
      load_hf(source, cfg, w);
      break;
    case Format::Gguf:
      gguf = std::make_unique<GgufFile>(path);
      load_gguf(*gguf, cfg, w);
      break;
    case Format::Llama2c:
      load_llama2c(path, cfg, w);
      break;
    case Format::Ascent: {
      std::span<const uint8_t> tokenizer;
      const AscentFileInfo info = read_ascent_model(path, cfg, w, tokenizer);
      if (embedded != nullptr) {
        embedded->bytes = tokenizer;
        embedded->kind = info.tokenizer_kind;
      }
      break;
    }
  }
  return source;
}

std::unique_ptr<Model> Model::load(const std::string& path, LoadOptions options) {
  // The environment's kernel variant and passes are read once, at their first use. Read them before the checkpoint
  // (seconds for a large model), so that a bad ASCENT_ISA or ASCENT_PASSES fails at once and in its own words, not
  // under the name of the graph node that first ran a kernel.
  kernels::active_isa();
  graph::default_passes();
  std::unique_ptr<Model> m(new Model());
  m->path_ = path;
  read_checkpoint(path, m->format_, m->cfg_, m->weights_, m->gguf_, &m->embedded_tokenizer_);
  if (options.check_tensors) check_weight_values(m->weights_);  // in the file's layouts, before any is repacked
  // Before the weights are finalized and placed (seconds for a large model): the SIMD attention reads f16 keys only
  // as key tiles, which need an even head size (graph::KvCache::k_tiles).
  ASCENT_CHECK(options.kv_type != DType::F16 || graph::KvCache::k_tiles(m->cfg_.head_dim),
               "{}: an f16 KV cache needs an even head size; this model's is {}", path, m->cfg_.head_dim);
  finalize_weights(m->cfg_, m->weights_);
  if (m->cfg_.uses_rope()) m->inv_freq_ = rope_inv_freq(m->cfg_);
  m->passes_ = graph::default_passes();
  // Build the generation graph now so that missing or mis-shaped tensors are reported at load time; it names the
  // order in which a decode step's matmuls read their weights, in which the load then repacks and places them. The
  // graph holds pointers to the WeightSet's tensors, which place_weights replaces in place.
  m->graph_raw_.emplace(build_transformer(m->cfg_, m->weights_, m->inv_freq_));
  m->graph_.emplace(graph::optimize(*m->graph_raw_, m->passes_));
  const PlaceOptions place{.repack = options.repack,
                           .copied = MappedFile::copies_files(),
                           .by_thread = options.thread_layout,
                           .threads = ThreadPool::global().size()};
  place_weights(m->weights_, graph::matmul_calls(*m->graph_), place);
  ASCENT_CHECK(options.kv_type == DType::F32 || options.kv_type == DType::F16, "{}: a KV cache of {} is not f32 or f16",
               path, dtype_name(options.kv_type));
  m->kv_type_ = options.kv_type;
  return m;
}

int64_t Model::parameter_count() const {
  int64_t n = 0;
  const Tensor* out = weights_.find("output.weight");
  const Tensor* emb = weights_.find("token_embd.weight");
  for (const auto& [name, t] : weights_.all()) {
    if (name == "output.weight" && out && emb && out->data == emb->data) continue;  // tied: count once
    n += t.numel();
  }
  return n;
}

int64_t Model::default_context() const {
  return std::min<int64_t>(cfg_.max_seq, 4096);
}

void Model::check_context(int64_t n_ctx, const char* what) const {
  ASCENT_CHECK(n_ctx > 0, "{}: the context length must be positive, got {}", what, n_ctx);
  if (cfg_.arch == Arch::Gpt2) {
    ASCENT_CHECK(n_ctx <= cfg_.max_seq, "{}: context length {} exceeds the model's {} learned positions", what, n_ctx,
                 cfg_.max_seq);
  }
}

}  // namespace ascent::model
