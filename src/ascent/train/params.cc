#include "ascent/train/params.h"

#include <cmath>
#include <cstring>
#include <random>

#include "ascent/base/error.h"
#include "ascent/base/thread_pool.h"

namespace ascent::train {

std::vector<std::pair<std::string, Shape>> weight_shapes(const model::ModelConfig& c) {
  using model::Arch;
  const int64_t C = c.dim, D = c.head_dim, qd = c.n_heads * D, kvd = c.n_kv_heads * D, F = c.ffn_dim;
  const bool gpt2 = c.arch == Arch::Gpt2, qkv_bias = gpt2 || c.arch == Arch::Qwen2;
  std::vector<std::pair<std::string, Shape>> s;
  auto norm = [&](const std::string& n) {
    s.push_back({n + ".weight", {C}});
    if (gpt2) s.push_back({n + ".bias", {C}});
  };
  s.push_back({"token_embd.weight", {c.vocab, C}});
  if (gpt2) s.push_back({"position_embd.weight", {c.max_seq, C}});
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    norm(b + "attn_norm");
    for (auto [n, rows] : {std::pair{"attn_q", qd}, std::pair{"attn_k", kvd}, std::pair{"attn_v", kvd}}) {
      s.push_back({b + n + ".weight", {rows, C}});
      if (qkv_bias) s.push_back({b + n + ".bias", {rows}});
    }
    if (c.arch == Arch::Qwen3) {
      s.push_back({b + "attn_q_norm.weight", {D}});
      s.push_back({b + "attn_k_norm.weight", {D}});
    }
    s.push_back({b + "attn_output.weight", {C, qd}});
    if (gpt2) s.push_back({b + "attn_output.bias", {C}});
    norm(b + "ffn_norm");
    if (gpt2) {
      s.push_back({b + "ffn_up.weight", {F, C}});
      s.push_back({b + "ffn_up.bias", {F}});
      s.push_back({b + "ffn_down.weight", {C, F}});
      s.push_back({b + "ffn_down.bias", {C}});
    } else {
      s.push_back({b + "ffn_gate.weight", {F, C}});
      s.push_back({b + "ffn_up.weight", {F, C}});
      s.push_back({b + "ffn_down.weight", {C, F}});
    }
  }
  norm("output_norm");
  if (!c.tied_embeddings) s.push_back({"output.weight", {c.vocab, C}});
  return s;
}

namespace {

bool is_decayed(const std::string& name, const Shape& shape) {
  // Norm weights and biases are vectors; every matrix (embeddings included, as GPT-2 and nanoGPT decay them) decays.
  (void)name;
  return shape.size() == 2;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Standard normal values from a 64-bit Mersenne Twister by Box-Muller, written out here: std::normal_distribution's
// output is implementation-defined, and a seed must give the same model with any standard library.
class Normal {
 public:
  explicit Normal(uint64_t seed) : gen_(seed) {}
  double next() {
    if (have_spare_) {
      have_spare_ = false;
      return spare_;
    }
    double u1 = 0.0;
    while (u1 == 0.0) u1 = static_cast<double>(gen_() >> 11) * 0x1.0p-53;
    const double u2 = static_cast<double>(gen_() >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1)), a = 2.0 * M_PI * u2;
    spare_ = r * std::sin(a);
    have_spare_ = true;
    return r * std::cos(a);
  }

 private:
  std::mt19937_64 gen_;
  double spare_ = 0.0;
  bool have_spare_ = false;
};

}  // namespace

void ParamSet::add(std::string name, Tensor value, bool decay) {
  Param p;
  p.name = std::move(name);
  p.grad.assign(static_cast<size_t>(value.numel()), 0.0f);
  p.value = std::move(value);
  p.decay = decay;
  params_.push_back(std::move(p));
}

void ParamSet::build_view(const model::ModelConfig& c) {
  view_ = model::WeightSet("trainer");
  for (const Param& p : params_) view_.add(p.name, p.value, "");
  if (c.tied_embeddings) view_.add("output.weight", find_name("token_embd.weight")->value, "");
}

