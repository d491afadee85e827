// ascent serve's parts that need no engine: request parsing and checking (each bad field a 400 naming it), the JSON of
// responses, chunks and errors, Prometheus text, a choice's text through UTF-8 and stop strings, and the HTTP layer
// driven over a real socket by a plain POSIX client.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "ascent/model/model_tokenizer.h"
#include "ascent/serve/api.h"
#include "ascent/serve/choice_text.h"
#include "ascent/serve/http.h"
#include "ascent/serve/metrics.h"

namespace ascent::serve {
namespace {

using ojson = nlohmann::ordered_json;

const RequestLimits kLimits{.vocab = 100, .max_n = 4};

GenerationRequest completion(const std::string& body) {
  return parse_generation_request(Endpoint::Completions, body, kLimits);
}
GenerationRequest chat(const std::string& body) {
  return parse_generation_request(Endpoint::Chat, body, kLimits);
}

// The status and param of the ApiError that parsing `body` throws ("" when it parses).
std::pair<int, std::string> refusal(Endpoint e, const std::string& body) {
  try {
    parse_generation_request(e, body, kLimits);
  } catch (const ApiError& err) {
    return {err.status, err.param};
  }
  return {0, ""};
}

TEST(ServeApi, CompletionDefaultsAreOpenAIs) {
  const auto r = completion(R"({"model": "m", "prompt": "Once upon"})");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt_text, "Once upon");
  EXPECT_FALSE(r.prompt_is_ids);
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_EQ(r.sampling.top_p, 1.0f);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_EQ(r.sampling.min_p, 0.0f);
  EXPECT_EQ(r.n, 1);
  EXPECT_EQ(r.top_logprobs, -1);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.seed_given);
}

TEST(ServeApi, CompletionFieldsAreRead) {
  const auto r = completion(
      R"({"prompt": [[1, 2, 3]], "max_tokens": 7, "temperature": 0, "top_p": 0.5, "top_k": -1, "min_p": 0.1,
          "seed": -1, "presence_penalty": 1.5, "frequency_penalty": -2, "repetition_penalty": 1.1,
          "logit_bias": {"5": -100, "7": 2.5}, "stop": ["a", "bc"], "logprobs": 3, "n": 2, "ignore_eos": true,
          "stream": true, "stream_options": {"include_usage": true}, "user": "ignored", "suffix": null})");
  EXPECT_TRUE(r.prompt_is_ids);
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(*r.max_tokens, 7);
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_EQ(r.sampling.top_p, 0.5f);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.1f);
  EXPECT_EQ(r.sampling.seed, ~uint64_t{0});
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.sampling.presence_penalty, 1.5f);
  EXPECT_EQ(r.sampling.frequency_penalty, -2.0f);
  EXPECT_FLOAT_EQ(r.sampling.repeat_penalty, 1.1f);
  ASSERT_EQ(r.sampling.logit_bias.size(), 2u);
  EXPECT_EQ(r.sampling.logit_bias[0], (std::pair<int32_t, float>{5, -100.0f}));
  EXPECT_EQ(r.sampling.logit_bias[1], (std::pair<int32_t, float>{7, 2.5f}));
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(r.top_logprobs, 3);
  EXPECT_EQ(r.n, 2);
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(completion(R"({"prompt": ["one string"], "stop": "x", "max_tokens": 3.0})").prompt_text, "one string");
  EXPECT_EQ(completion(R"({"prompt": "p", "stop": "x"})").stop, (std::vector<std::string>{"x"}));
}

