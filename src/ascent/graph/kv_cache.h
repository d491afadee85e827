// The KV cache of one sequence: per layer, K and V rows (max_seq, n_kv_heads * head_dim) in f32. Attention nodes
// append their new rows at n_past and read rows [0, n_past + T). The paged, multi-sequence cache belongs to the
// serving engine.
#pragma once

#include <cstdint>
#include <vector>

#include "ascent/base/aligned.h"

namespace ascent::graph {

class KvCache {
 public:
  KvCache(int n_layers, int64_t max_seq, int64_t kv_width);
  float* k(int layer) { return reinterpret_cast<float*>(k_[static_cast<size_t>(layer)].get()); }
  float* v(int layer) { return reinterpret_cast<float*>(v_[static_cast<size_t>(layer)].get()); }
  int64_t max_seq() const { return max_seq_; }
  int64_t kv_width() const { return kv_width_; }
  int n_layers() const { return static_cast<int>(k_.size()); }

 private:
  int64_t max_seq_, kv_width_;
  std::vector<AlignedPtr> k_, v_;  // each (max_seq, kv_width)
};

}  // namespace ascent::graph
