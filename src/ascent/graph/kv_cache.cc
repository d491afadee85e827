#include "ascent/graph/kv_cache.h"

namespace ascent::graph {

KvCache::KvCache(int n_layers, int64_t max_seq, int64_t kv_width) : max_seq_(max_seq), kv_width_(kv_width) {
  const size_t bytes = static_cast<size_t>(max_seq * kv_width) * sizeof(float);
  for (int i = 0; i < n_layers; ++i) {
    // Rows past n_past are never read, so the cache needs no zeroing and costs memory only as it fills.
    k_.push_back(aligned_alloc_bytes(bytes, /*zero=*/false));
    v_.push_back(aligned_alloc_bytes(bytes, /*zero=*/false));
  }
}

}  // namespace ascent::graph