TEST(ServeApi, BadFieldsAreRefusedByName) {
  const Endpoint c = Endpoint::Completions;
  const std::pair<int, std::string> cases[] = {
      {refusal(c, R"({"prompt": "p", "max_tokens": 0})")},
      {refusal(c, R"({"prompt": "p", "max_tokens": 1.5})")},
      {refusal(c, R"({"prompt": "p", "max_tokens": "5"})")},
      {refusal(c, R"({"prompt": "p", "temperature": 100.5})")},
      {refusal(c, R"({"prompt": "p", "temperature": "hot"})")},
      {refusal(c, R"({"prompt": "p", "top_p": 0})")},
      {refusal(c, R"({"prompt": "p", "top_k": -2})")},
      {refusal(c, R"({"prompt": "p", "min_p": 1.5})")},
      {refusal(c, R"({"prompt": "p", "presence_penalty": 3})")},
      {refusal(c, R"({"prompt": "p", "frequency_penalty": -2.1})")},
      {refusal(c, R"({"prompt": "p", "repetition_penalty": 0})")},
      {refusal(c, R"({"prompt": "p", "seed": 1.5})")},
      {refusal(c, R"({"prompt": "p", "logit_bias": {"100": 1}})")},
      {refusal(c, R"({"prompt": "p", "logit_bias": {"x": 1}})")},
      {refusal(c, R"({"prompt": "p", "logit_bias": {"1": 101}})")},
      {refusal(c, R"({"prompt": "p", "logit_bias": [1]})")},
      {refusal(c, R"({"prompt": "p", "stop": ["a", "b", "c", "d", "e"]})")},
      {refusal(c, R"({"prompt": "p", "stop": [""]})")},
      {refusal(c, R"({"prompt": "p", "stop": 5})")},
      {refusal(c, R"({"prompt": "p", "logprobs": 21})")},
      {refusal(c, R"({"prompt": "p", "logprobs": true})")},
      {refusal(c, R"({"prompt": "p", "n": 5})")},
      {refusal(c, R"({"prompt": "p", "n": 0})")},
      {refusal(c, R"({"prompt": "p", "stream": "yes"})")},
      {refusal(c, R"({"prompt": "p", "stream_options": {"include_usage": true}})")},
      {refusal(c, R"({"prompt": "p", "ignore_eos": 1})")},
      {refusal(c, R"({"prompt": "p", "model": 3})")},
      {refusal(c, R"({"prompt": [1, 100]})")},
      {refusal(c, R"({"prompt": [1, -1]})")},
      {refusal(c, R"({"prompt": []})")},
      {refusal(c, R"({"prompt": ["a", "b"]})")},
      {refusal(c, R"({"prompt": 5})")},
      {refusal(c, R"({})")},
  };
  const char* params[] = {"max_tokens",
                          "max_tokens",
                          "max_tokens",
                          "temperature",
                          "temperature",
                          "top_p",
                          "top_k",
                          "min_p",
                          "presence_penalty",
                          "frequency_penalty",
                          "repetition_penalty",
                          "seed",
                          "logit_bias",
                          "logit_bias",
                          "logit_bias",
                          "logit_bias",
                          "stop",
                          "stop",
                          "stop",
                          "logprobs",
                          "logprobs",
                          "n",
                          "n",
                          "stream",
                          "stream_options",
                          "ignore_eos",
                          "model",
                          "prompt",
                          "prompt",
                          "prompt",
                          "prompt",
                          "prompt",
                          "prompt"};
  ASSERT_EQ(std::size(cases), std::size(params));
  for (size_t i = 0; i < std::size(cases); ++i) {
    EXPECT_EQ(cases[i].first, 400) << i;
    EXPECT_EQ(cases[i].second, params[i]) << i;
  }
}

