// AVX-512 causal attention with grouped-query heads and sliding window, flash-style: tiles of 16 keys, online
// softmax (running max and sum per query row), no score matrix. Matches the reference (attention_cpu.cc) to
// rounding; refuses nothing the reference accepts (any head size: rows are zero-padded to whole vectors).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/ops.h"

#pragma GCC push_options
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma")

#include "ascent/kernels/cpu/simd_avx512.h"

namespace ascent::kernels {
namespace {

constexpr int64_t kKeyTile = 16;            // keys per tile: one score per lane
constexpr int64_t kRowsPerItem = 64;        // query rows (tokens x heads of one kv head) sharing each K/V tile copy
constexpr float kNoMax = -3.402823466e38f;  // running max before any key: finite, so a masked tile is a no-op

// The K/V tiles of one work item (keys [tile_lo * 16, (tile_hi + 1) * 16) of one kv head) and the running state of
// its query rows. Per thread, kept across calls.
struct FlashScratch {
  std::vector<float> kt;  // (tiles, D2, 16): K transposed, so 16 scores come out of one FMA chain
  std::vector<float> vt;  // (tiles * 16, Dp): V rows zero-padded to whole vectors
  std::vector<float> qs;  // (rows, D2): query rows, zero-padded to even length
  std::vector<float> o;   // (rows, Dp): unnormalised outputs
  std::vector<float> l;   // (rows, 16): lane-wise sums of probabilities
  std::vector<float> m;   // (rows,): running max score
  std::vector<float> p;   // (4, 16): one tile's probabilities for a group of rows
};

// Adds NC vectors of tile `kt0`'s value rows, weighted by p, to rows' outputs (columns c0 .. c0 + 16 NC), after
// scaling them by alpha: o = o * alpha + p @ V.
template <int R, int NC>
inline void tile_pv(const float* vt, int64_t Dp, int64_t c0, const float* p, const __m512 alpha[R], float* const o[R]) {
  __m512 acc[R][NC];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_mul_ps(_mm512_loadu_ps(o[r] + c0 + 16 * c), alpha[r]);
  }
  for (int64_t j = 0; j < kKeyTile; ++j) {
    __m512 v[NC];
    for (int c = 0; c < NC; ++c) v[c] = _mm512_loadu_ps(vt + j * Dp + c0 + 16 * c);
    for (int r = 0; r < R; ++r) {
      const __m512 pj = _mm512_set1_ps(p[r * kKeyTile + j]);
      for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_fmadd_ps(pj, v[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < NC; ++c) _mm512_storeu_ps(o[r] + c0 + 16 * c, acc[r][c]);
  }
}

// One key tile for R query rows: scores, online-softmax update of max and sum, and o = o * alpha + p @ V.
// Lanes outside a row's keys [first[r], last[r]] score -inf; a tile with none of them leaves the row's state
// bitwise unchanged (alpha = e^0 = 1, p = 0), so a row's result does not depend on which rows share its group.
template <int R>
void flash_tile(FlashScratch& s, int64_t D2, int64_t Dp, int64_t tile, int64_t tile_lo, const int64_t rows[R],
                const int64_t first[R], const int64_t last[R], float scale) {
  const float* kt = s.kt.data() + (tile - tile_lo) * D2 * kKeyTile;
  const float* vt = s.vt.data() + (tile - tile_lo) * kKeyTile * Dp;
  // Scores: two accumulators per row (even and odd d) so eight FMA chains are in flight.
  __m512 acc0[R], acc1[R];
  const float* q[R];
  for (int r = 0; r < R; ++r) {
    acc0[r] = acc1[r] = _mm512_setzero_ps();
    q[r] = s.qs.data() + rows[r] * D2;
  }
  for (int64_t d = 0; d < D2; d += 2) {
    const __m512 k0 = _mm512_loadu_ps(kt + d * kKeyTile), k1 = _mm512_loadu_ps(kt + (d + 1) * kKeyTile);
    for (int r = 0; r < R; ++r) {
      acc0[r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r][d]), k0, acc0[r]);
      acc1[r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r][d + 1]), k1, acc1[r]);
    }
  }
  __m512 alpha[R];
  float* o[R];
  const __m512i lane = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(tile * kKeyTile)),
                                        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  for (int r = 0; r < R; ++r) {
    const __mmask16 valid =
        _mm512_cmp_epi32_mask(lane, _mm512_set1_epi32(static_cast<int32_t>(first[r])), _MM_CMPINT_NLT) &
        _mm512_cmp_epi32_mask(lane, _mm512_set1_epi32(static_cast<int32_t>(last[r])), _MM_CMPINT_LE);
    const __m512 sc =
        _mm512_mask_mul_ps(_mm512_set1_ps(-INFINITY), valid, _mm512_add_ps(acc0[r], acc1[r]), _mm512_set1_ps(scale));
    float& m = s.m[static_cast<size_t>(rows[r])];
    const float m_new = std::max(m, _mm512_reduce_max_ps(sc));
    alpha[r] = exp_ps(_mm512_set1_ps(m - m_new));
    m = m_new;
    const __m512 p = exp_ps(_mm512_sub_ps(sc, _mm512_set1_ps(m_new)));
    _mm512_storeu_ps(s.p.data() + r * kKeyTile, p);
    float* l = s.l.data() + rows[r] * kKeyTile;
    _mm512_storeu_ps(l, _mm512_fmadd_ps(_mm512_loadu_ps(l), alpha[r], p));
    o[r] = s.o.data() + rows[r] * Dp;
  }
  // Values, four vectors of columns at a time (R * 4 accumulators stay in registers).
  int64_t c0 = 0;
  for (; c0 + 64 <= Dp; c0 += 64) tile_pv<R, 4>(vt, Dp, c0, s.p.data(), alpha, o);
  switch ((Dp - c0) / 16) {
    case 3:
      return tile_pv<R, 3>(vt, Dp, c0, s.p.data(), alpha, o);
    case 2:
      return tile_pv<R, 2>(vt, Dp, c0, s.p.data(), alpha, o);
    case 1:
      return tile_pv<R, 1>(vt, Dp, c0, s.p.data(), alpha, o);
    default:
      return;
  }
}

}  // namespace

