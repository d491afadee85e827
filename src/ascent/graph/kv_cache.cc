#include "ascent/graph/kv_cache.h"

namespace ascent::graph {

KvCache::KvCache(int n_layers, int64_t max_seq, int64_t kv_width) : max_seq_(max_seq), kv_width_(kv_width) {
  const size_t bytes = static_cast<size_t>(max_seq * kv_width) * sizeof(float);
  for (int i = 0; i < n_layers; ++i) {
    k_.push_back(aligned_alloc_bytes(bytes));
    v_.push_back(aligned_alloc_bytes(bytes));
  }
}

}  // namespace ascent::graph
