// KV cache storage: per layer, K and V in f32 or f16, as a pool of blocks of `block` positions, each block
// (n_kv_heads, block, head_dim). A sequence's positions map to blocks through its block table (Segment::blocks), so
// many sequences share one pool (the serving engine's paged cache, engine/kv_pool.h); with no table a sequence owns the
// pool from block 0 on. One kv head's rows of a block are one run, so a decode step's attention streams runs of
// block * head_dim values, not head_dim values every n_kv_heads * head_dim. Where the head size is even, K's blocks
// hold each head's positions as key tiles instead (kernels::k_offset): the kernels then read a tile's keys transposed
// in place rather than transposing them at every step. f16 halves the bytes a decode step's attention reads, at f16's
// precision; kernels::kv_store rounds each value as it is written.
#pragma once

#include <cstdint>
#include <vector>

#include "ascent/base/aligned.h"
#include "ascent/tensor/dtype.h"

namespace ascent::graph {

class KvCache {
 public:
  // The default positions per block for one sequence: one kv head's run of a block (64 KiB at head_dim 64) is long
  // enough for the hardware prefetchers to follow.
  static constexpr int64_t kBlock = 256;

  // n_blocks blocks of `block` positions (a multiple of the kernels' key groups, 16). type: DType::F32 or DType::F16.
  KvCache(int n_layers, int64_t n_blocks, int64_t kv_width, DType type = DType::F32, int64_t block = kBlock);
  // One sequence's cache of at least max_seq positions, in blocks of kBlock.
  static KvCache for_positions(int n_layers, int64_t max_seq, int64_t kv_width, DType type = DType::F32);

  DType dtype() const { return type_; }
  int64_t block() const { return block_; }
  int64_t n_blocks() const { return n_blocks_; }
  // Positions the whole pool holds: the limit for a sequence with no block table.
  int64_t capacity() const { return n_blocks_ * block_; }
  // Bytes of one block over all layers, K and V.
  int64_t block_bytes() const;
  // Whether K's blocks hold key tiles (kernels::k_offset): for every even head size, which the kernels need for it.
  static bool k_tiles(int64_t head_dim) { return head_dim % 2 == 0; }
  // A layer's K and V of an f32 cache (k, v) or of an f16 one (k_f16, v_f16: IEEE half bits); the other type's
  // accessors throw.
  float* k(int layer) { return static_cast<float*>(data(k_, layer, DType::F32)); }
  float* v(int layer) { return static_cast<float*>(data(v_, layer, DType::F32)); }
  uint16_t* k_f16(int layer) { return static_cast<uint16_t*>(data(k_, layer, DType::F16)); }
  uint16_t* v_f16(int layer) { return static_cast<uint16_t*>(data(v_, layer, DType::F16)); }
  // Copies block src's contents to block dst in every layer (copy-on-write of a shared block).
  void copy_block(int64_t src, int64_t dst);
  int64_t kv_width() const { return kv_width_; }
  int n_layers() const { return static_cast<int>(k_.size()); }

 private:
  void* data(std::vector<AlignedPtr>& kv, int layer, DType want);

  int64_t n_blocks_, block_, kv_width_;
  DType type_;
  std::vector<AlignedPtr> k_, v_;  // each (n_blocks, n_kv_heads, block, head_dim)
};

}  // namespace ascent::graph
