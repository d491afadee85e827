// The KV cache of one sequence: per layer, K and V in f32, blocks of kBlock positions, each block (n_kv_heads,
// kBlock, head_dim) (kernels::kv_offset with kv_block = kBlock): a decode step's attention reads each kv head's rows
// as runs of kBlock * head_dim floats, not as head_dim floats every n_kv_heads * head_dim. K's blocks hold each
// head's positions as key tiles instead (kernels::k_offset) where the head size is even, so that the kernels read
// a tile's keys transposed in place rather than transposing them at every step. Attention nodes append
// their new positions at n_past and read positions [0, n_past + T). The paged, multi-sequence cache belongs to the
// serving engine.
#pragma once

#include <cstdint>
#include <vector>

#include "ascent/base/aligned.h"

namespace ascent::graph {

class KvCache {
 public:
  // Positions per block: a multiple of the attention kernels' key tiles (16), and one kv head's run of a block
  // (64 KiB at head_dim 64) long enough for the hardware prefetchers to follow.
  static constexpr int64_t kBlock = 256;

  KvCache(int n_layers, int64_t max_seq, int64_t kv_width);
  int64_t block() const { return kBlock; }
  // Whether K's blocks hold key tiles (kernels::k_offset): for every even head size, which the kernels need for it.
  static bool k_tiles(int64_t head_dim) { return head_dim % 2 == 0; }
  float* k(int layer) { return reinterpret_cast<float*>(k_[static_cast<size_t>(layer)].get()); }
  float* v(int layer) { return reinterpret_cast<float*>(v_[static_cast<size_t>(layer)].get()); }
  int64_t max_seq() const { return max_seq_; }
  int64_t kv_width() const { return kv_width_; }
  int n_layers() const { return static_cast<int>(k_.size()); }

 private:
  int64_t max_seq_, kv_width_;
  std::vector<AlignedPtr> k_, v_;  // each (max_seq rounded up to kBlock, kv_width), in blocks
};

}  // namespace ascent::graph
