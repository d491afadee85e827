#include "ascent/serve/server.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>

#include "ascent/base/error.h"
#include "ascent/base/json_file.h"
#include "ascent/base/read_file.h"
#include "ascent/serve/choice_text.h"

namespace ascent::serve {

using ojson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

const char* const kChatMlTemplate =
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

namespace {

namespace fs = std::filesystem;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string random_hex(size_t n) {
  static std::mt19937_64 rng{std::random_device{}()};
  std::string s;
  while (s.size() < n) s += fmt::format("{:016x}", rng());
  return s.substr(0, n);
}

// A tokenizer_config.json holding a chat_template, or nothing.
std::optional<tokenizer::ChatTemplate> template_from_config(const fs::path& config) {
  std::error_code ec;
  if (!fs::is_regular_file(config, ec)) return std::nullopt;
  const auto j = read_json_file<nlohmann::ordered_json>(config.string());
  if (!j.is_object() || !j.contains("chat_template") || j["chat_template"].is_null()) return std::nullopt;
  return tokenizer::ChatTemplate::from_tokenizer_config(config.string());
}

std::string token_piece(const tokenizer::Tokenizer& tok, int32_t id) {
  return id >= 0 && id < tok.size() ? tok.decode_token(id) : std::string();
}

}  // namespace

FoundTemplate find_chat_template(const model::Model& m, const tokenizer::Tokenizer& tok,
                                 const std::string& tokenizer_path, const std::string& override_file) {
  const std::string bos = token_piece(tok, tok.bos()), eos = token_piece(tok, tok.eos());
  if (!override_file.empty()) {
    if (fs::path(override_file).extension() == ".json") {
      return {tokenizer::ChatTemplate::from_tokenizer_config(override_file), override_file};
    }
    const std::string source = read_file(override_file);
    return {with_context("--chat-template " + override_file, [&] { return tokenizer::ChatTemplate(source, bos, eos); }),
            override_file};
  }
  std::vector<fs::path> dirs;
  std::error_code ec;
  if (!tokenizer_path.empty() && fs::is_directory(tokenizer_path, ec)) dirs.emplace_back(tokenizer_path);
  if (m.format() == model::Format::HuggingFace) {
    dirs.push_back(fs::is_directory(m.path(), ec) ? fs::path(m.path()) : fs::path(m.path()).parent_path());
  }
  for (const fs::path& d : dirs) {
    const fs::path jinja = d / "chat_template.jinja";
    if (fs::is_regular_file(jinja, ec)) {
      const std::string source = read_file(jinja.string());
      return {with_context(jinja.string(), [&] { return tokenizer::ChatTemplate(source, bos, eos); }), jinja.string()};
    }
    if (auto t = template_from_config(d / "tokenizer_config.json")) {
      return {std::move(*t), (d / "tokenizer_config.json").string()};
    }
  }
  if (const model::GgufFile* g = m.gguf()) {
    if (const model::GgufValue* v = g->find("tokenizer.chat_template"); v && !v->s.empty()) {
      return {with_context(g->path() + ": tokenizer.chat_template",
                           [&] { return tokenizer::ChatTemplate(v->s, bos, eos); }),
              g->path() + " (tokenizer.chat_template)"};
    }
  }
  return {tokenizer::ChatTemplate(kChatMlTemplate, bos, eos), "ChatML (the model has no chat template)"};
}

// Counters and histograms the server keeps itself (EngineStats has the rest).
struct Server::Metrics {
  std::map<int, int64_t> by_status;
  int64_t prompt_tokens = 0, generation_tokens = 0;
  Histogram ttft{{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}};
  Histogram itl{
      {0.001, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5}};
  Histogram e2e{{0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 300}};
};

// One generation request in flight: its choices' text and logprobs, built from the engine's events on the I/O thread.
struct Server::Job : std::enable_shared_from_this<Server::Job> {
  struct Choice {
    ChoiceText text;
    std::string out{};                     // the whole text (non-streamed)
    std::vector<LogprobEntry> logprobs{};  // all of them (non-streamed), or those not sent yet (streamed)
    std::string finish{};
    bool done = false;
    int64_t tokens = 0;
    Clock::time_point last{};
  };

