// AVX-512 kernels for GGUF Q8_0 weights, as the file holds them and repacked (packed_formats.h: Q8_0R), against
// activations quantized per 32-column block.
#include "ascent/kernels/cpu/gemm_avx512_common.h"

namespace ascent::kernels {
namespace {

// GGUF Q8_0 rows against per-block int8 activations: two 32-element blocks per step, each half of the register
// scaled by its own weight and activation scales.
struct Q80Kern {
  static constexpr int kDecodeRows = 1;  // decode runs decode_rows
  struct RowCache;
  // Unsigned codes (weight + 128) of blocks b and b+1 (b+1 zero when past the row), and their scales.
  template <bool kPairs>
  static void load_w(const uint8_t* row, int64_t b, int64_t nb, __m512i& codes, __m512& dw) {
    const bool two = kPairs || b + 1 < nb;
    const auto* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[0].qs));
    const __m256i hi = two ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[1].qs)) : _mm256_set1_epi8(-128);
    codes = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), _mm512_set1_epi8(-128));
    dw = _mm512_insertf32x8(_mm512_set1_ps(_cvtsh_ss(blk[0].d)), _mm256_set1_ps(two ? _cvtsh_ss(blk[1].d) : 0.0f), 1);
  }
  // Tokens t .. t + TT - 1's side of blocks b, b + 1 (a: token t's activations): the activations, minus the
  // weights' code offset times their sums (per lane), and their block scales (lanes 0-7 block b, 8-15 b + 1).
  template <int TT>
  static void block_acts(const GemmInput& in, const int8_t* a, int64_t t, int64_t b, __m512i av[TT], __m512i off[TT],
                         __m512 da[TT]) {
    const __m512i offset = _mm512_set1_epi8(-128);  // u8 128
    const int64_t B = in.Kp / kQBlock;
    for (int j = 0; j < TT; ++j) {
      av[j] = _mm512_loadu_si512(a + j * in.Kp + b * kQBlock);
      off[j] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, av[j]));
      const float* d = in.d.data() + (t + j) * B + b;
      da[j] = _mm512_insertf32x8(_mm512_set1_ps(d[0]), _mm256_set1_ps(d[1]), 1);
    }
  }
  // kPairs: the row has an even number of blocks, so every step takes two (no test in the loop, which GCC 12
  // answers by keeping the accumulators in memory). kCached: codes and scales read from a RowCache (prefill)
  // instead of formed from the blocks.
  template <int R, int TT, bool kPairs, bool kCached = false>
  static void body(const GemmInput& in, const MatrixView& w, int64_t n, int64_t t, float out[4][4],
                   const RowCache* cache = nullptr) {
    const int64_t nb = in.K / kQBlock;
    __m512 acc[R][TT];
    // Row addresses from one stride (no calls inside the loops, so GCC unrolls them and keeps acc in registers).
    const int64_t stride = w.row_bytes();
    const uint8_t* w0 = w.row_ptr(n);
    const uint8_t* rows[R];
    const int64_t ahead = prefetch_distance(R * stride);
    for (int r = 0; r < R; ++r) {
      rows[r] = w0 + r * stride;
      for (int j = 0; j < TT; ++j) acc[r][j] = _mm512_setzero_ps();
    }
    const int8_t* a = in.q.data() + t * in.Kp;
    for (int64_t b = 0; b < nb; b += 2) {
      __m512i av[TT], off[TT];
      __m512 da[TT];
      block_acts<TT>(in, a, t, b, av, off, da);
      for (int r = 0; r < R; ++r) {
        __m512i codes;
        __m512 dw;
        if constexpr (kCached) {
          const int64_t pairs = (nb + 1) / 2, pr = b / 2;
          codes = _mm512_loadu_si512(cache->codes.data() + (r * pairs + pr) * 64);
          const float* d2 = cache->dw.data() + (r * pairs + pr) * 2;
          dw = _mm512_insertf32x8(_mm512_set1_ps(d2[0]), _mm256_set1_ps(d2[1]), 1);
        } else {
          prefetch_ahead<TT>(rows[r] + b * static_cast<int64_t>(sizeof(BlockQ8_0)), ahead);
          load_w<kPairs>(rows[r], b, nb, codes, dw);
        }
        for (int j = 0; j < TT; ++j) {
          const __m512i s = _mm512_dpbusd_epi32(off[j], codes, av[j]);  // off holds minus the codes' offset
          acc[r][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, da[j]), acc[r][j]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) out[r][j] = hsum(acc[r][j]);
    }
  }
  // Decode (one token), rows [n0, n1) one at a time: body<1, 1>'s arithmetic in two 256-bit halves, lanes 0-7
  // (even blocks) in y[0] and 8-15 (odd blocks) in y[1]. So the same products and sums per lane, and the same bits.
  // Built from 256-bit parts, the loop needs no inserts or cross-lane moves. Those cost as much as the arithmetic
  // where 512-bit instructions run as two halves (Zen 4). The offset term is formed once per call from the single
  // token's lane sums (gemm.h), and the activation scales are read from its lane vector. One row at a time makes
  // each thread's weights one sequential stream. The block scale is converted in place: a table of all f16 values
  // is slower, since the streamed weights keep evicting its lines.
  static void decode_rows(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& o) {
    const int64_t nb = in.K / kQBlock;
    const int64_t stride = w.row_bytes();
    const int64_t ahead = prefetch_distance(stride);
    // minus the codes' offset (128) times each lane's activation sum, as block_acts forms it
    const int32_t* neg_off = scaled_lane_offsets(in, /*shift=*/7);
    const float* lane_d = in.lane_d.data();
    const int8_t* a = in.q.data();
    const __m256i flip = _mm256_set1_epi8(-128);
    const uint8_t* row = w.row_ptr(n0);
    for (int64_t n = n0; n < n1; ++n, row += stride) {
      const auto* blk = reinterpret_cast<const BlockQ8_0*>(row);
      __m256 y[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
      auto step = [&](int64_t b, int h) {
        const __m256i codes = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[b].qs)), flip);
        const __m256i off = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(neg_off + b * 8));
        const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + b * kQBlock));
        const __m256i is = _mm256_dpbusd_epi32(off, codes, av);
        const __m256 dw = _mm256_cvtph_ps(_mm_set1_epi16(static_cast<int16_t>(blk[b].d)));
        const __m256 sc = _mm256_mul_ps(dw, _mm256_loadu_ps(lane_d + b * 8));
        y[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), sc, y[h]);
      };
      int64_t b = 0;
      for (; b + 1 < nb; b += 2) {
        prefetch_ahead<1>(blk + b, ahead);
        step(b, 0);
        step(b + 1, 1);
      }
      if (b < nb) {  // an odd last block: body adds the absent block's zero product to lanes 8-15
        step(b, 0);
        y[1] = _mm256_fmadd_ps(_mm256_setzero_ps(), _mm256_setzero_ps(), y[1]);
      }
      float res[4][4];
      res[0][0] = hsum(y[0], y[1]);
      store_tile<1>(o, 0, 1, n, res);
    }
  }
  template <int R, int TT>
  static void tile(const GemmInput& in, const MatrixView& w, int64_t n, int64_t t, float out[4][4]) {
    if ((in.K / kQBlock) % 2 == 0) {
      body<R, TT, true>(in, w, n, t, out);
    } else {
      body<R, TT, false>(in, w, n, t, out);
    }
  }

  // Prefill: each 4-row tile's codes and block scales, as load_w gives them (codes unsigned, scales widened from
  // f16), are formed once into L1 for all its token tiles. The cached tile then does body's arithmetic on them, so
  // the same bits. The scales stay two floats per block pair: as 16-lane vectors, the cache would not fit L1 beside
  // the activations for long rows.
  struct RowCache {
    AlignedVector<uint8_t> codes;  // (R, pairs, 64) unsigned codes of blocks b, b + 1
    AlignedVector<float> dw;       // (R, pairs, 2) their scales (widened from f16)
  };
  template <int R>
  static void fill(const GemmInput& in, const MatrixView& w, int64_t n, RowCache& c) {
    const int64_t nb = in.K / kQBlock, pairs = (nb + 1) / 2;
    c.codes.resize(static_cast<size_t>(4 * pairs * 64));
    c.dw.resize(static_cast<size_t>(4 * pairs * 2));
    const int64_t stride = w.row_bytes();
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = w.row_ptr(n) + r * stride;
      for (int64_t pr = 0; pr < pairs; ++pr) {
        __m512i codes;
        __m512 dw;
        load_w</*kPairs=*/false>(row, 2 * pr, nb, codes, dw);
        _mm512_storeu_si512(c.codes.data() + (r * pairs + pr) * 64, codes);
        alignas(64) float lanes[16];
        _mm512_store_ps(lanes, dw);
        c.dw[static_cast<size_t>((r * pairs + pr) * 2)] = lanes[0];
        c.dw[static_cast<size_t>((r * pairs + pr) * 2 + 1)] = lanes[8];
      }
    }
  }
  template <int R, int TT>
  static void cached_tile(const GemmInput& in, const MatrixView& w, const RowCache& c, int64_t n, int64_t t,
                          float out[4][4]) {
    // The loop bound covers an odd last block either way: kPairs only steers load_w, which the cache replaces.
    body<R, TT, /*kPairs=*/true, /*kCached=*/true>(in, w, n, t, out, &c);
  }
};

