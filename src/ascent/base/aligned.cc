#include "ascent/base/aligned.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "ascent/base/error.h"

namespace ascent {

void AlignedDeleter::operator()(void* p) const {
  std::free(p);
}

AlignedPtr aligned_alloc_bytes(size_t bytes, bool zero) {
  const size_t n = align_up(bytes == 0 ? 1 : bytes);
  void* p = std::aligned_alloc(kAlignment, n);
  if (p == nullptr) fail("out of memory allocating {} bytes", n);
  if (zero) std::memset(p, 0, n);
  return AlignedPtr(static_cast<uint8_t*>(p));
}

AlignedPtr huge_alloc_bytes(size_t bytes, bool zero) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t n = align_up(bytes == 0 ? 1 : bytes, kHuge);
  void* p = std::aligned_alloc(kHuge, n);
  if (p == nullptr) fail("out of memory allocating {} bytes", n);
  ::madvise(p, n, MADV_HUGEPAGE);  // a hint: without transparent huge pages the buffer is still usable
  if (zero) std::memset(p, 0, n);
  return AlignedPtr(static_cast<uint8_t*>(p));
}

void Arena::reserve(size_t bytes) {
  if (bytes <= capacity_ && buf_) return;
  buf_ = aligned_alloc_bytes(bytes);
  capacity_ = bytes;
}

}  // namespace ascent