  Server& srv;
  std::shared_ptr<Exchange> ex;
  HttpRequest req;  // method and path, for the log line
  uint64_t number = 0;
  GenerationRequest r;
  ResponseHeader head;
  std::vector<Choice> choices;
  int64_t prompt_tokens = 0;
  uint64_t id = 0;
  int open = 0;  // choices not done
  Clock::time_point t0;
  double ttft = -1;
  bool client_gone = false, cancelled = false;
  std::string error;

  Job(Server& s, std::shared_ptr<Exchange> e) : srv(s), ex(std::move(e)) {}

  std::string token_text(int32_t tid) const { return token_piece(srv.tok_, tid); }
  TokenText token_fn() const {
    return [self = shared_from_this()](int32_t tid) { return self->token_text(tid); };
  }

  void write_chunk(const ChunkPart& part) {
    ex->write(sse_event(chunk_json(r.endpoint, head, part, r.top_logprobs >= 0, token_fn())));
  }

  void on_token(const engine::TokenEvent& e) {
    if (e.index < 0 || e.index >= static_cast<int>(choices.size())) return;
    Choice& c = choices[static_cast<size_t>(e.index)];
    if (c.done) return;
    const auto now = Clock::now();
    if (ttft < 0) {
      ttft = std::chrono::duration<double>(now - t0).count();
      srv.metrics_->ttft.observe(ttft);
    }
    if (c.tokens > 0) srv.metrics_->itl.observe(std::chrono::duration<double>(now - c.last).count());
    c.last = now;
    ++c.tokens;
    if (r.top_logprobs >= 0) c.logprobs.push_back({e.id, e.logprob, e.top, c.text.decoded_bytes()});
    const StopPush p = c.text.push(e.id);
    if (r.stream) {
      if (!p.text.empty() && !p.stopped) {
        write_chunk({.index = e.index, .text = p.text, .logprobs = std::move(c.logprobs)});
        c.logprobs.clear();
      }
    }
    if (p.stopped) {
      finish_choice(e.index, p.text, "stop");
      // The engine runs a request's sequences together: the request ends once every choice has.
      if (open == 0 && !cancelled) {
        cancelled = true;
        srv.engine_.cancel(id, engine::FinishReason::Stop);
      }
    } else if (!r.stream) {
      c.out += p.text;
    }
  }

  // Ends choice i with its last text.
  void finish_choice(int i, const std::string& text, const std::string& reason) {
    Choice& c = choices[static_cast<size_t>(i)];
    c.done = true;
    c.finish = reason;
    --open;
    if (r.stream) {
      write_chunk({.index = i, .text = text, .logprobs = std::move(c.logprobs), .finish_reason = reason});
      c.logprobs.clear();
    } else {
      c.out += text;
    }
  }

  void on_finish(int index, engine::FinishReason reason) {
    if (index < 0 || index >= static_cast<int>(choices.size())) return;
    Choice& c = choices[static_cast<size_t>(index)];
    if (c.done) return;
    const StopPush p = c.text.finish();
    switch (reason) {
      case engine::FinishReason::Stop:
        finish_choice(index, p.text, "stop");
        break;
      case engine::FinishReason::Length:
        finish_choice(index, p.text, p.stopped ? "stop" : "length");
        break;
      case engine::FinishReason::Cancelled:
        if (error.empty() && !client_gone) error = "the request was cancelled: the server is shutting down";
        c.done = true;
        --open;
        break;
      case engine::FinishReason::Error:
        c.done = true;
        --open;
        break;
    }
  }

