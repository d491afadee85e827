#include "ascent/serve/api.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace ascent::serve {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

void bad_param(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

namespace {

// The deepest nesting of arrays and objects in a JSON text, counting only brackets outside strings. The scan is
// linear and keeps no stack, so it runs before the parser sees a hostile body.
int json_depth(std::string_view s) {
  int depth = 0, most = 0;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      most = std::max(most, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return most;
}

// The top-level key whose value holds byte `pos` of a JSON object text ("" when pos is not inside a value), found by
// the same bracket scan as json_depth: a parse error there (invalid UTF-8 in a string) names that field.
std::string top_level_key_at(std::string_view s, size_t pos) {
  int depth = 0;
  bool in_string = false, key_next = false, is_key = false;
  size_t start = 0;
  std::string key;
  for (size_t i = 0; i < s.size() && i < pos; ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
        if (is_key) key = std::string(s.substr(start, i - start));
      }
    } else if (c == '"') {
      in_string = true;
      start = i + 1;
      is_key = depth == 1 && key_next;
    } else if (c == '{' || c == '[') {
      key_next = ++depth == 1;
    } else if (c == '}' || c == ']') {
      --depth;
    } else if (depth == 1 && c == ':') {
      key_next = false;
    } else if (depth == 1 && c == ',') {
      key_next = true;
      key.clear();
    }
  }
  return key_next ? std::string() : key;
}

const char* type_name(const json& j) {
  switch (j.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    case json::value_t::number_float:
      return "a number";
    default:
      return "an integer";
  }
}

[[noreturn]] void wrong_type(const std::string& param, const json& j, const char* want) {
  bad_param(param, fmt::format("'{}' must be {}, got {}", param, want, type_name(j)));
}

// The field or nullptr when absent or null (OpenAI's clients send null for "not given").
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

double number_in(const json& j, const std::string& param, double lo, double hi, bool lo_open = false) {
  if (!j.is_number()) wrong_type(param, j, "a number");
  const double v = j.get<double>();
  const bool low_ok = lo_open ? v > lo : v >= lo;
  if (!std::isfinite(v) || !low_ok || v > hi) {
    bad_param(param, fmt::format("'{}' must be in {}{}, {}], got {}", param, lo_open ? "(" : "[", lo, hi, j.dump()));
  }
  return v;
}

int64_t integer_in(const json& j, const std::string& param, int64_t lo, int64_t hi) {
  // 2.0 is an integer to Python's clients once it went through a float; a fraction is not.
  if (j.is_number_float()) {
    const double v = j.get<double>();
    if (!std::isfinite(v) || v != std::floor(v) || std::fabs(v) > 9.0e15) wrong_type(param, j, "an integer");
  } else if (!j.is_number()) {
    wrong_type(param, j, "an integer");
  }
  const bool big_unsigned = j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX);
  const int64_t v = j.is_number_float() ? static_cast<int64_t>(j.get<double>()) : j.get<int64_t>();
  if (big_unsigned || v < lo || v > hi) {
    bad_param(param, fmt::format("'{}' must be an integer in [{}, {}], got {}", param, lo, hi, j.dump()));
  }
  return v;
}

bool boolean(const json& j, const std::string& param) {
  if (!j.is_boolean()) wrong_type(param, j, "a boolean");
  return j.get<bool>();
}

int32_t token_id(const json& j, const std::string& param, int64_t vocab) {
  if (!j.is_number_integer()) wrong_type(param, j, "a token id (an integer)");
  const bool ok = j.is_number_unsigned() ? j.get<uint64_t>() < static_cast<uint64_t>(vocab)
                                         : j.get<int64_t>() >= 0 && j.get<int64_t>() < vocab;
  if (!ok)
    bad_param(param, fmt::format("'{}': token id {} is outside the vocabulary (size {})", param, j.dump(), vocab));
  return static_cast<int32_t>(j.get<int64_t>());
}

