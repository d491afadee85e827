#include "ascent/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "ascent/base/error.h"
#include "ascent/tensor/dtype.h"

namespace ascent::engine {

// Values outside these ranges have no meaning, and reading them as "off" (as a bare <= or >= test would) would hide
// a typo; NaN fails every comparison here, so it is refused too.
Sampler::Sampler(SamplingParams p) : p_(p), state_(p.seed) {
  ASCENT_CHECK(p.temperature >= 0.0f && std::isfinite(p.temperature), "--temp must be 0 (greedy) or more, got {}",
               p.temperature);
  ASCENT_CHECK(p.top_k >= 0, "--top-k must be 0 (off) or more, got {}", p.top_k);
  ASCENT_CHECK(p.top_p > 0.0f && p.top_p <= 1.0f, "--top-p must be in (0, 1], got {}", p.top_p);
  ASCENT_CHECK(p.min_p >= 0.0f && p.min_p <= 1.0f, "--min-p must be in [0, 1], got {}", p.min_p);
  ASCENT_CHECK(p.repeat_penalty > 0.0f && std::isfinite(p.repeat_penalty), "--repeat-penalty must be positive, got {}",
               p.repeat_penalty);
  ASCENT_CHECK(p.repeat_last_n >= -1, "--repeat-last-n must be -1 (the whole history) or more, got {}",
               p.repeat_last_n);
}

void check_logits(std::span<const float> logits) {
  if (all_finite(logits)) return;  // a decode step checks its whole vocabulary row: the vectorized test first
  const auto it = std::ranges::find_if(logits, [](float l) { return !std::isfinite(l); });
  fail(
      "the logit of token {} is {}: the model computed a NaN or an overflow (a weight that is not finite, or "
      "activations past the float range; --check-tensors looks for such weights)",
      it - logits.begin(), std::isnan(*it) ? std::fabs(*it) : *it);  // "nan", whatever its sign bit
}

double Sampler::uniform() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  ASCENT_CHECK(!logits.empty(), "sampler: empty logits");
  check_logits(logits);
  cand_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) cand_[i] = {logits[i], static_cast<int32_t>(i)};
  if (p_.repeat_penalty != 1.0f && p_.repeat_last_n != 0) {
    const size_t n =
        p_.repeat_last_n < 0 ? history.size() : std::min(history.size(), static_cast<size_t>(p_.repeat_last_n));
    std::unordered_set<int32_t> seen(history.end() - static_cast<std::ptrdiff_t>(n), history.end());
    for (int32_t id : seen) {
      if (id < 0 || static_cast<size_t>(id) >= cand_.size()) continue;
      float& l = cand_[static_cast<size_t>(id)].first;
      l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
    }
  }
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  if (p_.temperature <= 0.0f) return std::min_element(cand_.begin(), cand_.end(), by_logit)->second;

  size_t k = cand_.size();
  if (p_.top_k > 0) k = std::min(k, static_cast<size_t>(p_.top_k));
  std::partial_sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(k), cand_.end(), by_logit);
  cand_.resize(k);
  // Softmax at temperature; probabilities stay in cand_[i].first.
  const float mx = cand_[0].first;
  double sum = 0.0;
  for (auto& c : cand_) {
    c.first = std::exp((c.first - mx) / p_.temperature);
    sum += c.first;
  }
  for (auto& c : cand_) c.first = static_cast<float>(c.first / sum);
  if (p_.top_p < 1.0f) {
    double cum = 0.0;
    size_t keep = 0;
    while (keep < cand_.size()) {
      cum += cand_[keep++].first;
      if (cum >= p_.top_p) break;
    }
    cand_.resize(keep);
  }
  if (p_.min_p > 0.0f) {
    const float floor = cand_[0].first * p_.min_p;
    size_t keep = 1;
    while (keep < cand_.size() && cand_[keep].first >= floor) ++keep;
    cand_.resize(keep);
  }
  double total = 0.0;
  for (const auto& c : cand_) total += c.first;
  double r = uniform() * total;
  for (const auto& c : cand_) {
    r -= c.first;
    if (r < 0) return c.second;
  }
  return cand_.back().second;
}

}  // namespace ascent::engine
