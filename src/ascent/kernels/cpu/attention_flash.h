// Flash-style causal attention with grouped-query heads and sliding window, written once over a SIMD traits type V.
// attention_avx512.cc and attention_avx2.cc include it after their target pragma, so each gets its own copy (hence
// the anonymous namespace). V provides:
// - F, a vector of kLanes floats; zero, set1, store, add, sub, mul, fma, reduce_max, hsum;
// - load: of floats, and of f16 bits widened exactly, for f16 caches;
// - exp: 0 below -87, so e^-inf = 0;
// - scores(acc, scale, first_lane_key, first, last): acc * scale in lanes whose key lies in [first, last], -inf
//   elsewhere;
// - any_greater(x, m): whether a lane of x exceeds m;
// - transpose(src, ld, dst): a W x W block of keys' dimensions into W lane-per-key vectors.
//
// Keys go in tiles of W = kLanes (one score per lane), online softmax (running max and sum per query row), no
// score matrix. Matches the reference (attention_cpu.cc) to rounding; any head size (rows zero-padded).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "ascent/base/aligned.h"
#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/ops.h"
#include "ascent/tensor/dtype.h"

namespace ascent::kernels {
namespace {

constexpr int64_t kRowsPerItem = 64;        // query rows (tokens x heads of one kv head) sharing each K/V tile copy
constexpr float kNoMax = -3.402823466e38f;  // running max before any key: finite, so a masked tile is a no-op

// The K/V tiles of one work item (keys [tile_lo * W, (tile_hi + 1) * W) of one kv head, W = V::kLanes) and the
// running state of its query rows. Per thread, kept across calls.
struct FlashScratch {
  AlignedVector<float> kt;  // (tiles, D2, W): K transposed, so W scores come out of one FMA chain
  // V rows zero-padded to whole vectors, (tiles * W, Dp). When rows already are whole vectors (Dp == D) they are
  // read in place from the cache, and only a last tile reaching past the cache's rows is copied here, (W, Dp).
  AlignedVector<float> vt;
  AlignedVector<float> qs;  // (rows, D2): query rows, zero-padded to even length
  AlignedVector<float> o;   // (rows, Dp): unnormalised outputs
  AlignedVector<float> l;   // (rows, W): lane-wise sums of probabilities
  AlignedVector<float> m;   // (rows,): running max score
  AlignedVector<float> p;   // (4, W): one tile's probabilities for a group of rows
};

// Adds NC vectors of a tile's value rows (row stride ldv), weighted by p, to rows' outputs (columns c0 ..
// c0 + W NC), after scaling them by alpha: o = o * alpha + p @ V. kRescale = false when every alpha is exactly 1
// (no row's running max moved): o * 1 = o, so skipping the multiply gives the same bits.
template <class V, int R, int NC, bool kRescale, class EV>
inline void tile_pv(const EV* vt, int64_t ldv, int64_t c0, const float* p, const typename V::F alpha[R],
                    float* const o[R]) {
  constexpr int64_t kKeyTile = V::kLanes;
  typename V::F acc[R][NC];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < NC; ++c) {
      acc[r][c] = V::load(o[r] + c0 + kKeyTile * c);
      if constexpr (kRescale) acc[r][c] = V::mul(acc[r][c], alpha[r]);
    }
  }
  for (int64_t j = 0; j < kKeyTile; ++j) {
    typename V::F v[NC];
    for (int c = 0; c < NC; ++c) v[c] = V::load(vt + j * ldv + c0 + kKeyTile * c);
    for (int r = 0; r < R; ++r) {
      const typename V::F pj = V::set1(p[r * kKeyTile + j]);
      for (int c = 0; c < NC; ++c) acc[r][c] = V::fma(pj, v[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < NC; ++c) V::store(o[r] + c0 + kKeyTile * c, acc[r][c]);
  }
}

// o = o * alpha + p @ V over all Dp columns, four vectors of columns at a time (R * 4 accumulators stay in
// registers).
template <class V, int R, bool kRescale, class EV>
inline void tile_values(const EV* vt, int64_t ldv, int64_t Dp, const float* p, const typename V::F alpha[R],
                        float* const o[R]) {
  constexpr int64_t kKeyTile = V::kLanes;
  int64_t c0 = 0;
  for (; c0 + 4 * kKeyTile <= Dp; c0 += 4 * kKeyTile) tile_pv<V, R, 4, kRescale, EV>(vt, ldv, c0, p, alpha, o);
  switch ((Dp - c0) / kKeyTile) {
    case 3:
      return tile_pv<V, R, 3, kRescale, EV>(vt, ldv, c0, p, alpha, o);
    case 2:
      return tile_pv<V, R, 2, kRescale, EV>(vt, ldv, c0, p, alpha, o);
    case 1:
      return tile_pv<V, R, 1, kRescale, EV>(vt, ldv, c0, p, alpha, o);
    default:
      return;
  }
}

// Where a tile some way ahead starts in a cache with K in key tiles and whole value rows in blocks: its key group
// (kKeyGroup positions, dimension-major) and its W value rows, each one run. nullptr: nothing to fetch.
struct TileAhead {
  const char* k = nullptr;
  const char* v = nullptr;
};

// Raw scores (q . k, before the scale) of R query rows against NT key tiles: kt[t] is tile t's keys, transposed
// (D2, W), ldk elements between dimensions (f32, or f16 widened exactly as it loads). Two accumulators per row and
// tile (even and odd d), so a score's sum is the same chain whatever NT is. NT = 2 shares each query broadcast
// between two tiles' FMAs.
// With kFetch, each two dimensions also prefetch (into L1) their share of ahead[t]'s key group and value rows
// (elements EK), so a later tile's lines arrive while this one's arithmetic runs. In a burst at a tile's start, the
// cache's stream and the arithmetic would take about the sum of their times (measured with bench/ab_decode.py). The
// spread costs about a fifth of the tile time when the rows are already in L2, but decode reads a cold cache.
template <class V, int R, int NT, class EK, bool kFetch>
inline void tile_scores(const float* const q[R], int64_t D2, const EK* const kt[NT], int64_t ldk,
                        typename V::F raw[NT][R], const TileAhead ahead[NT]) {
  using F = typename V::F;
  // Bytes per two dimensions: of a key group (D rows of kKeyGroup) and of a tile's value rows (W rows of D).
  constexpr int64_t kStepK = 2 * kKeyGroup * static_cast<int64_t>(sizeof(EK));
  constexpr int64_t kStepV = 2 * V::kLanes * static_cast<int64_t>(sizeof(EK));
  // A missing half fetches the other's lines again: a test per prefetch in the loop cost a further quarter (hot).
  const char* pk[NT];
  const char* pv[NT];
  for (int t = 0; t < NT; ++t) {
    pk[t] = ahead[t].k != nullptr ? ahead[t].k : ahead[t].v;
    pv[t] = ahead[t].v != nullptr ? ahead[t].v : ahead[t].k;
  }
  F acc0[NT][R], acc1[NT][R];
  for (int t = 0; t < NT; ++t) {
    for (int r = 0; r < R; ++r) acc0[t][r] = acc1[t][r] = V::zero();
  }
  for (int64_t d = 0; d < D2; d += 2) {
    if constexpr (kFetch) {
      for (int t = 0; t < NT; ++t) {
        for (int64_t b = 0; b < kStepK; b += 64) __builtin_prefetch(pk[t] + d / 2 * kStepK + b, 0, 3);
        for (int64_t b = 0; b < kStepV; b += 64) __builtin_prefetch(pv[t] + d / 2 * kStepV + b, 0, 3);
      }
    }
    F k0[NT], k1[NT];
    for (int t = 0; t < NT; ++t) {
      k0[t] = V::load(kt[t] + d * ldk);
      k1[t] = V::load(kt[t] + (d + 1) * ldk);
    }
    for (int r = 0; r < R; ++r) {
      const F q0 = V::set1(q[r][d]), q1 = V::set1(q[r][d + 1]);
      for (int t = 0; t < NT; ++t) {
        acc0[t][r] = V::fma(q0, k0[t], acc0[t][r]);
        acc1[t][r] = V::fma(q1, k1[t], acc1[t][r]);
      }
    }
  }
  for (int t = 0; t < NT; ++t) {
    for (int r = 0; r < R; ++r) raw[t][r] = V::add(acc0[t][r], acc1[t][r]);
  }
}

// One key tile's online-softmax update for R query rows, from their raw scores: scale, running max and sum, and
// o = o * alpha + p @ V (vt: the tile's W value rows, ldv apart; f32 or f16). Lanes outside a row's keys
// [first[r], last[r]] score -inf; a tile with none of them leaves the row's state bitwise unchanged (alpha = e^0 = 1,
// p = 0), so a row's result does not depend on which rows share its group.
template <class V, int R, class EV>
void tile_update(FlashScratch& s, int64_t Dp, const typename V::F raw[R], const EV* vt, int64_t ldv, int64_t tile,
                 const int64_t rows[R], const int64_t first[R], const int64_t last[R], float scale) {
  using F = typename V::F;
  constexpr int64_t kKeyTile = V::kLanes;
  F alpha[R];
  float* o[R];
  bool rescale = false;
  const int64_t key0 = tile * kKeyTile;
  for (int r = 0; r < R; ++r) {
    // Scaled scores, -inf outside the row's keys (a tile wholly inside them needs no mask: the same products).
    const F sc = key0 >= first[r] && key0 + kKeyTile - 1 <= last[r] ? V::mul(raw[r], V::set1(scale))
                                                                    : V::scores(raw[r], scale, key0, first[r], last[r]);
    // The running max moves only if a lane exceeds it; otherwise max(m, reduce_max(sc)) is m and the rescaling
    // factor e^(m - m) is exactly 1, so the reduction and that exp are skipped with the same result.
    float& m = s.m[static_cast<size_t>(rows[r])];
    const float m_new = V::any_greater(sc, m) ? std::max(m, V::reduce_max(sc)) : m;
    if (m_new != m) {
      alpha[r] = V::exp(V::set1(m - m_new));
      rescale = true;
    } else {
      alpha[r] = V::set1(1.0f);
    }
    m = m_new;
    const F p = V::exp(V::sub(sc, V::set1(m_new)));
    V::store(s.p.data() + r * kKeyTile, p);
    float* l = s.l.data() + rows[r] * kKeyTile;
    V::store(l, V::fma(V::load(l), alpha[r], p));
    o[r] = s.o.data() + rows[r] * Dp;
  }
  if (rescale) {
    tile_values<V, R, true, EV>(vt, ldv, Dp, s.p.data(), alpha, o);
  } else {
    tile_values<V, R, false, EV>(vt, ldv, Dp, s.p.data(), alpha, o);
  }
}

// NT consecutive key tiles (1 or 2) for R query rows: both tiles' scores first, then each tile's update in key
// order, so a row's arithmetic is the same as one tile at a time.
template <class V, int R, int NT, class EK, class EV>
void flash_tiles(FlashScratch& s, int64_t D2, int64_t Dp, const EK* const kt[NT], int64_t ldk, const EV* const vt[NT],
                 int64_t ldv, int64_t tile, const int64_t rows[R], const int64_t first[R], const int64_t last[R],
                 float scale, const TileAhead ahead[NT]) {
  const float* q[R];
  for (int r = 0; r < R; ++r) q[r] = s.qs.data() + rows[r] * D2;
  typename V::F raw[NT][R];
  bool fetch = true;  // every tile has something ahead to fetch
  for (int t = 0; t < NT; ++t) fetch &= ahead[t].k != nullptr || ahead[t].v != nullptr;
  if (fetch) {
    tile_scores<V, R, NT, EK, true>(q, D2, kt, ldk, raw, ahead);
  } else {
    tile_scores<V, R, NT, EK, false>(q, D2, kt, ldk, raw, ahead);
  }
  for (int t = 0; t < NT; ++t) tile_update<V, R, EV>(s, Dp, raw[t], vt[t], ldv, tile + t, rows, first, last, scale);
}

// How many key tiles ahead pack_keys and the tile loop prefetch the cache rows they will read. They go into L2 in a
// burst as each tile starts; with key tiles and in-place values, into L1 spread through the score loop
// (tile_scores). During decode the cache is cold: the layer's weights streamed through the caches since it was last
// read. In a cache of rows (positions, Hkv*D), one kv head's slice of a row is also a short piece a long stride
// from the next. The hardware prefetchers do not follow such pieces; the model's KvCache keeps blocks of one head's
// rows instead (ops.h, kv_offset). Four tiles ahead beat none, two and eight (measured with bench/ab_decode.py).
constexpr int64_t kPrefetchTiles = 4;
// How many tiles ahead tile_scores' spread prefetch runs (into L1): three, four, six and eight are no faster.
constexpr int64_t kSpreadTiles = 2;

// One kv head's rows of a K or V cache (elements E: float, or uint16_t for f16) laid out as AttentionDims::kv_block
// says: rows(j) is position j's D elements.
template <class E>
struct HeadRows {
  const E* cache;
  const AttentionDims* d;
  int64_t head;
  const E* operator()(int64_t j) const { return cache + kv_offset(*d, j, head); }
};

// Prefetches rows [j0, j1] (clamped to [lo, hi]) of n elements each into L2. In blocks (kv_block > 0), a head's rows
// of a block are one run, located once. Locating each row (two divisions) and a loop per row would cost about a
// quarter of a decode step's attention time with the rows already in L2.
template <class E>
inline void prefetch_rows(const HeadRows<E>& rows, int64_t n, int64_t j0, int64_t j1, int64_t lo, int64_t hi) {
  const int64_t row_bytes = n * static_cast<int64_t>(sizeof(E));
  const int64_t block = rows.d->kv_block;
  for (int64_t j = std::max(j0, lo), end = std::min(j1, hi); j <= end;) {
    const int64_t last = block > 0 ? std::min(end, (j / block + 1) * block - 1) : j;  // rows [j, last] are one run
    const char* p = reinterpret_cast<const char*>(rows(j));
    for (int64_t b = 0; b < (last - j + 1) * row_bytes; b += 64) __builtin_prefetch(p + b, 0, 2);
    j = last + 1;
  }
}

// n cache elements as floats: a copy, or f16 widened by widen_row (exactly, as V::load's f16 overload does).
inline void widen_kv(const float* src, float* dst, int64_t n) {
  std::copy(src, src + n, dst);
}
inline void widen_kv(const uint16_t* src, float* dst, int64_t n) {
  widen_row(DType::F16, src, dst, n);
}

// Keys [lo, hi] of one kv head (k: its rows, ld floats between a tile's keys) transposed into kt, (tiles, D2, W)
// from tile lo / W: lanes outside [lo, hi] and the odd-D padding dimension are zero. Whole tiles go W x W through
// V::transpose, the rest one value at a time.
template <class V>
void pack_keys(const HeadRows<float>& k, int64_t ld, int64_t D, int64_t D2, int64_t lo, int64_t hi,
               AlignedVector<float>& kt) {
  constexpr int64_t W = V::kLanes;
  const int64_t tile_lo = lo / W, tile_hi = hi / W;
  kt.resize(static_cast<size_t>((tile_hi - tile_lo + 1) * D2 * W));
  prefetch_rows(k, D, tile_lo * W, (tile_lo + kPrefetchTiles) * W - 1, lo, hi);
  for (int64_t tile = tile_lo; tile <= tile_hi; ++tile) {
    const int64_t ahead = (tile + kPrefetchTiles) * W;
    prefetch_rows(k, D, ahead, ahead + W - 1, lo, hi);
    float* dst = kt.data() + (tile - tile_lo) * D2 * W;
    const int64_t key0 = tile * W;
    const float* src = k(key0);
    int64_t c0 = 0;
    if (key0 >= lo && key0 + W - 1 <= hi) {
      for (; c0 + W <= D; c0 += W) V::transpose(src + c0, ld, dst + c0 * W);
    } else {
      std::fill(dst, dst + D2 * W, 0.0f);
    }
    const int64_t j0 = std::max(lo, key0), j1 = std::min(hi, key0 + W - 1);
    for (int64_t c = c0; c < D; ++c) {
      for (int64_t j = j0; j <= j1; ++j) dst[c * W + (j - key0)] = k(j)[c];
    }
    if (D2 > D) std::fill(dst + D * W, dst + D2 * W, 0.0f);
  }
}

// Flash-style attention. A work item is a run of consecutive blocks of query tokens of one kv head, which packs the
// K/V tiles of its keys once. Within a block, the query heads sharing the kv head (GQA) and neighbouring tokens
// reuse each tile from L1. Keys go in tiles of W aligned at absolute positions; each row keeps a running max,
// lane-wise sum and unnormalised output (online softmax).
// A row's arithmetic depends only on its position and the cache, not on T or on its item's other rows: lanes
// outside its keys are masked to -inf and weigh an exact +0. So prefill and decode agree bitwise, and batches are
// invariant. E is the caches' element, float or uint16_t (f16, which needs K in key tiles), widened to f32 exactly
// as each vector loads: an f16 cache gives the bits of an f32 one with the same values.
template <class V, class E>
void flash_attention(const float* q, const E* k, const E* v, const AttentionDims& d, float* out,
                     const HeadPrepare& prepare) {
  constexpr int64_t kKeyTile = V::kLanes;
  const int64_t D = d.head_dim, group = d.n_heads / d.n_kv_heads;
  const int64_t q_stride = d.n_heads * D, kv_ld = kv_row_stride(d);
  const int64_t D2 = (D + 1) / 2 * 2, Dp = (D + kKeyTile - 1) / kKeyTile * kKeyTile;
  const int64_t block = std::max<int64_t>(1, kRowsPerItem / group);  // query tokens per block
  const int64_t n_blocks = (d.n_tokens + block - 1) / block;
  // Runs per kv head: enough items for two per thread; one run per head when there are more heads than that.
  const int64_t threads = ThreadPool::global().size();
  const int64_t runs = std::min(n_blocks, std::max<int64_t>(1, (2 * threads + d.n_kv_heads - 1) / d.n_kv_heads));
  auto first_key = [&](int64_t pos) { return d.window > 0 ? std::max<int64_t>(0, pos - d.window + 1) : 0; };
  // Items with later tokens (more keys) first, so the dynamic schedule ends on short ones.
  auto body = [&](int64_t i0, int64_t i1) {
    thread_local FlashScratch s;
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t run = runs - 1 - item / d.n_kv_heads, kvh = item % d.n_kv_heads;
      if (prepare) prepare(kvh);  // one token: one item per kv head (runs = 1), before its queries and keys are read
      const int64_t b0 = run * n_blocks / runs, b1 = (run + 1) * n_blocks / runs;  // blocks [b0, b1)
      const int64_t run_lo = first_key(d.n_past + b0 * block);
      const int64_t run_hi = d.n_past + std::min(d.n_tokens, b1 * block) - 1;
      const int64_t tile_lo = run_lo / kKeyTile, tile_hi = run_hi / kKeyTile;
      const HeadRows<E> k_rows{k, &d, kvh}, v_rows{v, &d, kvh};
      // K in key tiles (AttentionDims::k_tiles) is read in place, in groups of kKeyGroup keys (a whole tile, or
      // two, kKeyGroup * D floats in one run); otherwise transposed here. Lanes of a tile outside a row's keys may
      // then hold any value of the cache (even an unwritten position's): their scores are masked, not summed.
      if constexpr (std::is_same_v<E, float>) {
        if (!d.k_tiles) pack_keys<V>(k_rows, kv_ld, D, D2, run_lo, run_hi, s.kt);
      }
      auto prefetch_key_group = [&](int64_t key) {
        if (!d.k_tiles || key > run_hi) return;
        const char* p = reinterpret_cast<const char*>(k + k_offset(d, key / kKeyGroup * kKeyGroup, kvh));
        for (int64_t b = 0; b < kKeyGroup * D * static_cast<int64_t>(sizeof(E)); b += 64) {
          __builtin_prefetch(p + b, 0, 2);
        }
      };
      // Values in place when rows are whole vectors, except a last tile reaching past the cache's valid rows;
      // otherwise copied (zero-padded) into s.vt from tile `copied` on.
      const bool last_partial = (tile_hi + 1) * kKeyTile - 1 > run_hi;
      const int64_t copied = Dp != D ? tile_lo : last_partial ? tile_hi : tile_hi + 1;
      if (copied <= tile_hi) {
        s.vt.assign(static_cast<size_t>((tile_hi - copied + 1) * kKeyTile * Dp), 0.0f);
        for (int64_t j = std::max(run_lo, copied * kKeyTile); j <= run_hi; ++j) {
          widen_kv(v_rows(j), s.vt.data() + (j - copied * kKeyTile) * Dp, D);
        }
      }
      const bool spread = d.k_tiles && Dp == D;  // see tile_scores
      // Where tile t's keys (transposed, ldk apart) and values (ldv apart) lie: in the cache, or in s.kt / s.vt.
      const int64_t ldk = d.k_tiles ? kKeyGroup : kKeyTile;
      auto keys_of = [&](int64_t t) -> const E* {
        if (d.k_tiles) return k + k_offset(d, t * kKeyTile, kvh);
        if constexpr (std::is_same_v<E, float>) return s.kt.data() + (t - tile_lo) * D2 * kKeyTile;
        return nullptr;  // unreachable: attention_cpu.cc refuses an f16 cache without key tiles
      };
      // NT tiles (1, or 2 whose values come from the same place) from `tile` on, for R rows.
      auto run_tiles = [&](int64_t tile, auto nt, int64_t R, const int64_t* rows, const int64_t* first,
                           const int64_t* last, const TileAhead* ahead) {
        constexpr int NT = decltype(nt)::value;
        const E* kt[NT];
        for (int t = 0; t < NT; ++t) kt[t] = keys_of(tile + t);
        auto with_values = [&]<class EV>(const EV* const* vt, int64_t ldv) {
          switch (R) {
            case 4:
              return flash_tiles<V, 4, NT, E, EV>(s, D2, Dp, kt, ldk, vt, ldv, tile, rows, first, last, d.scale, ahead);
            case 3:
              return flash_tiles<V, 3, NT, E, EV>(s, D2, Dp, kt, ldk, vt, ldv, tile, rows, first, last, d.scale, ahead);
            case 2:
              return flash_tiles<V, 2, NT, E, EV>(s, D2, Dp, kt, ldk, vt, ldv, tile, rows, first, last, d.scale, ahead);
            default:
              return flash_tiles<V, 1, NT, E, EV>(s, D2, Dp, kt, ldk, vt, ldv, tile, rows, first, last, d.scale, ahead);
          }
        };
        if (tile >= copied) {
          const float* vt[NT];
          for (int t = 0; t < NT; ++t) vt[t] = s.vt.data() + (tile + t - copied) * kKeyTile * Dp;
          return with_values(vt, Dp);
        }
        const E* vt[NT];
        for (int t = 0; t < NT; ++t) vt[t] = v_rows((tile + t) * kKeyTile);
        with_values(vt, kv_ld);
      };
      // Value rows from here on were prefetched for a block already run (blocks go back to front, so each reaches
      // keys no lower than the next one's): a block prefetches only the rows below them.
      int64_t fetched_lo = std::numeric_limits<int64_t>::max();
      for (int64_t b = b1 - 1; b >= b0; --b) {
        const int64_t t0 = b * block, t1 = std::min(d.n_tokens, t0 + block);
        const int64_t n_rows = (t1 - t0) * group;
        const int64_t key_lo = first_key(d.n_past + t0), key_hi = d.n_past + t1 - 1;
        // Row i is token t0 + i / group, head kvh * group + i % group.
        s.qs.assign(static_cast<size_t>(n_rows * D2), 0.0f);
        for (int64_t i = 0; i < n_rows; ++i) {
          const float* qi = q + (t0 + i / group) * q_stride + (kvh * group + i % group) * D;
          std::copy(qi, qi + D, s.qs.data() + i * D2);
        }
        s.o.assign(static_cast<size_t>(n_rows * Dp), 0.0f);
        s.l.assign(static_cast<size_t>(n_rows * kKeyTile), 0.0f);
        s.m.assign(static_cast<size_t>(n_rows), kNoMax);
        s.p.resize(4 * kKeyTile);
        // Value rows read in place from the cache and not yet prefetched: [key_lo, prefetch_hi].
        const int64_t prefetch_hi = std::min({key_hi, copied * kKeyTile - 1, fetched_lo - 1});
        fetched_lo = std::min(fetched_lo, key_lo);
        prefetch_rows(v_rows, D, key_lo, (key_lo / kKeyTile + kPrefetchTiles) * kKeyTile - 1, key_lo, prefetch_hi);
        for (int64_t t = 0; t < kPrefetchTiles; ++t) prefetch_key_group((key_lo / kKeyTile + t) * kKeyTile);
        const int64_t tile_end = key_hi / kKeyTile;
        for (int64_t tile = key_lo / kKeyTile; tile <= tile_end; tile += 2) {
          // Tiles in pairs in prefill (a row's tiles still update it in key order: flash_tiles). There each tile
          // serves up to kRowsPerItem rows from L1, and sharing the query broadcasts makes prefill attention about a
          // fifth faster. A decode step reads its tiles from memory once, and there pairs are slower, likely because
          // the second tile's keys are then read before the first tile's values.
          const bool pair = d.n_tokens > 1 && tile + 1 <= tile_end && (tile >= copied) == (tile + 1 >= copied);
          // The tiles ahead: kSpreadTiles, spread through the score loops (tile_scores) where K is in key tiles
          // and the values are read in place (whole vector rows), otherwise kPrefetchTiles, prefetched here at once.
          TileAhead ahead[2];
          for (int64_t t = tile; t <= std::min(tile + 1, tile_end); ++t) {
            const int64_t key = (t + (spread ? kSpreadTiles : kPrefetchTiles)) * kKeyTile;
            if (!spread) {
              prefetch_rows(v_rows, D, key, key + kKeyTile - 1, key_lo, prefetch_hi);
              prefetch_key_group(key);
              continue;
            }
            // A key group of two AVX2 tiles is fetched with the first of them.
            if (key <= run_hi && key % kKeyGroup == 0)
              ahead[t - tile].k = reinterpret_cast<const char*>(k + k_offset(d, key, kvh));
            if (key <= prefetch_hi) ahead[t - tile].v = reinterpret_cast<const char*>(v_rows(key));
            // Past this head's last tile, a decode step's next item (the next kv head, the same keys) begins.
            if (key > run_hi && d.n_tokens == 1 && item + 1 < i1) {
              const int64_t next_key = (tile_lo + t + kSpreadTiles - tile_end - 1) * kKeyTile;
              const int64_t next_kvh = (item + 1) % d.n_kv_heads;
              if (next_key <= run_hi) {
                if (next_key % kKeyGroup == 0)
                  ahead[t - tile].k = reinterpret_cast<const char*>(k + k_offset(d, next_key, next_kvh));
                ahead[t - tile].v = reinterpret_cast<const char*>(v + kv_offset(d, next_key, next_kvh));
              }
            }
          }
          const TileAhead none[2];
          for (int64_t i = 0; i < n_rows; i += 4) {
            const int64_t R = std::min<int64_t>(4, n_rows - i);
            int64_t rows[4], first[4], last[4];
            bool any[2] = {false, false};  // whether a row's keys reach into tile, tile + 1
            for (int64_t r = 0; r < R; ++r) {
              const int64_t pos = d.n_past + t0 + (i + r) / group;
              rows[r] = i + r;
              first[r] = first_key(pos);
              last[r] = pos;
              for (int64_t t = 0; t < 2; ++t) {
                any[t] |= first[r] < (tile + t + 1) * kKeyTile && last[r] >= (tile + t) * kKeyTile;
              }
            }
            // A tile reaching none of the rows' keys would be a no-op for every row: skipping it changes nothing.
            // The first row group's score loops carry the prefetches (later ones find the tiles in L1).
            if (pair && any[0] && any[1]) {
              run_tiles(tile, std::integral_constant<int, 2>{}, R, rows, first, last, i == 0 ? ahead : none);
              continue;
            }
            for (int64_t t = 0; t < 2 && tile + t <= tile_end; ++t) {
              if (any[t])
                run_tiles(tile + t, std::integral_constant<int, 1>{}, R, rows, first, last, i == 0 ? ahead + t : none);
            }
          }
        }
        for (int64_t i = 0; i < n_rows; ++i) {
          const float inv = 1.0f / V::hsum(V::load(s.l.data() + i * kKeyTile));
          const float* oi = s.o.data() + i * Dp;
          float* dst = out + (t0 + i / group) * q_stride + (kvh * group + i % group) * D;
          for (int64_t c = 0; c < D; ++c) dst[c] = oi[c] * inv;
        }
      }
    }
  };
  // A single token's items (one per kv head, all the same size) split statically. Each thread then attends over the
  // same kv heads at every step, so their cache rows stay in its core's caches. A shared counter would hand them out
  // differently from step to step, and the rows would cross to the other core, which may sit on another die.
  if (d.n_tokens == 1) {
    ThreadPool::global().parallel_for(runs * d.n_kv_heads, body);
  } else {
    ThreadPool::global().parallel_for_dynamic(runs * d.n_kv_heads, 1, body);
  }
}

}  // namespace
}  // namespace ascent::kernels
