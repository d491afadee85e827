#include "ascent/engine/kv_pool.h"

#include <algorithm>

#include "ascent/base/error.h"

namespace ascent::engine {

KvPool::KvPool(const model::Model& m, int64_t n_blocks, int64_t block, DType type, bool prefix_caching)
    : cache_(static_cast<int>(m.config().n_layers), n_blocks, m.kv_width(), type, block),
      prefix_caching_(prefix_caching),
      refs_(static_cast<size_t>(n_blocks), 0),
      meta_(static_cast<size_t>(n_blocks)) {
  free_.reserve(static_cast<size_t>(n_blocks));
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));  // block 0 first
}

int32_t KvPool::allocate() {
  int32_t b = -1;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    b = lru_.front();
    lru_.pop_front();
    unpublish(b);
  } else {
    return -1;
  }
  refs_[static_cast<size_t>(b)] = 1;
  return b;
}

void KvPool::retain(int32_t b) {
  int32_t& r = refs_[static_cast<size_t>(b)];
  if (r == 0) lru_.erase(meta_[static_cast<size_t>(b)].lru);  // only published blocks wait with no holder
  ++r;
}

void KvPool::release(int32_t b) {
  int32_t& r = refs_[static_cast<size_t>(b)];
  ASCENT_CHECK(r > 0, "KV pool: block {} released more often than taken", b);
  if (--r > 0) return;
  Meta& m = meta_[static_cast<size_t>(b)];
  if (m.published) {
    m.lru = lru_.insert(lru_.end(), b);
  } else {
    free_.push_back(b);
  }
}

void KvPool::release_all(std::vector<int32_t>& table) {
  for (int32_t b : table) release(b);
  table.clear();
}

uint64_t KvPool::chain(uint64_t parent, std::span<const int32_t> block_tokens) {
  // splitmix64's finalizer over the parent hash and each token: a change anywhere in the prefix changes every later
  // hash. Collisions only cost a comparison: lookup() checks the tokens and the parent block.
  auto mix = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  uint64_t h = mix(parent + 0x9e3779b97f4a7c15ULL);
  for (int32_t t : block_tokens) h = mix(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(t)) + 0x9e3779b97f4a7c15ULL));
  return h;
}

int32_t KvPool::lookup(uint64_t hash, int32_t parent, std::span<const int32_t> block_tokens) {
  if (!prefix_caching_) return -1;
  ++lookups_;
  const auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return -1;
  const Meta& m = meta_[static_cast<size_t>(it->second)];
  if (m.parent != parent || !std::ranges::equal(m.tokens, block_tokens)) return -1;
  ++hits_;
  retain(it->second);
  return it->second;
}

void KvPool::publish(int32_t b, uint64_t hash, int32_t parent, std::span<const int32_t> block_tokens) {
  if (!prefix_caching_) return;
  Meta& m = meta_[static_cast<size_t>(b)];
  if (m.published || by_hash_.contains(hash)) return;
  m.published = true;
  m.hash = hash;
  m.parent = parent;
  m.tokens.assign(block_tokens.begin(), block_tokens.end());
  by_hash_[hash] = b;
}

void KvPool::unpublish(int32_t b) {
  Meta& m = meta_[static_cast<size_t>(b)];
  if (!m.published) return;
  by_hash_.erase(m.hash);
  m = Meta{};
}

bool KvPool::copy_on_write(std::vector<int32_t>& table, size_t i) {
  const int32_t old = table[i];
  if (refs(old) == 1 && !meta_[static_cast<size_t>(old)].published) return true;
  const int32_t fresh = allocate();
  if (fresh < 0) return false;
  cache_.copy_block(old, fresh);
  release(old);
  table[i] = fresh;
  return true;
}

}  // namespace ascent::engine
