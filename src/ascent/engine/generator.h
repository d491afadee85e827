// The single-sequence generation loop: prefill the prompt, then sample and feed back one token at a time until
// n tokens or end-of-sequence. Many sequences at once go through the serving engine (engine.h).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "ascent/engine/sampler.h"
#include "ascent/model/session.h"

namespace ascent::engine {

struct GenerateStats {
  int64_t prompt_tokens = 0, generated_tokens = 0;
  double prompt_seconds = 0, generate_seconds = 0;
  bool context_full = false;  // stopped because the context was full, before n_predict tokens or EOS
};

// Calls on_token for each generated id as soon as it is sampled, and stops before any of stop_ids (the end-of-text
// ids: eos and the model's other end ids, none of them passed on). Returns the generated ids.
std::vector<int32_t> generate(model::Session& m, std::span<const int32_t> prompt, int64_t n_predict, Sampler& sampler,
                              std::span<const int32_t> stop_ids, const std::function<void(int32_t)>& on_token,
                              GenerateStats* stats);

}  // namespace ascent::engine
