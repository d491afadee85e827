#include "ascent/graph/kv_cache.h"

namespace ascent::graph {

KvCache::KvCache(int n_layers, int64_t max_seq, int64_t kv_width) : max_seq_(max_seq), kv_width_(kv_width) {
  const int64_t positions = (max_seq + kBlock - 1) / kBlock * kBlock;  // whole blocks
  const size_t bytes = static_cast<size_t>(positions * kv_width) * sizeof(float);
  // Rows past n_past are never read, so a large cache is left untouched and costs memory only as it fills, one
  // huge page (2 MiB) at a time. On 4 KiB pages every other decode step faulted in a fresh page per layer for K
  // and for V (2 KiB rows of a 1B model), ~35 us per layer in this VM, 2-3% of decode. A cache smaller than a huge
  // page is written through once here instead, so no decode step faults.
  const bool huge = bytes >= (size_t{2} << 20);
  for (int i = 0; i < n_layers; ++i) {
    k_.push_back(huge ? huge_alloc_bytes(bytes, /*zero=*/false) : aligned_alloc_bytes(bytes, /*zero=*/true));
    v_.push_back(huge ? huge_alloc_bytes(bytes, /*zero=*/false) : aligned_alloc_bytes(bytes, /*zero=*/true));
  }
}

}  // namespace ascent::graph
