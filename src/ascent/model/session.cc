#include "ascent/model/session.h"

#include <algorithm>

#include "ascent/base/error.h"

namespace ascent::model {
namespace {

graph::KvCache cache_for(const Model& m, int64_t n_ctx) {
  return graph::KvCache::for_positions(static_cast<int>(m.config().n_layers), n_ctx, m.kv_width(), m.kv_type());
}

int64_t checked(const Model& m, int64_t n_ctx) {
  if (n_ctx == 0) n_ctx = m.default_context();
  m.check_context(n_ctx, "context");
  return n_ctx;
}

}  // namespace

Session::Session(const Model& model, int64_t n_ctx)
    : model_(model),
      exec_(model.generation_graph(), model.passes()),
      n_ctx_(checked(model, n_ctx)),
      kv_(cache_for(model, n_ctx_)) {}

void Session::set_context(int64_t n_ctx) {
  model_.check_context(n_ctx, "context");
  kv_ = cache_for(model_, n_ctx);
  batch_kv_.clear();  // forward_batch makes new ones of the new length
  n_ctx_ = n_ctx;
  n_past_ = 0;
}

std::span<const float> Session::forward(std::span<const int32_t> tokens, bool all_logits) {
  ASCENT_CHECK(n_past_ + static_cast<int64_t>(tokens.size()) <= n_ctx_,
               "sequence of {} tokens exceeds the context length {}", n_past_ + static_cast<int64_t>(tokens.size()),
               n_ctx_);
  auto out = exec_.run(tokens, n_past_, kv_, all_logits);
  n_past_ += static_cast<int64_t>(tokens.size());
  return out;
}

std::span<const float> Session::forward_batch(std::span<const std::vector<int32_t>> sequences) {
  while (batch_kv_.size() < sequences.size()) batch_kv_.push_back(cache_for(model_, n_ctx_));
  std::vector<graph::Segment> segs;
  for (size_t i = 0; i < sequences.size(); ++i) {
    ASCENT_CHECK(static_cast<int64_t>(sequences[i].size()) <= n_ctx_,
                 "sequence {} of {} tokens exceeds the context length {}", i, sequences[i].size(), n_ctx_);
    segs.push_back({sequences[i], 0, &batch_kv_[i], {}, /*all_rows=*/true});
  }
  return exec_.run_batch(segs);
}

void Session::rewind(int64_t n) {
  ASCENT_CHECK(n >= 0 && n <= n_past_, "rewind to position {}: only {} positions are cached", n, n_past_);
  n_past_ = n;
}

void Session::warm_up(int64_t max_tokens) {
  exec_.warm_up(std::min(max_tokens, n_ctx_));
}

}  // namespace ascent::model
