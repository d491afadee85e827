// GGUF <-> (ModelConfig, WeightSet): reading llama.cpp's metadata keys and tensor names, and writing them back.
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "ascent/base/error.h"
#include "ascent/base/log.h"
#include "ascent/model/check_weights.h"
#include "ascent/model/loaders.h"
#include "ascent/model/model_tokenizer.h"

namespace ascent::model {
namespace {

const char* gguf_arch(Arch a) {
  switch (a) {
    case Arch::Llama:
    case Arch::Mistral:
      return "llama";  // llama.cpp runs Mistral as llama
    case Arch::Qwen2:
      return "qwen2";
    case Arch::Qwen3:
      return "qwen3";
    case Arch::Gpt2:
      return "gpt2";
  }
  return "?";
}

// Reorders the rows of a (H*D, K) projection (or an (H*D,) bias) from rotate-half to interleaved pairs: GGUF row
// (h, 2i + a) is HF row (h, a * D/2 + i).
Tensor permute_for_interleaved_rope(const Tensor& t, int64_t heads) {
  const Tensor f = to_f32(t);
  const int64_t R = t.shape[0], K = t.shape.size() == 2 ? t.shape[1] : 1, D = R / heads, half = D / 2;
  Tensor out = make_owned(DType::F32, t.shape);
  auto* dst = static_cast<float*>(const_cast<void*>(out.data));
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t a = 0; a < 2; ++a) {
        const float* src = f.f32() + (h * D + a * half + i) * K;
        std::copy(src, src + K, dst + (h * D + 2 * i + a) * K);
      }
    }
  }
  // Back to the source's type where rows can be written in it. An Ascent int8/int4 or K-quant matrix has no row writer:
  // it stays f32, and the caller converts it to the output type.
  return t.dtype == DType::F32 || !quantize_row_writes(t.dtype) ? out : convert(out, t.dtype);
}

// Whether a and b hold the same values in the same type and shape (a tied model's embedding and its output copy).
bool same_tensor(const Tensor& a, const Tensor& b) {
  if (a.dtype != b.dtype || a.shape != b.shape) return false;
  return a.data == b.data || std::memcmp(a.data, b.data, static_cast<size_t>(a.nbytes())) == 0;
}

}  // namespace

