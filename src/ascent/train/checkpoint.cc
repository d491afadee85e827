#include "ascent/train/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "ascent/base/atomic_write.h"
#include "ascent/base/error.h"
#include "ascent/base/json_file.h"
#include "ascent/base/mapped_file.h"
#include "ascent/model/hf_writer.h"
#include "ascent/model/loaders.h"
#include "ascent/model/safetensors.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace ascent::train {
namespace {

constexpr const char* kPrefix = "step-";

// FNV-1a over a file's bytes: enough to tell a damaged file from the one written (not a defence against tampering).
uint64_t file_hash(const std::string& path) {
  MappedFile f(path);
  uint64_t h = 1469598103934665603ull;
  for (uint8_t b : f.bytes()) h = (h ^ b) * 1099511628211ull;
  return h;
}

std::string hex(uint64_t v) {
  return fmt::format("{:016x}", v);
}

// The tokenizer files of a model folder (or the one file named) that go into every checkpoint.
std::vector<fs::path> tokenizer_files(const std::string& tokenizer) {
  if (fs::is_regular_file(tokenizer)) return {fs::path(tokenizer)};
  std::vector<fs::path> out;
  for (const char* n : {"tokenizer.json", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json",
                        "encoder.json", "vocab.bpe", "added_tokens.json"}) {
    const fs::path p = fs::path(tokenizer) / n;
    if (fs::is_regular_file(p)) out.push_back(p);
  }
  ASCENT_CHECK(!out.empty(), "{}: no tokenizer files to copy into the checkpoint", tokenizer);
  return out;
}

bool is_checkpoint_name(const std::string& n) {
  return n.rfind(kPrefix, 0) == 0 && n.size() > 5 && std::all_of(n.begin() + 5, n.end(), ::isdigit);
}

}  // namespace

std::string write_checkpoint(const std::string& root, const model::ModelConfig& c, const ParamSet& params, AdamW& opt,
                             const TrainerState& state, const std::string& tokenizer) {
  fs::create_directories(root);
  const std::string name = fmt::format("{}{:08d}", kPrefix, state.step);
  const fs::path final_dir = fs::path(root) / name, tmp = fs::path(root) / ("." + name + ".tmp");
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  model::write_hf_model(c, params.weights(), tmp.string());
  for (const fs::path& f : tokenizer_files(tokenizer)) fs::copy_file(f, tmp / f.filename());
  std::vector<std::pair<std::string, Tensor>> moments;
  auto view = [](std::vector<float>& v, const Shape& s) {
    Tensor t;
    t.dtype = DType::F32;
    t.shape = s;
    t.data = v.data();
    return t;
  };
  const auto& ps = params.params();
  for (size_t k = 0; k < ps.size(); ++k) {
    moments.emplace_back("m." + ps[k].name, view(opt.m()[k], ps[k].value.shape));
    moments.emplace_back("v." + ps[k].name, view(opt.v()[k], ps[k].value.shape));
  }
  model::write_safetensors((tmp / "optimizer.safetensors").string(), moments);
  json j = {{"step", state.step},
            {"data_position", state.data_position},
            {"loss_scale", state.loss_scale},
            {"clean_steps", state.clean_steps},
            {"adam_steps", opt.steps()},
            {"seed", state.seed},
            {"model_hash", hex(file_hash((tmp / "model.safetensors").string()))},
            {"optimizer_hash", hex(file_hash((tmp / "optimizer.safetensors").string()))}};
  const std::string text = j.dump(2) + "\n";
  write_file_atomic((tmp / "trainer_state.json").string(), {std::span<const char>(text)});
  fs::remove_all(final_dir);  // a checkpoint of this step from a run that was later resumed before it
  fs::rename(tmp, final_dir);
  return final_dir.string();
}

std::vector<std::string> list_checkpoints(const std::string& root) {
  std::vector<std::string> out;
  if (!fs::is_directory(root)) return out;
  for (const auto& e : fs::directory_iterator(root)) {
    if (e.is_directory() && is_checkpoint_name(e.path().filename().string())) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string latest_checkpoint(const std::string& root) {
  const auto all = list_checkpoints(root);
  return all.empty() ? "" : all.back();
}

void prune_checkpoints(const std::string& root, int64_t keep) {
  auto all = list_checkpoints(root);
  for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i) fs::remove_all(all[i]);
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string n = e.path().filename().string();
    if (n.size() > 5 && n[0] == '.' && n.compare(n.size() - 4, 4, ".tmp") == 0) fs::remove_all(e.path());
  }
}

