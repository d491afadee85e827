// Token sampling, in this order (tests/e2e/test_sampling.py predicts tokens from this contract):
// 1. Repetition penalty on each distinct id among the last repeat_last_n tokens of the history: a positive logit is
//    divided by it, any other multiplied.
// 2. Temperature <= 0: greedy (argmax, lowest id on ties). Else candidates sorted by logit (ties: lower id first)
//    are cut to the first top_k.
// 3. Softmax at the temperature; top-p keeps the shortest prefix whose sum reaches top_p, then min-p those with at
//    least min_p times the first one's probability.
// 4. A draw from splitmix64 (state = seed; each draw adds 0x9e3779b97f4a7c15 and mixes), one per sampled token:
//    u = (output >> 11) * 2^-53, and the token is the first whose running sum exceeds u times the kept sum.
// So a seed reproduces the same tokens on any platform.
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
