// UTF-8 steps the tokenizer and the template interpreter share, over utf8proc: the character at a byte offset, the
// encoding of a code point, and a string's length in code points. Bytes that are not UTF-8 are never repaired here.
#pragma once

#include <utf8proc.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>

namespace ascent::tokenizer {

// The code point of the UTF-8 character at s[at] and its length (an invalid byte: -1, length 1).
inline std::pair<utf8proc_int32_t, size_t> char_at(std::string_view s, size_t at) {
  utf8proc_int32_t cp = -1;
  const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + at),
                                  static_cast<utf8proc_ssize_t>(s.size() - at), &cp);
  return {n > 0 ? cp : -1, n > 0 ? static_cast<size_t>(n) : 1};
}

// Appends code point cp (a valid one: utf8proc_codepoint_valid) as UTF-8.
inline void append_utf8(std::string& out, utf8proc_int32_t cp) {
  utf8proc_uint8_t buf[4];
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(utf8proc_encode_char(cp, buf)));
}

// Python's len() of s: the bytes that do not continue a character.
inline size_t code_points(std::string_view s) {
  return static_cast<size_t>(
      std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xc0) != 0x80; }));
}

// The first n characters of s (all of it when shorter): Python's s[:n].
inline std::string prefix_chars(std::string_view s, size_t n) {
  size_t end = 0;
  for (size_t k = 0; k < n && end < s.size(); ++k) end += char_at(s, end).second;
  return std::string(s.substr(0, end));
}

}  // namespace ascent::tokenizer
