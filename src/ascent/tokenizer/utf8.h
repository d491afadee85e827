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

// Python's len() of s, stepping as char_at does (a byte that is not UTF-8 is a character of its own), so that a count
// and a walk of that many characters agree.
inline size_t code_points(std::string_view s) {
  size_t n = 0;
  for (size_t at = 0; at < s.size(); at += char_at(s, at).second) ++n;
  return n;
}

// The byte offset of character n of s (s.size() when s is shorter).
inline size_t byte_offset(std::string_view s, size_t n) {
  size_t at = 0;
  for (size_t k = 0; k < n && at < s.size(); ++k) at += char_at(s, at).second;
  return std::min(at, s.size());
}

// Where the character ending at byte e > 0 of s starts (a byte that is not UTF-8 is a character of its own).
inline size_t prev_char(std::string_view s, size_t e) {
  size_t b = e - 1;
  while (b > 0 && e - b < 4 && (static_cast<unsigned char>(s[b]) & 0xc0) == 0x80) --b;
  return b + char_at(s, b).second == e ? b : e - 1;
}

// The first n characters of s (all of it when shorter): Python's s[:n].
inline std::string prefix_chars(std::string_view s, size_t n) {
  return std::string(s.substr(0, byte_offset(s, n)));
}

}  // namespace ascent::tokenizer
