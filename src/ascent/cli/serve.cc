// ascent serve: an OpenAI-compatible HTTP server over the serving engine (src/ascent/serve/server.h).
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "ascent/base/error.h"
#include "ascent/cli/commands.h"
#include "ascent/cli/runtime_flags.h"
#include "ascent/engine/engine.h"
#include "ascent/model/model_tokenizer.h"
#include "ascent/serve/server.h"

namespace ascent::cli {
namespace {

// "8M", "512K", "1.5G", "4096": bytes, the suffixes powers of 1024.
int64_t parse_bytes(const std::string& text, const char* flag) {
  size_t used = 0;
  double v = -1;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = text.substr(used);
  double scale = 0;
  if (unit.empty() || unit == "B") {
    scale = 1;
  } else if (unit == "K" || unit == "KiB" || unit == "k") {
    scale = 1024.0;
  } else if (unit == "M" || unit == "MiB") {
    scale = 1024.0 * 1024;
  } else if (unit == "G" || unit == "GiB") {
    scale = 1024.0 * 1024 * 1024;
  } else if (unit == "T" || unit == "TiB") {
    scale = 1024.0 * 1024 * 1024 * 1024;
  }
  ASCENT_CHECK(used > 0 && scale > 0 && v >= 0 && v * scale < 9.0e18,
               "{} {}: not a size in bytes (a number with an optional K, M, G or T suffix, powers of 1024)", flag,
               text);
  return static_cast<int64_t>(v * scale);
}

struct Options {
  std::string model, tokenizer, chat_template;
  serve::ServerOptions server;
  int port = 8080;
  std::string max_body = "8M", kv_memory = "0";
  double idle_timeout = 60, request_timeout = 60;
  int threads = 0;
  engine::EngineOptions engine;
  bool no_prefix_caching = false;
  RuntimeFlags runtime;
};

// The name /v1/models lists: the model folder's or file's base name.
std::string base_name(const std::string& path) {
  std::filesystem::path p = std::filesystem::path(path).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  const std::string name = p.filename().string();
  return name.empty() ? path : name;
}

void run(Options& o) {
  // The flags' own checks before the model loads.
  ASCENT_CHECK(o.port >= 0 && o.port <= 65535, "--port: must be in [0, 65535], got {}", o.port);
  ASCENT_CHECK(o.idle_timeout > 0, "--idle-timeout: must be > 0 seconds, got {}", o.idle_timeout);
  ASCENT_CHECK(o.request_timeout > 0, "--request-timeout: must be > 0 seconds, got {}", o.request_timeout);
  ASCENT_CHECK(o.server.shutdown_timeout_s >= 0, "--shutdown-timeout: must be >= 0 seconds, got {}",
               o.server.shutdown_timeout_s);
  const int64_t max_body = parse_bytes(o.max_body, "--max-body");
  ASCENT_CHECK(max_body > 0, "--max-body: must be more than 0 bytes");
  o.engine.kv_memory_bytes = parse_bytes(o.kv_memory, "--kv-memory");
  o.engine.prefix_caching = !o.no_prefix_caching;
  o.engine.kv_type = parse_dtype(o.runtime.kv_type);
  if (o.server.api_key.empty()) {
    if (const char* k = std::getenv("ASCENT_API_KEY")) o.server.api_key = k;
  }
  o.server.port = static_cast<uint16_t>(o.port);
  o.server.http.max_body = static_cast<uint64_t>(max_body);
  o.server.http.idle_timeout_s = o.idle_timeout;
  o.server.http.write_timeout_s = o.idle_timeout;
  o.server.http.request_timeout_s = o.request_timeout;
  if (o.server.served_model_name.empty()) o.server.served_model_name = base_name(o.model);
  // The engine compiles every plan it needs at start and runs no single-sequence Session to trace.
  ASCENT_CHECK(o.runtime.profile.empty() && o.runtime.memory_csv.empty(),
               "--profile and --memory-csv: not available in serve (ascent profile traces a run)");
  ASCENT_CHECK(o.runtime.warmup == 0, "--warmup: serve compiles every plan the engine needs before it listens");
  set_threads(o.threads);
  o.runtime.before_load();

  auto m = model::Model::load(o.model, o.runtime.load_options());
  auto tok = model::load_tokenizer(*m, o.tokenizer);
  auto found = serve::find_chat_template(*m, *tok, o.tokenizer, o.chat_template);
  // The engine compiles its own plans (every step shape) before the server reports ready.
  engine::Engine engine(*m, o.engine);
  serve::Server server(engine, *tok, std::move(found.tmpl), o.server);
  std::fprintf(stderr, "ascent serve: model %s as '%s', chat template: %s\n", o.model.c_str(),
               o.server.served_model_name.c_str(), found.from.c_str());
  server.run();
}

}  // namespace

void add_serve(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* c = app.add_subcommand("serve", "serve a model over an OpenAI-compatible HTTP API");
  c->add_option("-m,--model", o->model, kModelHelp)->required();
  c->add_option("--host", o->server.host, "address to listen on")->capture_default_str();
  c->add_option("--port", o->port, "port to listen on (0: a free one, printed when ready)")->capture_default_str();
  c->add_option("--api-key", o->server.api_key,
                "require 'Authorization: Bearer KEY' (default: $ASCENT_API_KEY; /health and /metrics stay open)");
  c->add_option("--served-model-name", o->server.served_model_name,
                "the model's name in the API (default: the model folder's or file's name)");
  c->add_option("-t,--threads", o->threads, "kernel threads (0: all cores)");
  c->add_option("--max-body", o->max_body, "largest request body, bytes with an optional K/M/G suffix")
      ->capture_default_str();
  c->add_option("--idle-timeout", o->idle_timeout,
                "seconds a keep-alive connection may wait for its next request (and a response write may stall)")
      ->capture_default_str();
  c->add_option("--request-timeout", o->request_timeout, "seconds a request may take to arrive whole")
      ->capture_default_str();
  c->add_option("--shutdown-timeout", o->server.shutdown_timeout_s,
                "seconds running requests may finish after SIGTERM or SIGINT")
      ->capture_default_str();
  c->add_option("--chat-template", o->chat_template,
                "a Jinja chat template file (or a tokenizer_config.json) to use instead of the model's; without "
                "either, ChatML");
  c->add_option("--tokenizer", o->tokenizer, "tokenizer.bin, tokenizer.json, .gguf or folder");
  c->add_option("-c,--ctx-size", o->engine.ctx_size, "positions per sequence (0: the model's, at most 4096)")
      ->capture_default_str();
  c->add_option("--max-seqs", o->engine.max_seqs, "sequences running at once")->capture_default_str();
  c->add_option("--max-batch-tokens", o->engine.max_batch_tokens, "tokens per engine step")->capture_default_str();
  c->add_option("--prefill-chunk", o->engine.prefill_chunk,
                "prompt tokens per step while sequences decode (smaller: even gaps between tokens; larger: prompts "
                "finish sooner)")
      ->capture_default_str();
  c->add_option("--kv-memory", o->kv_memory,
                "KV cache size, bytes with an optional K/M/G suffix (0: ctx-size x max-seqs positions)")
      ->capture_default_str();
  c->add_option("--kv-block", o->engine.kv_block, "positions per KV block (a multiple of 16)")->capture_default_str();
  c->add_flag("--no-prefix-caching", o->no_prefix_caching, "do not reuse the KV blocks of a shared prompt prefix");
  c->add_option("--max-queue-delay-us", o->engine.max_queue_delay_us,
                "microseconds an idle engine waits for more requests before a step")
      ->capture_default_str();
  c->add_option("--max-queued", o->engine.max_queued, "requests waiting beyond which new ones get 503")
      ->capture_default_str();
  o->runtime.add_to(c);
  c->callback([o] { run(*o); });
}

}  // namespace ascent::cli