  void on_done(const engine::Usage& usage, const std::string& engine_error) {
    if (!engine_error.empty()) error = engine_error;
    int64_t generated = 0;
    for (const Choice& c : choices) generated += c.tokens;
    int status = 200;
    if (client_gone) {
      status = 499;  // nginx's "client closed request": no response was sent
    } else if (!error.empty()) {
      const bool shutdown = error.find("shutting down") != std::string::npos;
      const ApiError e(shutdown ? 503 : 500, error, {}, {}, shutdown ? "server_error" : "internal_error");
      if (r.stream) {
        ex->write(sse_event(error_json(e)));
        ex->write(std::string(kSseDone));
        ex->finish();
      } else {
        status = e.status;
        ex->send(status, "application/json", dump(error_json(e)));
      }
    } else {
      const ojson u = usage_json(prompt_tokens, generated, usage.cached_prompt_tokens);
      if (r.stream) {
        if (r.include_usage) ex->write(sse_event(usage_chunk_json(r.endpoint, head, u)));
        ex->write(std::string(kSseDone));
        ex->finish();
      } else {
        std::vector<ChoiceResult> results;
        for (Choice& c : choices) results.push_back({std::move(c.out), c.finish, std::move(c.logprobs)});
        ex->send(200, "application/json",
                 dump(response_json(r.endpoint, head, results, r.top_logprobs >= 0, token_fn(), u)));
      }
    }
    ex->finish();  // the error paths above already ended it; this ends a client-gone exchange
    const double secs = seconds_since(t0);
    srv.metrics_->e2e.observe(secs);
    srv.metrics_->prompt_tokens += prompt_tokens;
    srv.metrics_->generation_tokens += generated;
    srv.count(status);
    srv.log_request(number, req, status, prompt_tokens, generated, ttft, secs);
  }
};

// Hands the engine's events to the I/O thread. It holds the job and drops it there too, so a job (and the
// connection it holds) is never destroyed on the engine's thread.
class Server::Sink : public engine::RequestSink {
 public:
  Sink(HttpServer& http, std::shared_ptr<Job> job) : http_(http), job_(std::move(job)) {}
  ~Sink() override {
    http_.post([job = std::move(job_)] {});
  }
  void on_token(const engine::TokenEvent& e) override {
    http_.post([job = job_, e] { job->on_token(e); });
  }
  void on_finish(int index, engine::FinishReason reason) override {
    http_.post([job = job_, index, reason] { job->on_finish(index, reason); });
  }
  void on_done(const engine::Usage& usage, const std::string& error) override {
    http_.post([job = job_, usage, error] { job->on_done(usage, error); });
  }

 private:
  HttpServer& http_;
  std::shared_ptr<Job> job_;
};

Server::Server(engine::Engine& engine, tokenizer::Tokenizer& tok, tokenizer::ChatTemplate tmpl, ServerOptions options)
    : engine_(engine),
      tok_(tok),
      tmpl_(std::move(tmpl)),
      opt_(std::move(options)),
      metrics_(std::make_unique<Metrics>()) {
  const engine::EngineOptions& eo = engine_.options();  // ctx_size resolved by the engine
  ctx_size_ = eo.ctx_size;
  limits_.vocab = engine_.model().config().vocab;
  limits_.max_n = static_cast<int>(std::min<int64_t>(kMaxChoices, eo.max_seqs));
  if (!opt_.http.error_body) {
    opt_.http.error_body = [](int status, const std::string& message) {
      return dump(
          error_json(ApiError(status, message, {}, {}, status >= 500 ? "server_error" : "invalid_request_error")));
    };
  }
  http_ = std::make_unique<HttpServer>(
      opt_.host, opt_.port, opt_.http,
      [this](const HttpRequest& req, std::shared_ptr<Exchange> ex) { handle(req, std::move(ex)); });
}

Server::~Server() {
  // The engine's sinks post to the HTTP server's thread: no request may outlive it.
  engine_.stop(0);
  http_->stop();
}

void Server::run() {
  http_->start([this](int sig) {
    int seen = 0;
    {
      std::lock_guard lock(mu_);
      seen = ++signals_;
    }
    cv_.notify_all();
    // A second signal while draining: stop now.
    if (seen > 1) {
      std::fprintf(stderr, "ascent serve: signal %d again: exiting without waiting for running requests\n", sig);
      std::_Exit(1);
    }
  });
  engine_.start();
  std::fprintf(stderr, "ascent serve: listening on http://%s:%u\n",
               opt_.host.find(':') != std::string::npos ? ("[" + opt_.host + "]").c_str() : opt_.host.c_str(),
               static_cast<unsigned>(port()));
  std::fflush(stderr);
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return signals_ > 0; });
  }
  std::fprintf(stderr, "ascent serve: shutting down: running requests have %g s to finish\n", opt_.shutdown_timeout_s);
  http_->stop_accepting();
  engine_.stop(opt_.shutdown_timeout_s);
  // The engine has sent every request's last event; their responses still have to reach the clients.
  const auto until = Clock::now() + std::chrono::seconds(5);
  while (http_->busy() > 0 && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  http_->stop();
}