// Flash-style attention: work items are (block of query tokens, kv head), so the query heads that share a kv head
// (GQA) and neighbouring tokens reuse each K/V tile while it is in L1. Keys go in tiles of 16 aligned at absolute
// positions; each row keeps a running max, lane-wise sum and unnormalised output (online softmax), so no score
// vector is materialised. A row's arithmetic depends only on its position and the cache (not on T or on the rows
// it is grouped with): prefill and decode give the same bits for the same row, and batches are invariant.
void attention_forward_avx512(const float* q, const float* k, const float* v, const AttentionDims& d, float* out) {
  const int64_t D = d.head_dim, group = d.n_heads / d.n_kv_heads;
  const int64_t q_stride = d.n_heads * D, kv_stride = d.n_kv_heads * D;
  const int64_t D2 = (D + 1) / 2 * 2, Dp = (D + 15) / 16 * 16;
  const int64_t block = std::max<int64_t>(1, kRowsPerItem / group);  // query tokens per item
  const int64_t n_blocks = (d.n_tokens + block - 1) / block;
  auto first_key = [&](int64_t pos) { return d.window > 0 ? std::max<int64_t>(0, pos - d.window + 1) : 0; };
  // Items with later tokens (more keys) first, so the dynamic schedule ends on short ones.
  ThreadPool::global().parallel_for_dynamic(n_blocks * d.n_kv_heads, 1, [&](int64_t i0, int64_t i1) {
    thread_local FlashScratch s;
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t b = n_blocks - 1 - item / d.n_kv_heads, kvh = item % d.n_kv_heads;
      const int64_t t0 = b * block, t1 = std::min(d.n_tokens, t0 + block);
      const int64_t n_rows = (t1 - t0) * group;
      const int64_t key_lo = first_key(d.n_past + t0), key_hi = d.n_past + t1 - 1;
      const int64_t tile_lo = key_lo / kKeyTile, tile_hi = key_hi / kKeyTile, tiles = tile_hi - tile_lo + 1;
      s.kt.assign(static_cast<size_t>(tiles * D2 * kKeyTile), 0.0f);
      s.vt.assign(static_cast<size_t>(tiles * kKeyTile * Dp), 0.0f);
      for (int64_t j = key_lo; j <= key_hi; ++j) {
        const float* kj = k + j * kv_stride + kvh * D;
        const float* vj = v + j * kv_stride + kvh * D;
        const int64_t tj = j / kKeyTile - tile_lo, lane = j % kKeyTile;
        float* ktj = s.kt.data() + tj * D2 * kKeyTile + lane;
        for (int64_t c = 0; c < D; ++c) ktj[c * kKeyTile] = kj[c];
        std::copy(vj, vj + D, s.vt.data() + (j - tile_lo * kKeyTile) * Dp);
      }
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
      for (int64_t tile = tile_lo; tile <= tile_hi; ++tile) {
        for (int64_t i = 0; i < n_rows; i += 4) {
          const int64_t R = std::min<int64_t>(4, n_rows - i);
          int64_t rows[4], first[4], last[4];
          bool any = false;
          for (int64_t r = 0; r < R; ++r) {
            const int64_t pos = d.n_past + t0 + (i + r) / group;
            rows[r] = i + r;
            first[r] = first_key(pos);
            last[r] = pos;
            any |= first[r] < (tile + 1) * kKeyTile && last[r] >= tile * kKeyTile;
          }
          if (!any) continue;  // only a no-op for every row: skipping it changes nothing
          switch (R) {
            case 4:
              flash_tile<4>(s, D2, Dp, tile, tile_lo, rows, first, last, d.scale);
              break;
            case 3:
              flash_tile<3>(s, D2, Dp, tile, tile_lo, rows, first, last, d.scale);
              break;
            case 2:
              flash_tile<2>(s, D2, Dp, tile, tile_lo, rows, first, last, d.scale);
              break;
            default:
              flash_tile<1>(s, D2, Dp, tile, tile_lo, rows, first, last, d.scale);
          }
        }
      }
      for (int64_t i = 0; i < n_rows; ++i) {
        const float inv = 1.0f / hsum(_mm512_loadu_ps(s.l.data() + i * kKeyTile));
        const float* oi = s.o.data() + i * Dp;
        float* dst = out + (t0 + i / group) * q_stride + (kvh * group + i % group) * D;
        for (int64_t c = 0; c < D; ++c) dst[c] = oi[c] * inv;
      }
    }
  });
}

}  // namespace ascent::kernels

#pragma GCC diagnostic pop
#pragma GCC pop_options
