// The tiling loop shared by the SIMD matmul variants. gemm_avx2.cc and gemm_avx512_common.h include it after their
// target pragma, so each gets its own copy compiled for its ISA (hence the anonymous namespace).

// A format kernel Kern provides `template <int R, int TT> static void tile(in, w, n, t, float out[4][4])`, computing
// rows n..n+R-1 for tokens t..t+TT-1, and kDecodeRows, the tile height for a single token. Every (R, TT)
// instantiation performs the same arithmetic per output: results do not depend on how the work is cut (batch
// invariance). Optional parts:
// - decode_rows(in, w, n0, n1, out): its own row loop for a single token, with tile<1, 1>'s bits, where a tile
//   call per row costs a noticeable share of a short row.
// - a RowCache (fill, cached_tile: see run_row_tile). With decode_rows, such a kernel needs no tile.
// - run(in, w, n0, n1, out): a kernel that drives itself for every token count (the I4 kernels, whose rows come in
//   blocks of 16); drive_tiles hands it the whole range.
#pragma once

#include <immintrin.h>

#include <vector>

#include "ascent/kernels/cpu/gemm.h"
#include "ascent/kernels/cpu/row_ops.h"  // prefetch_span: decode loops take their activations' lines as a chunk starts

namespace ascent::kernels {
namespace {

inline int64_t tile_min(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// store_out for a whole tile, with the null tests hoisted out of the loops (same arithmetic: dot + bias, then
// residual + that): a per-element store_out cost a noticeable share of a short prefill tile.
template <int R>
inline void store_tile(const GemmOut& o, int64_t t, int64_t tt, int64_t n, const float res[4][4]) {
  float bias[R];
  for (int r = 0; r < R; ++r) bias[r] = o.bias != nullptr ? o.bias[n + r] : 0.0f;
  for (int64_t j = 0; j < tt; ++j) {
    const int64_t i = (t + j) * o.ldy + (n - o.n_base);
    float* y = o.y + i;
    if (o.residual != nullptr) {
      const float* res_in = o.residual + i;
      for (int r = 0; r < R; ++r) y[r] = res_in[r] + (res[r][j] + bias[r]);
    } else {
      for (int r = 0; r < R; ++r) y[r] = res[r][j] + bias[r];
    }
  }
}

// store_out for token t's outputs first .. first + count - 1 (v[i] is output first + i) that lie in [n0, n1): an
// I4 row block's results, of which a thread's range may take only some.
inline void store_rows(const GemmOut& o, int64_t t, int64_t first, int64_t count, int64_t n0, int64_t n1,
                       const float* v) {
  const int64_t base = t * o.ldy - o.n_base;
  const int64_t lo = first > n0 ? first : n0, hi = first + count < n1 ? first + count : n1;
  for (int64_t n = lo; n < hi; ++n) {
    const float x = v[n - first] + (o.bias != nullptr ? o.bias[n] : 0.0f);
    o.y[base + n] = o.residual != nullptr ? o.residual[base + n] + x : x;
  }
}

// I4's offset terms, (T, Kp / group): for each token and group of `group` columns, minus 8 x the group's activation
// sum (the codes are stored as value + 8), from GemmInput::sum32; exact in int32. Formed once per call into a
// per-thread buffer, valid until the thread's next call.
inline const int32_t* int4_offsets(const GemmInput& in, int64_t group) {
  thread_local AlignedVector<int32_t> off;
  const int64_t per = group / 32, G = in.Kp / group;
  off.resize(static_cast<size_t>(in.T * G));
  for (int64_t t = 0; t < in.T; ++t) {
    const int32_t* s32 = in.sum32.data() + t * in.Kp / 32;
    for (int64_t g = 0; g < G; ++g) {
      int32_t s = 0;
      for (int64_t c = 0; c < per; ++c) s += s32[g * per + c];
      off[static_cast<size_t>(t * G + g)] = -8 * s;
    }
  }
  return off.data();
}

// Tokens per block in the prefill loops: as many as keep their activations (per_token bytes each) in L2 while a
// thread sweeps its weight rows, at most 128.
inline int64_t token_block(int64_t per_token) {
  return tile_min(128, (256 * 1024 / per_token + 3) / 4 * 4 + 4);
}

// Calls fn.template operator()<GROUP>() for an I4 weight's group size (32, 64, else 128): the I4 kernels' group
// loops are fixed and unrolled at compile time.
template <class Fn>
inline void with_int4_group(const MatrixView& w, Fn&& fn) {
  switch (w.group) {
    case 32:
      return fn.template operator()<32>();
    case 64:
      return fn.template operator()<64>();
    default:
      return fn.template operator()<128>();
  }
}

// Where a prefetch puts the bytes it asks for `ahead` further on. Decode (one token) streams each weight byte once:
// the prefetches keep enough memory requests in flight. Each loop takes the target that streams best for it
// (measured with bench/ab_decode.py).
// - L1 (T0 hint), the default: the AVX2 tiles, and the AVX-512 Q8_0 loop, which consumes its bytes fastest.
// - L2 (T1 hint): the AVX-512 loops on the file's 4-bit and K-quant layouts, and the f32/f16 row pairs. The 4-bit
//   and K-quant loops do more work per byte: out-of-order execution hides a load that hits L2, and the prefetches
//   do not hold L1's miss buffers for a whole memory latency.
// - Stream (NTA hint): the AVX-512 loops that read each thread's weights as one contiguous run (weight_layout.h).
// - None: int8 and Q8_0R, the lightest loops, which the hardware prefetchers follow best.
// The AVX2 one-row decode loops take their own, avx2_stream_prefetch.
enum class PrefetchTo { L1, L2, Stream };
// A decode stream's distance. The repacked GGUF loops (Q4_0R, Q4_KR, Q6_KR) do more work per byte and prefetch a
// block's lines together: they stream best twice as far ahead (kStreamAheadBlocks).
constexpr int64_t kStreamAhead = 4096;
constexpr int64_t kStreamAheadBlocks = 8192;

// Only single-token tiles (TT == 1) prefetch: decode is bound by the weight stream, prefill by arithmetic.
template <int TT, PrefetchTo kTo = PrefetchTo::L1>
inline void prefetch_ahead(const void* p, int64_t ahead) {
  if constexpr (TT == 1 && kTo == PrefetchTo::L1) _mm_prefetch(static_cast<const char*>(p) + ahead, _MM_HINT_T0);
  if constexpr (TT == 1 && kTo == PrefetchTo::L2) _mm_prefetch(static_cast<const char*>(p) + ahead, _MM_HINT_T1);
  if constexpr (TT == 1 && kTo == PrefetchTo::Stream) _mm_prefetch(static_cast<const char*>(p) + ahead, _MM_HINT_NTA);
}

// A decode stream's prefetch (PrefetchTo::Stream) of the line kStreamAhead bytes after p. A line fetched with the
// non-temporal hint skips the usual fill and eviction through the cache levels. On AMD, whose L3 is a victim cache,
// a token's weight stream then neither writes every line into L3 nor evicts what the steps between matmuls read
// again: the KV cache, norm weights, activations and code.
inline void stream_prefetch(const void* p) {
  prefetch_ahead<1, PrefetchTo::Stream>(p, kStreamAhead);
}

// prefetch_ahead for each cache line of a block of `bytes` at p (GGUF K-quant super-blocks span several).
template <int TT, PrefetchTo kTo = PrefetchTo::L1>
inline void prefetch_block(const void* p, int64_t bytes, int64_t ahead) {
  for (int64_t o = 0; o < bytes; o += 64) prefetch_ahead<TT, kTo>(static_cast<const uint8_t*>(p) + o, ahead);
}

// How far ahead to prefetch: the next tile's rows, but at least 4 KiB (into L1) or 8 KiB (into L2) so short
// (4-bit) rows still cover the memory latency; a decode stream kStreamAhead.
inline int64_t prefetch_distance(int64_t tile_bytes, PrefetchTo to = PrefetchTo::L1) {
  if (to == PrefetchTo::Stream) return kStreamAhead;  // the float loops (Bf16Kern)
  const int64_t least = to == PrefetchTo::L1 ? 4096 : 8192;
  return tile_bytes < least ? least : tile_bytes;
}

template <class Kern, int R, int TT>
void run_tile(const GemmInput& in, const MatrixView& w, int64_t n, int64_t t, const GemmOut& o) {
  float res[4][4];
  if constexpr (requires { Kern::template tile<R, TT>(in, w, n, t, res); }) {
    Kern::template tile<R, TT>(in, w, n, t, res);
  } else {
    // A kernel without tile: its several-token calls always get a RowCache (run_row_tile) and its single-token
    // calls run decode_rows, so nothing reaches here but for completeness; the cached tile on a freshly filled
    // cache gives the same bits.
    thread_local typename Kern::RowCache cache;
    Kern::template fill<R>(in, w, n, cache);
    Kern::template cached_tile<R, TT>(in, w, cache, n, t, res);
  }
  store_tile<R>(o, t, TT, n, res);
}

// Tokens per register tile: Kern::kTokens where a kernel sets it (AVX2 has 16 vector registers, too few for
// 4 x 4 accumulators plus operands), else 4.
template <class Kern>
constexpr int64_t tile_tokens() {
  if constexpr (requires { Kern::kTokens; }) {
    return Kern::kTokens;
  } else {
    return 4;
  }
}

// Calls fn.template operator()<N>() with N = v for v in 2..4, else N = 1: turns a run-time tile size into the
// compile-time one the kernels are instantiated for (rows per tile, tokens per tile).
template <class Fn>
inline void with_tile_size(int64_t v, Fn&& fn) {
  switch (v) {
    case 4:
      return fn.template operator()<4>();
    case 3:
      return fn.template operator()<3>();
    case 2:
      return fn.template operator()<2>();
    default:
      return fn.template operator()<1>();
  }
}

// One row tile (R rows at n) against tokens [t0, t1). A RowCache is a per-thread buffer a kernel fills once per row
// tile, e.g. with weights unpacked into L1. With several tokens, every token tile (tile_tokens<Kern>() tokens) reads
// it. Decode (one token) keeps the plain tile or decode_rows, so the cached tile must compute the same bits.
template <class Kern, int R>
void run_row_tile(const GemmInput& in, const MatrixView& w, int64_t n, int64_t t0, int64_t t1, const GemmOut& o) {
  if constexpr (requires { typename Kern::RowCache; }) {
    if (in.T > 1) {
      thread_local typename Kern::RowCache cache;
      Kern::template fill<R>(in, w, n, cache);
      for (int64_t t = t0; t < t1; t += tile_tokens<Kern>()) {
        float res[4][4];
        const int64_t tt = tile_min(tile_tokens<Kern>(), t1 - t);
        with_tile_size(tt, [&]<int TT>() { Kern::template cached_tile<R, TT>(in, w, cache, n, t, res); });
        store_tile<R>(o, t, tt, n, res);
      }
      return;
    }
  }
  constexpr int64_t kTokens = tile_tokens<Kern>();
  for (int64_t t = t0; t < t1; t += kTokens) {
    with_tile_size(tile_min(kTokens, t1 - t), [&]<int TT>() { run_tile<Kern, R, TT>(in, w, n, t, o); });
  }
}

// Tokens are processed in blocks whose activations stay in L2 while each thread sweeps its weight rows, four
// rows by tile_tokens<Kern>() tokens at a time. A single token (decode) takes one row at a time instead: each thread
// then reads its weights as one sequential stream, which the prefetchers follow best. Kern::kDecodeRows asks for
// more rows where one row cannot keep the core busy: the AVX2 float kernel (one FMA chain per row), and the AVX2
// 4-bit and K-quant kernels on the file's layouts (four rows share each step's activation work).
template <class Kern>
void drive_tile_loop(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& o) {
  if constexpr (requires { Kern::decode_rows(in, w, n0, n1, o); }) {  // a kernel's own row loop for one token
    if (in.T == 1) return Kern::decode_rows(in, w, n0, n1, o);
  }
  const int64_t act_bytes = in.kind == ActKind::F32 ? 4 : in.kind == ActKind::BF16 ? 2 : 1;
  const int64_t per_token = in.Kp * act_bytes;
  const int64_t tok_block = token_block(per_token);
  const int64_t rows_per_tile = in.T == 1 ? Kern::kDecodeRows : 4;
  for (int64_t t0 = 0; t0 < in.T; t0 += tok_block) {
    const int64_t t1 = tile_min(in.T, t0 + tok_block);
    for (int64_t n = n0; n < n1; n += rows_per_tile) {
      with_tile_size(tile_min(rows_per_tile, n1 - n), [&]<int R>() { run_row_tile<Kern, R>(in, w, n, t0, t1, o); });
    }
  }
}

// A kernel with its own driver (Kern::run: I4's blocks of 16 rows), else the tile loop above.
template <class Kern>
void drive_tiles(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& o) {
  if constexpr (requires { Kern::run(in, w, n0, n1, o); }) {
    Kern::run(in, w, n0, n1, o);
  } else {
    drive_tile_loop<Kern>(in, w, n0, n1, o);
  }
}

}  // namespace
}  // namespace ascent::kernels
