// Read-only memory-mapped files. Model weights are used in place from the mapping: loading a model costs page
// table entries, not copies, and the OS pages weights in on first touch.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace ascent {

class MappedFile {
 public:
  // Throws ascent::Error "PATH: reason" when the file is missing, unreadable, a directory or empty.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Resident set size of this process in bytes (from /proc/self/statm), for load-without-copy checks.
size_t resident_bytes();

}  // namespace ascent