TEST(ServeApi, BadJsonIsA400WithoutParam) {
  for (const char* body : {"{", "[1, 2]", "\"text\"", "{\"prompt\": \"a\",}", ""}) {
    const auto [status, param] = refusal(Endpoint::Completions, body);
    EXPECT_EQ(status, 400) << body;
    EXPECT_EQ(param, "") << body;
  }
  // Nesting past the limit is refused before parsing; brackets inside strings do not count.
  const std::string deep = "{\"prompt\": \"p\", \"x\": " + std::string(100, '[') + std::string(100, ']') + "}";
  EXPECT_EQ(refusal(Endpoint::Completions, deep).first, 400);
  // Invalid UTF-8 inside a field's string names that field.
  EXPECT_EQ(refusal(Endpoint::Completions, "{\"model\": \"m\", \"prompt\": \"a \xff b\", \"n\": 1}").second, "prompt");
  EXPECT_EQ(refusal(Endpoint::Chat, "{\"messages\": [{\"role\": \"user\", \"content\": \"\xc0\xaf\"}]}").second,
            "messages");
  const std::string quoted = "{\"prompt\": \"" + std::string(100, '[') + "\"}";
  EXPECT_EQ(completion(quoted).prompt_text, std::string(100, '['));
}

TEST(ServeApi, ChatMessagesAndLogprobs) {
  const auto r = chat(
      R"({"messages": [{"role": "system", "content": "be brief"},
                       {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                       {"role": "assistant", "content": null, "tool_calls": [{"id": "1"}]}],
          "max_completion_tokens": 9, "logprobs": true, "top_logprobs": 2,
          "tools": [{"type": "function"}], "chat_template_kwargs": {"enable_thinking": false}})");
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[1]["content"], "a\nb");
  EXPECT_TRUE(r.messages[2]["content"].is_null());
  EXPECT_EQ(r.messages[2]["tool_calls"][0]["id"], "1");
  EXPECT_EQ(*r.max_tokens, 9);
  EXPECT_EQ(r.top_logprobs, 2);
  EXPECT_EQ(r.template_vars["tools"][0]["type"], "function");
  EXPECT_EQ(r.template_vars["enable_thinking"], false);
  EXPECT_EQ(chat(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})").top_logprobs, 0);
  EXPECT_EQ(chat(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": false})").top_logprobs, -1);
  const Endpoint c = Endpoint::Chat;
  EXPECT_EQ(refusal(c, R"({"messages": []})").second, "messages");
  EXPECT_EQ(refusal(c, R"({"messages": "hi"})").second, "messages");
  EXPECT_EQ(refusal(c, R"({"messages": [{"content": "x"}]})").second, "messages[0].role");
  EXPECT_EQ(refusal(c, R"({"messages": [{"role": "user", "content": 5}]})").second, "messages[0].content");
  EXPECT_EQ(refusal(c, R"({"messages": [{"role": "robot", "content": "x"}]})").second, "messages[0].role");
  EXPECT_EQ(refusal(c, R"({"messages": [{"role": "user", "content": "x"}, {"role": "user"}]})").second,
            "messages[1].content");
  EXPECT_EQ(refusal(c, R"({"messages": [{"role": "assistant", "content": null}]})").second, "messages[0].content");
  EXPECT_EQ(refusal(c, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})").second,
            "messages[0].content[0].type");
  EXPECT_EQ(refusal(c, R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})").second,
            "top_logprobs");
  EXPECT_EQ(refusal(c, R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 2})").second, "logprobs");
  EXPECT_EQ(refusal(c, R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0})").second,
            "max_completion_tokens");
  EXPECT_EQ(refusal(c, R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})").second, "tools");
}

TEST(ServeApi, ErrorJsonIsOpenAIs) {
  const ojson j = error_json(ApiError(400, "'n' must be ...", "n"));
  EXPECT_EQ(dump(j),
            R"({"error":{"message":"'n' must be ...","type":"invalid_request_error","param":"n","code":null}})");
  const ojson k = error_json(ApiError(401, "Incorrect API key provided.", {}, "invalid_api_key"));
  EXPECT_EQ(k["error"]["param"], nullptr);
  EXPECT_EQ(k["error"]["code"], "invalid_api_key");
}

