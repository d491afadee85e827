// The parameters a run trains: every weight of a model as an owned f32 array (the master copy), its gradient, and
// whether weight decay applies to it. A WeightSet view over the same arrays feeds the graph builder and the writers,
// so the graph that trains is the one model/transformer.h builds for inference. Tied embeddings are one parameter
// under two names ("token_embd.weight" and "output.weight" share an array and its gradient).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ascent/model/config.h"
#include "ascent/model/weights.h"

namespace ascent::train {

// What a gradient array holds. Cleared gradients are zeros that have not been written: clearing costs no pass over
// the array, and most are overwritten by their first product (Autodiff::GradTarget) without ever being zeroed.
enum class GradState {
  Zeros,    // zeros
  Cleared,  // zero by meaning; the array still holds what was there before (ParamSet::zero_cleared writes the zeros)
  Live,     // what backward has added since the last clear
};

struct Param {
  std::string name;
  Tensor value;             // f32, owned
  std::vector<float> grad;  // same size as value
  bool decay = true;        // false for norm weights and biases
  GradState grad_state = GradState::Zeros;
  float* data() { return static_cast<float*>(const_cast<void*>(value.data)); }
  int64_t numel() const { return value.numel(); }
};

class ParamSet {
 public:
  // Fresh weights for an architecture and shape: normal(0, 0.02) for matrices and embeddings, the residual
  // projections (attn_output, ffn_down) scaled by 1/sqrt(2 * layers) as GPT-2 does, norms 1, biases 0; drawn from a
  // generator seeded by `seed`, in the parameters' name order, so a seed gives the same model everywhere.
  static ParamSet init(const model::ModelConfig& c, uint64_t seed);
  // f32 copies of loaded weights (fine-tuning): every tensor the graph uses, whatever its stored type. Q and K rows of
  // an interleaved-RoPE file are brought to Hugging Face's order, and c's rope_style with them.
  static ParamSet from_weights(model::ModelConfig& c, const model::WeightSet& w);

  ParamSet() = default;
  ParamSet(ParamSet&&) = default;
  ParamSet& operator=(ParamSet&&) = default;

  std::vector<Param>& params() { return params_; }
  const std::vector<Param>& params() const { return params_; }
  // The parameter whose value array starts at p (a graph node's weight), or null.
  Param* find(const void* p);
  Param* find_name(const std::string& name);
  const model::WeightSet& weights() const { return view_; }
  int64_t count() const;  // trainable values (tied ones once)
  // Every gradient to zero. Marks them Cleared; no array is written here.
  void zero_grad();
  // Writes the zeros of every Cleared gradient, for a reader of all of them (a norm, a test). A gradient no product
  // took since zero_grad is left Cleared by a backward pass.
  void zero_cleared();
  // The gradient array of p for backward's write (Autodiff::GradOf): zeros unless the write overwrites.
  float* take_grad(Param& p, bool overwrites, bool& zero);

 private:
  void add(std::string name, Tensor value, bool decay);
  void build_view(const model::ModelConfig& c);

  std::vector<Param> params_;
  model::WeightSet view_{"trainer"};
};

// The canonical names and shapes of an architecture's weights, in a fixed order (what init draws and writers write).
std::vector<std::pair<std::string, Shape>> weight_shapes(const model::ModelConfig& c);

}  // namespace ascent::train
