// Writes a file whole or not at all: the bytes go to PATH.tmp, which is renamed to PATH once everything is on disk. On
// any failure the temporary is removed and an error names PATH. Where PATH is a symbolic link, the file it points to is
// the one replaced (the link stays). Where PATH is a device, pipe or socket (-o /dev/stdout), the bytes are written to
// it directly, since renaming over it would replace the device node itself.
#pragma once

#include <cstdio>
#include <initializer_list>
#include <span>
#include <string>

namespace ascent {

class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path);  // opens the temporary (or the device); fails naming the path
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();  // without commit(): closes and removes the temporary

  void write(std::span<const char> bytes);  // errors are kept and reported by commit()
  void commit();                            // closes and renames into place; fails naming the path

 private:
  std::string path_, target_, tmp_;  // as given; where it resolves to; the temporary ("" when written in place)
  std::FILE* f_ = nullptr;
  int err_ = 0;  // the first write's or the close's errno (EIO where it set none)
};

void write_file_atomic(const std::string& path, std::span<const std::span<const char>> parts);
inline void write_file_atomic(const std::string& path, std::initializer_list<std::span<const char>> parts) {
  write_file_atomic(path, std::span<const std::span<const char>>(parts.begin(), parts.size()));
}

}  // namespace ascent
