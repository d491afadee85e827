// A load generator for OpenAI-compatible completion servers (`ascent loadtest`): clients that each send
// POST /v1/completions requests one after another, streamed, and the time every token's text arrived.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ascent/serve/http_client.h"

namespace ascent::serve {

struct LoadOptions {
  Url url;  // the server; its path, if any, is a prefix of /v1/completions (or ends in /v1/completions itself)
  int clients = 1, requests = 1;
  int prompt_words = 100;  // each prompt's length in words: common English words, about one token each
  int shared_prefix = 0;   // words at the start of every prompt that are the same in all of them
  int max_tokens = 16;
  std::string model;  // "" leaves "model" out of the request
  std::string api_key;
  uint64_t seed = 0;
  bool stream = true;
  double temperature = 0;
  std::chrono::milliseconds timeout{600000};  // the longest wait for the connection or the next bytes
};

// The prompt of request `index`: prompt_words words, the first shared_prefix of them the same for every index. The
// rest begin with a word pair that differs between any two of the first 40,000 indices, so prompts share no longer
// prefix by chance. Depends only on (seed, index, the counts).
std::string make_prompt(uint64_t seed, int index, int prompt_words, int shared_prefix);

// The number of words make_prompt draws from.
int prompt_vocabulary_size();

struct RequestRecord {
  int index = 0, client = 0;
  int status = 0;      // the HTTP status; 0 where none came back
  std::string error;   // "" for a request that succeeded
  double start_s = 0;  // when it was sent, from the start of the run
  double ttft_s = -1;  // from sending to the first chunk with text (-1: none came); the whole response unstreamed
  double e2e_s = 0;    // from sending to the end of the response
  std::vector<double> gaps_s;     // between successive chunks with text
  int64_t text_chunks = 0;        // chunks with text
  int64_t completion_tokens = 0;  // the usage chunk's count, else text_chunks
  int64_t prompt_tokens = -1;     // the usage chunk's count (-1: no usage)
  bool usage = false;             // whether the server reported usage
};

struct LoadProgress {
  int sent = 0, done = 0, errors = 0;
  int64_t tokens = 0;  // text chunks received so far, in finished requests and running ones
  double elapsed_s = 0;
};

struct LoadResult {
  std::vector<RequestRecord> records;  // by index
  double wall_s = 0;                   // from the first request sent to the last one finished
};

// Asks GET {url}/v1/models for the served model's id: nullopt where the server does not say. A server that cannot
// be reached, or refuses the key, throws ascent::Error with the cause.
std::optional<std::string> served_model(const LoadOptions& o);

// Runs the load: o.clients coroutines on this thread, each sending requests until o.requests have been sent.
// on_progress runs about every `every` and once at the end.
LoadResult run_load(const LoadOptions& o, std::chrono::milliseconds every,
                    const std::function<void(const LoadProgress&)>& on_progress);

// The completions endpoint's path for o.url.
std::string completions_path(const Url& url);

struct Percentiles {
  size_t n = 0;
  double p50 = 0, p90 = 0, p99 = 0;
};
// Percentiles by linear interpolation between the sorted values (NumPy's default method); n = 0 for no values.
Percentiles percentiles(std::vector<double> values);

}  // namespace ascent::serve
