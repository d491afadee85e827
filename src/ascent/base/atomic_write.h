// Writes a file whole or not at all: the bytes go to PATH.tmp, which is renamed to PATH once everything is on
// disk; on any failure the temporary is removed and an error names PATH.
#pragma once

#include <initializer_list>
#include <span>
#include <string>

namespace ascent {

void write_file_atomic(const std::string& path, std::span<const std::span<const char>> parts);
inline void write_file_atomic(const std::string& path, std::initializer_list<std::span<const char>> parts) {
  write_file_atomic(path, std::span<const std::span<const char>>(parts.begin(), parts.size()));
}

}  // namespace ascent