void load_gguf(const GgufFile& f, ModelConfig& cfg, WeightSet& w) {
  const std::string arch = f.get_string("general.architecture");
  if (arch == "llama") {
    cfg.arch = Arch::Llama;
    cfg.rope_style = RopeStyle::Interleaved;
  } else if (arch == "qwen2" || arch == "qwen3") {
    cfg.arch = arch == "qwen2" ? Arch::Qwen2 : Arch::Qwen3;
    cfg.rope_style = RopeStyle::Half;
  } else if (arch == "gpt2") {
    cfg.arch = Arch::Gpt2;
  } else {
    fail("{}: general.architecture '{}' is not supported (llama, qwen2, qwen3, gpt2)", f.path(), arch);
  }
  const std::string p = arch + ".";
  cfg.dim = f.get_int(p + "embedding_length");
  cfg.n_layers = f.get_int(p + "block_count");
  cfg.ffn_dim = f.get_int(p + "feed_forward_length");
  cfg.n_heads = f.get_int(p + "attention.head_count");
  cfg.n_kv_heads = f.get_int(p + "attention.head_count_kv", cfg.n_heads);
  cfg.max_seq = f.get_int(p + "context_length", 2048);
  // Mixtral-style files keep arch llama and add experts; said so here rather than as a missing ffn tensor.
  const int64_t experts = f.get_int(p + "expert_count", 0);
  ASCENT_CHECK(experts == 0, "{}: metadata {}expert_count {}: mixture-of-experts models are not supported", f.path(), p,
               experts);
  ASCENT_CHECK(cfg.n_heads > 0, "{}: metadata {}attention.head_count must be positive", f.path(), p);
  cfg.head_dim = f.get_int(p + "attention.key_length", cfg.dim / cfg.n_heads);
  cfg.norm_eps = static_cast<float>(cfg.arch == Arch::Gpt2 ? f.get_float(p + "attention.layer_norm_epsilon", 1e-5)
                                                           : f.get_float(p + "attention.layer_norm_rms_epsilon", 1e-5));
  cfg.rope_theta = f.get_float(p + "rope.freq_base", 10000.0);
  // What llama.cpp's RoPE can do and ours does not is refused, rather than run into other logits:
  // - rotating only the first rope.dimension_count dimensions of a head (ours rotates the whole head);
  // - linear and YaRN scaling (rope.scaling.type, or the older rope.scale_linear), which change every position's
  //   angles.
  // llama3's scaling comes as the rope_freqs.weight tensor, read below.
  if (cfg.uses_rope()) {
    const int64_t n_rot = f.get_int(p + "rope.dimension_count", cfg.head_dim);
    ASCENT_CHECK(n_rot == cfg.head_dim,
                 "{}: metadata {}rope.dimension_count {} is not the head size {}: partial rotary embeddings are not "
                 "supported",
                 f.path(), p, n_rot, cfg.head_dim);
    const std::string scaling = f.get_string(p + "rope.scaling.type", "none");
    ASCENT_CHECK(scaling == "none", "{}: metadata {}rope.scaling.type '{}' is not supported (none)", f.path(), p,
                 scaling);
    const double linear = f.get_float(p + "rope.scale_linear", 1.0);
    ASCENT_CHECK(linear == 1.0, "{}: metadata {}rope.scale_linear {} is not supported (1)", f.path(), p, linear);
  }
  cfg.sliding_window = f.get_int(p + "attention.sliding_window", 0);
  cfg.bos_id = static_cast<int32_t>(f.get_int("tokenizer.ggml.bos_token_id", cfg.arch == Arch::Gpt2 ? 50256 : 1));
  cfg.eos_id = static_cast<int32_t>(f.get_int("tokenizer.ggml.eos_token_id", cfg.arch == Arch::Gpt2 ? 50256 : 2));
  // llama.cpp's converter names Llama 3 Instruct's <|eot_id|> (3.1's <|eom_id|>) in these keys; generation ends on
  // them as on eos (config.h: end_ids).
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    const auto id = static_cast<int32_t>(f.get_int(key, -1));
    if (id < 0 || id == cfg.eos_id || std::find(cfg.end_ids.begin(), cfg.end_ids.end(), id) != cfg.end_ids.end())
      continue;
    if (cfg.end_ids.empty()) cfg.end_ids.push_back(cfg.eos_id);
    cfg.end_ids.push_back(id);
  }

  for (const auto& info : f.tensors()) {
    if (info.name == "rope_freqs.weight") {
      const Tensor t = to_f32(f.tensor(info));
      cfg.rope_freq_factors.assign(t.f32(), t.f32() + t.numel());
      continue;
    }
    w.add(info.name, f.tensor(info), f.path());
  }
  const Tensor* embd = w.find("token_embd.weight");
  ASCENT_CHECK(embd != nullptr, "{}: missing tensor token_embd.weight", f.path());
  ASCENT_CHECK(embd->shape.size() == 2, "{}: tensor token_embd.weight has shape {}, expected 2-D", f.path(),
               shape_str(embd->shape));
  cfg.vocab = embd->shape[0];
  cfg.tied_embeddings = !w.has("output.weight");
  validate_config(cfg, f.path());
  for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                          "tokenizer.ggml.eom_token_id"}) {
    // Read as the loader reads them (int32); -1 (0xffffffff) is llama.cpp's "no such token".
    const auto id = static_cast<int32_t>(f.get_int(key, -1));
    if (id != -1) check_token_id(cfg, id, key, f.path());
  }
  w.keep_file(f.file());
}

