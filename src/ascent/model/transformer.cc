#include "ascent/model/transformer.h"

#include <cmath>

namespace ascent::model {

graph::Graph build_transformer(const ModelConfig& c, const WeightSet& w, const std::vector<float>& inv_freq) {
  graph::Graph g;
  const int64_t C = c.dim, D = c.head_dim, qd = c.n_heads * D, kvd = c.n_kv_heads * D, F = c.ffn_dim;
  const bool ln = c.uses_layer_norm();
  const bool has_qkv_bias = c.arch == Arch::Qwen2 || c.arch == Arch::Gpt2 || w.has("blk.0.attn_q.bias");
  auto vec = [&](const std::string& n, int64_t len) { return &w.get(n, {len}); };
  auto opt_vec = [&](const std::string& n, int64_t len) { return w.has(n) ? vec(n, len) : nullptr; };
  auto norm = [&](graph::Value x, const std::string& n, const std::string& name) {
    if (ln) return g.layer_norm(x, w.get(n + ".weight", {C}), vec(n + ".bias", C), c.norm_eps, name);
    // Emitted as normalisation then scale; the fuse-norm pass joins them.
    return g.mul_vec(g.rms_norm_bare(x, c.norm_eps, C, name + ".norm"), w.get(n + ".weight", {C}), name);
  };

  const graph::Value tokens = g.tokens();
  const graph::Value pos = g.positions();
  graph::Value x = g.embedding(w.get("token_embd.weight", {c.vocab, C}), tokens, "token_embd");
  if (c.arch == Arch::Gpt2) {
    const Tensor& wpe = w.get("position_embd.weight", {c.max_seq, C});
    x = g.add(x, g.embedding(wpe, pos, "position_embd"), "embd_sum");
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    graph::Value h = norm(x, b + "attn_norm", b + "attn_norm");
    auto bias = [&](const std::string& n, int64_t len) { return has_qkv_bias ? vec(b + n, len) : opt_vec(b + n, len); };
    graph::Value q = g.matmul(h, w.get(b + "attn_q.weight", {qd, C}), bias("attn_q.bias", qd), b + "attn_q");
    graph::Value k = g.matmul(h, w.get(b + "attn_k.weight", {kvd, C}), bias("attn_k.bias", kvd), b + "attn_k");
    graph::Value v = g.matmul(h, w.get(b + "attn_v.weight", {kvd, C}), bias("attn_v.bias", kvd), b + "attn_v");
    if (c.arch == Arch::Qwen3) {
      q = g.mul_vec(g.rms_norm_bare(q, c.norm_eps, D, b + "attn_q_norm.norm"), w.get(b + "attn_q_norm.weight", {D}),
                    b + "attn_q_norm");
      k = g.mul_vec(g.rms_norm_bare(k, c.norm_eps, D, b + "attn_k_norm.norm"), w.get(b + "attn_k_norm.weight", {D}),
                    b + "attn_k_norm");
    }
    if (c.uses_rope()) {
      q = g.rope(q, pos, c.n_heads, D, inv_freq, c.rope_style, b + "rope_q");
      k = g.rope(k, pos, c.n_kv_heads, D, inv_freq, c.rope_style, b + "rope_k");
    }
    graph::Value a =
        g.attention(q, k, v, static_cast<int>(l), c.n_heads, c.n_kv_heads, D, scale, c.window_of(l), b + "attn");
    a = g.matmul(a, w.get(b + "attn_output.weight", {C, qd}), opt_vec(b + "attn_output.bias", C), b + "attn_output");
    x = g.add(x, a, b + "attn_residual");

    h = norm(x, b + "ffn_norm", b + "ffn_norm");
    graph::Value m;
    if (c.arch == Arch::Gpt2) {
      m = g.matmul(h, w.get(b + "ffn_up.weight", {F, C}), vec(b + "ffn_up.bias", F), b + "ffn_up");
      m = g.gelu_tanh(m, b + "ffn_gelu");
      m = g.matmul(m, w.get(b + "ffn_down.weight", {C, F}), vec(b + "ffn_down.bias", C), b + "ffn_down");
    } else {
      graph::Value gate = g.matmul(h, w.get(b + "ffn_gate.weight", {F, C}), nullptr, b + "ffn_gate");
      graph::Value up = g.matmul(h, w.get(b + "ffn_up.weight", {F, C}), nullptr, b + "ffn_up");
      m = g.swiglu(gate, up, b + "ffn_swiglu");
      m = g.matmul(m, w.get(b + "ffn_down.weight", {C, F}), nullptr, b + "ffn_down");
    }
    x = g.add(x, m, b + "ffn_residual");
  }
  x = g.last_row(x, "last_row");
  x = norm(x, "output_norm", "output_norm");
  x = g.matmul(x, w.get("output.weight", {c.vocab, C}), nullptr, "output");
  g.set_output(x);
  return g;
}

}  // namespace ascent::model
