// ascent loadtest: load on an OpenAI-compatible completion server (ascent serve, llama.cpp's llama-server, vLLM):
// --clients clients each send streamed POST /v1/completions requests one after another, --requests in all. It
// reports generated tokens per second over the run, and percentiles of time to first token, of the gaps between
// tokens and of whole requests.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ascent/base/atomic_write.h"
#include "ascent/base/error.h"
#include "ascent/cli/commands.h"
#include "ascent/serve/load_generator.h"

namespace ascent::cli {
namespace {

struct Options {
  std::string url, jsonl, model, api_key;
  int clients = 1, requests = 1, prompt_tokens = 0, max_tokens = 0, shared_prefix = 0;
  uint64_t seed = 0;
  bool stream = true;
  double temperature = 0, timeout_s = 600;
};

nlohmann::json percentile_json(const serve::Percentiles& p) {
  if (p.n == 0) return nullptr;
  return {{"p50", p.p50 * 1e3}, {"p90", p.p90 * 1e3}, {"p99", p.p99 * 1e3}, {"n", p.n}};
}

void run(const Options& f) {
  ASCENT_CHECK(f.clients >= 1, "--clients: at least 1, got {}", f.clients);
  ASCENT_CHECK(f.requests >= 1, "--requests: at least 1, got {}", f.requests);
  ASCENT_CHECK(f.prompt_tokens >= 1, "--prompt-tokens: at least 1, got {}", f.prompt_tokens);
  ASCENT_CHECK(f.max_tokens >= 1, "--max-tokens: at least 1, got {}", f.max_tokens);
  ASCENT_CHECK(f.shared_prefix >= 0 && f.shared_prefix <= f.prompt_tokens,
               "--shared-prefix {}: must be from 0 to --prompt-tokens {}", f.shared_prefix, f.prompt_tokens);
  ASCENT_CHECK(f.temperature >= 0, "--temperature: must be >= 0, got {}", f.temperature);
  ASCENT_CHECK(
      std::ranges::none_of(f.api_key, [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }),
      "--api-key: holds a control character, which cannot go in an HTTP header");
  ASCENT_CHECK(f.timeout_s > 0 && f.timeout_s <= 1e6, "--timeout: must be > 0 and at most 1e6 seconds, got {}",
               f.timeout_s);
  // Each running request holds a socket; past the descriptor limit every one of them would fail on its own.
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY) {
    const auto most = static_cast<int64_t>(files.rlim_cur) - 32;
    ASCENT_CHECK(f.clients <= most, "--clients {}: more than this process's {} open files allow (ulimit -n)", f.clients,
                 files.rlim_cur);
  }

  serve::LoadOptions o;
  o.url = serve::parse_url(f.url, "--url");
  o.clients = f.clients;
  o.requests = f.requests;
  o.prompt_words = f.prompt_tokens;
  o.shared_prefix = f.shared_prefix;
  o.max_tokens = f.max_tokens;
  o.model = f.model;
  o.api_key = f.api_key;
  o.seed = f.seed;
  o.stream = f.stream;
  o.temperature = f.temperature;
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(f.timeout_s * 1e3));

  // Opened before the run, so a --jsonl that cannot be written fails now rather than after it.
  std::unique_ptr<AtomicFile> jsonl;
  if (!f.jsonl.empty()) jsonl = with_context("--jsonl", [&] { return std::make_unique<AtomicFile>(f.jsonl); });

  // The server is asked for its model first: that also finds a URL with no server behind it before the run.
  std::optional<std::string> served;
  try {
    served = serve::served_model(o);
  } catch (const Error& e) {
    fail("--url {}: {}", f.url, e.what());
  }
  if (o.model.empty() && served) o.model = *served;

  const std::string endpoint = fmt::format("http://{}:{}{}", o.url.host, o.url.port, serve::completions_path(o.url));
  std::fprintf(stderr, "loadtest: %s, model %s, %d clients, %d requests, %d-word prompts (%d shared), %d tokens each\n",
               endpoint.c_str(), o.model.empty() ? "(not named)" : o.model.c_str(), o.clients, o.requests,
               o.prompt_words, o.shared_prefix, o.max_tokens);
  const bool tty = ::isatty(STDERR_FILENO) == 1;
  auto progress = [&](const serve::LoadProgress& p) {
    std::fprintf(stderr, "%sloadtest: %d/%d done, %d running, %lld tokens, %.1f tok/s, %d errors, %.1f s%s",
                 tty ? "\r" : "", p.done, o.requests, p.sent - p.done, static_cast<long long>(p.tokens),
                 p.elapsed_s > 0 ? static_cast<double>(p.tokens) / p.elapsed_s : 0.0, p.errors, p.elapsed_s,
                 tty ? "\x1b[K" : "\n");
    std::fflush(stderr);
  };
  const serve::LoadResult res = serve::run_load(o, std::chrono::milliseconds(tty ? 500 : 2000), progress);
  if (tty) std::fputc('\n', stderr);

  int errors = 0, short_runs = 0;
  int64_t generated = 0, prompt_sum = 0, prompt_n = 0;
  std::vector<double> ttft, gaps, e2e;
  for (const auto& r : res.records) {
    if (!r.error.empty()) {
      ++errors;
      continue;
    }
    generated += r.completion_tokens;
    if (r.prompt_tokens >= 0) {
      prompt_sum += r.prompt_tokens;
      ++prompt_n;
    }
    if (r.completion_tokens < o.max_tokens) ++short_runs;
    if (r.ttft_s >= 0) ttft.push_back(r.ttft_s);
    gaps.insert(gaps.end(), r.gaps_s.begin(), r.gaps_s.end());
    e2e.push_back(r.e2e_s);
  }
  const double tps = res.wall_s > 0 ? static_cast<double>(generated) / res.wall_s : 0;
  const auto p_ttft = serve::percentiles(ttft), p_gap = serve::percentiles(gaps), p_e2e = serve::percentiles(e2e);

