// Aligned heap memory and a bump arena. Kernels assume 64-byte alignment (one cache line, one AVX-512 register);
// the graph's memory planner hands out offsets inside one Arena so activations live in a single allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

namespace ascent {

constexpr size_t kAlignment = 64;

inline size_t align_up(size_t n, size_t a = kAlignment) {
  return (n + a - 1) / a * a;
}

struct AlignedDeleter {
  void operator()(void* p) const;
};
using AlignedPtr = std::unique_ptr<uint8_t[], AlignedDeleter>;

// kAlignment-aligned; zeroed unless zero=false (large buffers then stay unbacked by RAM until first written).
// Throws ascent::Error naming the size when memory runs out.
AlignedPtr aligned_alloc_bytes(size_t bytes, bool zero = true);
// A buffer aligned to 2 MiB and backed by transparent huge pages where the kernel allows them (asked for before the
// first write, which is when pages are chosen). For large buffers streamed once per use, which read faster from huge
// pages than from 4 KiB ones. zero = false leaves it untouched, so memory is taken
// (and zeroed by the kernel) one huge page at a time on first write.
AlignedPtr huge_alloc_bytes(size_t bytes, bool zero = true);

// A std::allocator whose blocks start on a kAlignment boundary, for vectors that SIMD loops read a whole register
// at a time: malloc's 16-byte alignment put every 64-byte load from such a vector across two cache lines.
template <class T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{kAlignment})); }
  void deallocate(T* p, size_t) { ::operator delete (p, std::align_val_t{kAlignment}); }
  template <class U>
  bool operator==(const AlignedAllocator<U>&) const {
    return true;
  }
};

template <class T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

class Arena {
 public:
  Arena() = default;
  // Grows (never shrinks) to at least `bytes`; contents are not preserved across growth.
  void reserve(size_t bytes);
  uint8_t* data() { return buf_.get(); }
  size_t capacity() const { return capacity_; }

 private:
  AlignedPtr buf_;
  size_t capacity_ = 0;
};

}  // namespace ascent
