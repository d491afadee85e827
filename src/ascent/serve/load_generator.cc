#include "ascent/serve/load_generator.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <exception>
#include <iterator>

#include "ascent/base/error.h"

namespace ascent::serve {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {

// Common English words, each one token after a space in the Llama 2, Llama 3, Qwen3 and GPT-2 vocabularies (those in
// ../shared/tokenizers), so a prompt of P words is about P tokens. 200 of them: 40,000 distinct leading pairs.
constexpr const char* kWords[] = {
    "the",     "of",    "and",    "to",      "in",      "is",     "was",    "that",  "for",    "on",     "with",
    "as",      "by",    "at",     "from",    "his",     "her",    "they",   "we",    "you",    "this",   "but",
    "not",     "are",   "or",     "have",    "had",     "be",     "one",    "all",   "there",  "which",  "when",
    "their",   "were",  "can",    "time",    "more",    "will",   "would",  "about", "if",     "out",    "up",
    "so",      "what",  "some",   "into",    "them",    "could",  "other",  "than",  "then",   "only",   "its",
    "new",     "like",  "also",   "after",   "first",   "two",    "made",   "over",  "may",    "did",    "down",
    "most",    "any",   "where",  "just",    "people",  "years",  "way",    "many",  "much",   "before", "good",
    "through", "back",  "long",   "day",     "well",    "work",   "life",   "own",   "world",  "same",   "last",
    "still",   "great", "might",  "never",   "under",   "while",  "found",  "place", "those",  "both",   "city",
    "home",    "water", "house",  "school",  "state",   "part",   "number", "end",   "high",   "small",  "war",
    "old",     "year",  "name",   "right",   "country", "family", "power",  "book",  "hand",   "road",   "night",
    "story",   "light", "garden", "music",   "game",    "money",  "point",  "room",  "car",    "food",   "tree",
    "sea",     "dog",   "king",   "man",     "woman",   "child",  "land",   "door",  "table",  "fire",   "field",
    "river",   "town",  "street", "body",    "head",    "face",   "eye",    "voice", "word",   "line",   "paper",
    "group",   "team",  "party",  "company", "system",  "level",  "order",  "court", "church", "market", "office",
    "army",    "horse", "ship",   "train",   "bird",    "sun",    "moon",   "star",  "rain",   "snow",   "wind",
    "stone",   "gold",  "iron",   "glass",   "bread",   "milk",   "tea",    "wine",  "apple",  "black",  "white",
    "red",     "green", "blue",   "young",   "open",    "full",   "hard",   "free",  "late",   "early",  "big",
    "short",   "real",
};
static_assert(std::size(kWords) == 200);

// splitmix64: a specified stream, so a seed makes the same prompts on any platform.
uint64_t next(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

const char* word(uint64_t& state) {
  return kWords[next(state) % std::size(kWords)];
}

}  // namespace

int prompt_vocabulary_size() {
  return static_cast<int>(std::size(kWords));
}

std::string make_prompt(uint64_t seed, int index, int prompt_words, int shared_prefix) {
  std::string out;
  auto add = [&](const char* w) {
    if (!out.empty()) out += ' ';
    out += w;
  };
  uint64_t shared = seed ^ 0x5eed5eed5eed5eedull;
  for (int i = 0; i < shared_prefix; ++i) add(word(shared));
  uint64_t own = seed;
  const uint64_t offsets = next(own);
  own ^= static_cast<uint64_t>(index) * 0xd1b54a32d192ed03ull;
  const auto n = static_cast<uint64_t>(std::size(kWords));
  const auto k = static_cast<uint64_t>(index);
  for (int i = shared_prefix; i < prompt_words; ++i) {
    if (i == shared_prefix) {
      add(kWords[(k + offsets) % n]);
    } else if (i == shared_prefix + 1) {
      add(kWords[(k / n + (offsets >> 32)) % n]);
    } else {
      add(word(own));
    }
  }
  return out;
}

std::string completions_path(const Url& url) {
  std::string path = url.path;
  while (path.ends_with('/')) path.pop_back();
  if (path.ends_with("/v1/completions")) return path;
  if (path.ends_with("/v1")) return path + "/completions";
  return path + "/v1/completions";
}

namespace {

std::string models_path(const Url& url) {
  std::string path = completions_path(url);
  return path.substr(0, path.size() - std::string_view("completions").size()) + "models";
}

std::vector<std::pair<std::string, std::string>> auth_headers(const LoadOptions& o) {
  if (o.api_key.empty()) return {};
  return {{"Authorization", "Bearer " + o.api_key}};
}

// Runs one coroutine to its end on a fresh io_context; its exception, if any, is rethrown here.
template <class T>
T run_one(asio::awaitable<T> task) {
  asio::io_context io;
  std::exception_ptr error;
  T value{};
  asio::co_spawn(io, std::move(task), [&](std::exception_ptr e, T v) {
    error = e;
    value = std::move(v);
  });
  io.run();
  if (error) std::rethrow_exception(error);
  return value;
}

// Text from the server, cut to `most` bytes and on one line, for an error message.
std::string quote(std::string_view text, size_t most) {
  std::string out(text.substr(0, most));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  return text.size() > most ? out + "..." : out;
}

// What an error response said: its JSON error message where it has one (OpenAI's {"error": {"message"}}, or a
// plain string), else the start of its body.
std::string error_text(const std::string& body) {
  const auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("error")) {
    const auto& e = j["error"];
    if (e.is_string()) return quote(e.get_ref<const std::string&>(), 300);
    if (e.is_object() && e.contains("message") && e["message"].is_string()) {
      return quote(e["message"].get_ref<const std::string&>(), 300);
    }
  }
  return quote(body, 200);
}

}  // namespace

std::optional<std::string> served_model(const LoadOptions& o) {
  HttpRequest req{.method = "GET", .target = models_path(o.url), .body = {}, .headers = auth_headers(o)};
  std::string body;
  const int status = run_one(http_request(o.url, req, o.timeout, [&](int, std::string_view b) { body += b; }));
  if (status == 401 || status == 403) fail("HTTP {} for {}: {} (--api-key)", status, req.target, error_text(body));
  if (status != 200) return std::nullopt;
  const auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty()) return std::nullopt;
  const auto& first = j["data"][0];
  if (!first.is_object() || !first.contains("id") || !first["id"].is_string()) return std::nullopt;
  return first["id"].get<std::string>();
}

