#include "ascent/model/config.h"

#include <cmath>

#include "ascent/base/error.h"

namespace ascent::model {

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::Llama:
      return "llama";
    case Arch::Mistral:
      return "mistral";
    case Arch::Qwen2:
      return "qwen2";
    case Arch::Qwen3:
      return "qwen3";
    case Arch::Gpt2:
      return "gpt2";
  }
  return "?";
}

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  const int64_t D = c.head_dim;
  std::vector<float> inv(static_cast<size_t>(D / 2));
  for (int64_t i = 0; i < D / 2; ++i) {
    // HF: 1 / base ** (arange(0, D, 2).float() / D), in f32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(D);
    inv[static_cast<size_t>(i)] = 1.0f / std::pow(static_cast<float>(c.rope_theta), exponent);
  }
  if (!c.rope_freq_factors.empty()) {
    for (size_t i = 0; i < inv.size() && i < c.rope_freq_factors.size(); ++i) inv[i] /= c.rope_freq_factors[i];
    return inv;
  }
  if (!c.rope_scaling.enabled) return inv;
  const auto& s = c.rope_scaling;
  const double low_wavelen = s.original_max_position / s.low_freq_factor;
  const double high_wavelen = s.original_max_position / s.high_freq_factor;
  for (auto& f : inv) {
    const double wavelen = 2.0 * M_PI / f;
    if (wavelen < high_wavelen) continue;  // high frequencies are kept
    if (wavelen > low_wavelen) {
      f = static_cast<float>(f / s.factor);
    } else {
      const double smooth =
          (s.original_max_position / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = static_cast<float>((1.0 - smooth) * f / s.factor + smooth * f);
    }
  }
  return inv;
}

void check_token_id(const ModelConfig& c, int64_t id, const char* field, const std::string& source) {
  ASCENT_CHECK(id >= 0 && id < c.vocab, "{}: {} {} is not a token id (the vocabulary has {})", source, field, id,
               c.vocab);
}

void validate_config(const ModelConfig& c, const std::string& source) {
  auto positive = [&](int64_t v, const char* field) {
    ASCENT_CHECK(v > 0 && v < (int64_t{1} << 31), "{}: {} must be a positive integer, got {}", source, field, v);
  };
  positive(c.vocab, "vocab_size");
  positive(c.dim, "hidden_size");
  positive(c.n_layers, "num_hidden_layers");
  positive(c.n_heads, "num_attention_heads");
  positive(c.n_kv_heads, "num_key_value_heads");
  positive(c.head_dim, "head_dim");
  positive(c.ffn_dim, "intermediate_size");
  positive(c.max_seq, "max_position_embeddings");
  ASCENT_CHECK(c.n_heads % c.n_kv_heads == 0, "{}: num_attention_heads {} is not a multiple of num_key_value_heads {}",
               source, c.n_heads, c.n_kv_heads);
  ASCENT_CHECK(c.head_dim % 2 == 0 || !c.uses_rope(), "{}: head_dim {} must be even for rotary embeddings", source,
               c.head_dim);
  ASCENT_CHECK(c.norm_eps > 0 && c.norm_eps < 1, "{}: norm epsilon {} is out of range", source, c.norm_eps);
  ASCENT_CHECK(c.sliding_window >= 0, "{}: sliding_window {} must be 0 (none) or positive", source, c.sliding_window);
  ASCENT_CHECK(c.sliding_from_layer == 0 || (c.sliding_from_layer > 0 && c.sliding_from_layer < c.n_layers),
               "{}: the sliding window's first layer {} is not one of the {} layers", source, c.sliding_from_layer,
               c.n_layers);
  ASCENT_CHECK(std::isfinite(c.rope_theta) && c.rope_theta > 0, "{}: rope_theta {} must be positive and finite", source,
               c.rope_theta);
  // rope_inv_freq divides by these. A factor list of the wrong length would apply to its first entries only, and a zero
  // or a NaN would make every position's rotation NaN without an error.
  if (!c.rope_freq_factors.empty()) {
    ASCENT_CHECK(static_cast<int64_t>(c.rope_freq_factors.size()) == c.head_dim / 2,
                 "{}: {} rope frequency factors for head_dim {} (expected {})", source, c.rope_freq_factors.size(),
                 c.head_dim, c.head_dim / 2);
    for (size_t i = 0; i < c.rope_freq_factors.size(); ++i) {
      ASCENT_CHECK(std::isfinite(c.rope_freq_factors[i]) && c.rope_freq_factors[i] > 0,
                   "{}: rope frequency factor {} is {}, not positive and finite", source, i, c.rope_freq_factors[i]);
    }
  }
  if (c.rope_scaling.enabled) {
    const auto& s = c.rope_scaling;
    auto positive_real = [&](double v, const char* field) {
      ASCENT_CHECK(std::isfinite(v) && v > 0, "{}: rope_scaling.{} {} must be positive and finite", source, field, v);
    };
    positive_real(s.factor, "factor");
    positive_real(s.low_freq_factor, "low_freq_factor");
    positive_real(s.original_max_position, "original_max_position_embeddings");
    ASCENT_CHECK(std::isfinite(s.high_freq_factor) && s.high_freq_factor > s.low_freq_factor,
                 "{}: rope_scaling.high_freq_factor {} must be finite and above low_freq_factor {}", source,
                 s.high_freq_factor, s.low_freq_factor);
  }
}

}  // namespace ascent::model
