#include "ascent/tokenizer/chat_template.h"

#include "ascent/base/error.h"
#include "ascent/base/json_file.h"

namespace ascent::tokenizer {

namespace {

std::string token_text(const nlohmann::ordered_json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return {};
}

}  // namespace

ChatTemplate ChatTemplate::from_tokenizer_config(const std::string& path) {
  const auto j = read_json_file<nlohmann::ordered_json>(path);
  ASCENT_CHECK(j.is_object() && j.contains("chat_template"), "{}: no chat_template field", path);
  std::string source;
  const auto& t = j["chat_template"];
  if (t.is_string()) {
    source = t.get<std::string>();
  } else if (t.is_array()) {
    for (const auto& e : t) {
      if (e.value("name", std::string()) == "default") source = e.value("template", std::string());
    }
    ASCENT_CHECK(!source.empty(), "{}: chat_template list has no 'default' entry", path);
  } else {
    fail("{}: chat_template must be a string or a list", path);
  }
  return with_context(path, [&] {
    return ChatTemplate(source, token_text(j.value("bos_token", nlohmann::ordered_json())),
                        token_text(j.value("eos_token", nlohmann::ordered_json())));
  });
}

ChatTemplate::ChatTemplate(const std::string& source, std::string bos, std::string eos)
    : tmpl_(std::make_shared<jinja::Template>(source)), bos_(std::move(bos)), eos_(std::move(eos)) {}

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  ASCENT_CHECK(context.is_object(), "chat context must be a JSON object with a messages list");
  ASCENT_CHECK(context.contains("messages") && context["messages"].is_array(), "chat context: messages must be a list");
  std::map<std::string, jinja::Value> vars;
  vars["bos_token"] = jinja::Value::string(bos_);
  vars["eos_token"] = jinja::Value::string(eos_);
  vars["add_generation_prompt"] = jinja::Value::boolean(false);
  for (const auto& [k, v] : context.items()) vars[k] = jinja::Value::from_json(v);
  return tmpl_->render(vars);
}

}  // namespace ascent::tokenizer