void parse_prompt(const json& body, GenerationRequest& r, const RequestLimits& lim) {
  const json* p = field(body, "prompt");
  if (!p) bad_param("prompt", "'prompt' is required");
  // A list of one string is the one prompt; a list of several would be a batch, which this server does not take.
  if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) p = &(*p)[0];
  if (p->is_array() && p->size() == 1 && (*p)[0].is_array()) p = &(*p)[0];
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
    return;
  }
  if (!p->is_array()) wrong_type("prompt", *p, "a string or an array of token ids");
  if (p->empty()) bad_param("prompt", "'prompt' must not be empty");
  if ((*p)[0].is_string() || (*p)[0].is_array()) {
    bad_param("prompt", "'prompt': a batch of several prompts is not supported; send one request per prompt");
  }
  r.prompt_is_ids = true;
  for (size_t i = 0; i < p->size(); ++i) r.prompt_ids.push_back(token_id((*p)[i], "prompt", lim.vocab));
}

// A message's content: a string, null, or a list of text parts (joined by newlines, as vLLM does for templates that
// take strings).
ojson message_content(const json& c, const std::string& param) {
  if (c.is_null() || c.is_string()) return c;
  if (!c.is_array()) wrong_type(param, c, "a string, null or an array of content parts");
  std::string text;
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string part = fmt::format("{}[{}]", param, i);
    const json& p = c[i];
    if (!p.is_object()) wrong_type(part, p, "an object");
    const json* type = field(p, "type");
    if (!type || !type->is_string() || type->get<std::string>() != "text") {
      bad_param(part + ".type", fmt::format("'{}.type': only \"text\" content parts are supported", part));
    }
    const json* t = field(p, "text");
    if (!t || !t->is_string()) wrong_type(part + ".text", t ? *t : json(), "a string");
    if (i > 0) text += "\n";
    text += t->get<std::string>();
  }
  return text;
}

void parse_messages(const json& body, GenerationRequest& r) {
  const json* m = field(body, "messages");
  if (!m) bad_param("messages", "'messages' is required");
  if (!m->is_array()) wrong_type("messages", *m, "an array");
  if (m->empty()) bad_param("messages", "'messages' must not be empty");
  for (size_t i = 0; i < m->size(); ++i) {
    const std::string param = fmt::format("messages[{}]", i);
    const json& msg = (*m)[i];
    if (!msg.is_object()) wrong_type(param, msg, "an object");
    const json* role = field(msg, "role");
    if (!role || !role->is_string()) wrong_type(param + ".role", role ? *role : json(), "a string");
    const std::string r_name = role->get<std::string>();
    static const char* const kRoles[] = {"system", "developer", "user", "assistant", "tool", "function"};
    if (std::find(std::begin(kRoles), std::end(kRoles), r_name) == std::end(kRoles)) {
      bad_param(param + ".role", fmt::format("'{}.role': '{}' is not one of system, developer, user, assistant, tool, "
                                             "function",
                                             param, r_name));
    }
    // Only an assistant turn that calls tools may come without content.
    const json* content = field(msg, "content");
    if (!content && !(r_name == "assistant" && (field(msg, "tool_calls") || field(msg, "function_call")))) {
      bad_param(param + ".content", fmt::format("'{}.content' is required for a {} message", param, r_name));
    }
    // Every other key (name, tool_calls, tool_call_id, ...) reaches the template as sent.
    ojson out = ojson::parse(msg.dump());
    if (msg.contains("content")) out["content"] = message_content(msg["content"], param + ".content");
    r.messages.push_back(std::move(out));
  }
  if (const json* tools = field(body, "tools")) {
    if (!tools->is_array()) wrong_type("tools", *tools, "an array");
    r.template_vars["tools"] = ojson::parse(tools->dump());
  }
  if (const json* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) wrong_type("chat_template_kwargs", *kw, "an object");
    for (auto it = kw->begin(); it != kw->end(); ++it) {
      if (it.key() == "messages" || it.key() == "add_generation_prompt") {
        bad_param("chat_template_kwargs", fmt::format("'chat_template_kwargs' may not set '{}'", it.key()));
      }
      r.template_vars[it.key()] = ojson::parse(it.value().dump());
    }
  }
}

