// The Jinja interpreter (tokenizer/jinja_eval.cc, through chat_template.cc): the input is a template, parsed and
// rendered with one fixed conversation that holds every kind of value a chat context has (strings with Unicode and
// markup, integers, floats, booleans, null, nested lists and objects, tool calls, tool definitions). A fuzzed
// template reaches the filters, tests, methods and statements; a fuzzed context would only vary the data they read.
#include "fuzz_common.h"

#include "ascent/tokenizer/chat_template.h"

using namespace ascent;

namespace {

constexpr const char* kContext = R"({
  "messages": [
    {"role": "system", "content": "You are terse. <b>\"quoted\"</b> & 'single'"},
    {"role": "user", "content": "Weather in Paris? \u00dcn\u00efc\u00f6d\u00e9 \u4f60\u597d \ud83e\udd99\n\ttabs  "},
    {"role": "assistant", "content": "", "reasoning_content": "Thinking it through.",
     "tool_calls": [{"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "metric": true}}},
                    {"type": "function", "function": {"name": "search", "arguments": "{\"q\": \"x\"}"}}]},
    {"role": "tool", "name": "get_weather", "tool_call_id": "call_1", "content": "{\"temp\": 21.5}"},
    {"role": "user", "content": [{"type": "text", "text": "and this?"}, {"type": "image", "url": null}]},
    {"role": "assistant", "content": "<think>\nstep one\n</think>\n\nIt is 21\u00b0C."}
  ],
  "tools": [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"},
        "days": {"type": "integer", "default": 1, "minimum": -1, "maximum": 1e3},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
  ],
  "documents": [{"title": "doc", "text": "body", "id": 0}],
  "add_generation_prompt": true,
  "enable_thinking": false,
  "temperature": 0.7,
  "seed": -12345678901
})";

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json context = nlohmann::ordered_json::parse(kContext);
  const std::string source(reinterpret_cast<const char*>(data), size);
  fuzz::refused([&] { (void)tokenizer::ChatTemplate(source, "<s>", "</s>").render(context); });
  return 0;
}
