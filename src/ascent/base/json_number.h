// Integers read from JSON exactly, for the readers of files whose headers are JSON (safetensors, Ascent's metadata,
// tokenizer.json). nlohmann's get<int64_t> truncates 1.5 to 1 and turns 1e30 into whatever an out-of-range float
// conversion gives (undefined behaviour), so a corrupted offset, shape or id could pass the checks after it as some
// other number. These refuse anything but an integer in range, naming the field.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string_view>
#include <utility>

#include "ascent/base/error.h"

namespace ascent {

// Whether j is an integer that T holds exactly: not a float, a string or null, and within T's range.
template <class T>
bool json_integer_in(const nlohmann::json& j) {
  if (!j.is_number_integer()) return false;
  return j.is_number_unsigned() ? std::in_range<T>(j.get<uint64_t>()) : std::in_range<T>(j.get<int64_t>());
}

// j as an int64_t; throws ascent::Error "WHAT must be an integer, got J" for a float, a string, null or a value
// past int64's range.
inline int64_t json_int(const nlohmann::json& j, std::string_view what) {
  ASCENT_CHECK(json_integer_in<int64_t>(j), "{} must be an integer, got {}", what, j.dump());
  return j.get<int64_t>();
}

// j as a uint64_t; throws ascent::Error "WHAT must be a non-negative integer, got J" otherwise.
inline uint64_t json_uint(const nlohmann::json& j, std::string_view what) {
  ASCENT_CHECK(json_integer_in<uint64_t>(j), "{} must be a non-negative integer, got {}", what, j.dump());
  return j.get<uint64_t>();
}

// j as an int32_t (token ids): json_int, then checked against int32's range.
inline int32_t json_int32(const nlohmann::json& j, std::string_view what) {
  const int64_t v = json_int(j, what);
  ASCENT_CHECK(std::in_range<int32_t>(v), "{} {} is out of range", what, v);
  return static_cast<int32_t>(v);
}

}  // namespace ascent
