#include "ascent/train/config.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <map>
#include <set>
#include <vector>

#include "ascent/base/error.h"

namespace ascent::train {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::O0:
      return "O0";
    case Precision::O1:
      return "O1";
    case Precision::O2:
      return "O2";
    case Precision::O3:
      return "O3";
  }
  return "?";
}

namespace {

// The keys each section takes; a key elsewhere is refused with the closest known one as a hint.
const std::map<std::string, std::vector<std::string>> kSections = {
    {"model",
     {"arch", "init_from", "init_seed", "dim", "n_layers", "n_heads", "n_kv_heads", "head_dim", "ffn_dim", "max_seq",
      "norm_eps", "rope_theta", "tied_embeddings"}},
    {"data", {"dir", "num_shards", "shard_id"}},
    {"train", {"batch_size", "seq_len", "grad_accum", "steps", "seed"}},
    {"optimizer", {"lr", "min_lr", "warmup_steps", "decay", "weight_decay", "beta1", "beta2", "eps", "grad_clip"}},
    {"precision", {"level", "half", "loss_scale", "loss_scale_window", "inject_overflow_step"}},
    {"eval", {"interval", "batches"}},
    {"checkpoint", {"interval", "keep"}},
};
const std::vector<std::string> kScalars = {"tokenizer", "recompute", "output", "threads", "log_interval"};

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string hint(const std::string& key, const std::vector<std::string>& known) {
  std::string best;
  size_t d = 3;
  for (const auto& k : known) {
    const size_t e = edit_distance(key, k);
    if (e < d) {
      d = e;
      best = k;
    }
  }
  return best.empty() ? "" : " (did you mean " + best + "?)";
}

class Reader {
 public:
  Reader(const std::string& path, YAML::Node root) : path_(path), root_(std::move(root)) {}

  YAML::Node node(const std::string& section, const std::string& key) const {
    if (section.empty()) return root_[key];
    const YAML::Node s = root_[section];
    return s && s.IsMap() ? s[key] : YAML::Node();
  }
  static std::string full(const std::string& section, const std::string& key) {
    return section.empty() ? key : section + "." + key;
  }
  template <typename T>
  bool get(const std::string& section, const std::string& key, T& out, const char* what) const {
    const YAML::Node n = node(section, key);
    if (!n || n.IsNull()) return false;
    if (!n.IsScalar())
      fail("{}: {}: expected {}, got a {}", path_, full(section, key), what, n.IsMap() ? "map" : "list");
    try {
      out = n.as<T>();
    } catch (const YAML::Exception&) {
      fail("{}: {}: expected {}, got '{}'", path_, full(section, key), what, n.Scalar());
    }
    return true;
  }
  int64_t integer(const std::string& s, const std::string& k, int64_t def, int64_t lo, int64_t hi) const {
    int64_t v = def;
    if (get(s, k, v, "an integer")) {
      ASCENT_CHECK(v >= lo && v <= hi, "{}: {}: {} is out of range [{}, {}]", path_, full(s, k), v, lo, hi);
    }
    return v;
  }
  double real(const std::string& s, const std::string& k, double def, double lo, double hi) const {
    double v = def;
    if (get(s, k, v, "a number")) {
      ASCENT_CHECK(std::isfinite(v) && v >= lo && v <= hi, "{}: {}: {} is out of range [{}, {}]", path_, full(s, k), v,
                   lo, hi);
    }
    return v;
  }
  std::string text(const std::string& s, const std::string& k, const std::string& def) const {
    std::string v = def;
    get(s, k, v, "a string");
    return v;
  }
  template <typename E>
  E choice(const std::string& s, const std::string& k, E def,
           const std::vector<std::pair<std::string, E>>& opts) const {
    std::string v;
    if (!get(s, k, v, "a string")) return def;
    std::string names;
    for (const auto& [n, e] : opts) {
      if (n == v) return e;
      names += (names.empty() ? "" : ", ") + n;
    }
    fail("{}: {}: '{}' is not one of {}", path_, full(s, k), v, names);
  }
  void check_keys() const {
    ASCENT_CHECK(root_.IsMap(), "{}: expected a map of settings at the top level", path_);
    std::vector<std::string> top = kScalars;
    for (const auto& [s, keys] : kSections) top.push_back(s);
    for (const auto& kv : root_) {
      const std::string key = kv.first.as<std::string>();
      auto sec = kSections.find(key);
      if (sec == kSections.end()) {
        ASCENT_CHECK(std::find(kScalars.begin(), kScalars.end(), key) != kScalars.end(), "{}: unknown key {}{}", path_,
                     key, hint(key, top));
        continue;
      }
      if (key == "precision" && kv.second.IsScalar()) continue;  // "precision: O2" is short for precision.level
      ASCENT_CHECK(kv.second.IsMap(), "{}: {}: expected a map of settings", path_, key);
      for (const auto& inner : kv.second) {
        const std::string k = inner.first.as<std::string>();
        ASCENT_CHECK(std::find(sec->second.begin(), sec->second.end(), k) != sec->second.end(),
                     "{}: unknown key {}.{}{}", path_, key, k, hint(k, sec->second));
      }
    }
  }
  const YAML::Node& root() const { return root_; }

