// Session: one sequence on a shared Model, the single-sequence face of the engine's path. It owns what the model does
// not: an executor (arena and plans) and a KV cache with the sequence's positions. forward() runs new tokens after
// those already cached, through the same Executor::run_batch the serving engine calls with many segments, so
// `generate`, `perplexity`, `bench`, `logits` and the server compute each row alike.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ascent/graph/executor.h"
#include "ascent/graph/kv_cache.h"
#include "ascent/model/model.h"
#include "ascent/prof/tracer.h"

namespace ascent::model {

class Session {
 public:
  // n_ctx 0: the model's default context. The model outlives the session.
  explicit Session(const Model& model, int64_t n_ctx = 0);

  const Model& model() const { return model_; }
  // Context length of the KV cache; resets the sequence. Refuses lengths the model cannot run.
  void set_context(int64_t n_ctx);
  int64_t context() const { return n_ctx_; }

  // Runs tokens at positions n_past()..; returns logits (T, vocab) or, unless all_logits, (1, vocab) for the last.
  std::span<const float> forward(std::span<const int32_t> tokens, bool all_logits);
  int64_t n_past() const { return n_past_; }
  // Runs several new sequences (each from position 0, in caches of its own) as one batch, and returns every
  // row's logits (sum of lengths, vocab), sequence after sequence. The session's own sequence is untouched.
  std::span<const float> forward_batch(std::span<const std::vector<int32_t>> sequences);
  void reset() { n_past_ = 0; }
  // Keeps the cache's first n positions (0 <= n <= n_past()): the next forward runs at position n and overwrites
  // what followed, as after a rejected draft or an edited turn (ascent bench re-runs a decode step so).
  void rewind(int64_t n);

  // Records every executed node from now on (null to stop).
  void set_tracer(prof::Tracer* t) { exec_.set_tracer(t); }
  // Sees every matmul's weight and input before it runs (quantization calibration); empty to stop.
  void set_matmul_observer(graph::Executor::MatmulObserver f) { exec_.set_matmul_observer(std::move(f)); }
  // Compiles the plans of every shape bucket up to max_tokens now (first-token latency moves to start-up).
  void warm_up(int64_t max_tokens);
  int64_t plans_compiled() const { return exec_.plans_compiled(); }

 private:
  const Model& model_;
  graph::Executor exec_;
  int64_t n_ctx_ = 0;  // before kv_, which is sized from it
  graph::KvCache kv_;
  std::vector<graph::KvCache> batch_kv_;  // forward_batch's, one per sequence, of the session's context
  int64_t n_past_ = 0;
};

}  // namespace ascent::model
