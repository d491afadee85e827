// A model's chat template (tokenizer_config.json's "chat_template"), rendered with messages, tools and flags the
// way Hugging Face's apply_chat_template does.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "ascent/tokenizer/jinja.h"

namespace ascent::tokenizer {

class ChatTemplate {
 public:
  // Reads chat_template (a string, or a list of {name, template} where "default" wins), bos_token and eos_token.
  static ChatTemplate from_tokenizer_config(const std::string& path);
  explicit ChatTemplate(const std::string& source, std::string bos = {}, std::string eos = {});

  // context: {"messages": [...], "tools": [...], "add_generation_prompt": bool, ...}; every key becomes a
  // template variable, plus bos_token and eos_token.
  std::string render(const nlohmann::ordered_json& context) const;

 private:
  std::shared_ptr<jinja::Template> tmpl_;
  std::string bos_, eos_;
};

}  // namespace ascent::tokenizer