void Server::count(int status) {
  ++metrics_->by_status[status];
}

void Server::log_request(uint64_t number, const HttpRequest& req, int status, int64_t prompt, int64_t generated,
                         double ttft_s, double seconds) {
  std::string line = fmt::format("ascent serve: #{} {} {} {} {}", number, req.peer, req.method, req.path, status);
  if (prompt > 0 || generated > 0) line += fmt::format(" prompt={} generated={}", prompt, generated);
  if (ttft_s >= 0) line += fmt::format(" ttft={:.1f}ms", ttft_s * 1e3);
  line += fmt::format(" {:.1f}ms\n", seconds * 1e3);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

namespace {

bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

}  // namespace

void Server::handle(const HttpRequest& req, std::shared_ptr<Exchange> ex) {
  const uint64_t number = ++requests_;
  const auto t0 = Clock::now();
  auto reply = [&](int status, const std::string& body, const Headers& extra = {},
                   const char* type = "application/json") {
    ex->send(status, type, body, extra);
    count(status);
    log_request(number, req, status, 0, 0, -1, seconds_since(t0));
  };
  auto reply_error = [&](const ApiError& e, const Headers& extra = {}) { reply(e.status, dump(error_json(e)), extra); };

  struct Route {
    const char* path;
    const char* method;
    bool open;  // answered without the API key
  };
  static const Route kRoutes[] = {
      {"/health", "GET", true},
      {"/metrics", "GET", true},
      {"/v1/models", "GET", false},
      {"/v1/completions", "POST", false},
      {"/v1/chat/completions", "POST", false},
      {"/tokenize", "POST", false},
      {"/detokenize", "POST", false},
  };
  const std::string& path = req.path;
  const Route* route = nullptr;
  for (const Route& rt : kRoutes) {
    if (path == rt.path) route = &rt;
  }
  const bool model_path = path.starts_with("/v1/models/");
  try {
    if (!route && !model_path) {
      throw ApiError(404, fmt::format("Invalid URL ({} {})", req.method, path), {}, "unknown_url");
    }
    const char* method = route ? route->method : "GET";
    if (req.method != method) {
      return reply_error(ApiError(405, fmt::format("{} {}: method not allowed (use {})", req.method, path, method)),
                         {{"Allow", method}});
    }
    if (!opt_.api_key.empty() && !(route && route->open)) {
      const std::string auth = req.header("Authorization");
      const bool bearer = auth.size() > 7 && (auth.starts_with("Bearer ") || auth.starts_with("bearer "));
      if (!bearer || !constant_time_equal(auth.substr(7), opt_.api_key)) {
        return reply_error(ApiError(401,
                                    bearer ? "Incorrect API key provided."
                                           : "You didn't provide an API key: send it as 'Authorization: Bearer "
                                             "KEY'.",
                                    {}, "invalid_api_key"),
                           {{"WWW-Authenticate", "Bearer"}});
      }
    }
    if (path == "/health") {
      if (!engine_.ready()) return reply(503, R"({"status":"loading"})", {{"Retry-After", "1"}});
      return reply(200, R"({"status":"ok"})");
    }
    if (path == "/metrics") return reply(200, metrics_text(), {}, "text/plain; version=0.0.4; charset=utf-8");
    const ojson model_card{{"id", opt_.served_model_name},
                           {"object", "model"},
                           {"created", 0},
                           {"owned_by", "ascent"},
                           {"max_model_len", ctx_size_}};
    if (path == "/v1/models") return reply(200, dump(ojson{{"object", "list"}, {"data", {model_card}}}));
    if (model_path) {
      if (path.substr(11) != opt_.served_model_name) {
        throw ApiError(404, fmt::format("The model '{}' does not exist", path.substr(11)), "model", "model_not_found");
      }
      return reply(200, dump(model_card));
    }
    if (path == "/tokenize") {
      const nlohmann::json body = parse_json_object(req.body);
      const auto content = body.find("content");
      if (content == body.end() || !content->is_string()) bad_param("content", "'content' must be a string");
      bool add_special = false, parse_special = true;
      if (auto it = body.find("add_special"); it != body.end() && !it->is_null()) {
        if (!it->is_boolean()) bad_param("add_special", "'add_special' must be a boolean");
        add_special = it->get<bool>();
      }
      if (auto it = body.find("parse_special"); it != body.end() && !it->is_null()) {
        if (!it->is_boolean()) bad_param("parse_special", "'parse_special' must be a boolean");
        parse_special = it->get<bool>();
      }
      const auto ids = tok_.encode(content->get<std::string>(), add_special, parse_special);
      return reply(200, dump(ojson{{"tokens", ids}}));
    }
    if (path == "/detokenize") {
      const nlohmann::json body = parse_json_object(req.body);
      const auto tokens = body.find("tokens");
      if (tokens == body.end() || !tokens->is_array()) bad_param("tokens", "'tokens' must be an array of token ids");
      std::vector<int32_t> ids;
      for (const auto& t : *tokens) {
        const bool ok =
            t.is_number_integer() && (t.is_number_unsigned() ? t.get<uint64_t>() < uint64_t(tok_.size())
                                                             : t.get<int64_t>() >= 0 && t.get<int64_t>() < tok_.size());
        if (!ok) {
          bad_param("tokens",
                    fmt::format("'tokens': {} is not a token id of the vocabulary (size {})", t.dump(), tok_.size()));
        }
        ids.push_back(t.get<int32_t>());
      }
      return reply(200, dump(ojson{{"content", tok_.decode(ids)}}));
    }
    generate(req, ex, path == "/v1/completions" ? Endpoint::Completions : Endpoint::Chat, number);
  } catch (const ApiError& e) {
    reply_error(e, e.status == 503 ? Headers{{"Retry-After", "1"}} : Headers{});
  } catch (const engine::QueueFull& e) {
    reply_error(ApiError(503, fmt::format("the server is busy: {}; retry later", e.what()), {}, {}, "server_error"),
                {{"Retry-After", "1"}});
  } catch (const Error& e) {
    reply_error(ApiError(400, e.what()));
  } catch (const std::exception& e) {
    reply_error(ApiError(500, e.what(), {}, {}, "internal_error"));
  }
}

std::vector<int32_t> Server::prompt_ids(const GenerationRequest& r) {
  std::vector<int32_t> ids;
  if (r.endpoint == Endpoint::Completions) {
    ids = r.prompt_is_ids ? r.prompt_ids : tok_.encode(r.prompt_text, /*add_special=*/true, /*parse_special=*/true);
    // An empty text prompt starts from BOS alone, as `ascent generate` does.
    if (ids.empty() && tok_.bos() >= 0 && tok_.bos() < limits_.vocab) ids.push_back(tok_.bos());
    if (ids.empty()) bad_param("prompt", "'prompt' is empty and the vocabulary has no BOS token to start from");
    return ids;
  }
  ojson ctx{{"messages", r.messages}, {"add_generation_prompt", true}};
  for (const auto& [k, v] : r.template_vars.items()) ctx[k] = v;
  std::string text;
  try {
    text = tmpl_.render(ctx);
  } catch (const Error& e) {
    bad_param("messages", fmt::format("the chat template failed on these messages: {}", e.what()));
  }
  // The template writes the special tokens (BOS included) as text.
  ids = tok_.encode(text, /*add_special=*/false, /*parse_special=*/true);
  if (ids.empty()) bad_param("messages", "the chat template rendered these messages as no tokens");
  return ids;
}

void Server::generate(const HttpRequest& req, const std::shared_ptr<Exchange>& ex, Endpoint endpoint, uint64_t number) {
  const auto t0 = Clock::now();
  if (!engine_.ready()) throw ApiError(503, "the model is still loading; retry later", {}, {}, "server_error");
  GenerationRequest r = parse_generation_request(endpoint, req.body, limits_);
  if (!r.model.empty() && r.model != opt_.served_model_name) {
    throw ApiError(
        404, fmt::format("The model '{}' does not exist (this server serves '{}')", r.model, opt_.served_model_name),
        "model", "model_not_found");
  }
  std::vector<int32_t> prompt = prompt_ids(r);
  const auto n_prompt = static_cast<int64_t>(prompt.size());
  const char* prompt_param = endpoint == Endpoint::Completions ? "prompt" : "messages";
  if (n_prompt >= ctx_size_) {
    throw ApiError(400,
                   fmt::format("This model's maximum context length is {} tokens. However, your {} has {} tokens, "
                               "which leaves no room for a completion.",
                               ctx_size_, prompt_param, n_prompt),
                   prompt_param, "context_length_exceeded");
  }
  const int64_t max_tokens = r.max_tokens                        ? *r.max_tokens
                             : endpoint == Endpoint::Completions ? 16
                                                                 : ctx_size_ - n_prompt;
  if (n_prompt + max_tokens > ctx_size_) {
    throw ApiError(400,
                   fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens "
                               "({} in the {}, {} in the completion). Please reduce the length of the {} or "
                               "completion.",
                               ctx_size_, n_prompt + max_tokens, n_prompt, prompt_param, max_tokens, prompt_param),
                   "max_tokens", "context_length_exceeded");
  }
  // The sampler's own check, after the parser's: a range the two disagree on still ends as a 400 naming the field.
  try {
    engine::check_sampling(r.sampling, limits_.vocab);
  } catch (const Error& e) {
    const std::string what = e.what();
    throw ApiError(400, what, what.substr(0, what.find_first_not_of("abcdefghijklmnopqrstuvwxyz_")));
  }
  if (!r.seed_given) r.sampling.seed = std::random_device{}() * 0x100000001ull ^ std::random_device{}();

  auto job = std::make_shared<Job>(*this, ex);
  job->req.method = req.method;
  job->req.path = req.path;
  job->req.peer = req.peer;
  job->number = number;
  job->t0 = t0;
  job->prompt_tokens = n_prompt;
  job->head = {
      .id = (endpoint == Endpoint::Completions ? "cmpl-" : "chatcmpl-") + random_hex(24),
      .created =
          std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count(),
      .model = opt_.served_model_name};
  for (int i = 0; i < r.n; ++i) {
    job->choices.push_back({.text = ChoiceText(tok_, r.stop, prompt.back())});
  }
  job->open = r.n;

  engine::RequestParams params;
  params.prompt = std::move(prompt);
  params.sampling = r.sampling;
  params.max_tokens = max_tokens;
  params.n = r.n;
  params.ignore_eos = r.ignore_eos;
  // The tokenizer's EOS and every end id the model's files name, as `ascent generate` stops.
  params.end_ids = {tok_.eos()};
  for (int32_t e : engine_.model().config().end_ids) params.end_ids.push_back(e);
  params.top_logprobs = r.top_logprobs;
  job->r = std::move(r);
  // The response starts only once the engine took the request, so a refusal (503, 400) is still a plain error.
  job->id = engine_.submit(std::move(params), std::make_shared<Sink>(*http_, job));
  ex->on_gone([this, job] {
    job->client_gone = true;
    if (!job->cancelled) {
      job->cancelled = true;
      engine_.cancel(job->id);
    }
  });
  if (job->r.stream) {
    ex->start_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
    if (endpoint == Endpoint::Chat) {
      for (int i = 0; i < job->r.n; ++i) job->write_chunk({.index = i, .role_only = true});
    }
  }
}

