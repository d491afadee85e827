// AVX-512 kernels for GGUF Q4_K weights, as the file holds them and repacked (packed_formats.h: Q4_KR): integer
// sums per 32-column sub-block against per-block int8 activations, the sub-block scales applied lane-wise in f32.
#include "ascent/kernels/cpu/gemm_avx512_common.h"

namespace ascent::kernels {
namespace {

// Q4_K: lane value = d * scale_j * sum(a * code) - dmin * min_j * sum(a), times the activation block scale.
struct Q4KKern : KQuantKern<Q4KKern> {
  static constexpr int kDecodeRows = 1;  // decode runs decode_rows
  struct RowCache;
  // The 8 sub-block scales and minimums of a super-block times d and dmin, interleaved: lane 2j scale j, lane
  // 2j + 1 minimum j (q4k_simd.h).
  static __m512 scales_mins(const BlockQ4_K& b) {
    const __m512 dd = _mm512_cvtph_ps(_mm256_set1_epi32(q4k_d_dmin(b)));
    return _mm512_mul_ps(dd, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q4k_scales_mins(b))));
  }
  // Quarter q of a super-block's 256 columns as the kernel pairs them (split_nibbles over 64 bytes 64 * (q / 2),
  // half q % 2): lanes 0-7 hold sub-block 4 (q / 2) + q % 2, lanes 8-15 the one two further. Returns, per lane,
  // where that sub-block's factors sit in an interleaved (scales_mins) vector: lane 2 * sub-block.
  static __m512i quarter_index(int q) {
    const int s0 = 4 * (q / 2) + q % 2;
    return _mm512_set_epi32(2 * s0 + 4, 2 * s0 + 4, 2 * s0 + 4, 2 * s0 + 4, 2 * s0 + 4, 2 * s0 + 4, 2 * s0 + 4,
                            2 * s0 + 4, 2 * s0, 2 * s0, 2 * s0, 2 * s0, 2 * s0, 2 * s0, 2 * s0, 2 * s0);
  }
  // kCached: codes and scale/minimum vectors read from a RowCache (prefill) instead of formed from the blocks.
  // Per super-block and row, sm (scales_mins) times the tokens' kq_dax gives two factors. Lane 2j holds d * scale_j
  // * the block scale; lane 2j + 1 holds dmin * min_j * the block's scaled activation sum. The minimum terms are
  // subtracted there once per super-block (into the odd lanes), and the scale factors permuted to each chunk's
  // lanes. One token keeps that product for the 4 chunks; several (prefill) form it per chunk in registers. Those
  // are the same products in the same order, so the same bits.
  template <int R, int TT, bool kCached = false>
  static void body(const GemmInput& in, const MatrixView& w, int64_t n, int64_t t, float out[4][4],
                   const RowCache* cache = nullptr) {
    const int64_t stride = w.row_bytes();
    const uint8_t* w0 = w.row_ptr(n);
    const int64_t ahead = prefetch_distance(R * stride);
    __m512 acc[R][TT];
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) acc[r][j] = _mm512_setzero_ps();
    }
    const int8_t* a = in.kq_pairs.data() + t * in.K;  // (TT, K) paired columns
    const int64_t nsb = in.K / kQKBlock;
    const float* dax0 = in.kq_dax.data() + t * nsb * 16;
    for (int64_t sb = 0; sb < nsb; ++sb) {
      __m512 sm[R], dax[TT];
      for (int j = 0; j < TT; ++j) dax[j] = _mm512_loadu_ps(dax0 + (j * nsb + sb) * 16);
      for (int r = 0; r < R; ++r) {
        if constexpr (kCached) {
          sm[r] = _mm512_loadu_ps(cache->sm.data() + (r * nsb + sb) * 16);
        } else {
          const auto* blk = reinterpret_cast<const BlockQ4_K*>(w0 + r * stride) + sb;
          prefetch_block<TT>(blk, sizeof(BlockQ4_K), ahead);
          sm[r] = scales_mins(*blk);
        }
        for (int j = 0; j < TT; ++j) {
          acc[r][j] = _mm512_mask_sub_ps(acc[r][j], 0xaaaa, acc[r][j], _mm512_mul_ps(sm[r], dax[j]));
        }
      }
      // Two 64-column chunks (64 packed bytes) at a time. The low nibbles of both are one register (sub-blocks 2p,
      // 2p + 2 in lanes 0-7, 8-15), the high nibbles another (2p + 1, 2p + 3). So the activations are paired the
      // same way: columns 0-31 with 64-95, and 32-63 with 96-127.
      if constexpr (TT == 1) {
        __m512 f1[R];  // sm * dax, whose even lanes are the chunks' scale factors
        for (int r = 0; r < R; ++r) f1[r] = _mm512_mul_ps(sm[r], dax[0]);
        for (int p = 0; p < 2; ++p) {
          const int64_t k = sb * kQKBlock + 128 * p;
          const __m512i av[2] = {_mm512_loadu_si512(a + k), _mm512_loadu_si512(a + k + 64)};
          for (int r = 0; r < R; ++r) {
            __m512i codes[2];
            if constexpr (kCached) {
              for (int h = 0; h < 2; ++h)
                codes[h] = _mm512_loadu_si512(cache->codes.data() + ((r * nsb + sb) * 4 + 2 * p + h) * 64);
            } else {
              split_nibbles((reinterpret_cast<const BlockQ4_K*>(w0 + r * stride) + sb)->qs + 64 * p, codes);
            }
            for (int h = 0; h < 2; ++h) {
              const __m512i is = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes[h], av[h]);
              acc[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is),
                                          _mm512_permutexvar_ps(quarter_index(2 * p + h), f1[r]), acc[r][0]);
            }
          }
        }
      } else {
        for (int q = 0; q < 4; ++q) {  // quarter q: half q % 2 of the 64-byte pair q / 2
          const __m512i sidx = quarter_index(q);
          __m512i av[TT];
          __m512 da[TT];  // each lane's block scale
          for (int j = 0; j < TT; ++j) {
            av[j] = _mm512_loadu_si512(a + j * in.K + sb * kQKBlock + 64 * q);
            da[j] = _mm512_permutexvar_ps(sidx, dax[j]);
          }
          for (int r = 0; r < R; ++r) {
            __m512i codes;
            if constexpr (kCached) {
              codes = _mm512_loadu_si512(cache->codes.data() + ((r * nsb + sb) * 4 + q) * 64);
            } else {
              __m512i both[2];
              split_nibbles((reinterpret_cast<const BlockQ4_K*>(w0 + r * stride) + sb)->qs + 64 * (q / 2), both);
              codes = both[q % 2];
            }
            const __m512 sc = _mm512_permutexvar_ps(sidx, sm[r]);
            for (int j = 0; j < TT; ++j) {
              const __m512i is = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes, av[j]);
              acc[r][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(sc, da[j]), acc[r][j]);
            }
          }
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) out[r][j] = hsum(acc[r][j]);
    }
  }

  // Decode (one token), rows [n0, n1) one at a time, one sequential stream per thread: body<1, 1>'s arithmetic in
  // 256-bit halves. body's lanes 0-7 take sub-blocks 0, 1, 4, 5 of each super-block (in that order), lanes 8-15
  // sub-blocks 2, 3, 6, 7. Here y[0] and y[1] take the same sub-blocks in the same order, each a 32-byte chunk's low
  // or high nibbles against the paired activations. So the same products and sums per lane: the same bits. Each
  // chunk's scale factor is broadcast from its register by an in-half permute, which is faster than broadcasts from
  // a stack copy. Where 512-bit instructions run as two halves (Zen 4), a four-row 512-bit tile is bound by its
  // instruction count.
  static void decode_rows(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& o) {
    const int64_t nsb = in.K / kQKBlock;
    const int64_t stride = w.row_bytes();
    const int64_t ahead = prefetch_distance(stride, PrefetchTo::L2);
    const int8_t* a = in.kq_pairs.data();  // (K,) paired columns
    const float* dax = in.kq_dax.data();   // (K / 256, 16)
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    const uint8_t* row = w.row_ptr(n0);
    for (int64_t n = n0; n < n1; ++n, row += stride) {
      const auto* blk = reinterpret_cast<const BlockQ4_K*>(row);
      __m256 y[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
      for (int64_t sb = 0; sb < nsb; ++sb) {
        prefetch_block<1, PrefetchTo::L2>(blk + sb, sizeof(BlockQ4_K), ahead);
        // scales_mins() in halves: lanes 2j, 2j + 1 of half h are sub-block 4h + j's scale and minimum
        const __m256 dd = _mm256_cvtph_ps(_mm_set1_epi32(q4k_d_dmin(blk[sb])));
        const __m128i sm8 = q4k_scales_mins(blk[sb]);
        __m256 f[2];  // sm * dax: even lanes the sub-blocks' scale factors, odd their minimum terms
        for (int h = 0; h < 2; ++h) {
          // The shift is an immediate: clang wants it constant without unrolling the loop first.
          const __m128i half = h == 0 ? sm8 : _mm_srli_si128(sm8, 8);
          const __m256 sm = _mm256_mul_ps(dd, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(half)));
          f[h] = _mm256_mul_ps(sm, _mm256_loadu_ps(dax + sb * 16 + 8 * h));
          y[h] = _mm256_mask_sub_ps(y[h], 0xaa, y[h], f[h]);
        }
        for (int p = 0; p < 2; ++p) {
          const int64_t k = sb * kQKBlock + 128 * p;
          for (int h = 0; h < 2; ++h) {  // chunk 2p + h: sub-blocks 4p + 2h (low nibbles), 4p + 2h + 1 (high)
            const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[sb].qs + 64 * p + 32 * h));
            const __m256i lo = _mm256_and_si256(raw, low4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
            const int s = 4 * p + 2 * h;
            const __m256i is_lo = _mm256_dpbusd_epi32(
                _mm256_setzero_si256(), lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + k + 32 * h)));
            y[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is_lo), _mm256_permutexvar_ps(_mm256_set1_epi32(2 * s % 8), f[p]),
                                   y[h]);
            const __m256i is_hi = _mm256_dpbusd_epi32(
                _mm256_setzero_si256(), hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + k + 64 + 32 * h)));
            y[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is_hi),
                                   _mm256_permutexvar_ps(_mm256_set1_epi32(2 * (s + 1) % 8), f[p]), y[h]);
          }
        }
      }
      float res[4][4];
      res[0][0] = hsum(y[0], y[1]);
      store_tile<1>(o, 0, 1, n, res);
    }
  }

  // Prefill: each 4-row tile's codes (nibbles unpacked) and its super-blocks' scale and minimum vectors are formed
  // once into L1 for all its token tiles. The vectors have d and dmin applied, as scales_mins() gives them. The
  // cached tile does body's arithmetic on them, so the same bits.
  struct RowCache {
    AlignedVector<uint8_t> codes;  // (R, K / 64, 64)
    AlignedVector<float> sm;       // (R, K / 256, 16): scales_mins of each super-block
  };
  template <int R>
  static void fill(const GemmInput& in, const MatrixView& w, int64_t n, RowCache& c) {
    const int64_t nsb = in.K / kQKBlock;
    c.codes.resize(static_cast<size_t>(4 * nsb * kQKBlock));
    c.sm.resize(static_cast<size_t>(4 * nsb * 16));
    const int64_t stride = w.row_bytes();
    for (int r = 0; r < R; ++r) {
      const auto* blks = reinterpret_cast<const BlockQ4_K*>(w.row_ptr(n) + r * stride);
      for (int64_t sb = 0; sb < nsb; ++sb) {
        _mm512_storeu_ps(c.sm.data() + (r * nsb + sb) * 16, scales_mins(blks[sb]));
        for (int p = 0; p < 2; ++p) {
          __m512i codes[2];
          split_nibbles(blks[sb].qs + 64 * p, codes);
          for (int h = 0; h < 2; ++h)
            _mm512_storeu_si512(c.codes.data() + ((r * nsb + sb) * 4 + 2 * p + h) * 64, codes[h]);
        }
      }
    }
  }
  template <int R, int TT>
  static void cached_tile(const GemmInput& in, const MatrixView& w, const RowCache& c, int64_t n, int64_t t,
                          float out[4][4]) {
    body<R, TT, /*kCached=*/true>(in, w, n, t, out, &c);
  }
};