  std::printf("| requests | errors | generated tokens | wall s | generated tok/s | prompt tokens (mean) |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|\n");
  std::printf(
      "| %d | %d | %lld | %.2f | %.2f | %s |\n\n", o.requests, errors, static_cast<long long>(generated), res.wall_s,
      tps,
      prompt_n ? fmt::format("{:.1f}", static_cast<double>(prompt_sum) / static_cast<double>(prompt_n)).c_str() : "-");
  std::printf("| ms | p50 | p90 | p99 | n |\n|---|---:|---:|---:|---:|\n");
  auto row = [](const char* name, const serve::Percentiles& p) {
    if (p.n == 0) {
      std::printf("| %s | - | - | - | 0 |\n", name);
    } else {
      std::printf("| %s | %.1f | %.1f | %.1f | %zu |\n", name, p.p50 * 1e3, p.p90 * 1e3, p.p99 * 1e3, p.n);
    }
  };
  row("TTFT", p_ttft);
  row("inter-token", p_gap);
  row("e2e", p_e2e);
  std::fflush(stdout);

  if (jsonl) {
    std::string out;
    for (const auto& r : res.records) {
      nlohmann::json j = {{"type", "request"},
                          {"index", r.index},
                          {"client", r.client},
                          {"status", r.status},
                          {"error", r.error.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.error)},
                          {"start_ms", r.start_s * 1e3},
                          {"ttft_ms", r.ttft_s >= 0 ? nlohmann::json(r.ttft_s * 1e3) : nlohmann::json(nullptr)},
                          {"e2e_ms", r.e2e_s * 1e3},
                          {"completion_tokens", r.completion_tokens},
                          {"usage", r.usage},
                          {"prompt_tokens", r.prompt_tokens >= 0 ? nlohmann::json(r.prompt_tokens) : nullptr},
                          {"text_chunks", r.text_chunks}};
      nlohmann::json gaps_ms = nlohmann::json::array();
      for (const double g : r.gaps_s) gaps_ms.push_back(g * 1e3);
      j["itl_ms"] = std::move(gaps_ms);
      out += j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    }
    nlohmann::json s = {{"type", "summary"},
                        {"url", endpoint},
                        {"model", o.model},
                        {"clients", o.clients},
                        {"requests", o.requests},
                        {"prompt_words", o.prompt_words},
                        {"shared_prefix", o.shared_prefix},
                        {"max_tokens", o.max_tokens},
                        {"stream", o.stream},
                        {"temperature", o.temperature},
                        {"seed", o.seed},
                        {"errors", errors},
                        {"generated_tokens", generated},
                        {"wall_s", res.wall_s},
                        {"generated_tok_per_s", tps},
                        {"ttft_ms", percentile_json(p_ttft)},
                        {"itl_ms", percentile_json(p_gap)},
                        {"e2e_ms", percentile_json(p_e2e)}};
    out += s.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    jsonl->write(out);
    jsonl->commit();
  }

  if (short_runs > 0) {
    std::fprintf(stderr,
                 "loadtest: warning: %d requests generated fewer than --max-tokens %d tokens (does the server honour "
                 "ignore_eos?)\n",
                 short_runs, o.max_tokens);
  }
  if (errors > 0) {
    // The distinct causes, each with the first request that met it.
    std::map<std::string, std::pair<int, int>> causes;  // error -> (first index, count)
    for (const auto& r : res.records) {
      if (r.error.empty()) continue;
      auto [it, fresh] = causes.try_emplace(r.error, r.index, 0);
      ++it->second.second;
    }
    int shown = 0;
    for (const auto& [what, where] : causes) {
      if (++shown > 5) break;
      std::fprintf(stderr, "loadtest: %d requests failed (request %d first): %s\n", where.second, where.first,
                   what.c_str());
    }
    fail("{} of {} requests to {} failed", errors, o.requests, endpoint);
  }
}

}  // namespace

void add_loadtest(CLI::App& app) {
  auto f = std::make_shared<Options>();
  auto* c = app.add_subcommand("loadtest", "load an OpenAI-compatible completion server and measure it");
  c->add_option("--url", f->url, "the server, http://HOST[:PORT][/PATH] (requests go to PATH/v1/completions)")
      ->required();
  c->add_option("--clients", f->clients, "clients sending at the same time, each one request after another")
      ->capture_default_str();
  c->add_option("--requests", f->requests, "requests in all")->capture_default_str();
  c->add_option("--prompt-tokens", f->prompt_tokens, "each prompt's length: words, about one token each")->required();
  c->add_option("--max-tokens", f->max_tokens, "tokens each request generates (sent with ignore_eos)")->required();
  c->add_option("--shared-prefix", f->shared_prefix, "words at the start of the prompt that every request shares")
      ->capture_default_str();
  c->add_option("--jsonl", f->jsonl, "write one JSON object per request and a summary object to this file");
  c->add_option("--model", f->model, "the request's model (default: the first the server's /v1/models names)");
  c->add_option("--api-key", f->api_key, "sent as Authorization: Bearer KEY");
  c->add_option("--seed", f->seed, "the prompts' words come from this seed")->capture_default_str();
  c->add_flag("--stream,!--no-stream", f->stream, "stream tokens as server-sent events (default)");
  c->add_option("--temperature", f->temperature, "sampling temperature")->capture_default_str();
  c->add_option("--timeout", f->timeout_s, "seconds a request may wait for the connection or its next bytes")
      ->capture_default_str();
  c->callback([f] { run(*f); });
}

}  // namespace ascent::cli