void finalize_weights(const ModelConfig& cfg, WeightSet& w) {
  if (!w.has("token_embd.weight") && w.has("output.weight") && cfg.tied_embeddings) {
    w.add("token_embd.weight", *w.find("output.weight"), w.file_of("output.weight"));
  }
  if (!w.has("output.weight") && w.has("token_embd.weight")) {
    w.add("output.weight", *w.find("token_embd.weight"), w.file_of("token_embd.weight"));
  }
  if (cfg.arch == Arch::Gpt2) {
    // Split the fused QKV projection into three row views so every architecture shares one graph.
    const int64_t C = cfg.dim;
    for (int64_t l = 0; l < cfg.n_layers; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".";
      for (const char* kind : {"weight", "bias"}) {
        const std::string name = b + "attn_qkv." + kind;
        const Tensor* t = w.find(name);
        if (t == nullptr) continue;  // the graph builder reports what is missing
        Tensor fused = kind == std::string("bias") && t->dtype != DType::F32 ? to_f32(*t) : *t;
        // A scalar (safetensors allows one) has no rows to split: its first dimension was read from an empty shape.
        ASCENT_CHECK(!fused.shape.empty() && fused.shape[0] == 3 * C, "{}: tensor {} has shape {}, expected {} rows",
                     w.file_of(name), name, shape_str(fused.shape), 3 * C);
        const int64_t row_bytes = fused.shape.size() == 2 ? storage_bytes(fused.dtype, fused.shape[1]) : 4;
        const char* parts[3] = {"attn_q.", "attn_k.", "attn_v."};
        for (int i = 0; i < 3; ++i) {
          Tensor part = fused;
          part.shape[0] = C;
          part.data = static_cast<const uint8_t*>(fused.data) + i * C * row_bytes;
          w.add(b + parts[i] + kind, part, w.file_of(name));
        }
        w.remove(name);
      }
    }
  }
  for (const auto& [name, t] : w.all()) {
    if (t.shape.size() == 1 && t.dtype != DType::F32) w.replace(name, to_f32(t));
  }
}

