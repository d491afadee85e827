// Hugging Face folders: config.json gives the architecture and sizes, tensors come from model.safetensors or
// the shards listed in model.safetensors.index.json, renamed to canonical GGUF-style names on the way in.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <set>
#include <type_traits>

#include "ascent/base/error.h"
#include "ascent/base/json_file.h"
#include "ascent/base/json_number.h"
#include "ascent/model/loaders.h"
#include "ascent/model/safetensors.h"

namespace ascent::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

template <class T>
T field(const json& j, const std::string& path, const char* key) {
  ASCENT_CHECK(j.contains(key) && !j[key].is_null(), "{}: missing field {}", path, key);
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // nlohmann's get<int> truncates 1.5 to 1, which then surfaced as a tensor shape error far from its cause, and
    // wraps what T cannot hold (an eos_token_id of 2^63 became 0, a valid id).
    ASCENT_CHECK(j[key].is_number_integer(), "{}: field {} must be an integer, got {}", path, key, j[key].dump());
    ASCENT_CHECK(json_integer_in<T>(j[key]), "{}: field {} {} is out of range", path, key, j[key].dump());
  }
  try {
    return j[key].get<T>();
  } catch (const json::exception&) {
    fail("{}: field {} has the wrong type", path, key);
  }
}

template <class T>
T field_or(const json& j, const std::string& path, const char* key, T dflt) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  return field<T>(j, path, key);
}

// An eos_token_id list: a non-empty list of integers.
std::vector<int32_t> eos_list(const json& ids, const std::string& path) {
  bool ok = !ids.empty();
  for (const json& id : ids) ok = ok && id.is_number_integer();
  ASCENT_CHECK(ok, "{}: field eos_token_id must be an integer or a non-empty list of integers, got {}", path,
               ids.dump());
  std::vector<int32_t> out;
  for (const json& id : ids) out.push_back(json_int32(id, fmt::format("{}: field eos_token_id", path)));
  return out;
}

// generation_config.json's end ids (an integer or a list), where the folder has one, added to the config's: what
// transformers' generate stops on.
void add_generation_eos(const std::string& dir, ModelConfig& c) {
  const std::string path = (fs::path(dir) / "generation_config.json").string();
  if (!fs::exists(path)) return;
  const json j = read_json_file(path);
  if (!j.is_object() || !j.contains("eos_token_id") || j["eos_token_id"].is_null()) return;
  const json& e = j["eos_token_id"];
  std::vector<int32_t> ids;
  if (e.is_array()) {
    ids = eos_list(e, path);
  } else {
    ids.push_back(field<int32_t>(j, path, "eos_token_id"));
  }
  for (int32_t id : ids) {
    check_token_id(c, id, "eos_token_id", path);
    if (std::find(c.end_ids.begin(), c.end_ids.end(), id) == c.end_ids.end()) c.end_ids.push_back(id);
  }
}