ParamSet ParamSet::init(const model::ModelConfig& c, uint64_t seed) {
  ParamSet s;
  Normal normal(seed);
  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layers));
  for (const auto& [name, shape] : weight_shapes(c)) {
    Tensor t = make_owned(DType::F32, shape);
    auto* v = static_cast<float*>(const_cast<void*>(t.data));
    const int64_t n = t.numel();
    if (shape.size() == 1) {
      const bool is_norm = ends_with(name, "norm.weight");
      std::fill(v, v + n, is_norm ? 1.0f : 0.0f);
    } else {
      const bool proj = ends_with(name, "attn_output.weight") || ends_with(name, "ffn_down.weight");
      const double sd = proj ? proj_std : 0.02;
      for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(normal.next() * sd);
    }
    s.add(name, std::move(t), is_decayed(name, shape));
  }
  s.build_view(c);
  return s;
}

ParamSet ParamSet::from_weights(model::ModelConfig& c, const model::WeightSet& w) {
  ParamSet s;
  // Interleaved-RoPE files (GGUF llama, llama2.c) hold Q and K rows permuted so pairs (2i, 2i + 1) rotate together.
  // They come back to Hugging Face's order (pairs (i, i + D/2)), what checkpoints are written in: file row
  // (h, 2i + a) is row (h, a * D/2 + i).
  const bool unpermute = c.rope_style == RopeStyle::Interleaved;
  for (const auto& [name, shape] : weight_shapes(c)) {
    const Tensor& src = w.get(name, shape);
    Tensor t = make_owned(DType::F32, shape);
    auto* v = static_cast<float*>(const_cast<void*>(t.data));
    const int64_t K = shape.size() == 2 ? shape[1] : 1;
    const bool q = ends_with(name, "attn_q.weight") || ends_with(name, "attn_q.bias");
    const bool k = ends_with(name, "attn_k.weight") || ends_with(name, "attn_k.bias");
    const int64_t heads = q ? c.n_heads : c.n_kv_heads, D = c.head_dim;
    std::vector<float> vec;
    if (shape.size() == 1) {
      vec.resize(static_cast<size_t>(shape[0]));
      row_to_f32(src, 0, vec.data());
    }
    for (int64_t r = 0; r < shape[0]; ++r) {
      int64_t to = r;
      if (unpermute && (q || k) && r < heads * D) {
        const int64_t h = r / D, i = r % D / 2, a = r % 2;
        to = h * D + a * (D / 2) + i;
      }
      if (shape.size() == 2) {
        row_to_f32(src, r, v + to * K);
      } else {
        v[to] = vec[static_cast<size_t>(r)];
      }
    }
    s.add(name, std::move(t), is_decayed(name, shape));
  }
  c.rope_style = RopeStyle::Half;
  s.build_view(c);
  return s;
}

Param* ParamSet::find(const void* p) {
  for (Param& q : params_)
    if (q.value.data == p) return &q;
  return nullptr;
}

Param* ParamSet::find_name(const std::string& name) {
  for (Param& q : params_)
    if (q.name == name) return &q;
  return nullptr;
}

int64_t ParamSet::count() const {
  int64_t n = 0;
  for (const Param& p : params_) n += p.numel();
  return n;
}

void ParamSet::zero_grad() {
  for (Param& p : params_) {
    if (p.grad_state == GradState::Live) p.grad_state = GradState::Cleared;
  }
}

namespace {

// On the pool: an untied embedding's gradient (vocab x width) is zeroed every step before its scatter-add.
void fill_zeros(std::vector<float>& g) {
  ThreadPool::global().parallel_for(static_cast<int64_t>(g.size()),
                                    [&](int64_t i0, int64_t i1) { std::fill(g.begin() + i0, g.begin() + i1, 0.0f); });
}

}  // namespace

void ParamSet::zero_cleared() {
  for (Param& p : params_) {
    if (p.grad_state != GradState::Cleared) continue;
    fill_zeros(p.grad);
    p.grad_state = GradState::Zeros;
  }
}

float* ParamSet::take_grad(Param& p, bool overwrites, bool& zero) {
  zero = p.grad_state != GradState::Live;
  if (p.grad_state == GradState::Cleared && !overwrites) fill_zeros(p.grad);
  p.grad_state = GradState::Live;
  return p.grad.data();
}

}  // namespace ascent::train
