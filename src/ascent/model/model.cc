#include "ascent/model/model.h"

#include <filesystem>

#include "ascent/base/error.h"
#include "ascent/base/thread_pool.h"
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
  m->graph_raw_.emplace(build_transformer(m->cfg_, m->weights_, m->inv_freq_, /*all_logits=*/false));
  m->graph_last_.emplace(graph::optimize(*m->graph_raw_, m->passes_));
  const PlaceOptions place{.repack = options.repack,
                           .copied = MappedFile::copies_files(),
                           .by_thread = options.thread_layout,
                           .threads = ThreadPool::global().size()};
  place_weights(m->weights_, graph::matmul_calls(*m->graph_last_), place);
  m->exec_last_ = std::make_unique<graph::Executor>(*m->graph_last_, m->passes_);
  m->kv_type_ = options.kv_type;  // set_context's KvCache refuses any type but f32 and f16
  m->set_context(std::min<int64_t>(m->cfg_.max_seq, 4096));
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

void Model::set_context(int64_t n_ctx) {
  ASCENT_CHECK(n_ctx > 0, "context length must be positive, got {}", n_ctx);
  if (cfg_.arch == Arch::Gpt2) {
    ASCENT_CHECK(n_ctx <= cfg_.max_seq, "context length {} exceeds the model's {} learned positions", n_ctx,
                 cfg_.max_seq);
  }
  n_ctx_ = n_ctx;
  kv_ = std::make_unique<graph::KvCache>(static_cast<int>(cfg_.n_layers), n_ctx, cfg_.n_kv_heads * cfg_.head_dim,
                                         kv_type_);
  batch_kv_.clear();  // forward_batch makes new ones of the new length
  n_past_ = 0;
}

std::span<const float> Model::forward_batch(std::span<const std::vector<int32_t>> sequences) {
  graph::Executor& ex = all_rows_executor();
  while (batch_kv_.size() < sequences.size()) {
    batch_kv_.push_back(std::make_unique<graph::KvCache>(static_cast<int>(cfg_.n_layers), n_ctx_,
                                                         cfg_.n_kv_heads * cfg_.head_dim, kv_type_));
  }
  std::vector<graph::Executor::Segment> segs;
  for (size_t i = 0; i < sequences.size(); ++i) segs.push_back({sequences[i], 0, batch_kv_[i].get()});
  return ex.run_batch(segs);
}

graph::Executor& Model::all_rows_executor() {
  if (!graph_all_) {
    graph_all_.emplace(graph::optimize(build_transformer(cfg_, weights_, inv_freq_, /*all_logits=*/true), passes_));
    exec_all_ = std::make_unique<graph::Executor>(*graph_all_, passes_);
    exec_all_->set_tracer(tracer_);
    exec_all_->set_matmul_observer(observer_);
  }
  return *exec_all_;
}

std::span<const float> Model::forward(std::span<const int32_t> tokens, bool all_logits) {
  graph::Executor& ex = all_logits ? all_rows_executor() : *exec_last_;
  auto out = ex.run(tokens, n_past_, *kv_);
  n_past_ += static_cast<int64_t>(tokens.size());
  return out;
}

void Model::rewind(int64_t n) {
  ASCENT_CHECK(n >= 0 && n <= n_past_, "rewind to position {}: only {} positions are cached", n, n_past_);
  n_past_ = n;
}

void Model::set_matmul_observer(graph::Executor::MatmulObserver f) {
  observer_ = std::move(f);
  exec_last_->set_matmul_observer(observer_);
  if (exec_all_) exec_all_->set_matmul_observer(observer_);
}

void Model::set_tracer(prof::Tracer* t) {
  tracer_ = t;
  exec_last_->set_tracer(t);
  if (exec_all_) exec_all_->set_tracer(t);
}

void Model::warm_up(int64_t max_tokens) {
  exec_last_->warm_up(std::min(max_tokens, n_ctx_));
}

int64_t Model::plans_compiled() const {
  return exec_last_->plans_compiled() + (exec_all_ ? exec_all_->plans_compiled() : 0);
}

}  // namespace ascent::model
