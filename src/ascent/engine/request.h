// What a caller of the serving engine (engine.h) hands in and gets back: a request's prompt ids and sampling
// settings, the events its sequences produce, and why each stopped. Text never enters here: stop strings, chat
// templates and detokenization belong to the caller (serve/), which cancels a request when its text says so.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ascent/engine/sampler.h"

namespace ascent::engine {

struct RequestParams {
  std::vector<int32_t> prompt{};   // token ids, at least one
  SamplingParams sampling{};       // per request; each of its n sequences draws from its own generator
  int64_t max_tokens = 16;         // generated tokens per sequence, at least 1
  int n = 1;                       // sequences sampled from the prompt, sharing its KV blocks
  bool ignore_eos = false;         // keep going past the end-of-text ids
  std::vector<int32_t> end_ids{};  // the end-of-text ids; empty: the model's (its eos_id and end_ids)
  int top_logprobs = -1;           // -1: no logprobs; 0..20: the chosen token's log-probability and this many more
};

enum class FinishReason {
  Stop,       // an end-of-text id (not passed on), or the caller cancelled after matching a stop string
  Length,     // max_tokens generated, or the sequence reached the context length
  Cancelled,  // the caller cancelled (a client went away)
  Error,      // the engine failed it; the message says why
};
const char* finish_reason_name(FinishReason r);

// One generated token of sequence `index` (0 .. n-1) of a request.
struct TokenEvent {
  int index = 0;
  int32_t id = 0;
  float logprob = 0;              // set when the request asked for logprobs
  std::vector<TokenLogprob> top;  // top_logprobs entries, most likely first
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;  // of prompt_tokens, those whose KV blocks came from the prefix cache
  int64_t generated_tokens = 0;      // over all n sequences
};

// Receives a request's events, in order, on the engine's thread: implementations hand them to their own thread and
// return at once (a slow sink stalls every sequence of the step).
class RequestSink {
 public:
  virtual ~RequestSink() = default;
  virtual void on_token(const TokenEvent& e) = 0;
  // Once per sequence; after the last sequence's, on_done.
  virtual void on_finish(int index, FinishReason reason) = 0;
  // Last call: the request's usage, and the error message when a sequence finished with FinishReason::Error.
  virtual void on_done(const Usage& usage, const std::string& error) = 0;
};

}  // namespace ascent::engine