void parse_stop(const json& body, GenerationRequest& r) {
  const json* s = field(body, "stop");
  if (!s) return;
  if (s->is_string()) {
    r.stop.push_back(s->get<std::string>());
  } else if (s->is_array()) {
    if (s->size() > kMaxStops) {
      bad_param("stop", fmt::format("'stop' takes at most {} sequences, got {}", kMaxStops, s->size()));
    }
    for (const json& x : *s) {
      if (!x.is_string()) wrong_type("stop", x, "a string or an array of strings");
      r.stop.push_back(x.get<std::string>());
    }
  } else {
    wrong_type("stop", *s, "a string or an array of strings");
  }
  for (const std::string& x : r.stop) {
    if (x.empty()) bad_param("stop", "'stop' sequences must not be empty");
  }
}

void parse_logit_bias(const json& body, GenerationRequest& r, const RequestLimits& lim) {
  const json* b = field(body, "logit_bias");
  if (!b) return;
  if (!b->is_object()) wrong_type("logit_bias", *b, "an object mapping token ids to biases");
  for (auto it = b->begin(); it != b->end(); ++it) {
    const std::string& key = it.key();
    int64_t id = -1;
    size_t used = 0;
    try {
      id = std::stoll(key, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (key.empty() || used != key.size() || id < 0 || id >= lim.vocab) {
      bad_param("logit_bias",
                fmt::format("'logit_bias': key '{}' is not a token id in the vocabulary (size {})", key, lim.vocab));
    }
    const double bias = number_in(it.value(), "logit_bias", -100, 100);
    r.sampling.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(bias));
  }
}

}  // namespace

json parse_json_object(std::string_view body) {
  if (json_depth(body) > kMaxJsonDepth) {
    throw ApiError(400, fmt::format("the JSON body nests deeper than {} levels", kMaxJsonDepth));
  }
  json j;
  try {
    j = json::parse(body);
  } catch (const json::parse_error& e) {
    // A body broken inside one field's value (invalid UTF-8 in a string, most often) names that field.
    const std::string key = top_level_key_at(body, e.byte > 0 ? e.byte - 1 : 0);
    throw ApiError(
        400, (key.empty() ? "" : "'" + key + "': ") + "could not parse the JSON body of the request: " + e.what(), key);
  } catch (const json::exception& e) {
    throw ApiError(400, std::string("could not parse the JSON body of the request: ") + e.what());
  }
  if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object");
  return j;
}