 private:
  std::string path_;
  YAML::Node root_;
};

}  // namespace

TrainConfig read_train_config(const std::string& path) {
  ASCENT_CHECK(std::filesystem::exists(path), "{}: no such config file", path);
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    fail("{}: not valid YAML: {}", path, e.what());
  }
  const Reader r(path, root);
  r.check_keys();
  TrainConfig c;
  c.path = path;
  constexpr int64_t kBig = int64_t{1} << 31;

  c.init_from = r.text("model", "init_from", "");
  c.init_seed = static_cast<uint64_t>(r.integer("model", "init_seed", 1, 0, INT64_MAX));
  model::ModelConfig& m = c.model;
  if (c.init_from.empty()) {
    ASCENT_CHECK(r.node("model", "arch"),
                 "{}: model.arch is required (llama, qwen3, gpt2) unless model.init_from "
                 "names a checkpoint",
                 path);
    m.arch = r.choice<model::Arch>(
        "model", "arch", model::Arch::Llama,
        {{"llama", model::Arch::Llama}, {"qwen3", model::Arch::Qwen3}, {"gpt2", model::Arch::Gpt2}});
    for (const char* k : {"dim", "n_layers", "n_heads"})
      ASCENT_CHECK(r.node("model", k), "{}: model.{} is required for a new model", path, k);
    m.dim = r.integer("model", "dim", 0, 1, kBig);
    m.n_layers = r.integer("model", "n_layers", 0, 1, 4096);
    m.n_heads = r.integer("model", "n_heads", 0, 1, 4096);
    m.n_kv_heads = r.integer("model", "n_kv_heads", m.n_heads, 1, 4096);
    ASCENT_CHECK(r.node("model", "head_dim") || m.dim % m.n_heads == 0,
                 "{}: model.dim {} is not a multiple of model.n_heads {}", path, m.dim, m.n_heads);
    m.head_dim = r.integer("model", "head_dim", m.dim / m.n_heads, 1, 4096);
    ASCENT_CHECK(m.n_heads % m.n_kv_heads == 0, "{}: model.n_heads {} is not a multiple of model.n_kv_heads {}", path,
                 m.n_heads, m.n_kv_heads);
    ASCENT_CHECK(m.arch != model::Arch::Gpt2 || (m.n_kv_heads == m.n_heads && m.head_dim * m.n_heads == m.dim),
                 "{}: gpt2 takes no model.n_kv_heads or model.head_dim of its own", path);
    ASCENT_CHECK(m.arch == model::Arch::Gpt2 || m.head_dim % 2 == 0,
                 "{}: model.head_dim {} must be even for rotary embeddings", path, m.head_dim);
    m.ffn_dim = r.integer("model", "ffn_dim", 4 * m.dim, 1, kBig);
    m.max_seq = r.integer("model", "max_seq", 1024, 1, kBig);
    m.norm_eps = static_cast<float>(r.real("model", "norm_eps", m.arch == model::Arch::Gpt2 ? 1e-5 : 1e-6, 1e-12, 0.1));
    m.rope_theta = r.real("model", "rope_theta", 10000.0, 1.0, 1e12);
    bool tied = m.arch == model::Arch::Gpt2;
    r.get("model", "tied_embeddings", tied, "true or false");
    ASCENT_CHECK(tied || m.arch != model::Arch::Gpt2, "{}: gpt2 always ties its embeddings", path);
    m.tied_embeddings = tied;
  } else {
    for (const char* k : {"arch", "dim", "n_layers", "n_heads", "n_kv_heads", "head_dim", "ffn_dim", "max_seq",
                          "norm_eps", "rope_theta", "tied_embeddings"})
      ASCENT_CHECK(!r.node("model", k), "{}: model.{} cannot be set with model.init_from (the checkpoint's is used)",
                   path, k);
  }
  c.tokenizer = r.text("", "tokenizer", c.init_from);
  ASCENT_CHECK(!c.tokenizer.empty(), "{}: tokenizer is required for a new model (a tokenizer file or model folder)",
               path);

  c.data_dir = r.text("data", "dir", "");
  ASCENT_CHECK(!c.data_dir.empty(), "{}: data.dir is required (a folder written by ascent data prepare)", path);
  c.num_shards = static_cast<int>(r.integer("data", "num_shards", 1, 1, 1 << 20));
  c.shard_id = static_cast<int>(r.integer("data", "shard_id", 0, 0, c.num_shards - 1));

  c.batch_size = r.integer("train", "batch_size", 8, 1, 1 << 20);
  c.seq_len = r.integer("train", "seq_len", 128, 1, 1 << 20);
  ASCENT_CHECK(c.init_from.empty() ? c.seq_len <= m.max_seq : true,
               "{}: train.seq_len {} is longer than model.max_seq {}", path, c.seq_len, m.max_seq);
  c.grad_accum = r.integer("train", "grad_accum", 1, 1, 1 << 20);
  c.steps = r.integer("train", "steps", 1000, 1, INT64_MAX / 2);
  c.seed = static_cast<uint64_t>(r.integer("train", "seed", 1, 0, INT64_MAX));

  Schedule& s = c.schedule;
  s.lr = r.real("optimizer", "lr", 3e-4, 0.0, 10.0);
  s.min_lr = r.real("optimizer", "min_lr", s.lr * 0.1, 0.0, s.lr);
  s.warmup_steps = r.integer("optimizer", "warmup_steps", 0, 0, c.steps);
  s.total_steps = c.steps;
  s.decay = r.choice<Decay>("optimizer", "decay", Decay::Cosine,
                            {{"cosine", Decay::Cosine}, {"linear", Decay::Linear}, {"constant", Decay::Constant}});
  c.adamw.weight_decay = r.real("optimizer", "weight_decay", 0.1, 0.0, 10.0);
  c.adamw.beta1 = r.real("optimizer", "beta1", 0.9, 0.0, 0.999999);
  c.adamw.beta2 = r.real("optimizer", "beta2", 0.95, 0.0, 0.999999);
  c.adamw.eps = r.real("optimizer", "eps", 1e-8, 0.0, 1.0);
  c.grad_clip = r.real("optimizer", "grad_clip", 1.0, 0.0, 1e9);

  const std::vector<std::pair<std::string, Precision>> levels = {{"O0", Precision::O0},
                                                                 {"O1", Precision::O1},
                                                                 {"O2", Precision::O2},
                                                                 {"O3", Precision::O3},
                                                                 {"fp32", Precision::O0}};
  if (root["precision"] && root["precision"].IsScalar()) {
    c.precision = r.choice<Precision>("", "precision", Precision::O0, levels);
  } else {
    c.precision = r.choice<Precision>("precision", "level", Precision::O0, levels);
    const std::string half = r.choice<std::string>("precision", "half", "bf16", {{"bf16", "bf16"}, {"fp16", "fp16"}});
    c.fp16 = half == "fp16";
    ASCENT_CHECK(!c.fp16 || c.precision == Precision::O3, "{}: precision.half fp16 needs precision.level O3", path);
    c.loss_scale_init = r.real("precision", "loss_scale", 65536.0, 1.0, 1e30);
    c.loss_scale_window = r.integer("precision", "loss_scale_window", 200, 1, INT64_MAX / 2);
    c.inject_overflow_step = r.integer("precision", "inject_overflow_step", -1, -1, INT64_MAX / 2);
  }
  c.recompute = r.choice<graph::Recompute>(
      "", "recompute", graph::Recompute::None,
      {{"none", graph::Recompute::None}, {"selective", graph::Recompute::Selective}, {"full", graph::Recompute::Full}});

  c.eval_interval = r.integer("eval", "interval", 100, 0, INT64_MAX / 2);
  c.eval_batches = r.integer("eval", "batches", 8, 1, 1 << 20);
  c.checkpoint_interval = r.integer("checkpoint", "interval", 200, 0, INT64_MAX / 2);
  c.keep_checkpoints = r.integer("checkpoint", "keep", 3, 1, 1 << 20);
  c.output = r.text("", "output", "");
  ASCENT_CHECK(!c.output.empty(), "{}: output is required (the run's folder)", path);
  c.threads = static_cast<int>(r.integer("", "threads", 0, 0, 1024));
  c.log_interval = r.integer("", "log_interval", 1, 1, INT64_MAX / 2);
  return c;
}

}  // namespace ascent::train
