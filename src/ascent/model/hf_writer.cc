#include "ascent/model/hf_writer.h"

#include <filesystem>
#include <map>

#include "ascent/base/atomic_write.h"
#include "ascent/base/error.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace ascent::model {

json hf_config_json(const ModelConfig& c) {
  json j;
  if (c.arch == Arch::Gpt2) {
    j = {{"architectures", {"GPT2LMHeadModel"}},
         {"model_type", "gpt2"},
         {"vocab_size", c.vocab},
         {"n_embd", c.dim},
         {"n_layer", c.n_layers},
         {"n_head", c.n_heads},
         {"n_inner", c.ffn_dim},
         {"n_positions", c.max_seq},
         {"n_ctx", c.max_seq},
         {"layer_norm_epsilon", c.norm_eps},
         {"activation_function", "gelu_new"},
         {"tie_word_embeddings", true}};
  } else {
    static const std::map<Arch, std::pair<const char*, const char*>> names = {
        {Arch::Llama, {"llama", "LlamaForCausalLM"}},
        {Arch::Mistral, {"mistral", "MistralForCausalLM"}},
        {Arch::Qwen2, {"qwen2", "Qwen2ForCausalLM"}},
        {Arch::Qwen3, {"qwen3", "Qwen3ForCausalLM"}}};
    const auto& [type, cls] = names.at(c.arch);
    j = {{"architectures", {cls}},
         {"model_type", type},
         {"vocab_size", c.vocab},
         {"hidden_size", c.dim},
         {"num_hidden_layers", c.n_layers},
         {"num_attention_heads", c.n_heads},
         {"num_key_value_heads", c.n_kv_heads},
         {"head_dim", c.head_dim},
         {"intermediate_size", c.ffn_dim},
         {"max_position_embeddings", c.max_seq},
         {"rms_norm_eps", c.norm_eps},
         {"rope_theta", c.rope_theta},
         {"hidden_act", "silu"},
         {"attention_bias", c.arch == Arch::Qwen2},
         {"tie_word_embeddings", c.tied_embeddings}};
    ASCENT_CHECK(c.rope_style == RopeStyle::Half,
                 "writing a Hugging Face folder: this model's Q and K rows are in GGUF's interleaved RoPE order");
    ASCENT_CHECK(!c.rope_scaling.enabled && c.sliding_window == 0 && c.rope_freq_factors.empty(),
                 "writing a Hugging Face config with rope scaling or a sliding window is not supported");
  }
  j["bos_token_id"] = c.bos_id;
  j["eos_token_id"] = c.eos_id;
  j["torch_dtype"] = "float32";
  return j;
}

namespace {

Tensor transposed(const Tensor& t) {
  const int64_t R = t.shape[0], C = t.shape[1];
  Tensor out = make_owned(DType::F32, {C, R});
  auto* d = static_cast<float*>(const_cast<void*>(out.data));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) d[c * R + r] = t.f32()[r * C + c];
  return out;
}

// Rows of a, b and c stacked: (Ra + Rb + Rc, ...), or the vectors joined.
Tensor stacked(const Tensor& a, const Tensor& b, const Tensor& c) {
  Shape s = a.shape;
  s[0] = a.shape[0] + b.shape[0] + c.shape[0];
  Tensor out = make_owned(DType::F32, s);
  auto* d = static_cast<float*>(const_cast<void*>(out.data));
  for (const Tensor* t : {&a, &b, &c}) d = std::copy(t->f32(), t->f32() + t->numel(), d);
  return out;
}

}  // namespace