TrainerState restore_checkpoint(const std::string& dir, const model::ModelConfig& c, ParamSet& params, AdamW& opt) {
  const std::string state_path = (fs::path(dir) / "trainer_state.json").string();
  ASCENT_CHECK(fs::is_regular_file(state_path), "{}: not a training checkpoint (trainer_state.json is missing)", dir);
  const json j = read_json_file(state_path);
  TrainerState s;
  std::string model_hash, opt_hash;
  int64_t adam_steps = 0;
  try {
    s.step = j.at("step").get<int64_t>();
    s.data_position = j.at("data_position").get<uint64_t>();
    s.loss_scale = j.at("loss_scale").get<double>();
    s.clean_steps = j.at("clean_steps").get<int64_t>();
    s.seed = j.at("seed").get<uint64_t>();
    adam_steps = j.at("adam_steps").get<int64_t>();
    model_hash = j.at("model_hash").get<std::string>();
    opt_hash = j.at("optimizer_hash").get<std::string>();
  } catch (const json::exception& e) {
    fail("{}: {}", state_path, e.what());
  }
  const std::string model_path = (fs::path(dir) / "model.safetensors").string();
  const std::string opt_path = (fs::path(dir) / "optimizer.safetensors").string();
  for (const auto& [path, want] : {std::pair{model_path, model_hash}, std::pair{opt_path, opt_hash}}) {
    ASCENT_CHECK(fs::is_regular_file(path), "{}: missing", path);
    const std::string got = hex(file_hash(path));
    ASCENT_CHECK(got == want, "{}: damaged (its hash {} is not the {} trainer_state.json recorded)", path, got, want);
  }
  // Everything is read and checked into new arrays first; the run's parameters change only when all of it holds.
  model::ModelConfig cfg;
  model::WeightSet w(dir);
  model::load_hf(dir, cfg, w);
  model::finalize_weights(cfg, w);
  std::string diff;
  auto field = [&](const char* name, auto got, auto want) {
    if (got != want) diff += fmt::format("{}{} {} (this run: {})", diff.empty() ? "" : ", ", name, got, want);
  };
  field("arch", std::string(model::arch_name(cfg.arch)), std::string(model::arch_name(c.arch)));
  field("vocab", cfg.vocab, c.vocab);
  field("dim", cfg.dim, c.dim);
  field("n_layers", cfg.n_layers, c.n_layers);
  field("n_heads", cfg.n_heads, c.n_heads);
  field("n_kv_heads", cfg.n_kv_heads, c.n_kv_heads);
  field("head_dim", cfg.head_dim, c.head_dim);
  field("ffn_dim", cfg.ffn_dim, c.ffn_dim);
  field("max_seq", cfg.max_seq, c.max_seq);
  field("tied_embeddings", cfg.tied_embeddings, c.tied_embeddings);
  field("norm_eps", cfg.norm_eps, c.norm_eps);
  if (c.arch != model::Arch::Gpt2) field("rope_theta", cfg.rope_theta, c.rope_theta);
  ASCENT_CHECK(diff.empty(), "{}: the checkpoint's model is not this run's: {}", dir, diff);
  model::WeightSet mo(opt_path);
  model::read_safetensors(opt_path, mo, [](const std::string& n) { return n; });
  std::vector<std::vector<float>> values, m, v;
  for (const Param& p : params.params()) {
    const Tensor& t = w.get(p.name, p.value.shape);
    ASCENT_CHECK(t.dtype == DType::F32, "{}: tensor {} is {}, not f32", model_path, p.name, dtype_name(t.dtype));
    values.emplace_back(t.f32(), t.f32() + t.numel());
    for (auto [prefix, out] : {std::pair{"m.", &m}, std::pair{"v.", &v}}) {
      const Tensor& o = mo.get(prefix + p.name, p.value.shape);
      ASCENT_CHECK(o.dtype == DType::F32, "{}: tensor {}{} is not f32", opt_path, prefix, p.name);
      out->emplace_back(o.f32(), o.f32() + o.numel());
    }
  }
  auto& ps = params.params();
  for (size_t k = 0; k < ps.size(); ++k) {
    std::copy(values[k].begin(), values[k].end(), ps[k].data());
    opt.m()[k] = std::move(m[k]);
    opt.v()[k] = std::move(v[k]);
  }
  opt.set_steps(adam_steps);
  return s;
}

}  // namespace ascent::train
