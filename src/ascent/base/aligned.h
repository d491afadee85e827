// Aligned heap memory and a bump arena. Kernels assume 64-byte alignment (one cache line, one AVX-512 register);
// the graph's memory planner hands out offsets inside one Arena so activations live in a single allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

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
// A buffer aligned to 2 MiB and backed by transparent huge pages where the kernel allows them (asked for before
// the first write, which is when pages are chosen). For large buffers streamed once per use: measured on this
// machine, two threads read a 512 MiB buffer 62-64 GB/s on 4 KiB pages and 73-76 GB/s on huge pages. zero = false
// leaves it untouched, so memory is taken (and zeroed by the kernel) one huge page at a time on first write.
AlignedPtr huge_alloc_bytes(size_t bytes, bool zero = true);

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
