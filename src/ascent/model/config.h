// A decoder-only transformer's hyper-parameters, in one struct for every supported architecture, with the
// fields each source format fills (config.json, GGUF metadata, llama2.c header).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ascent/kernels/op_attrs.h"

namespace ascent::model {

enum class Arch { Llama, Mistral, Qwen2, Qwen3, Gpt2 };

const char* arch_name(Arch a);

struct Llama3RopeScaling {
  bool enabled = false;
  double factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 4.0, original_max_position = 8192;
};

struct ModelConfig {
  Arch arch = Arch::Llama;
  int64_t vocab = 0, dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, ffn_dim = 0;
  int64_t max_seq = 2048;
  float norm_eps = 1e-5f;
  double rope_theta = 10000.0;
  RopeStyle rope_style = RopeStyle::Half;
  Llama3RopeScaling rope_scaling;
  int64_t sliding_window = 0;            // 0: full causal attention
  int64_t sliding_from_layer = 0;        // layers before it attend fully (Qwen2/Qwen3's max_window_layers)
  std::vector<float> rope_freq_factors;  // GGUF rope_freqs.weight: inv_freq[i] is divided by factor i
  bool tied_embeddings = false;
  int32_t bos_id = 1, eos_id = 2;
  // Every id the model's files name as ending generation where they name more than eos_id: an HF eos_token_id list
  // (Llama 3.1 Instruct's <|end_of_text|>, <|eom_id|>, <|eot_id|>; eos_id is its first) and generation_config.json's
  // ids, as transformers stops on any of them. Empty for a single eos.
  std::vector<int32_t> end_ids;

  bool uses_layer_norm() const { return arch == Arch::Gpt2; }
  // Layer l's attention window (0: full causal).
  int64_t window_of(int64_t l) const { return l >= sliding_from_layer ? sliding_window : 0; }
  bool uses_rope() const { return arch != Arch::Gpt2; }
};

// The inverse frequencies (head_dim / 2,) HF computes for this config, Llama-3 scaling included.
std::vector<float> rope_inv_freq(const ModelConfig& c);

// Checks ranges and divisibility; throws "SOURCE: field: problem".
void validate_config(const ModelConfig& c, const std::string& source);
// Fails naming source and field unless 0 <= id < c.vocab. The loaders check each id a file names at the load, rather
// than first at the embedding lookup (bos) or never (an end id that cannot be sampled). The defaults of a file that
// names none (GPT-2's 50256) are left alone, as a small test model's vocabulary need not hold them.
void check_token_id(const ModelConfig& c, int64_t id, const char* field, const std::string& source);

}  // namespace ascent::model