GenerationRequest parse_generation_request(Endpoint endpoint, std::string_view text, const RequestLimits& lim) {
  const json body = parse_json_object(text);
  GenerationRequest r;
  r.endpoint = endpoint;
  // OpenAI's defaults, with the filters OpenAI lacks off.
  r.sampling.temperature = 1.0f;
  r.sampling.top_k = 0;
  r.sampling.top_p = 1.0f;
  r.sampling.min_p = 0.0f;
  r.sampling.repeat_penalty = 1.0f;
  r.sampling.repeat_last_n = -1;

  if (const json* m = field(body, "model")) {
    if (!m->is_string()) wrong_type("model", *m, "a string");
    r.model = m->get<std::string>();
  }
  if (endpoint == Endpoint::Completions) {
    parse_prompt(body, r, lim);
  } else {
    parse_messages(body, r);
  }
  const int64_t kMaxTokens = std::numeric_limits<int32_t>::max();
  if (const json* v = field(body, "max_tokens")) r.max_tokens = integer_in(*v, "max_tokens", 1, kMaxTokens);
  if (endpoint == Endpoint::Chat) {
    if (const json* v = field(body, "max_completion_tokens")) {
      r.max_tokens = integer_in(*v, "max_completion_tokens", 1, kMaxTokens);
    }
  }
  if (const json* v = field(body, "temperature")) r.sampling.temperature = float(number_in(*v, "temperature", 0, 100));
  if (const json* v = field(body, "top_p")) r.sampling.top_p = float(number_in(*v, "top_p", 0, 1, /*lo_open=*/true));
  if (const json* v = field(body, "top_k")) {
    const int64_t k = integer_in(*v, "top_k", -1, std::numeric_limits<int32_t>::max());
    r.sampling.top_k = k <= 0 ? 0 : static_cast<int>(k);  // -1 (vLLM) and 0 both mean off
  }
  if (const json* v = field(body, "min_p")) r.sampling.min_p = float(number_in(*v, "min_p", 0, 1));
  if (const json* v = field(body, "presence_penalty")) {
    r.sampling.presence_penalty = float(number_in(*v, "presence_penalty", -2, 2));
  }
  if (const json* v = field(body, "frequency_penalty")) {
    r.sampling.frequency_penalty = float(number_in(*v, "frequency_penalty", -2, 2));
  }
  if (const json* v = field(body, "repetition_penalty")) {
    r.sampling.repeat_penalty = float(number_in(*v, "repetition_penalty", 0, 100, /*lo_open=*/true));
  }
  if (const json* v = field(body, "seed")) {
    // Any 64-bit integer, signed or not: its bits seed the generator.
    if (!v->is_number_integer()) wrong_type("seed", *v, "an integer");
    r.sampling.seed = v->is_number_unsigned() ? v->get<uint64_t>() : static_cast<uint64_t>(v->get<int64_t>());
    r.seed_given = true;
  }
  parse_logit_bias(body, r, lim);
  parse_stop(body, r);
  if (const json* v = field(body, "n")) r.n = static_cast<int>(integer_in(*v, "n", 1, lim.max_n));
  if (const json* v = field(body, "ignore_eos")) r.ignore_eos = boolean(*v, "ignore_eos");
  if (endpoint == Endpoint::Completions) {
    if (const json* v = field(body, "logprobs")) r.top_logprobs = static_cast<int>(integer_in(*v, "logprobs", 0, 20));
  } else {
    const json* lp = field(body, "logprobs");
    const bool want = lp && boolean(*lp, "logprobs");
    if (const json* v = field(body, "top_logprobs")) {
      const int64_t k = integer_in(*v, "top_logprobs", 0, 20);
      if (!want) bad_param("top_logprobs", "'top_logprobs' needs 'logprobs' set to true");
      r.top_logprobs = static_cast<int>(k);
    } else if (want) {
      r.top_logprobs = 0;
    }
  }
  if (const json* v = field(body, "stream")) r.stream = boolean(*v, "stream");
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) wrong_type("stream_options", *so, "an object");
    if (!r.stream) bad_param("stream_options", "'stream_options' is only allowed when 'stream' is true");
    if (const json* v = field(*so, "include_usage")) r.include_usage = boolean(*v, "stream_options.include_usage");
  }
  return r;
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}
std::string dump(const ojson& j) {
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

ojson error_json(const ApiError& e) {
  return ojson{{"error",
                {{"message", e.what()},
                 {"type", e.type},
                 {"param", e.param.empty() ? ojson() : ojson(e.param)},
                 {"code", e.code.empty() ? ojson() : ojson(e.code)}}}};
}

ojson usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
  ojson u{{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
  u["prompt_tokens_details"] = ojson{{"cached_tokens", cached_tokens}};
  return u;
}

namespace {

// A log-probability as JSON: -inf (a token logit_bias ruled out) has no JSON number, so it is the most negative
// finite float, as vLLM reports it.
ojson logprob_value(float lp) {
  return std::isfinite(lp) ? ojson(lp) : ojson(lp > 0 ? std::numeric_limits<float>::max() : -9999.0f);
}

ojson bytes_of(const std::string& s) {
  ojson b = ojson::array();
  for (char c : s) b.push_back(static_cast<unsigned char>(c));
  return b;
}

// Completions: {tokens, token_logprobs, top_logprobs, text_offset}.
ojson completion_logprobs(const std::vector<LogprobEntry>& entries, const TokenText& token_text) {
  ojson tokens = ojson::array(), lps = ojson::array(), tops = ojson::array(), offsets = ojson::array();
  for (const LogprobEntry& e : entries) {
    tokens.push_back(token_text(e.id));
    lps.push_back(logprob_value(e.logprob));
    ojson top = ojson::object();
    for (const engine::TokenLogprob& t : e.top) top[token_text(t.id)] = logprob_value(t.logprob);
    tops.push_back(std::move(top));
    offsets.push_back(e.text_offset);
  }
  return ojson{{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

// Chat: {content: [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}.
ojson chat_logprobs(const std::vector<LogprobEntry>& entries, const TokenText& token_text) {
  ojson content = ojson::array();
  for (const LogprobEntry& e : entries) {
    const std::string text = token_text(e.id);
    ojson top = ojson::array();
    for (const engine::TokenLogprob& t : e.top) {
      const std::string tt = token_text(t.id);
      top.push_back(ojson{{"token", tt}, {"logprob", logprob_value(t.logprob)}, {"bytes", bytes_of(tt)}});
    }
    content.push_back(ojson{
        {"token", text}, {"logprob", logprob_value(e.logprob)}, {"bytes", bytes_of(text)}, {"top_logprobs", top}});
  }
  return ojson{{"content", content}};
}

ojson logprobs_json(Endpoint endpoint, bool logprobs, const std::vector<LogprobEntry>& entries,
                    const TokenText& token_text) {
  if (!logprobs) return nullptr;
  return endpoint == Endpoint::Completions ? completion_logprobs(entries, token_text)
                                           : chat_logprobs(entries, token_text);
}

ojson head(Endpoint endpoint, const ResponseHeader& h, bool chunk) {
  const char* object = endpoint == Endpoint::Completions ? "text_completion"
                       : chunk                           ? "chat.completion.chunk"
                                                         : "chat.completion";
  return ojson{{"id", h.id}, {"object", object}, {"created", h.created}, {"model", h.model}};
}

ojson reason_json(const std::string& r) {
  return r.empty() ? ojson() : ojson(r);
}

}  // namespace

ojson response_json(Endpoint endpoint, const ResponseHeader& h, const std::vector<ChoiceResult>& choices, bool logprobs,
                    const TokenText& token_text, const ojson& usage) {
  ojson out = head(endpoint, h, /*chunk=*/false);
  ojson list = ojson::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    ojson choice{{"index", i}};
    if (endpoint == Endpoint::Completions) {
      choice["text"] = c.text;
    } else {
      choice["message"] = ojson{{"role", "assistant"}, {"content", c.text}};
    }
    choice["logprobs"] = logprobs_json(endpoint, logprobs, c.logprobs, token_text);
    choice["finish_reason"] = reason_json(c.finish_reason);
    list.push_back(std::move(choice));
  }
  out["choices"] = std::move(list);
  out["usage"] = usage;
  return out;
}

ojson chunk_json(Endpoint endpoint, const ResponseHeader& h, const ChunkPart& part, bool logprobs,
                 const TokenText& token_text) {
  ojson out = head(endpoint, h, /*chunk=*/true);
  ojson choice{{"index", part.index}};
  if (endpoint == Endpoint::Completions) {
    choice["text"] = part.text;
  } else if (part.role_only) {
    choice["delta"] = ojson{{"role", "assistant"}, {"content", ""}};
  } else if (!part.text.empty() || part.finish_reason.empty()) {
    choice["delta"] = ojson{{"content", part.text}};
  } else {
    choice["delta"] = ojson::object();
  }
  choice["logprobs"] = part.logprobs.empty() ? ojson() : logprobs_json(endpoint, logprobs, part.logprobs, token_text);
  choice["finish_reason"] = reason_json(part.finish_reason);
  out["choices"] = ojson::array({std::move(choice)});
  return out;
}

ojson usage_chunk_json(Endpoint endpoint, const ResponseHeader& h, const ojson& usage) {
  ojson out = head(endpoint, h, /*chunk=*/true);
  out["choices"] = ojson::array();
  out["usage"] = usage;
  return out;
}

std::string sse_event(const ojson& j) {
  return "data: " + dump(j) + "\n\n";
}

}  // namespace ascent::serve
