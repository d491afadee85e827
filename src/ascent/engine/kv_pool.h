// The serving engine's paged KV cache: one graph::KvCache of fixed-size blocks shared by every sequence, with
// reference counts and automatic prefix caching. A sequence holds a block table; blocks are handed out from a free
// list, and a full block is published under a hash of its tokens and of the whole prefix before it. A later sequence
// whose prompt starts with the same tokens takes those blocks instead of recomputing them. A block whose last holder
// lets go keeps its contents and stays findable until the pool needs it again, least recently used first. A block
// held by more than one sequence is never written: the engine copies it first (copy-on-write, copy_on_write()).
// Not thread-safe: the engine's step thread alone uses it.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "ascent/graph/kv_cache.h"
#include "ascent/model/model.h"

namespace ascent::engine {

class KvPool {
 public:
  KvPool(const model::Model& m, int64_t n_blocks, int64_t block, DType type, bool prefix_caching);

  graph::KvCache& cache() { return cache_; }
  int64_t block() const { return cache_.block(); }
  int64_t total() const { return cache_.n_blocks(); }
  // Blocks a sequence holds.
  int64_t used() const { return total() - static_cast<int64_t>(free_.size()) - static_cast<int64_t>(lru_.size()); }
  // Blocks free to hand out: never written, or cached prefixes nobody holds (handed out least recently used first).
  int64_t available() const { return static_cast<int64_t>(free_.size() + lru_.size()); }
  int64_t cached() const { return static_cast<int64_t>(lru_.size()); }

  // A block for the caller alone (reference count 1), or -1 when none is available.
  int32_t allocate();
  void retain(int32_t b);
  // Drops one reference; at zero the block becomes available (and stays findable if it is published).
  void release(int32_t b);
  void release_all(std::vector<int32_t>& table);
  int32_t refs(int32_t b) const { return refs_[static_cast<size_t>(b)]; }

  // The hash chain of a sequence's full blocks: hash i covers tokens [0, (i + 1) * block).
  static uint64_t chain(uint64_t parent, std::span<const int32_t> block_tokens);
  // The published block with this prefix hash, parent block and tokens, with a reference taken; -1 when none.
  int32_t lookup(uint64_t hash, int32_t parent, std::span<const int32_t> block_tokens);
  // Makes full block b findable under hash (its parent block is `parent`, -1 for the first). A hash already held by
  // another block keeps that one.
  void publish(int32_t b, uint64_t hash, int32_t parent, std::span<const int32_t> block_tokens);
  // Where table[i] is shared, replaces it with a copy the caller alone holds. false when no block is available.
  bool copy_on_write(std::vector<int32_t>& table, size_t i);

  int64_t lookups() const { return lookups_; }
  int64_t hits() const { return hits_; }

 private:
  struct Meta {
    bool published = false;
    uint64_t hash = 0;
    int32_t parent = -1;
    std::vector<int32_t> tokens;       // a published block's tokens: a lookup compares them, never trusting the hash
    std::list<int32_t>::iterator lru;  // its place in lru_ while nobody holds it
  };
  void unpublish(int32_t b);

  graph::KvCache cache_;
  bool prefix_caching_;
  std::vector<int32_t> refs_;
  std::vector<Meta> meta_;
  std::vector<int32_t> free_;  // never published, nobody holds them
  std::list<int32_t> lru_;     // published, nobody holds them: least recently released first
  std::unordered_map<uint64_t, int32_t> by_hash_;
  int64_t lookups_ = 0, hits_ = 0;
};

}  // namespace ascent::engine
