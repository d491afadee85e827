// Writes a model as a Hugging Face folder (config.json, generation_config.json, model.safetensors in f32) that
// transformers and every Ascent command load: what training writes at each checkpoint. The tensors are renamed from
// the canonical names back to each architecture's own (GPT-2's Q, K and V joined into c_attn and its matrices stored
// (in, out) as its Conv1D keeps them); tied embeddings are written once.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

#include "ascent/model/config.h"
#include "ascent/model/weights.h"

namespace ascent::model {

nlohmann::json hf_config_json(const ModelConfig& c);
// The model's tensors under Hugging Face names, as f32 arrays; w holds f32 tensors under canonical names (an f32
// WeightSet of gradients works too: the same renaming and layout apply).
std::vector<std::pair<std::string, Tensor>> hf_tensors(const ModelConfig& c, const WeightSet& w);
// Writes `tensors` as one safetensors file, atomically (base/atomic_write.h); metadata goes in __metadata__.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const nlohmann::json& metadata = nlohmann::json::object());
// config.json, generation_config.json and model.safetensors into the existing folder dir.
void write_hf_model(const ModelConfig& c, const WeightSet& w, const std::string& dir);

}  // namespace ascent::model
