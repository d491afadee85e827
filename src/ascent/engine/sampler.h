// Token sampling: repetition penalty, then top-k, temperature, top-p and min-p, then a draw from a seeded
// generator whose stream is fully specified (splitmix64), so a seed reproduces the same tokens on any platform.
// Temperature <= 0 is greedy (argmax, lowest id on ties).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ascent::engine {

struct SamplingParams {
  float temperature = 0.8f;  // 0: greedy
  int top_k = 40;            // 0: all
  float top_p = 0.95f;       // in (0, 1]; 1: off
  float min_p = 0.05f;       // in [0, 1]; 0: off
  float repeat_penalty = 1.0f;
  int repeat_last_n = 64;  // -1: the whole history; 0: off
  uint64_t seed = 0;
};

// Fails, naming the first token id whose logit is a NaN or an infinity. Such logits come from a damaged weight or
// activations past the float range, never from a sound model: sampling them would pick an arbitrary token (and NaN
// breaks the ordering the sort needs).
void check_logits(std::span<const float> logits);

class Sampler {
 public:
  explicit Sampler(SamplingParams p);
  // history: tokens seen so far (prompt and generated), for the repetition penalty. Logits must pass check_logits.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);

 private:
  double uniform();  // [0, 1)

  SamplingParams p_;
  uint64_t state_;
  std::vector<std::pair<float, int32_t>> cand_;
};

}  // namespace ascent::engine