std::string Server::metrics_text() {
  const engine::EngineStats s = engine_.stats();
  const Metrics& m = *metrics_;
  PrometheusWriter w;
  std::vector<std::pair<Labels, double>> by_status;
  for (const auto& [code, n] : m.by_status) by_status.push_back({{{"code", std::to_string(code)}}, double(n)});
  w.counter("ascent_requests_total", "HTTP requests answered, by status code (499: the client left first)", by_status);
  w.counter("ascent_prompt_tokens_total", "Prompt tokens of finished generation requests", double(m.prompt_tokens));
  w.counter("ascent_generation_tokens_total", "Tokens generated for finished generation requests",
            double(m.generation_tokens));
  w.histogram("ascent_time_to_first_token_seconds", "From a request's arrival to its first generated token", m.ttft);
  w.histogram("ascent_inter_token_latency_seconds", "Between successive tokens of one choice", m.itl);
  w.histogram("ascent_e2e_request_latency_seconds", "From a generation request's arrival to its last event", m.e2e);
  w.gauge("ascent_num_requests_running", "Sequences running in the engine", double(s.running));
  w.gauge("ascent_num_requests_waiting", "Sequences waiting in the engine's queue", double(s.waiting));
  w.gauge("ascent_kv_blocks_used", "KV cache blocks holding running sequences", double(s.kv_blocks_used));
  w.gauge("ascent_kv_blocks_free", "KV cache blocks free (cached prefixes included)",
          double(s.kv_blocks_total - s.kv_blocks_used));
  w.gauge("ascent_kv_blocks_cached", "Free KV cache blocks holding a reusable prefix", double(s.kv_blocks_cached));
  w.counter("ascent_prefix_cache_queries_total", "Full prompt blocks looked up in the prefix cache",
            double(s.prefix_queries));
  w.counter("ascent_prefix_cache_hits_total", "Full prompt blocks found in the prefix cache", double(s.prefix_hits));
  w.gauge("ascent_prefix_cache_hit_rate", "prefix_cache_hits_total / prefix_cache_queries_total (0 before any)",
          s.prefix_queries > 0 ? double(s.prefix_hits) / double(s.prefix_queries) : 0.0);
  w.counter("ascent_preemptions_total", "Sequences preempted for want of KV blocks", double(s.preemptions));
  w.counter("ascent_engine_steps_total", "Engine steps run", double(s.steps));
  w.counter("ascent_engine_prompt_tokens_total", "Prompt tokens the engine computed (recomputation counts again)",
            double(s.prompt_tokens));
  w.counter("ascent_engine_generated_tokens_total", "Tokens the engine generated (cancelled requests' included)",
            double(s.generated_tokens));
  std::vector<uint64_t> counts(s.batch_tokens_hist.begin(), s.batch_tokens_hist.end());
  std::vector<double> bounds(std::begin(engine::EngineStats::kBatchBuckets),
                             std::end(engine::EngineStats::kBatchBuckets));
  w.histogram("ascent_batch_tokens", "Engine steps by tokens per step", bounds, counts, double(s.batch_tokens_sum));
  return w.text();
}

}  // namespace ascent::serve
