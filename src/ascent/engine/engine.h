// The serving engine: many sequences of one shared, immutable Model at once. Requests wait in a bounded queue; a
// thread of its own runs steps, each one batch through the model's executor: every running sequence's next token
// first (decodes), then chunks of waiting prompts up to the step's token budget (chunked prefill), so a long prompt
// never stalls the streams already running. KV memory is a pool of fixed-size blocks (kv_pool.h) with prefix
// caching; when blocks run out the newest sequence is preempted and later recomputed, with no change to its output.
// A sequence's tokens depend only on its own prompt and settings: each row of a batch is computed as it would be alone
// (the kernels' batch invariance) and each sequence samples from its own generator.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

#include "ascent/engine/request.h"
#include "ascent/model/model.h"

namespace ascent::engine {

struct EngineOptions {
  int64_t max_seqs = 16;           // sequences running at once (--max-seqs)
  int64_t max_batch_tokens = 256;  // tokens per step, decodes and prefill chunks together (--max-batch-tokens)
  int64_t prefill_chunk = 32;      // prompt tokens per step while any sequence decodes (--prefill-chunk)
  int64_t ctx_size = 0;            // positions per sequence; 0: the model's, at most 4096 (--ctx-size)
  int64_t kv_memory_bytes = 0;     // the block pool's size; 0: ctx_size x max_seqs positions (--kv-memory)
  int64_t kv_block = 64;           // positions per KV block (--kv-block): a multiple of 16
  DType kv_type = DType::F32;      // f32 or f16 (--kv-type)
  bool prefix_caching = true;      // --no-prefix-caching turns it off
  int64_t max_queue_delay_us = 0;  // an idle engine waits this long for more requests before a step
  int64_t max_queued = 256;        // requests waiting beyond which submit() refuses (HTTP 503)
};

// submit() when max_queued requests already wait.
class QueueFull : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What /metrics shows, read at any time from any thread.
struct EngineStats {
  int64_t running = 0, waiting = 0;
  int64_t kv_blocks_total = 0, kv_blocks_used = 0, kv_blocks_cached = 0;  // cached: free, holding a reusable prefix
  int64_t prefix_queries = 0, prefix_hits = 0;  // full prompt blocks looked up in the prefix cache, and found
  int64_t preemptions = 0;
  int64_t steps = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0;  // computed over the engine's life (recomputation counts again)
  std::vector<int64_t> batch_tokens_hist;           // steps by tokens per step, buckets kBatchBuckets (then +Inf)
  int64_t batch_tokens_sum = 0;                     // tokens over all steps
  static constexpr int64_t kBatchBuckets[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048};
};

class Engine {
 public:
  // The model outlives the engine. Sizes the block pool (all of it at once) and checks the options, naming the flag.
  Engine(const model::Model& model, EngineOptions options);
  ~Engine();  // stop(0)
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Compiles the plans of every batch shape the scheduler can make, then starts the step thread. ready() after.
  void start();
  bool ready() const { return ready_.load(); }

  // Queues a request; returns its id. Throws QueueFull when max_queued wait, and Error naming the field for an
  // empty prompt, an id outside the vocabulary, n < 1, max_tokens < 1, or prompt + max_tokens past ctx_size.
  uint64_t submit(RequestParams params, std::shared_ptr<RequestSink> sink);
  // Finishes every sequence of the request with FinishReason::Cancelled (or `reason`) before the next step, freeing
  // its blocks. Unknown or finished ids are ignored.
  void cancel(uint64_t id, FinishReason reason = FinishReason::Cancelled);

  EngineStats stats() const;
  const EngineOptions& options() const { return opt_; }
  const model::Model& model() const { return model_; }

  // Refuses new requests, lets the running and queued ones finish for up to timeout_s seconds, cancels the rest and
  // joins the step thread.
  void stop(double timeout_s);

 private:
  struct Impl;
  const model::Model& model_;
  EngineOptions opt_;
  std::atomic<bool> ready_{false};
  std::unique_ptr<Impl> impl_;
};

}  // namespace ascent::engine