namespace {

class Run {
 public:
  Run(const LoadOptions& o, const std::function<void(const LoadProgress&)>& on_progress)
      : o_(o), on_progress_(on_progress), records_(static_cast<size_t>(o.requests)) {}

  LoadResult go(std::chrono::milliseconds every, asio::io_context& io) {
    start_ = Clock::now();
    std::exception_ptr error;
    auto keep = [&](std::exception_ptr e) {
      if (e && !error) error = e;
    };
    for (int c = 0; c < o_.clients; ++c) asio::co_spawn(io, client(c), keep);
    asio::steady_timer timer(io);
    timer_ = &timer;
    asio::co_spawn(io, progress(timer, every), keep);
    io.run();
    if (error) std::rethrow_exception(error);
    on_progress_(snapshot());
    LoadResult out;
    double end = 0;
    for (const auto& r : records_) end = std::max(end, r.start_s + r.e2e_s);
    out.wall_s = end;
    out.records = std::move(records_);
    return out;
  }

 private:
  double since_start() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  LoadProgress snapshot() const {
    return {.sent = sent_, .done = done_, .errors = errors_, .tokens = tokens_, .elapsed_s = since_start()};
  }

  asio::awaitable<void> progress(asio::steady_timer& timer, std::chrono::milliseconds every) {
    while (done_ < o_.requests) {
      timer.expires_after(every);
      boost::system::error_code ec;
      co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      if (done_ < o_.requests) on_progress_(snapshot());
    }
  }

  asio::awaitable<void> client(int c) {
    while (sent_ < o_.requests) {
      const int index = sent_++;
      co_await one(index, c);
      ++done_;
      if (!records_[static_cast<size_t>(index)].error.empty()) ++errors_;
      if (done_ == o_.requests) timer_->cancel();
    }
  }

  std::string body(int index) const {
    nlohmann::json j;
    if (!o_.model.empty()) j["model"] = o_.model;
    j["prompt"] = make_prompt(o_.seed, index, o_.prompt_words, o_.shared_prefix);
    j["max_tokens"] = o_.max_tokens;
    j["temperature"] = o_.temperature;
    j["stream"] = o_.stream;
    if (o_.stream) j["stream_options"] = {{"include_usage", true}};
    j["ignore_eos"] = true;
    return j.dump();
  }