// GGUF Q8_0 repacked as Q8_0R (packed_formats.h) when the model loads, as Q4_0R is for Q4_0: per 16 blocks, the scales
// side by side and the codes, unsigned (code + 128), in GemmInput::q4r's order. A block's integer dot builds up in one
// lane, and the float work (convert, scale, multiply-add) runs once per 16 blocks, not once per block as Q80Kern on the
// file's layout must. The unsigned codes' offset, minus 128 x each block's activation sum, is 16 x q4r_off. Decode
// (q4r_decode_rows) and prefill (q4r_cached_tile) both take one 512-bit register of 16 blocks, with the codes read in
// place (they already lie in its order): the same lanes in the same order, so the same bits.
struct Q80RKern {
  static constexpr int kDecodeRows = 1;  // decode runs decode_rows

  // Decode (one token): the codes as they lie (offset 128, so the offset terms shifted by 4: x 16).
  static void decode_rows(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& o) {
    q4r_decode_rows<kQ8RGroupBytes, /*kShift=*/4, /*kHighShift=*/0, /*kStreamPrefetch=*/false>(
        in, w, n0, n1, o, [&](const uint8_t* p, int j, __m512i& c0, __m512i& c1) {
          c0 = join_halves(p + 32 + 128 * j, p + 64 + 128 * j);
          c1 = join_halves(p + 96 + 128 * j, p + 128 + 128 * j);
        });
  }