void parse_config(const json& j, const std::string& path, ModelConfig& c) {
  const std::string type = field<std::string>(j, path, "model_type");
  if (type == "llama") {
    c.arch = Arch::Llama;
  } else if (type == "mistral") {
    c.arch = Arch::Mistral;
  } else if (type == "qwen2") {
    c.arch = Arch::Qwen2;
  } else if (type == "qwen3") {
    c.arch = Arch::Qwen3;
  } else if (type == "gpt2") {
    c.arch = Arch::Gpt2;
  } else {
    fail("{}: model_type '{}' is not supported (llama, mistral, qwen2, qwen3, gpt2)", path, type);
  }
  c.vocab = field<int64_t>(j, path, "vocab_size");
  c.bos_id = field_or<int32_t>(j, path, "bos_token_id", c.arch == Arch::Gpt2 ? 50256 : 1);
  if (j.contains("eos_token_id") && j["eos_token_id"].is_array()) {
    // A list (Llama 3's several end tokens): the first is eos_id, every one ends generation.
    c.end_ids = eos_list(j["eos_token_id"], path);
    c.eos_id = c.end_ids[0];
  } else {
    c.eos_id = field_or<int32_t>(j, path, "eos_token_id", c.arch == Arch::Gpt2 ? 50256 : 2);
  }
  if (c.arch == Arch::Gpt2) {
    c.dim = field<int64_t>(j, path, "n_embd");
    c.n_layers = field<int64_t>(j, path, "n_layer");
    c.n_heads = c.n_kv_heads = field<int64_t>(j, path, "n_head");
    c.ffn_dim = field_or<int64_t>(j, path, "n_inner", 4 * c.dim);
    c.max_seq = field_or<int64_t>(j, path, "n_positions", 1024);
    c.norm_eps = field_or<float>(j, path, "layer_norm_epsilon", 1e-5f);
    const std::string act = field_or<std::string>(j, path, "activation_function", "gelu_new");
    ASCENT_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh", "{}: activation_function '{}' is not supported", path,
                 act);
    c.tied_embeddings = true;
    ASCENT_CHECK(c.n_heads > 0 && c.dim % c.n_heads == 0, "{}: n_embd {} is not a multiple of n_head {}", path, c.dim,
                 c.n_heads);
    c.head_dim = c.dim / c.n_heads;
  } else {
    c.dim = field<int64_t>(j, path, "hidden_size");
    c.n_layers = field<int64_t>(j, path, "num_hidden_layers");
    c.n_heads = field<int64_t>(j, path, "num_attention_heads");
    c.n_kv_heads = field_or<int64_t>(j, path, "num_key_value_heads", c.n_heads);
    c.ffn_dim = field<int64_t>(j, path, "intermediate_size");
    c.max_seq = field_or<int64_t>(j, path, "max_position_embeddings", 2048);
    c.norm_eps = field_or<float>(j, path, "rms_norm_eps", 1e-6f);
    c.rope_theta = field_or<double>(j, path, "rope_theta", 10000.0);
    c.tied_embeddings = field_or<bool>(j, path, "tie_word_embeddings", false);
    ASCENT_CHECK(c.n_heads > 0, "{}: num_attention_heads must be positive", path);
    // Without head_dim, transformers takes hidden_size // num_attention_heads; a remainder means a damaged config.
    // Named as such, not as head_dim 0, a field the file does not have.
    ASCENT_CHECK(j.contains("head_dim") || c.dim % c.n_heads == 0,
                 "{}: hidden_size {} is not a multiple of num_attention_heads {} (and there is no head_dim)", path,
                 c.dim, c.n_heads);
    c.head_dim = field_or<int64_t>(j, path, "head_dim", c.dim / c.n_heads);
    // Rotary over part of each head (Phi, StableLM) is no architecture here: refused, not ignored.
    const double rotary = field_or<double>(j, path, "partial_rotary_factor", 1.0);
    ASCENT_CHECK(rotary == 1.0, "{}: partial_rotary_factor {} is not supported (rotary over the whole head)", path,
                 rotary);
    const std::string act = field_or<std::string>(j, path, "hidden_act", "silu");
    ASCENT_CHECK(act == "silu", "{}: hidden_act '{}' is not supported (silu)", path, act);
    if (c.arch == Arch::Mistral) {
      c.sliding_window = field_or<int64_t>(j, path, "sliding_window", 0);
    } else if ((c.arch == Arch::Qwen2 || c.arch == Arch::Qwen3) &&
               field_or<bool>(j, path, "use_sliding_window", false)) {
      // As transformers: layers from max_window_layers on slide (its default 28), those before attend fully.
      c.sliding_window = field_or<int64_t>(j, path, "sliding_window", 0);
      c.sliding_from_layer = field_or<int64_t>(j, path, "max_window_layers", 28);
      ASCENT_CHECK(c.sliding_from_layer >= 0, "{}: max_window_layers {} must not be negative", path,
                   c.sliding_from_layer);
      if (c.sliding_from_layer >= c.n_layers) c.sliding_window = c.sliding_from_layer = 0;  // no layer slides
    }
    if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
      const json& s = j["rope_scaling"];
      ASCENT_CHECK(s.is_object(), "{}: field rope_scaling must be an object or null, got {}", path, s.dump());
      const std::string rt = s.value("rope_type", s.value("type", std::string()));
      ASCENT_CHECK(rt == "llama3", "{}: rope_scaling type '{}' is not supported (llama3)", path, rt);
      c.rope_scaling.enabled = true;
      c.rope_scaling.factor = field<double>(s, path, "factor");
      c.rope_scaling.low_freq_factor = field<double>(s, path, "low_freq_factor");
      c.rope_scaling.high_freq_factor = field<double>(s, path, "high_freq_factor");
      c.rope_scaling.original_max_position = field<double>(s, path, "original_max_position_embeddings");
    }
  }
  c.rope_style = RopeStyle::Half;
  validate_config(c, path);
  for (const auto& [key, id] : {std::pair{"bos_token_id", c.bos_id}, std::pair{"eos_token_id", c.eos_id}}) {
    if (j.contains(key) && !j[key].is_null()) check_token_id(c, id, key, path);  // named by the file, not defaulted
  }
  for (int32_t id : c.end_ids) check_token_id(c, id, "eos_token_id", path);
}

