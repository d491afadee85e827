#include "ascent/base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ascent/base/error.h"

namespace ascent {
namespace {

bool copy_files = false;
bool exact_copies = false;

// Reads size bytes of fd into dst. Returns "" or why it stopped short.
std::string read_all(int fd, uint8_t* dst, size_t size, size_t& got) {
  got = 0;
  while (got < size) {
    const ssize_t r = ::pread(fd, dst + got, size - got, static_cast<off_t>(got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return std::strerror(errno);
    if (r == 0) return "file shrank";
    got += static_cast<size_t>(r);
  }
  return {};
}

}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail("{}: cannot stat: {}", path, std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    fail("{}: is a directory, expected a file", path);
  }
  if (st.st_size == 0) {
    ::close(fd);
    fail("{}: file is empty", path);
  }
  size_ = static_cast<size_t>(st.st_size);
  if (exact_copies) {
    read_exact(fd);
    return;
  }
  if (copy_files) {
    read_copy(fd);
    return;
  }
  mapped_ = size_;
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) fail("{}: cannot mmap {} bytes: {}", path, size_, std::strerror(err));
  data_ = static_cast<const uint8_t*>(p);
}

void MappedFile::read_copy(int fd) {
  constexpr size_t kHuge = size_t{2} << 20;
  mapped_ = (size_ + kHuge - 1) / kHuge * kHuge;
  void* p = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    fail("{}: cannot allocate {} bytes to read it into (--no-mmap): {}", path_, mapped_, std::strerror(err));
  }
  ::madvise(p, mapped_, MADV_HUGEPAGE);  // a hint: without transparent huge pages the copy still works
  auto* dst = static_cast<uint8_t*>(p);
  size_t got = 0;
  const std::string err = read_all(fd, dst, size_, got);
  if (!err.empty()) {
    ::close(fd);
    ::munmap(p, mapped_);
    fail("{}: read failed at byte {} of {}: {}", path_, got, size_, err);
  }
  ::mprotect(p, mapped_, PROT_READ);  // read-only, as a mapping would be
  data_ = dst;
  copied_ = true;
  // Mapped only for reloadable(): no page is read until then. Without it the copy's pages are never released.
  void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  if (m != MAP_FAILED) file_map_ = static_cast<const uint8_t*>(m);
  ::close(fd);
}

const uint8_t* MappedFile::reloadable(const void* p) const {
  ASCENT_CHECK(contains(p), "{}: an address outside the file", path_);
  if (!copied_ || heap_) return static_cast<const uint8_t*>(p);
  if (file_map_ == nullptr) return nullptr;
  return file_map_ + (static_cast<const uint8_t*>(p) - data_);
}

void MappedFile::read_exact(int fd) {
  void* p = nullptr;
  // Page-aligned as a mapping is: readers check the alignment of tensor data relative to it.
  if (::posix_memalign(&p, 4096, size_) != 0) {
    ::close(fd);
    fail("{}: cannot allocate {} bytes to read it into", path_, size_);
  }
  size_t got = 0;
  const std::string err = read_all(fd, static_cast<uint8_t*>(p), size_, got);
  ::close(fd);
  if (!err.empty()) {
    std::free(p);
    fail("{}: read failed at byte {} of {}: {}", path_, got, size_, err);
  }
  data_ = static_cast<const uint8_t*>(p);
  heap_ = true;
}

void MappedFile::set_exact_copies(bool exact) {
  exact_copies = exact;
}

void MappedFile::set_copy_files(bool copy) {
  copy_files = copy;
}

bool MappedFile::copies_files() {
  return copy_files;
}

MappedFile::~MappedFile() {
  if (heap_) {
    std::free(const_cast<uint8_t*>(data_));
  } else if (data_ != nullptr) {
    ::munmap(const_cast<uint8_t*>(data_), mapped_);
  }
  if (file_map_ != nullptr) ::munmap(const_cast<uint8_t*>(file_map_), size_);
}

size_t resident_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long total = 0, resident = 0;
  const int got = std::fscanf(f, "%lu %lu", &total, &resident);
  std::fclose(f);
  if (got != 2) return 0;
  return resident * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

void release_pages(const void* p, size_t bytes) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const auto end = (reinterpret_cast<uintptr_t>(p) + bytes) / page * page;
  // A hint: where it fails the pages stay resident, which costs memory, not correctness.
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace ascent
