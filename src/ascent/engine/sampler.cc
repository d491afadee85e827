#include "ascent/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "ascent/base/error.h"
#include "ascent/tensor/dtype.h"

namespace ascent::engine {
namespace {

// A repeated id is refused rather than summed or overwritten: a JSON object cannot repeat a key, so a repeat is a
// caller's mistake.
void check_bias(std::span<const std::pair<int32_t, float>> bias, const char* name, int64_t vocab_size) {
  std::unordered_set<int32_t> seen;
  for (const auto& [id, b] : bias) {
    ASCENT_CHECK(b >= -100.0f && b <= 100.0f, "{}: the bias of token {} must be in [-100, 100], got {}", name, id, b);
    ASCENT_CHECK(id >= 0, "{}: token id {} is negative", name, id);
    ASCENT_CHECK(vocab_size < 0 || id < vocab_size, "{}: token id {} is outside the vocabulary of {} ids", name, id,
                 vocab_size);
    ASCENT_CHECK(seen.insert(id).second, "{}: token id {} is given twice", name, id);
  }
}

// Higher logit first, and the lower id among equal logits.
bool by_logit(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

}  // namespace

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
  ASCENT_CHECK(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f,
               "--presence-penalty must be in [-2, 2], got {}", p.presence_penalty);
  ASCENT_CHECK(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f,
               "--frequency-penalty must be in [-2, 2], got {}", p.frequency_penalty);
  check_bias(p.logit_bias, "--logit-bias", -1);
}

void check_sampling(const SamplingParams& p, int64_t vocab_size) {
  ASCENT_CHECK(p.temperature >= 0.0f && p.temperature <= 100.0f, "temperature must be in [0, 100], got {}",
               p.temperature);
  ASCENT_CHECK(p.top_p > 0.0f && p.top_p <= 1.0f, "top_p must be in (0, 1], got {}", p.top_p);
  ASCENT_CHECK(p.min_p >= 0.0f && p.min_p <= 1.0f, "min_p must be in [0, 1], got {}", p.min_p);
  ASCENT_CHECK(p.top_k >= 0, "top_k must be 0 (off) or more, got {}", p.top_k);
  ASCENT_CHECK(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f, "presence_penalty must be in [-2, 2], got {}",
               p.presence_penalty);
  ASCENT_CHECK(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f,
               "frequency_penalty must be in [-2, 2], got {}", p.frequency_penalty);
  check_bias(p.logit_bias, "logit_bias", vocab_size);
  ASCENT_CHECK(p.repeat_penalty > 0.0f && std::isfinite(p.repeat_penalty),
               "repetition_penalty must be positive, got {}", p.repeat_penalty);
  ASCENT_CHECK(p.repeat_last_n >= -1, "repeat_last_n must be -1 (the whole history) or more, got {}", p.repeat_last_n);
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
  return sample(logits, history, history.size(), /*top_logprobs=*/-1).id;
}

SampledToken Sampler::sample(std::span<const float> logits, std::span<const int32_t> history, size_t generated_from,
                             int top_logprobs) {
  ASCENT_CHECK(!logits.empty(), "sampler: empty logits");
  ASCENT_CHECK(generated_from <= history.size(), "sampler: generated_from {} is past the history of {} tokens",
               generated_from, history.size());
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
  if ((p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f) && generated_from < history.size()) {
    std::unordered_map<int32_t, int64_t> count;
    for (int32_t id : history.subspan(generated_from)) ++count[id];
    for (const auto& [id, c] : count) {
      if (id < 0 || static_cast<size_t>(id) >= cand_.size()) continue;
      cand_[static_cast<size_t>(id)].first -= p_.presence_penalty + p_.frequency_penalty * static_cast<float>(c);
    }
  }
  for (const auto& [id, b] : p_.logit_bias) {
    ASCENT_CHECK(id >= 0 && static_cast<size_t>(id) < cand_.size(),
                 "logit_bias: token id {} is outside the vocabulary of {} ids", id, cand_.size());
    cand_[static_cast<size_t>(id)].first += b;
  }
  SampledToken out;
  if (top_logprobs >= 0) {
    // Taken before draw() reorders and cuts cand_, from the same f32 logits the draw starts from.
    adjusted_.resize(cand_.size());
    for (size_t i = 0; i < cand_.size(); ++i) adjusted_[i] = cand_[i].first;
    top_.assign(cand_.begin(), cand_.end());
  }
  out.id = draw();
  if (top_logprobs >= 0) {
    // log-softmax in double, (l - max) - log(sum exp(l - max)): the sum over 150k ids errs by ~1e-11, far below the
    // rounding of the f32 result.
    const float mx = *std::max_element(adjusted_.begin(), adjusted_.end());
    double sum = 0.0;
    for (float l : adjusted_) sum += std::exp(static_cast<double>(l) - mx);
    const double log_sum = std::log(sum);
    auto logprob = [&](float l) { return static_cast<float>(static_cast<double>(l) - mx - log_sum); };
    out.logprob = logprob(adjusted_[static_cast<size_t>(out.id)]);
    const size_t k = std::min(static_cast<size_t>(top_logprobs), top_.size());
    std::partial_sort(top_.begin(), top_.begin() + static_cast<std::ptrdiff_t>(k), top_.end(), by_logit);
    out.top.resize(k);
    for (size_t i = 0; i < k; ++i) out.top[i] = {top_[i].second, logprob(top_[i].first)};
  }
  return out;
}

int32_t Sampler::draw() {
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
