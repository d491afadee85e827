#include "ascent/engine/generator.h"

#include <algorithm>
#include <chrono>

#include "ascent/base/error.h"

namespace ascent::engine {

std::vector<int32_t> generate(model::Session& m, std::span<const int32_t> prompt, int64_t n_predict, Sampler& sampler,
                              std::span<const int32_t> stop_ids, const std::function<void(int32_t)>& on_token,
                              GenerateStats* stats) {
  using Clock = std::chrono::steady_clock;
  ASCENT_CHECK(!prompt.empty(), "the prompt is empty: give -p TEXT or --prompt-ids");
  ASCENT_CHECK(static_cast<int64_t>(prompt.size()) <= m.context(),
               "the prompt has {} tokens, more than the context length {}", prompt.size(), m.context());
  m.reset();
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  std::vector<int32_t> out;
  auto t0 = Clock::now();
  auto logits = m.forward(prompt, /*all_logits=*/false);
  auto t1 = Clock::now();
  bool context_full = false;
  for (int64_t i = 0; i < n_predict; ++i) {
    const int32_t tok = with_context(fmt::format("position {}", m.n_past() - 1), [&] {
      return sampler.sample(logits, history, /*generated_from=*/prompt.size(), /*top_logprobs=*/-1).id;
    });
    if (std::find(stop_ids.begin(), stop_ids.end(), tok) != stop_ids.end()) break;
    out.push_back(tok);
    history.push_back(tok);
    on_token(tok);
    if (i + 1 == n_predict) break;
    if (m.n_past() >= m.context()) {
      context_full = true;
      break;
    }
    logits = m.forward(std::span<const int32_t>(&tok, 1), /*all_logits=*/false);
  }
  if (stats != nullptr) {
    stats->context_full = context_full;
    stats->prompt_tokens = static_cast<int64_t>(prompt.size());
    stats->generated_tokens = static_cast<int64_t>(out.size());
    stats->prompt_seconds = std::chrono::duration<double>(t1 - t0).count();
    stats->generate_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  }
  return out;
}

}  // namespace ascent::engine