// Q4_KR (packed_formats.h): Q4_K's codes regrouped so that each vpdpbusd lane sums columns of one 32-column sub-block.
// A super-block's 8 integer sub-block sums build up in 8 lanes, and the float work (convert, scale, minimum term) runs
// once per super-block; Q4KKern's runs once per 64-column chunk. Per lane i (sub-block i) of a super-block:
//   y_i += float(sum(a * code) * scale_i) * (d * da_i),  then  y_i -= (dmin * min_i) * (da_i * sum(a))
// (one rounding: fnmadd). The integer sum times the 6-bit scale is exact in int32 and in f32 (< 2^22), and
// dmin * min_i is exact (an f16 times a 6-bit integer). Even super-blocks accumulate in lanes 0-7 and odd ones in
// lanes 8-15, in prefill and decode alike, each reduced once by hsum: the same bits for every tile and token count.
// The activations come in Q4_0R's order (GemmInput::q4r), whose 512-column groups are two super-blocks here.
struct Q4KRKern {
  static constexpr int kDecodeRows = 1;  // decode runs decode_rows

  // A super-block's 8 scales (int32), d in every lane, and dmin * min_i. Q4_KR's scale bytes (packed_formats.h) unpack
  // with two widenings, a variable shift and a bit select, against two byte shuffles and their fix-ups for Q4_K's.
  static void factors(const BlockQ4_KR& b, __m256i& sc, __m256& d, __m256& wm) {
    const __m256i s32 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.scales)));
    sc = _mm256_and_si256(s32, _mm256_set1_epi32(63));
    int low_mins;  // scales[8..11]: minimums 0-3's low 4 bits in the low nibbles, 4-7's in the high
    std::memcpy(&low_mins, b.scales + 8, 4);
    const __m256i lows =
        _mm256_srlv_epi32(_mm256_cvtepu8_epi32(_mm_set1_epi32(low_mins)), _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
    // Bits 0-3 from lows, bits 4-5 from scales[i] >> 2 (minimum i's top 2 bits), above them zeros.
    const __m256i m = _mm256_ternarylogic_epi32(lows, _mm256_srli_epi32(s32, 2), _mm256_set1_epi32(0x0f), 0xe4);
    d = _mm256_cvtph_ps(_mm_set1_epi16(static_cast<int16_t>(b.d)));
    wm = _mm256_mul_ps(_mm256_cvtph_ps(_mm_set1_epi16(static_cast<int16_t>(b.dmin))), _mm256_cvtepi32_ps(m));
  }

  // factors for the two super-blocks at p (lanes 0-7) and p + 144 (lanes 8-15) at once, the same values lane by
  // lane. Both 16-byte headers (d, dmin, the 12 scale bytes) go into one register, each twice, and byte shuffles
  // spread them over the lanes. That takes about 16 instructions, where two factors calls and the three inserts
  // joining their halves take 30, a third of decode's loop.
  static void factors2(const uint8_t* p, __m512i& sc, __m512& d, __m512& wm) {
    const __m256i h =
        _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
                                _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + sizeof(BlockQ4_KR))), 1);
    const __m512i h4 = _mm512_shuffle_i64x2(_mm512_castsi256_si512(h), _mm512_castsi256_si512(h), 0x50);  // h0 h0 h1 h1
    // Per 128-bit part k (k = 0, 1: its header's lanes 0-3, 4-7), lane 4k + i: scale byte 4 + 4k + i, and
    // minimum i's low-bits byte 12 + i (of which lanes 4-7 take the high nibble), zero-extended.
    constexpr auto z = [](int byte) { return static_cast<int>(0xffffff00u | byte); };  // byte, then 3 zeros
    const __m512i sidx = _mm512_setr_epi32(z(4), z(5), z(6), z(7), z(8), z(9), z(10), z(11), z(4), z(5), z(6), z(7),
                                           z(8), z(9), z(10), z(11));
    const __m512i lidx = _mm512_setr_epi32(z(12), z(13), z(14), z(15), z(12), z(13), z(14), z(15), z(12), z(13), z(14),
                                           z(15), z(12), z(13), z(14), z(15));
    const __m512i s32 = _mm512_shuffle_epi8(h4, sidx);
    sc = _mm512_and_si512(s32, _mm512_set1_epi32(63));
    const __m512i lows = _mm512_srlv_epi32(_mm512_shuffle_epi8(h4, lidx),
                                           _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 0, 0, 0, 0, 4, 4, 4, 4));
    const __m512i m = _mm512_ternarylogic_epi32(lows, _mm512_srli_epi32(s32, 2), _mm512_set1_epi32(0x0f), 0xe4);
    // d (bytes 0-1) and dmin (2-3) of each header, repeated over its 8 lanes.
    d = _mm512_cvtph_ps(_mm256_shuffle_epi8(h, _mm256_set1_epi16(0x0100)));
    wm = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_shuffle_epi8(h, _mm256_set1_epi16(0x0302))), _mm512_cvtepi32_ps(m));
  }

  // Decode (one token), rows [n0, n1) one at a time, each thread's weights one sequential stream, two super-blocks
  // (one 512-column activation group) per step. The loop is bound by its instruction count. So the high nibbles
  // enter vpdpbusd in place (raw & 0xf0, 16 x the code) and their sum is shifted back once (exact: a multiple of
  // 16), which saves a shift per 32 bytes. The low and high sums run as two chains (integer sums, exact in any order).
  static void decode_rows(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& o) {
    const int64_t nsb = in.K / kQKBlock;
    const int64_t stride = w.row_bytes();
    const int64_t ahead = kStreamAheadBlocks;
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    // One super-block at p against its activations a (one half of a group), scales da and scaled sums dsa.
    auto step = [&](const uint8_t* p, const int8_t* a, const float* da, const float* dsa, __m256& acc) {
      const auto& b = *reinterpret_cast<const BlockQ4_KR*>(p);
      __m256i lo = _mm256_setzero_si256(), hi16 = _mm256_setzero_si256();
      for (int j = 0; j < 4; ++j) {
        const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * j));
        lo = _mm256_dpbusd_epi32(lo, _mm256_and_si256(raw, low4),
                                 _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 128 * j)));
        hi16 = _mm256_dpbusd_epi32(hi16, _mm256_andnot_si256(low4, raw),
                                   _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 128 * j + 64)));
      }
      __m256i sc;
      __m256 d, wm;
      factors(b, sc, d, wm);
      const __m256i is = _mm256_add_epi32(lo, _mm256_srai_epi32(hi16, 4));
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_mullo_epi32(is, sc)), _mm256_mul_ps(d, _mm256_loadu_ps(da)), acc);
      acc = _mm256_fnmadd_ps(wm, _mm256_loadu_ps(dsa), acc);
    };
    // Both super-blocks of a group at p, even in lanes 0-7 and odd in lanes 8-15 of 512-bit registers: step's
    // lanes, the same operations on each, with half the instructions for the codes. The group's activations are
    // already in that order (the even super-block's 32 bytes of each 64, then the odd one's; da and dsa 8 floats
    // each). The saved instructions show when memory is fast (measured with bench/ab_decode.py).
    const __m512i low4x2 = _mm512_set1_epi8(0x0f);
    auto step2 = [&](const uint8_t* p, const int8_t* a, const float* da, const float* dsa, __m512& acc) {
      const auto& b0 = *reinterpret_cast<const BlockQ4_KR*>(p);
      const auto& b1 = *reinterpret_cast<const BlockQ4_KR*>(p + sizeof(BlockQ4_KR));
      __m512i lo = _mm512_setzero_si512(), hi16 = _mm512_setzero_si512();
      for (int j = 0; j < 4; ++j) {
        const __m512i raw = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0.qs + 32 * j))),
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1.qs + 32 * j)), 1);
        lo = dpbusd(lo, _mm512_and_si512(raw, low4x2), _mm512_loadu_si512(a + 128 * j));
        hi16 = dpbusd(hi16, _mm512_andnot_si512(low4x2, raw), _mm512_loadu_si512(a + 128 * j + 64));
      }
      __m512i sc;
      __m512 d, wm;
      factors2(p, sc, d, wm);
      const __m512i is = _mm512_add_epi32(lo, _mm512_srai_epi32(hi16, 4));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_mullo_epi32(is, sc)), _mm512_mul_ps(d, _mm512_loadu_ps(da)), acc);
      acc = _mm512_fnmadd_ps(wm, _mm512_loadu_ps(dsa), acc);
    };
    const uint8_t* row = w.row_ptr(n0);
    const int8_t* const a = in.q4r.data();
    const float* const da = in.d.data();
    const float* const dsa = in.q4r_dsa.data();
    prefetch_span(a, in.Kp);
    prefetch_span(da, in.Kp / kQBlock * 4);
    prefetch_span(dsa, in.Kp / kQBlock * 4);
    for (int64_t n = n0; n < n1; ++n, row += stride) {
      // Lanes 0-7 take the even super-blocks, 8-15 the odd ones (the halves of each 512-column activation group).
      __m512 y = _mm512_setzero_ps();
      const uint8_t* p = row;
      // One index for the three activation arrays (a's 512 bytes per group are 32 x da's 16 floats, so addressing
      // covers them all). GCC otherwise keeps one pointer each and a counter: six increments per group. The odd
      // last super-block, if any, takes the next group's first half at the same index.
      int64_t i = 0;
      for (; i < 16 * (nsb / 2); i += 16, p += 2 * sizeof(BlockQ4_KR)) {
        prefetch_block<1, PrefetchTo::Stream>(p, 2 * sizeof(BlockQ4_KR), ahead);
        step2(p, a + 32 * i, da + i, dsa + i, y);
      }
      __m256 y0 = _mm512_castps512_ps256(y);
      if (nsb % 2 != 0) {
        prefetch_block<1, PrefetchTo::Stream>(p, sizeof(BlockQ4_KR), ahead);
        step(p, a + 32 * i, da + i, dsa + i, y0);
      }
      float res[4][4];
      res[0][0] = hsum(y0, _mm512_extractf32x8_ps(y, 1));
      store_tile<1>(o, 0, 1, n, res);
    }
  }

  // Prefill: each 4-row tile's codes and factors, formed once into L1 for every token tile. The codes are unpacked
  // to one byte each in the order of the 512-bit registers: per pair of super-blocks and chunk j, the low nibbles of
  // both, then the high nibbles. A missing odd super-block (K an odd number of them) is zero codes and factors,
  // which add exact zeros to lanes 8-15 (accumulators that start at +0 never hold -0).
  struct RowCache {
    AlignedVector<uint8_t> codes;  // (R, K / 512 rounded up, 4 chunks, 2 nibble halves, 64)
    AlignedVector<int32_t> sc;     // (R, K / 512 rounded up, 16): the scales
    AlignedVector<float> f;        // (R, K / 512 rounded up, 2, 16): d, then dmin * min
  };
  template <int R>
  static void fill(const GemmInput& in, const MatrixView& w, int64_t n, RowCache& c) {
    const int64_t nsb = in.K / kQKBlock, NP = in.Kp / kQ4RGroup;
    c.codes.resize(static_cast<size_t>(4 * NP * kQ4RGroup));
    c.sc.resize(static_cast<size_t>(4 * NP * 16));
    c.f.resize(static_cast<size_t>(4 * NP * 32));
    const int64_t stride = w.row_bytes();
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    for (int r = 0; r < R; ++r) {
      const auto* blk = reinterpret_cast<const BlockQ4_KR*>(w.row_ptr(n) + r * stride);
      for (int64_t sb = 0; sb < 2 * NP; ++sb) {
        uint8_t* dst = c.codes.data() + (r * NP + sb / 2) * kQ4RGroup + sb % 2 * 32;
        for (int j = 0; j < 4; ++j) {
          __m256i raw = _mm256_setzero_si256();
          if (sb < nsb) raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[sb].qs + 32 * j));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 128 * j), _mm256_and_si256(raw, low4));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 128 * j + 64),
                              _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4));
        }
        __m256i sc = _mm256_setzero_si256();
        __m256 d = _mm256_setzero_ps(), wm = _mm256_setzero_ps();
        if (sb < nsb) factors(blk[sb], sc, d, wm);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(c.sc.data() + (r * NP + sb / 2) * 16 + sb % 2 * 8), sc);
        float* f = c.f.data() + (r * NP + sb / 2) * 32 + sb % 2 * 8;
        _mm256_storeu_ps(f, d);
        _mm256_storeu_ps(f + 16, wm);
      }
    }
  }
  template <int R, int TT>
  static void cached_tile(const GemmInput& in, const MatrixView& w, const RowCache& c, int64_t n, int64_t t,
                          float out[4][4]) {
    (void)w;
    (void)n;
    const int64_t NP = in.Kp / kQ4RGroup, B = in.Kp / kQBlock;
    q4r_cached_tile<R, TT>(
        in, t, [&](int r, int64_t g) { return c.codes.data() + (r * NP + g) * kQ4RGroup; },
        [&](int, int64_t) { return _mm512_setzero_si512(); },
        [&](__m512 acc, __m512i is, int r, int j, int64_t g) {
          const int64_t i = r * NP + g, b = (t + j) * B + 16 * g;
          const __m512 d = _mm512_loadu_ps(c.f.data() + i * 32), wm = _mm512_loadu_ps(c.f.data() + i * 32 + 16);
          acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_mullo_epi32(is, _mm512_loadu_si512(c.sc.data() + i * 16))),
                                _mm512_mul_ps(d, _mm512_loadu_ps(in.d.data() + b)), acc);
          return _mm512_fnmadd_ps(wm, _mm512_loadu_ps(in.q4r_dsa.data() + b), acc);
        },
        out);
  }
};

}  // namespace

template <>
void gemm_rows_simd<Isa::Avx512, WeightFormat::Q4_K>(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1,
                                                     const GemmOut& out) {
  drive_tiles<Q4KKern>(in, w, n0, n1, out);
}

template <>
void gemm_rows_simd<Isa::Avx512, WeightFormat::Q4_KR>(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1,
                                                      const GemmOut& out) {
  drive_tiles<Q4KRKern>(in, w, n0, n1, out);
}

}  // namespace ascent::kernels

#include "ascent/kernels/cpu/simd_avx512_end.h"