void write_gguf_model(const ModelConfig& cfg, const WeightSet& w, DType dtype, const std::string& path,
                      const FoundVocab* vocab) {
  GgufWriter out;
  const std::string arch = gguf_arch(cfg.arch);
  const std::string p = arch + ".";
  out.set_string("general.architecture", arch);
  out.set_string("general.name", "ascent-converted");
  out.set_u32("general.alignment", 32);
  out.set_u32(p + "context_length", static_cast<uint32_t>(cfg.max_seq));
  out.set_u32(p + "embedding_length", static_cast<uint32_t>(cfg.dim));
  out.set_u32(p + "block_count", static_cast<uint32_t>(cfg.n_layers));
  out.set_u32(p + "feed_forward_length", static_cast<uint32_t>(cfg.ffn_dim));
  out.set_u32(p + "attention.head_count", static_cast<uint32_t>(cfg.n_heads));
  out.set_u32(p + "attention.head_count_kv", static_cast<uint32_t>(cfg.n_kv_heads));
  if (cfg.head_dim * cfg.n_heads != cfg.dim) {
    out.set_u32(p + "attention.key_length", static_cast<uint32_t>(cfg.head_dim));
    out.set_u32(p + "attention.value_length", static_cast<uint32_t>(cfg.head_dim));
  }
  if (cfg.arch == Arch::Gpt2) {
    out.set_f32(p + "attention.layer_norm_epsilon", cfg.norm_eps);
  } else {
    out.set_f32(p + "attention.layer_norm_rms_epsilon", cfg.norm_eps);
    out.set_f32(p + "rope.freq_base", static_cast<float>(cfg.rope_theta));
    out.set_u32(p + "rope.dimension_count", static_cast<uint32_t>(cfg.head_dim));
  }
  // GGUF's key gives every layer the window: a model whose first layers attend fully has no way to say so.
  ASCENT_CHECK(cfg.sliding_from_layer == 0,
               "{}: the sliding window applies from layer {} on (max_window_layers); GGUF's attention.sliding_window "
               "would apply it to every layer",
               path, cfg.sliding_from_layer);
  if (cfg.sliding_window > 0) out.set_u32(p + "attention.sliding_window", static_cast<uint32_t>(cfg.sliding_window));
  // The vocabulary first: the model's own end and start ids below replace any it names, as generation stops on them.
  if (vocab != nullptr && !vocab->from.empty()) add_gguf_vocab(out, *vocab, cfg.vocab, path);
  // Only ids the vocabulary holds (a GGUF's are checked when it loads): a small GPT-2 whose config names none has
  // the default 50256, past its vocabulary, and the file then names none either.
  for (const auto& [key, id] :
       {std::pair{"tokenizer.ggml.bos_token_id", cfg.bos_id}, std::pair{"tokenizer.ggml.eos_token_id", cfg.eos_id}}) {
    if (id >= 0 && id < cfg.vocab) out.set_u32(key, static_cast<uint32_t>(id));
  }
  // The other end ids (an eos_token_id list: Llama 3.1 Instruct's <|eom_id|> and <|eot_id|>) in llama.cpp's two keys
  // for them, which its loader and ours both stop on. Which one is the turn's end the list does not say: the first
  // goes to eot, the second to eom. A third has no key, so the file is refused rather than written without it.
  std::vector<int32_t> extra;
  for (int32_t id : cfg.end_ids) {
    if (id != cfg.eos_id && std::find(extra.begin(), extra.end(), id) == extra.end()) extra.push_back(id);
  }
  ASCENT_CHECK(extra.size() <= 2,
               "{}: the model ends generation on {} ids besides eos {}; GGUF has keys for two (eot, eom)", path,
               extra.size(), cfg.eos_id);
  for (size_t i = 0; i < extra.size(); ++i) {
    out.set_u32(i == 0 ? "tokenizer.ggml.eot_token_id" : "tokenizer.ggml.eom_token_id",
                static_cast<uint32_t>(extra[i]));
  }

  const bool permute = arch == "llama" && cfg.rope_style == RopeStyle::Half;
  std::vector<Tensor> keep;                // converted tensors must outlive the writer's write()
  std::set<std::string_view> requantized;  // the rounded source types rounded again into another one
  for (const auto& [name, t] : w.all()) {
    std::string out_name = name;
    if (cfg.tied_embeddings && name == "output.weight") {
      // HF files that keep only lm_head for tied embeddings give it as the embedding. Where both are kept, the output
      // matrix is dropped only if it is the embedding's copy. An Ascent file quantizes it apart (int8, int4): writing
      // the embedding in its place would change every logit (by 0.5% RMS for int8, 7% for int4).
      if (!w.has("token_embd.weight")) {
        out_name = "token_embd.weight";
      } else if (same_tensor(t, *w.find("token_embd.weight"))) {
        continue;
      }
    }
    Tensor src = t;
    if (permute && name.find(".attn_q.") != std::string::npos) src = permute_for_interleaved_rope(t, cfg.n_heads);
    if (permute && name.find(".attn_k.") != std::string::npos) src = permute_for_interleaved_rope(t, cfg.n_kv_heads);
    DType target = t.shape.size() == 1 ? DType::F32 : dtype;
    if (is_quantized(target) && src.cols() % kQBlock != 0) {
      log::warn("{}: rows of {} are not a multiple of {}; stored as f16", name, src.cols(), kQBlock);
      target = DType::F16;
    }
    if (is_quantized(target) && is_rounded(t.dtype) && t.dtype != target) {
      requantized.insert(dtype_name(t.dtype));
    }
    if (src.dtype != target) {
      src = convert(src, target);
      // The source is finite (convert checks it first), but f16 and the f16 block scales of q8_0 and q4_0 end at
      // 65504: a larger value (block maximum over 127 or 8) would be written as an infinity.
      if (const auto bad = first_nonfinite(src)) {
        fail(
            "{}: tensor {}: {} once rounded to {}: a value of the source is past that type's range (--type bf16 or "
            "f32 keeps it)",
            path, out_name, *bad, dtype_name(target));
      }
    }
    keep.push_back(src);
    out.add_tensor(out_name, keep.back());
  }
  if (!cfg.rope_freq_factors.empty() || (cfg.rope_scaling.enabled && cfg.uses_rope())) {
    ModelConfig plain = cfg;
    plain.rope_scaling.enabled = false;
    plain.rope_freq_factors.clear();
    const auto base = rope_inv_freq(plain), scaled = rope_inv_freq(cfg);
    Tensor factors = make_owned(DType::F32, {static_cast<int64_t>(base.size())});
    auto* d = static_cast<float*>(const_cast<void*>(factors.data));
    for (size_t i = 0; i < base.size(); ++i) d[i] = base[i] / scaled[i];
    keep.push_back(factors);
    out.add_tensor("rope_freqs.weight", keep.back());
  }
  // llama.cpp's quantize refuses this without --allow-requantize; here it is said once.
  if (!requantized.empty()) {
    log::warn(
        "{}: {} matrices requantized to {}: their rounding compounds; convert the original model for the best "
        "copy",
        path, fmt::join(requantized, ", "), dtype_name(dtype));
  }
  out.write(path);
}

}  // namespace ascent::model