// Splits "PREFIX<digits>.<rest>" into layer index and rest; false when n has another form.
bool split_layer(const std::string& n, const std::string& prefix, std::string& index, std::string& rest) {
  if (n.rfind(prefix, 0) != 0) return false;
  size_t i = prefix.size();
  while (i < n.size() && n[i] >= '0' && n[i] <= '9') ++i;
  if (i == prefix.size() || i + 1 >= n.size() || n[i] != '.') return false;
  index = n.substr(prefix.size(), i - prefix.size());
  rest = n.substr(i + 1);
  return true;
}

// HF tensor name -> canonical name ("" to skip).
std::string rename_llama(const std::string& n) {
  static const std::map<std::string, std::string> per_layer = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
  };
  if (n == "model.embed_tokens.weight") return "token_embd.weight";
  if (n == "model.norm.weight") return "output_norm.weight";
  if (n == "lm_head.weight") return "output.weight";
  std::string index, rest;
  if (split_layer(n, "model.layers.", index, rest)) {
    auto it = per_layer.find(rest);
    if (it != per_layer.end()) return "blk." + index + "." + it->second;
    if (rest.find("rotary_emb") != std::string::npos) return "";
  }
  fail("unexpected tensor {}", n);
}

std::string rename_gpt2(const std::string& full) {
  static const std::map<std::string, std::string> per_layer = {
      {"ln_1.weight", "attn_norm.weight"},          {"ln_1.bias", "attn_norm.bias"},
      {"attn.c_attn.weight", "attn_qkv.weight"},    {"attn.c_attn.bias", "attn_qkv.bias"},
      {"attn.c_proj.weight", "attn_output.weight"}, {"attn.c_proj.bias", "attn_output.bias"},
      {"ln_2.weight", "ffn_norm.weight"},           {"ln_2.bias", "ffn_norm.bias"},
      {"mlp.c_fc.weight", "ffn_up.weight"},         {"mlp.c_fc.bias", "ffn_up.bias"},
      {"mlp.c_proj.weight", "ffn_down.weight"},     {"mlp.c_proj.bias", "ffn_down.bias"},
  };
  std::string n = full.rfind("transformer.", 0) == 0 ? full.substr(12) : full;
  if (n == "wte.weight") return "token_embd.weight";
  if (n == "wpe.weight") return "position_embd.weight";
  if (n == "ln_f.weight") return "output_norm.weight";
  if (n == "ln_f.bias") return "output_norm.bias";
  if (n == "lm_head.weight") return "output.weight";
  std::string index, rest;
  if (split_layer(n, "h.", index, rest)) {
    auto it = per_layer.find(rest);
    if (it != per_layer.end()) return "blk." + index + "." + it->second;
    if (rest == "attn.bias" || rest == "attn.masked_bias") return "";  // causal-mask buffers of old checkpoints
  }
  fail("unexpected tensor {}", full);
}

