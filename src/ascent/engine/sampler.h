// Token sampling, in this order (tests/e2e/test_sampling.py predicts tokens from this contract):
// 1. Repetition penalty on each distinct id among the last repeat_last_n tokens of the history: a positive logit is
//    divided by it, any other multiplied. Then OpenAI's presence and frequency penalties over the generated tokens,
//    then logit_bias added (all in f32).
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
#include <utility>
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
  // OpenAI's penalties, after the repetition penalty, over the generated tokens only (generated_from in sample()):
  // each id's logit loses presence_penalty once if it occurs and frequency_penalty times its count. In [-2, 2].
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // Added to the named ids' logits after the penalties (OpenAI's logit_bias, each in [-100, 100]).
  std::vector<std::pair<int32_t, float>> logit_bias{};
};

struct TokenLogprob {
  int32_t id = 0;
  // log-softmax of the logits after penalties and logit_bias, at temperature 1: the model's own view of the token,
  // whatever the sampling settings (as vLLM reports it).
  float logprob = 0;
};

struct SampledToken {
  int32_t id = 0;
  float logprob = 0;              // filled when top_logprobs >= 0
  std::vector<TokenLogprob> top;  // the top_logprobs most likely ids, most likely first (ties: lower id)
};

// Fails, naming the first token id whose logit is a NaN or an infinity. Such logits come from a damaged weight or
// activations past the float range, never from a sound model: sampling them would pick an arbitrary token (and NaN
// breaks the ordering the sort needs).
void check_logits(std::span<const float> logits);

// Fails for a value without a meaning, naming the field as the OpenAI API spells it. The ranges: temperature in
// [0, 100], top_p in (0, 1], min_p in [0, 1], top_k >= 0, presence_penalty and frequency_penalty in [-2, 2],
// repetition_penalty > 0, repeat_last_n >= -1. Each logit_bias value is in [-100, 100], for a distinct id in
// [0, vocab_size) (vocab_size < 0: any id >= 0). NaN is refused everywhere. The server answers these with HTTP 400.
void check_sampling(const SamplingParams& p, int64_t vocab_size = -1);

class Sampler {
 public:
  explicit Sampler(SamplingParams p);
  // history: tokens seen so far (prompt and generated), for the repetition penalty. Logits must pass check_logits.
  // No token counts as generated, so the presence and frequency penalties change nothing here.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);
  // The same draw; history[generated_from..] are the generated tokens the presence and frequency penalties count.
  // top_logprobs >= 0 also fills the chosen token's log-probability and that many most likely ids.
  SampledToken sample(std::span<const float> logits, std::span<const int32_t> history, size_t generated_from,
                      int top_logprobs);

 private:
  double uniform();  // [0, 1)
  int32_t draw();    // steps 2-4 of the contract on cand_, the adjusted logits in id order

  SamplingParams p_;
  uint64_t state_;
  std::vector<std::pair<float, int32_t>> cand_;
  std::vector<float> adjusted_;  // the logits after penalties and bias, kept for the log-probabilities
  std::vector<std::pair<float, int32_t>> top_;
};

}  // namespace ascent::engine
