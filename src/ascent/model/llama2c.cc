// llama2.c checkpoints: header {dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len} as int32
// (negative vocab_size: a separate classifier follows), then f32 arrays stacked over layers. Each layer's matrix
// becomes a view into the mapping.
#include <cstring>

#include "ascent/base/error.h"
#include "ascent/model/loaders.h"

namespace ascent::model {

void load_llama2c(const std::string& path, ModelConfig& cfg, WeightSet& w) {
  auto file = std::make_shared<MappedFile>(path);
  const auto bytes = file->bytes();
  ASCENT_CHECK(bytes.size() >= 28, "{}: truncated: {} bytes is too short for a llama2.c header", path, bytes.size());
  int32_t h[7];
  std::memcpy(h, bytes.data(), sizeof(h));
  const char* names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  for (int i = 0; i < 7; ++i) {
    const int64_t v = i == 5 ? (h[i] < 0 ? -static_cast<int64_t>(h[i]) : h[i]) : h[i];
    ASCENT_CHECK(v > 0 && v <= (1 << 24), "{}: bad header: {} = {} (bad magic or not a llama2.c checkpoint)", path,
                 names[i], h[i]);
  }
  cfg.arch = Arch::Llama;
  cfg.dim = h[0];
  cfg.ffn_dim = h[1];
  cfg.n_layers = h[2];
  cfg.n_heads = h[3];
  cfg.n_kv_heads = h[4];
  const bool shared = h[5] > 0;
  cfg.vocab = shared ? h[5] : -static_cast<int64_t>(h[5]);
  cfg.max_seq = h[6];
  ASCENT_CHECK(cfg.dim % cfg.n_heads == 0, "{}: bad header: dim {} is not a multiple of n_heads {}", path, cfg.dim,
               cfg.n_heads);
  cfg.head_dim = cfg.dim / cfg.n_heads;
  cfg.norm_eps = 1e-5f;
  cfg.rope_theta = 10000.0;
  cfg.rope_style = RopeStyle::Interleaved;
  cfg.tied_embeddings = shared;
  validate_config(cfg, path);

  const int64_t L = cfg.n_layers, C = cfg.dim, F = cfg.ffn_dim, V = cfg.vocab, kv = cfg.n_kv_heads * cfg.head_dim;
  const int64_t qd = cfg.n_heads * cfg.head_dim;
  const int64_t half = cfg.head_dim / 2;
  // In 128 bits: header fields of up to 2^24 make products past int64 (2^24 layers of 2^24 x 2^24 matrices), which
  // wrapped; the size check below then refuses any such header.
  using Wide = __int128;
  const Wide layer = C + Wide{C} * qd + Wide{2} * C * kv + Wide{qd} * C + C + Wide{3} * F * C;
  const Wide expect = Wide{V} * C * (shared ? 1 : 2) + L * layer + C + Wide{2} * cfg.max_seq * half;
  const int64_t have = (static_cast<int64_t>(bytes.size()) - 28) / 4;
  ASCENT_CHECK(have >= expect, "{}: truncated: header promises {} floats of weights, file holds {}", path, expect,
               have);
  // The format has no tensor table, so the size is its only check of the header. A corrupted shape that asks for fewer
  // floats than the file holds would otherwise load a prefix of the weights under the wrong shapes, and run.
  ASCENT_CHECK(static_cast<int64_t>(bytes.size()) == 28 + 4 * static_cast<int64_t>(expect),
               "{}: header promises {} bytes of weights, but the file holds {} after its header (a corrupted header "
               "or not a llama2.c checkpoint)",
               path, 4 * static_cast<int64_t>(expect), bytes.size() - 28);

  const float* p = reinterpret_cast<const float*>(bytes.data() + 28);
  auto view = [&](Shape s) {
    Tensor t;
    t.shape = std::move(s);
    t.data = p;
    p += t.numel();
    return t;
  };
  auto per_layer = [&](const std::string& suffix, Shape s) {
    for (int64_t l = 0; l < L; ++l) w.add("blk." + std::to_string(l) + "." + suffix, view(s), path);
  };
  w.add("token_embd.weight", view({V, C}), path);
  per_layer("attn_norm.weight", {C});
  per_layer("attn_q.weight", {qd, C});
  per_layer("attn_k.weight", {kv, C});
  per_layer("attn_v.weight", {kv, C});
  per_layer("attn_output.weight", {C, qd});
  per_layer("ffn_norm.weight", {C});
  per_layer("ffn_gate.weight", {F, C});
  per_layer("ffn_down.weight", {C, F});
  per_layer("ffn_up.weight", {F, C});
  w.add("output_norm.weight", view({C}), path);
  p += 2 * cfg.max_seq * half;  // legacy freq_cis tables; RoPE is computed
  if (!shared) w.add("output.weight", view({V, C}), path);
  w.keep_file(file);
}

}  // namespace ascent::model