// HF's GPT-2 Conv1D stores weights (in, out); our matmul wants (out, in).
void transpose_conv1d(WeightSet& w, int64_t n_layers) {
  for (int64_t l = 0; l < n_layers; ++l) {
    for (const char* s : {"attn_qkv", "attn_output", "ffn_up", "ffn_down"}) {
      const std::string name = "blk." + std::to_string(l) + "." + s + ".weight";
      const Tensor* t = w.find(name);
      if (t == nullptr || t->shape.size() != 2) continue;  // reported by the graph builder
      const Tensor f = to_f32(*t);
      const int64_t R = t->shape[0], C = t->shape[1];
      Tensor tr = make_owned(DType::F32, {C, R});
      auto* dst = static_cast<float*>(const_cast<void*>(tr.data));
      for (int64_t r = 0; r < R; ++r) {
        for (int64_t c = 0; c < C; ++c) dst[c * R + r] = f.f32()[r * C + c];
      }
      w.replace(name, t->dtype == DType::F32 ? tr : convert(tr, t->dtype));
    }
  }
}

}  // namespace

void read_hf_config(const std::string& dir, ModelConfig& cfg) {
  const std::string config_path = (fs::path(dir) / "config.json").string();
  ASCENT_CHECK(fs::exists(config_path), "{}: not a model folder: config.json is missing", dir);
  try {
    parse_config(read_json_file(config_path), config_path, cfg);
    add_generation_eos(dir, cfg);
  } catch (const json::exception& e) {  // a field of an unexpected shape the checks above did not foresee
    fail("{}: {}", config_path, e.what());
  }
}

void load_hf(const std::string& dir, ModelConfig& cfg, WeightSet& w) {
  read_hf_config(dir, cfg);
  auto rename = [&](const std::string& n) { return cfg.arch == Arch::Gpt2 ? rename_gpt2(n) : rename_llama(n); };

  const std::string single = (fs::path(dir) / "model.safetensors").string();
  const std::string index = (fs::path(dir) / "model.safetensors.index.json").string();
  if (fs::exists(index)) {
    const json j = read_json_file(index);
    ASCENT_CHECK(j.contains("weight_map") && j["weight_map"].is_object(), "{}: missing field weight_map", index);
    std::set<std::string> shards;
    for (const auto& [name, file] : j["weight_map"].items()) {
      ASCENT_CHECK(file.is_string(), "{}: weight_map entry {} is not a file name", index, name);
      const std::string f = file.get<std::string>();
      ASCENT_CHECK(f.find('/') == std::string::npos, "{}: shard name '{}' must be a plain file name", index, f);
      shards.insert(f);
    }
    for (const auto& s : shards) {
      const std::string shard = (fs::path(dir) / s).string();
      read_safetensors(shard, w, [&](const std::string& n) { return with_context(shard, [&] { return rename(n); }); });
    }
    for (const auto& [name, file] : j["weight_map"].items()) {
      const std::string c = rename(name);
      ASCENT_CHECK(c.empty() || w.has(c), "{}: tensor {} listed in {} is not in that shard", index, name,
                   file.get<std::string>());
    }
  } else {
    ASCENT_CHECK(fs::exists(single), "{}: no model.safetensors or model.safetensors.index.json", dir);
    read_safetensors(single, w, [&](const std::string& n) { return with_context(single, [&] { return rename(n); }); });
  }
  if (cfg.arch == Arch::Gpt2) transpose_conv1d(w, cfg.n_layers);
}

}  // namespace ascent::model
