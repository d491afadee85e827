#include "ascent/graph/kv_cache.h"

#include <cstring>

#include "ascent/base/error.h"

namespace ascent::graph {

KvCache::KvCache(int n_layers, int64_t n_blocks, int64_t kv_width, DType type, int64_t block)
    : n_blocks_(n_blocks), block_(block), kv_width_(kv_width), type_(type) {
  ASCENT_CHECK(type == DType::F32 || type == DType::F16, "KV cache: type {} is not f32 or f16", dtype_name(type));
  ASCENT_CHECK(block > 0 && block % 16 == 0, "KV cache: a block of {} positions is not a positive multiple of 16",
               block);
  ASCENT_CHECK(n_blocks > 0, "KV cache: {} blocks", n_blocks);
  const size_t bytes = static_cast<size_t>(n_blocks * block * kv_width * ascent::block_bytes(type));
  // Blocks not yet written are never read, so a large cache is left untouched and costs memory only as it fills, one
  // huge page (2 MiB) at a time. On 4 KiB pages, every other decode step would fault in a fresh page per layer for K
  // and for V (2 KiB rows of a 1B model): a few percent of decode. A cache smaller than a huge page is written through
  // once here instead, so no decode step faults.
  const bool huge = bytes >= (size_t{2} << 20);
  for (int i = 0; i < n_layers; ++i) {
    k_.push_back(huge ? huge_alloc_bytes(bytes, /*zero=*/false) : aligned_alloc_bytes(bytes, /*zero=*/true));
    v_.push_back(huge ? huge_alloc_bytes(bytes, /*zero=*/false) : aligned_alloc_bytes(bytes, /*zero=*/true));
  }
}

KvCache KvCache::for_positions(int n_layers, int64_t max_seq, int64_t kv_width, DType type) {
  return KvCache(n_layers, (max_seq + kBlock - 1) / kBlock, kv_width, type, kBlock);
}

int64_t KvCache::block_bytes() const {
  return 2 * n_layers() * block_ * kv_width_ * ascent::block_bytes(type_);
}

void KvCache::copy_block(int64_t src, int64_t dst) {
  ASCENT_CHECK(src >= 0 && src < n_blocks_ && dst >= 0 && dst < n_blocks_, "KV cache: copy of block {} to {} of {}",
               src, dst, n_blocks_);
  const auto one = static_cast<size_t>(block_ * kv_width_ * ascent::block_bytes(type_));
  for (size_t l = 0; l < k_.size(); ++l) {
    for (auto* kv : {&k_, &v_}) {
      uint8_t* base = (*kv)[l].get();
      std::memcpy(base + static_cast<size_t>(dst) * one, base + static_cast<size_t>(src) * one, one);
    }
  }
}

void* KvCache::data(std::vector<AlignedPtr>& kv, int layer, DType want) {
  ASCENT_CHECK(type_ == want, "KV cache: asked for its {} data, but it holds {}", dtype_name(want), dtype_name(type_));
  return kv[static_cast<size_t>(layer)].get();
}

}  // namespace ascent::graph
