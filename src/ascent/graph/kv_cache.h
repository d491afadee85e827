// The KV cache of one sequence: per layer, K and V in f32 or f16. f16 halves the bytes a decode step's attention reads,
// at f16's precision; kernels::kv_store rounds each value as it is written.
// Positions are stored in blocks of kBlock, each block (n_kv_heads, kBlock, head_dim) (kernels::kv_offset with kv_block
// = kBlock). So a decode step's attention reads each kv head's rows as runs of kBlock * head_dim floats, not as
// head_dim floats every n_kv_heads * head_dim. Where the head size is even, K's blocks hold each head's positions as
// key tiles instead (kernels::k_offset): the kernels then read a tile's keys transposed in place rather than
// transposing them at every step.
// Attention nodes append their new positions at n_past and read positions [0, n_past + T). The paged, multi-sequence
// cache belongs to the serving engine.
#pragma once

#include <cstdint>
#include <vector>

#include "ascent/base/aligned.h"
#include "ascent/tensor/dtype.h"

namespace ascent::graph {

class KvCache {
 public:
  // Positions per block: a multiple of the attention kernels' key tiles (16), and one kv head's run of a block
  // (64 KiB at head_dim 64) long enough for the hardware prefetchers to follow.
  static constexpr int64_t kBlock = 256;

  // type: DType::F32 or DType::F16.
  KvCache(int n_layers, int64_t max_seq, int64_t kv_width, DType type = DType::F32);
  DType dtype() const { return type_; }
  int64_t block() const { return kBlock; }
  // Whether K's blocks hold key tiles (kernels::k_offset): for every even head size, which the kernels need for it.
  static bool k_tiles(int64_t head_dim) { return head_dim % 2 == 0; }
  // A layer's K and V of an f32 cache (k, v) or of an f16 one (k_f16, v_f16: IEEE half bits); the other type's
  // accessors throw.
  float* k(int layer) { return static_cast<float*>(data(k_, layer, DType::F32)); }
  float* v(int layer) { return static_cast<float*>(data(v_, layer, DType::F32)); }
  uint16_t* k_f16(int layer) { return static_cast<uint16_t*>(data(k_, layer, DType::F16)); }
  uint16_t* v_f16(int layer) { return static_cast<uint16_t*>(data(v_, layer, DType::F16)); }
  int64_t max_seq() const { return max_seq_; }
  int64_t kv_width() const { return kv_width_; }
  int n_layers() const { return static_cast<int>(k_.size()); }

 private:
  void* data(std::vector<AlignedPtr>& kv, int layer, DType want);

  int64_t max_seq_, kv_width_;
  DType type_;
  std::vector<AlignedPtr> k_, v_;  // each (max_seq rounded up to kBlock, kv_width), in blocks
};

}  // namespace ascent::graph
