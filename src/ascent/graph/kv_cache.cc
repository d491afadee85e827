#include "ascent/graph/kv_cache.h"

#include "ascent/base/error.h"

namespace ascent::graph {

KvCache::KvCache(int n_layers, int64_t max_seq, int64_t kv_width, DType type)
    : max_seq_(max_seq), kv_width_(kv_width), type_(type) {
  ASCENT_CHECK(type == DType::F32 || type == DType::F16, "KV cache: type {} is not f32 or f16", dtype_name(type));
  const int64_t positions = (max_seq + kBlock - 1) / kBlock * kBlock;  // whole blocks
  const size_t bytes = static_cast<size_t>(positions * kv_width * block_bytes(type));
  // Rows past n_past are never read, so a large cache is left untouched and costs memory only as it fills, one huge
  // page (2 MiB) at a time. On 4 KiB pages, every other decode step would fault in a fresh page per layer for K and for
  // V (2 KiB rows of a 1B model): a few percent of decode. A cache smaller than a huge page is written through once
  // here instead, so no decode step faults.
  const bool huge = bytes >= (size_t{2} << 20);
  for (int i = 0; i < n_layers; ++i) {
    k_.push_back(huge ? huge_alloc_bytes(bytes, /*zero=*/false) : aligned_alloc_bytes(bytes, /*zero=*/true));
    v_.push_back(huge ? huge_alloc_bytes(bytes, /*zero=*/false) : aligned_alloc_bytes(bytes, /*zero=*/true));
  }
}

void* KvCache::data(std::vector<AlignedPtr>& kv, int layer, DType want) {
  ASCENT_CHECK(type_ == want, "KV cache: asked for its {} data, but it holds {}", dtype_name(want), dtype_name(type_));
  return kv[static_cast<size_t>(layer)].get();
}

}  // namespace ascent::graph