  // Prefill: the shared tile on the codes in place (no unpacking to cache), scales widened per group.
  template <int R, int TT>
  static void tile(const GemmInput& in, const MatrixView& w, int64_t n, int64_t t, float out[4][4]) {
    const int64_t stride = w.row_bytes(), B = in.Kp / kQBlock;
    const uint8_t* w0 = w.row_ptr(n);
    q4r_cached_tile<R, TT>(
        in, t, [&](int r, int64_t g) { return w0 + r * stride + g * kQ8RGroupBytes + 32; },
        [&](int j, int64_t g) {
          return _mm512_slli_epi32(_mm512_loadu_si512(in.q4r_off.data() + (t + j) * B + 16 * g), 4);
        },
        [&](__m512 acc, __m512i is, int r, int j, int64_t g) {
          const __m512 dw = _mm512_cvtph_ps(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w0 + r * stride + g * kQ8RGroupBytes)));
          const __m512 sc = _mm512_mul_ps(dw, _mm512_loadu_ps(in.d.data() + (t + j) * B + 16 * g));
          return _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), sc, acc);
        },
        out);
  }
};

}  // namespace

template <>
void gemm_rows_simd<Isa::Avx512, WeightFormat::Q8_0>(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1,
                                                     const GemmOut& out) {
  drive_tiles<Q80Kern>(in, w, n0, n1, out);
}

template <>
void gemm_rows_simd<Isa::Avx512, WeightFormat::Q8_0R>(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1,
                                                      const GemmOut& out) {
  drive_tiles<Q80RKern>(in, w, n0, n1, out);
}

}  // namespace ascent::kernels

#include "ascent/kernels/cpu/simd_avx512_end.h"