std::vector<std::pair<std::string, Tensor>> hf_tensors(const ModelConfig& c, const WeightSet& w) {
  std::vector<std::pair<std::string, Tensor>> out;
  auto get = [&](const std::string& n) -> const Tensor& {
    const Tensor* t = w.find(n);
    ASCENT_CHECK(t != nullptr, "writing a Hugging Face folder: tensor {} is missing", n);
    ASCENT_CHECK(t->dtype == DType::F32, "writing a Hugging Face folder: tensor {} is {}, not f32", n,
                 dtype_name(t->dtype));
    return *t;
  };
  auto opt = [&](const std::string& from, const std::string& to) {
    if (w.has(from)) out.emplace_back(to, get(from));
  };
  if (c.arch == Arch::Gpt2) {
    out.emplace_back("wte.weight", get("token_embd.weight"));
    out.emplace_back("wpe.weight", get("position_embd.weight"));
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".", h = "h." + std::to_string(l) + ".";
      out.emplace_back(h + "ln_1.weight", get(b + "attn_norm.weight"));
      out.emplace_back(h + "ln_1.bias", get(b + "attn_norm.bias"));
      out.emplace_back(h + "attn.c_attn.weight", transposed(stacked(get(b + "attn_q.weight"), get(b + "attn_k.weight"),
                                                                    get(b + "attn_v.weight"))));
      out.emplace_back(h + "attn.c_attn.bias",
                       stacked(get(b + "attn_q.bias"), get(b + "attn_k.bias"), get(b + "attn_v.bias")));
      out.emplace_back(h + "attn.c_proj.weight", transposed(get(b + "attn_output.weight")));
      out.emplace_back(h + "attn.c_proj.bias", get(b + "attn_output.bias"));
      out.emplace_back(h + "ln_2.weight", get(b + "ffn_norm.weight"));
      out.emplace_back(h + "ln_2.bias", get(b + "ffn_norm.bias"));
      out.emplace_back(h + "mlp.c_fc.weight", transposed(get(b + "ffn_up.weight")));
      out.emplace_back(h + "mlp.c_fc.bias", get(b + "ffn_up.bias"));
      out.emplace_back(h + "mlp.c_proj.weight", transposed(get(b + "ffn_down.weight")));
      out.emplace_back(h + "mlp.c_proj.bias", get(b + "ffn_down.bias"));
    }
    out.emplace_back("ln_f.weight", get("output_norm.weight"));
    out.emplace_back("ln_f.bias", get("output_norm.bias"));
    return out;
  }
  out.emplace_back("model.embed_tokens.weight", get("token_embd.weight"));
  static const std::pair<const char*, const char*> per_layer[] = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_v.bias", "self_attn.v_proj.bias"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"},
      {"attn_k_norm.weight", "self_attn.k_norm.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
  };
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".", h = "model.layers." + std::to_string(l) + ".";
    for (const auto& [from, to] : per_layer) opt(b + from, h + to);
  }
  out.emplace_back("model.norm.weight", get("output_norm.weight"));
  if (!c.tied_embeddings) out.emplace_back("lm_head.weight", get("output.weight"));
  return out;
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const json& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    ASCENT_CHECK(t.dtype == DType::F32, "{}: tensor {} is {}, only f32 is written", path, name, dtype_name(t.dtype));
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * 4;
    header[name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  const uint64_t n = h.size();
  char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  AtomicFile f(path);
  f.write({len, 8});
  f.write({h.data(), h.size()});
  for (const auto& [name, t] : tensors) {
    f.write({static_cast<const char*>(t.data), static_cast<size_t>(t.numel()) * 4});
  }
  f.commit();
}

void write_hf_model(const ModelConfig& c, const WeightSet& w, const std::string& dir) {
  const std::string config = hf_config_json(c).dump(2) + "\n";
  json gen = {{"bos_token_id", c.bos_id}, {"eos_token_id", c.eos_id}};
  const std::string generation = gen.dump(2) + "\n";
  write_safetensors((fs::path(dir) / "model.safetensors").string(), hf_tensors(c, w), {{"format", "pt"}});
  write_file_atomic((fs::path(dir) / "config.json").string(), {std::span<const char>(config)});
  write_file_atomic((fs::path(dir) / "generation_config.json").string(), {std::span<const char>(generation)});
}

}  // namespace ascent::model
