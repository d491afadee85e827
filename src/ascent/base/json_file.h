// A JSON file read whole (read_file) and parsed, its errors naming the file: the readers of config.json,
// tokenizer.json, encoder.json, tokenizer_config.json and chat contexts, which each wrote this out.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "ascent/base/error.h"
#include "ascent/base/read_file.h"

namespace ascent {

// Json: nlohmann::json, or nlohmann::ordered_json where key order matters (chat templates render it). Throws
// ascent::Error "PATH: bad JSON: ..." besides read_file's errors.
template <class Json = nlohmann::json>
Json read_json_file(const std::string& path) {
  const std::string text = read_file(path);
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: bad JSON: {}", path, e.what());
  }
}

}  // namespace ascent
