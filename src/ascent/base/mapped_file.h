// Read-only files in memory. By default memory-mapped: model weights are used in place from the mapping, so loading a
// model costs page table entries, not copies, and the OS pages weights in on first touch. With set_copy_files(true)
// (`--no-mmap`), files are read into anonymous memory backed by huge pages where the kernel allows. Loading then costs
// a copy and private memory, and decode streams the weights faster: fewer TLB misses and page-crossing prefetch stalls
// than with page-cache pages (bench/RESULTS.md, decode table).
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace ascent {

class MappedFile {
 public:
  // Throws ascent::Error "PATH: reason" when the file is missing, unreadable, a directory or empty.
  explicit MappedFile(const std::string& path);
  // Process-wide: read files opened from now on into memory instead of mapping them.
  static void set_copy_files(bool copy);
  static bool copies_files();
  // Process-wide, for the fuzz targets (tests/fuzz): read files opened from now on into a heap block of exactly their
  // size, so that AddressSanitizer reports a read past a file's end (a mapping reads zeros up to its last page's end).
  // Loads behave as with a mapping: copies_files() stays false.
  static void set_exact_copies(bool exact);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }
  bool contains(const void* p) const {
    const auto* b = static_cast<const uint8_t*>(p);
    return b >= data_ && b < data_ + size_;
  }
  // Where the byte at p (inside bytes()) can be read after its pages are given back (release_pages): p itself in a
  // mapping, whose pages read back from the file; for a copy (--no-mmap), the same byte in a mapping of the file kept
  // for that, whose pages cost nothing until read.
  const uint8_t* reloadable(const void* p) const;
  // Whether release_pages may be given this file's pages: not a heap block's (set_exact_copies), whose pages other
  // allocations may share.
  bool releasable() const { return !heap_; }

 private:
  void read_copy(int fd);
  void read_exact(int fd);

  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;  // bytes to unmap (a copy is rounded up to whole huge pages)
  bool copied_ = false;
  const uint8_t* file_map_ = nullptr;  // a copy's mapping of its file (reloadable)
  bool heap_ = false;                  // data_ is a heap block (set_exact_copies), freed rather than unmapped
};

// Gives back the whole pages inside [p, p + bytes) of a MappedFile's memory (madvise MADV_DONTNEED): a mapping's
// pages leave this process's resident set, a copy's (--no-mmap) are freed. Only for bytes that will not be read
// again: a copy's would read back as zeros.
void release_pages(const void* p, size_t bytes);

// Resident set size of this process in bytes (from /proc/self/statm), for load-without-copy checks.
size_t resident_bytes();

}  // namespace ascent