  // One chunk of the response (the whole response unstreamed): its text's arrival and the usage it reports.
  void chunk(RequestRecord& r, const nlohmann::json& j, double at, double& last_text) {
    if (!j.is_object()) {
      if (r.error.empty()) r.error = "a response chunk is not a JSON object";
      return;
    }
    if (j.contains("error")) {
      if (r.error.empty()) r.error = "the server reported: " + error_text(j.dump());
      return;
    }
    if (j.contains("choices") && j["choices"].is_array()) {
      for (const auto& choice : j["choices"]) {
        if (!choice.is_object() || !choice.contains("text") || !choice["text"].is_string()) continue;
        if (choice["text"].get_ref<const std::string&>().empty()) continue;
        if (r.text_chunks == 0) {
          r.ttft_s = at - r.start_s;
        } else {
          r.gaps_s.push_back(at - last_text);
        }
        last_text = at;
        ++r.text_chunks;
        if (o_.stream) ++tokens_;
      }
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      const auto& u = j["usage"];
      if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer()) {
        r.completion_tokens = u["completion_tokens"].get<int64_t>();
        r.usage = true;
      }
      if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer()) {
        r.prompt_tokens = u["prompt_tokens"].get<int64_t>();
      }
    }
  }

  asio::awaitable<void> one(int index, int c) {
    RequestRecord& r = records_[static_cast<size_t>(index)];
    r.index = index;
    r.client = c;
    HttpRequest req{.method = "POST", .target = completions_path(o_.url), .body = body(index), .headers = {}};
    req.headers = auth_headers(o_);
    if (o_.stream) req.headers.emplace_back("Accept", "text/event-stream");
    SseParser sse;
    std::vector<SseParser::Event> events;
    std::string raw;  // an error response, or the whole response unstreamed
    bool done = false;
    double last_text = 0;
    auto on_body = [&](int status, std::string_view bytes) {
      const double at = since_start();
      if (status != 200 || !o_.stream) {
        raw += bytes;
        return;
      }
      events.clear();
      sse.feed(bytes, events);
      for (const auto& e : events) {
        if (done) {
          if (r.error.empty()) r.error = "data after data: [DONE]";
          continue;
        }
        if (e.data == "[DONE]") {
          done = true;
          continue;
        }
        const auto j = nlohmann::json::parse(e.data, nullptr, /*allow_exceptions=*/false);
        if (j.is_discarded()) {
          if (r.error.empty()) r.error = "bad JSON in the stream: " + quote(e.data, 100);
          continue;
        }
        if (e.name == "error" && r.error.empty()) r.error = "the server reported: " + error_text(e.data);
        chunk(r, j, at, last_text);
      }
    };
    r.start_s = since_start();
    try {
      r.status = co_await http_request(o_.url, req, o_.timeout, on_body);
    } catch (const Error& e) {
      r.error = e.what();
    }
    r.e2e_s = since_start() - r.start_s;
    if (!r.error.empty()) co_return;
    if (r.status != 200) {
      r.error = fmt::format("HTTP {}: {}", r.status, error_text(raw));
    } else if (!o_.stream) {
      const auto j = nlohmann::json::parse(raw, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded()) {
        r.error = "the response is not JSON: " + quote(raw, 100);
      } else {
        chunk(r, j, r.start_s + r.e2e_s, last_text);
        tokens_ += r.usage ? r.completion_tokens : r.text_chunks;
      }
    } else if (!done) {
      r.error = sse.pending() ? "the stream ended inside an event" : "the stream ended before data: [DONE]";
    }
    if (!r.usage) r.completion_tokens = r.text_chunks;
    if (r.error.empty() && r.text_chunks == 0 && o_.max_tokens > 0) r.error = "no text came back";
  }

  const LoadOptions& o_;
  const std::function<void(const LoadProgress&)>& on_progress_;
  std::vector<RequestRecord> records_;
  Clock::time_point start_;
  asio::steady_timer* timer_ = nullptr;
  int sent_ = 0, done_ = 0, errors_ = 0;
  int64_t tokens_ = 0;
};

}  // namespace

LoadResult run_load(const LoadOptions& o, std::chrono::milliseconds every,
                    const std::function<void(const LoadProgress&)>& on_progress) {
  ASCENT_CHECK(o.clients >= 1 && o.requests >= 1, "at least one client and one request");
  asio::io_context io;
  Run run(o, on_progress);
  return run.go(every, io);
}

Percentiles percentiles(std::vector<double> values) {
  Percentiles p;
  p.n = values.size();
  if (values.empty()) return p;
  std::ranges::sort(values);
  auto at = [&](double q) {
    const double pos = q * static_cast<double>(values.size() - 1);
    const auto lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, values.size() - 1);
    return values[lo] + (values[hi] - values[lo]) * (pos - static_cast<double>(lo));
  };
  p.p50 = at(0.50);
  p.p90 = at(0.90);
  p.p99 = at(0.99);
  return p;
}

}  // namespace ascent::serve