TEST(ServeApi, ResponsesAndChunks) {
  const ResponseHeader h{.id = "cmpl-1", .created = 42, .model = "m"};
  const TokenText text = [](int32_t id) { return id == 3 ? std::string("\xe2\x96") : "t" + std::to_string(id); };
  std::vector<ChoiceResult> choices{
      {.text = "hello", .finish_reason = "length", .logprobs = {{3, -0.5f, {{3, -0.5f}, {4, -1.0f}}, 0}}}};
  const ojson u = usage_json(5, 1, 0);
  const ojson r = response_json(Endpoint::Completions, h, choices, /*logprobs=*/true, text, u);
  // A token's partial UTF-8 character becomes U+FFFD in the JSON text instead of an exception.
  EXPECT_EQ(
      dump(r),
      "{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":42,\"model\":\"m\",\"choices\":[{\"index\":0,"
      "\"text\":\"hello\",\"logprobs\":{\"tokens\":[\"\xef\xbf\xbd\"],\"token_logprobs\":[-0.5],\"top_logprobs\":"
      "[{\"\xef\xbf\xbd\":-0.5,\"t4\":-1.0}],\"text_offset\":[0]},\"finish_reason\":\"length\"}],\"usage\":{"
      "\"prompt_tokens\":5,\"completion_tokens\":1,\"total_tokens\":6,\"prompt_tokens_details\":{\"cached_"
      "tokens\":0}}}");
  const ojson c = response_json(Endpoint::Chat, {.id = "chatcmpl-1", .created = 1, .model = "m"},
                                {{.text = "hi", .finish_reason = "stop", .logprobs = {}}}, false, text, u);
  EXPECT_EQ(c["object"], "chat.completion");
  EXPECT_EQ(c["choices"][0]["message"], (ojson{{"role", "assistant"}, {"content", "hi"}}));
  EXPECT_EQ(c["choices"][0]["logprobs"], nullptr);
  EXPECT_EQ(c["choices"][0]["finish_reason"], "stop");

  const ojson first = chunk_json(Endpoint::Chat, h, {.index = 1, .role_only = true}, false, text);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["index"], 1);
  EXPECT_EQ(first["choices"][0]["delta"], (ojson{{"role", "assistant"}, {"content", ""}}));
  EXPECT_EQ(first["choices"][0]["finish_reason"], nullptr);
  const ojson mid = chunk_json(Endpoint::Chat, h, {.text = "abc"}, false, text);
  EXPECT_EQ(mid["choices"][0]["delta"], (ojson{{"content", "abc"}}));
  const ojson last = chunk_json(Endpoint::Chat, h, {.finish_reason = "stop"}, false, text);
  EXPECT_EQ(last["choices"][0]["delta"], ojson::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  const ojson lp = chunk_json(Endpoint::Chat, h, {.text = "x", .logprobs = {{4, -2.0f, {}, 0}}}, true, text);
  EXPECT_EQ(lp["choices"][0]["logprobs"]["content"][0],
            (ojson{{"token", "t4"}, {"logprob", -2.0f}, {"bytes", {116, 52}}, {"top_logprobs", ojson::array()}}));
  const ojson cc = chunk_json(Endpoint::Completions, h, {.text = "abc"}, false, text);
  EXPECT_EQ(cc["object"], "text_completion");
  EXPECT_EQ(cc["choices"][0]["text"], "abc");
  const ojson uc = usage_chunk_json(Endpoint::Chat, h, u);
  EXPECT_EQ(uc["choices"], ojson::array());
  EXPECT_EQ(uc["usage"]["total_tokens"], 6);
  EXPECT_EQ(sse_event(ojson{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
}

TEST(ServeMetrics, HistogramBucketsAndText) {
  Histogram h({0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.5, 20.0}) h.observe(v);
  EXPECT_EQ(h.counts(), (std::vector<uint64_t>{2, 1, 0, 1}));  // a bound is its bucket's upper end, inclusive
  EXPECT_EQ(h.count(), 4u);
  PrometheusWriter w;
  w.counter("x_total", "X done",
            std::vector<std::pair<Labels, double>>{{{{"code", "200"}}, 3}, {{{"code", "4\"0"}}, 1}});
  w.gauge("g", "a\nb", 0.25);
  w.histogram("h_seconds", "H", h);
  w.histogram("b", "B", std::vector<double>{1, 2}, std::vector<uint64_t>{1, 2, 3}, std::nullopt);
  EXPECT_EQ(w.text(),
            "# HELP x_total X done\n# TYPE x_total counter\nx_total{code=\"200\"} 3\nx_total{code=\"4\\\"0\"} 1\n"
            "# HELP g a\\nb\n# TYPE g gauge\ng 0.25\n"
            "# HELP h_seconds H\n# TYPE h_seconds histogram\nh_seconds_bucket{le=\"0.1\"} 2\n"
            "h_seconds_bucket{le=\"1\"} 3\nh_seconds_bucket{le=\"10\"} 3\nh_seconds_bucket{le=\"+Inf\"} 4\n"
            "h_seconds_sum 20.65\nh_seconds_count 4\n"
            "# HELP b B\n# TYPE b histogram\nb_bucket{le=\"1\"} 1\nb_bucket{le=\"2\"} 3\nb_bucket{le=\"+Inf\"} 6\n"
            "b_count 6\n");
  EXPECT_EQ(prometheus_number(1e300 * 1e300), "+Inf");
  EXPECT_EQ(prometheus_number(-3), "-3");
}

std::string shared_dir() {
  const char* env = std::getenv("ASCENT_SHARED");
  return env ? env : ASCENT_SHARED_DIR;
}

// story-656K's SentencePiece-style vocabulary: a stop string is found across token boundaries, the text shown never
// holds part of it, and the leading space after BOS is dropped as `ascent generate` drops it.
TEST(ServeChoiceText, StopsAcrossTokensAndHoldsBackPrefixes) {
  const std::string path = shared_dir() + "/models/story-656K/tokenizer.json";
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  tokenizer::Tokenizer tok(model::load_vocab(path, 0));
  const std::vector<int32_t> ids = tok.encode("Once upon a time there was a cat", /*add_special=*/false);
  ASSERT_GT(ids.size(), 4u);
  auto run = [&](std::vector<std::string> stops, bool* stopped) {
    ChoiceText t(tok, std::move(stops), tok.bos());
    std::string shown;
    for (int32_t id : ids) {
      const StopPush p = t.push(id);
      shown += p.text;
      if (p.stopped) {
        *stopped = true;
        return shown;
      }
    }
    const StopPush p = t.finish();
    *stopped = p.stopped;
    return shown + p.text;
  };
  bool stopped = false;
  EXPECT_EQ(run({}, &stopped), "Once upon a time there was a cat");
  EXPECT_FALSE(stopped);
  EXPECT_EQ(run({"n a ti"}, &stopped), "Once upo");  // spans "upon", " a" and " time"
  EXPECT_TRUE(stopped);
  EXPECT_EQ(run({"cat!"}, &stopped), "Once upon a time there was a cat");  // a prefix held back, then let go
  EXPECT_FALSE(stopped);
}

// The HTTP layer over a socket: keep-alive, a chunked stream, 413 from Content-Length before the body is sent, a
// malformed request, and a client that leaves mid-response.
class HttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpLimits lim;
    lim.max_body = 1000;
    lim.idle_timeout_s = 5;
    lim.request_timeout_s = 1;
    lim.error_body = [](int status, const std::string& m) { return std::to_string(status) + " " + m; };
    server_ = std::make_unique<HttpServer>("127.0.0.1", 0, lim, [this](const HttpRequest& req, auto ex) {
      if (req.path == "/stream") {
        ex->start_stream(200, "text/event-stream");
        ex->write("data: 1\n\n");
        ex->write("data: 2\n\n");
        ex->finish();
      } else if (req.path == "/hang") {
        hanging_ = ex;  // never answered: the client leaves
        ex->on_gone([this] { gone_ = true; });
        hung_ = true;
      } else {
        ex->send(200, "text/plain", req.method + " " + req.target + " " + req.body);
      }
    });
    server_->start([](int) {});
  }
  void TearDown() override {
    server_->post([this] { hanging_.reset(); });
    server_->stop();
  }

  int connect_client() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(server_->port());
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    timeval tv{.tv_sec = 5, .tv_usec = 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
  }
  static void send_all(int fd, const std::string& s) {
    ASSERT_EQ(::send(fd, s.data(), s.size(), 0), ssize_t(s.size()));
  }
  // Reads until `until` appears (or the connection closes or times out).
  static std::string read_until(int fd, const std::string& until) {
    std::string got;
    char buf[4096];
    while (got.find(until) == std::string::npos) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    return got;
  }

  std::unique_ptr<HttpServer> server_;
  std::shared_ptr<Exchange> hanging_;
  std::atomic<bool> gone_{false}, hung_{false};
};

TEST_F(HttpTest, KeepAliveStreamAndLimits) {
  const int fd = connect_client();
  send_all(fd, "POST /a?x=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc");
  std::string r = read_until(fd, "abc");
  EXPECT_NE(r.find("HTTP/1.1 200 OK\r\n"), std::string::npos) << r;
  EXPECT_NE(r.find("Connection: keep-alive"), std::string::npos) << r;
  EXPECT_NE(r.find("POST /a?x=1 abc"), std::string::npos) << r;
  // The same connection, a streamed response in chunks.
  send_all(fd, "GET /stream HTTP/1.1\r\nHost: h\r\n\r\n");
  r = read_until(fd, "0\r\n\r\n");
  EXPECT_NE(r.find("Transfer-Encoding: chunked"), std::string::npos) << r;
  EXPECT_NE(r.find("9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n"), std::string::npos) << r;
  // Two pipelined requests get two answers in order.
  send_all(fd, "GET /p1 HTTP/1.1\r\nHost: h\r\n\r\nGET /p2 HTTP/1.1\r\nHost: h\r\n\r\n");
  r = read_until(fd, "GET /p2 ");
  EXPECT_LT(r.find("GET /p1 "), r.find("GET /p2 ")) << r;
  // A body over the limit is refused from its Content-Length, without sending it.
  send_all(fd, "POST /big HTTP/1.1\r\nHost: h\r\nContent-Length: 5000\r\n\r\n");
  r = read_until(fd, "--max-body");
  EXPECT_NE(r.find("HTTP/1.1 413 "), std::string::npos) << r;
  EXPECT_NE(r.find("Connection: close"), std::string::npos) << r;
  ::close(fd);

  const int bad = connect_client();
  send_all(bad, "NOT HTTP AT ALL\r\n\r\n");
  r = read_until(bad, "\r\n\r\n");
  EXPECT_NE(r.find("HTTP/1.1 400 "), std::string::npos) << r;
  ::close(bad);

  // A request whose body never arrives whole is answered 408 after --request-timeout.
  const int slow = connect_client();
  send_all(slow, "POST /slow HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nabc");
  r = read_until(slow, "request-timeout");
  EXPECT_NE(r.find("HTTP/1.1 408 "), std::string::npos) << r;
  ::close(slow);
}

TEST_F(HttpTest, ClientLeavingMidResponseIsNoticed) {
  const int fd = connect_client();
  send_all(fd, "GET /hang HTTP/1.1\r\nHost: h\r\n\r\n");
  for (int i = 0; i < 200 && !hung_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(server_->busy(), 1);
  ::close(fd);
  for (int i = 0; i < 200 && !gone_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(gone_);
  // The handler still ends its exchange; then nothing is in flight.
  server_->post([this] { hanging_->finish(); });
  for (int i = 0; i < 200 && server_->busy() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(server_->busy(), 0);
}

}  // namespace
}  // namespace ascent::serve
