// `ascent serve`'s server: the OpenAI API (completions, chat completions, models), /health, /metrics, /tokenize and
// /detokenize over one Engine. Requests are parsed, tokenized and answered on the HTTP server's one I/O thread; the
// engine's events for a request are posted there too, so a request's state (its choices' text, stop matching,
// logprobs) is only ever touched by that thread, as is the tokenizer, which is not thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "ascent/engine/engine.h"
#include "ascent/model/model.h"
#include "ascent/serve/api.h"
#include "ascent/serve/http.h"
#include "ascent/serve/metrics.h"
#include "ascent/tokenizer/chat_template.h"
#include "ascent/tokenizer/tokenizer.h"

namespace ascent::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;  // 0: a free port
  std::string api_key;   // empty: no key asked for
  std::string served_model_name;
  HttpLimits http;
  double shutdown_timeout_s = 30;  // running requests may finish for this long after SIGTERM or SIGINT
};

// The chat template a model comes with: --chat-template FILE when given (a Jinja file, or a tokenizer_config.json),
// else the model's own (chat_template.jinja or tokenizer_config.json beside an HF model or its --tokenizer folder, a
// GGUF's tokenizer.chat_template), else ChatML. `from` says which, for the start-up line.
struct FoundTemplate {
  tokenizer::ChatTemplate tmpl;
  std::string from;
};
FoundTemplate find_chat_template(const model::Model& m, const tokenizer::Tokenizer& tok,
                                 const std::string& tokenizer_path, const std::string& override_file);
// ChatML, the template used when a model has none.
extern const char* const kChatMlTemplate;

class Server {
 public:
  // Binds the listening socket (throws Error naming the address when it cannot). The engine is not started yet.
  Server(engine::Engine& engine, tokenizer::Tokenizer& tok, tokenizer::ChatTemplate tmpl, ServerOptions options);
  ~Server();

  uint16_t port() const { return http_->port(); }
  // Serves: starts the engine (while /health answers "loading"), prints the listening line, and returns once a
  // SIGTERM or SIGINT has drained it: no new connections, running requests finish for up to the shutdown timeout.
  void run();

 private:
  struct Job;
  class Sink;
  struct Metrics;

  void handle(const HttpRequest& req, std::shared_ptr<Exchange> ex);
  void generate(const HttpRequest& req, const std::shared_ptr<Exchange>& ex, Endpoint endpoint, uint64_t number);
  std::vector<int32_t> prompt_ids(const GenerationRequest& r);
  std::string metrics_text();
  void log_request(uint64_t number, const HttpRequest& req, int status, int64_t prompt, int64_t generated,
                   double ttft_s, double seconds);
  void count(int status);

  engine::Engine& engine_;
  tokenizer::Tokenizer& tok_;
  tokenizer::ChatTemplate tmpl_;
  ServerOptions opt_;
  int64_t ctx_size_ = 0;
  RequestLimits limits_;
  std::unique_ptr<Metrics> metrics_;  // I/O thread only
  uint64_t requests_ = 0;             // I/O thread only
  std::unique_ptr<HttpServer> http_;

  std::mutex mu_;
  std::condition_variable cv_;
  int signals_ = 0;
};

}  // namespace ascent::serve
