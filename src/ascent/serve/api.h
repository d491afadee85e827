// The OpenAI API's requests and responses as data: parsing and checking a completions or chat request body, and the
// JSON of responses, stream chunks and errors. No I/O and no engine here, so every shape is unit-tested on its own.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "ascent/engine/request.h"
#include "ascent/engine/sampler.h"

namespace ascent::serve {

// An error the client gets as {"error": {"message", "type", "param", "code"}} with this HTTP status.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = {}, std::string code = {},
           std::string type = "invalid_request_error")
      : std::runtime_error(message),
        status(status),
        param(std::move(param)),
        code(std::move(code)),
        type(std::move(type)) {}
  int status;
  std::string param, code, type;  // an empty param or code is JSON null
};

// 400 invalid_request_error naming the field at fault.
[[noreturn]] void bad_param(const std::string& param, const std::string& message);

enum class Endpoint { Completions, Chat };

// Limits a request is checked against.
struct RequestLimits {
  int64_t vocab = 0;  // token ids in prompts and logit_bias keys must be below it
  int max_n = 16;     // the most choices a request may ask for
};

// The most choices one request may ask for (n): each is a sequence the engine runs beside the others.
inline constexpr int kMaxChoices = 16;
// OpenAI's limit on stop sequences.
inline constexpr size_t kMaxStops = 4;
// JSON nesting beyond this is refused before parsing, so no body can exhaust the stack of a recursive consumer.
inline constexpr int kMaxJsonDepth = 64;

// A completions or chat request, checked. Sampling defaults are OpenAI's (temperature 1, top_p 1) with every other
// filter off, so a request that names nothing samples the model's plain distribution. Ranges are
// engine::check_sampling's (temperature up to 100, as vLLM allows, where OpenAI stops at 2).
struct GenerationRequest {
  Endpoint endpoint = Endpoint::Completions;
  std::string model;  // empty when the request names none
  // Completions: the prompt as text, or (prompt_is_ids) as token ids.
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  bool prompt_is_ids = false;
  // Chat: the messages (text parts joined into one string per message) and the template's extra variables
  // (tools, chat_template_kwargs), passed to the chat template.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json template_vars = nlohmann::ordered_json::object();

  std::optional<int64_t> max_tokens;  // absent: 16 for completions, the rest of the context for chat
  engine::SamplingParams sampling;
  bool seed_given = false;
  int n = 1;
  bool ignore_eos = false;
  std::vector<std::string> stop;
  int top_logprobs = -1;  // -1: no logprobs
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

// Parses a request body; throws ApiError (400, naming the field) for bad JSON, a wrong type or a value out of range.
// Unknown fields are ignored.
GenerationRequest parse_generation_request(Endpoint endpoint, std::string_view body, const RequestLimits& limits);

// The body as a JSON object (400 for bad JSON, nesting past kMaxJsonDepth or another top-level value).
nlohmann::json parse_json_object(std::string_view body);

// JSON text of j; bytes that are not UTF-8 (a token's partial character) become U+FFFD instead of throwing.
std::string dump(const nlohmann::json& j);
std::string dump(const nlohmann::ordered_json& j);

// The error object of OpenAI's responses.
nlohmann::ordered_json error_json(const ApiError& e);

// One token with its log-probabilities, as the engine gave it.
struct LogprobEntry {
  int32_t id = 0;
  float logprob = 0;
  std::vector<engine::TokenLogprob> top;
  int64_t text_offset = 0;  // bytes of the choice's text before this token
};

// A finished choice of a non-streamed response.
struct ChoiceResult {
  std::string text;
  std::string finish_reason;  // "stop" or "length"
  std::vector<LogprobEntry> logprobs;
};

// Maps a token id to its text (the raw piece, which may hold part of a UTF-8 character).
using TokenText = std::function<std::string(int32_t)>;

struct ResponseHeader {
  std::string id{};  // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;
  std::string model{};
};

nlohmann::ordered_json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens);

// A whole response: object "text_completion" or "chat.completion".
nlohmann::ordered_json response_json(Endpoint endpoint, const ResponseHeader& h,
                                     const std::vector<ChoiceResult>& choices, bool logprobs,
                                     const TokenText& token_text, const nlohmann::ordered_json& usage);

// One streamed chunk of choice `index`: text (chat: the delta's content; role_only sends the first delta, role and
// empty content), its tokens' logprobs when asked for, and finish_reason once the choice ends (empty: null).
struct ChunkPart {
  int index = 0;
  std::string text{};
  bool role_only = false;
  std::vector<LogprobEntry> logprobs{};
  std::string finish_reason{};
};
nlohmann::ordered_json chunk_json(Endpoint endpoint, const ResponseHeader& h, const ChunkPart& part, bool logprobs,
                                  const TokenText& token_text);
// The last chunk with stream_options.include_usage: no choices, the usage.
nlohmann::ordered_json usage_chunk_json(Endpoint endpoint, const ResponseHeader& h,
                                        const nlohmann::ordered_json& usage);

// A server-sent event carrying j: "data: {json}\n\n".
std::string sse_event(const nlohmann::ordered_json& j);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace ascent::serve
