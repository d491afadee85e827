// AVX-512 kernels for GGUF Q4_0 weights, as the file holds them and repacked (packed_formats.h: Q4_0R), against
// activations quantized per 32-column block.
#include "ascent/kernels/cpu/gemm_avx512_common.h"

namespace ascent::kernels {
namespace {

// GGUF Q4_0 rows against per-block int8 activations, in the lane order of GemmInput's q4_* layout (gemm.h). Each
// 32-bit lane sums 8 columns of one block, the low and high nibbles of the same 4 packed bytes. So the nibbles are
// split in place (an and, a shift and an and per two blocks) and never moved across lanes, and the float work
// (convert, scale, multiply-add) runs once per 8 columns, not once per 4.
// Lanes per 128 columns (4 blocks): 0-3 block 0, 4-7 block 1, 8-11 block 2, 12-15 block 3. Prefill holds them in
// one 512-bit register per group, decode in two 256-bit halves (blocks 0-1, 2-3). Both accumulate lane by lane in
// the same order and reduce with hsum: the same bits.
struct Q40Kern {
  static constexpr int kDecodeRows = 1;  // decode runs decode_rows
  static int64_t groups(int64_t K) { return (K + 127) / 128; }

  // Decode (one token), rows [n0, n1) one at a time, each thread's weights one sequential stream.
  static void decode_rows(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& o) {
    const int64_t nb = in.K / kQBlock, full = nb / 4, G = groups(in.K);
    const int64_t stride = w.row_bytes();
    const int64_t ahead = prefetch_distance(stride, PrefetchTo::L2);
    const int8_t* quads = in.q4_quads.data();
    const int32_t* neg_off = in.q4_off.data();
    const float* lane_d = in.q4_d.data();
    const uint8_t* row = w.row_ptr(n0);
    for (int64_t n = n0; n < n1; ++n, row += stride) {
      const auto* blk = reinterpret_cast<const BlockQ4_0*>(row);
      __m256 y[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
      for (int64_t g = 0; g < full; ++g) {
        prefetch_ahead<1, PrefetchTo::L2>(blk + 4 * g, ahead);
        for (int h = 0; h < 2; ++h) {
          const BlockQ4_0* b = blk + 4 * g + 2 * h;
          const __m256i raw = _mm256_inserti128_si256(
              _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[0].qs))),
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[1].qs)), 1);
          pair_step(raw, b[0].d, b[1].d, quads + g * 128 + 32 * h, neg_off + g * 16 + 8 * h, lane_d + g * 16 + 8 * h,
                    y[h]);
        }
      }
      if (full < G) {  // the last group's missing blocks: zero codes and scales, as fill gives prefill
        const int64_t g = full;
        for (int h = 0; h < 2; ++h) {
          const int64_t b0 = 4 * g + 2 * h;
          const __m128i c0 =
              b0 < nb ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[b0].qs)) : _mm_setzero_si128();
          const __m128i c1 =
              b0 + 1 < nb ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[b0 + 1].qs)) : _mm_setzero_si128();
          pair_step(_mm256_inserti128_si256(_mm256_castsi128_si256(c0), c1, 1), b0 < nb ? blk[b0].d : uint16_t{0},
                    b0 + 1 < nb ? blk[b0 + 1].d : uint16_t{0}, quads + g * 128 + 32 * h, neg_off + g * 16 + 8 * h,
                    lane_d + g * 16 + 8 * h, y[h]);
        }
      }
      float res[4][4];
      res[0][0] = hsum(y[0], y[1]);
      store_tile<1>(o, 0, 1, n, res);
    }
  }
  // Two blocks' packed bytes (raw: block 0 in the low 128 bits) and f16 scales into 8 lanes of acc.
  static void pair_step(__m256i raw, uint16_t d0, uint16_t d1, const int8_t* quads, const int32_t* neg_off,
                        const float* lane_d, __m256& acc) {
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    __m256i is = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(neg_off));
    is = _mm256_dpbusd_epi32(is, _mm256_and_si256(raw, low4),
                             _mm256_loadu_si256(reinterpret_cast<const __m256i*>(quads)));
    is = _mm256_dpbusd_epi32(is, _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4),
                             _mm256_loadu_si256(reinterpret_cast<const __m256i*>(quads + 64)));
    // f16 [d0 x4, d1 x4] widened: one convert for both blocks
    const __m128i dd =
        _mm_blend_epi32(_mm_set1_epi16(static_cast<int16_t>(d0)), _mm_set1_epi16(static_cast<int16_t>(d1)), 0xc);
    const __m256 sc = _mm256_mul_ps(_mm256_cvtph_ps(dd), _mm256_loadu_ps(lane_d));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), sc, acc);
  }

  // Prefill: each 4-row tile's codes, split into the layout's low (columns 0-15 of each block) and high halves,
  // and its block scales are formed once into L1 for all its token tiles.
  struct RowCache {
    AlignedVector<uint8_t> codes;  // (R, groups, 128) per group: low nibbles of blocks 0-3, then their high nibbles
    AlignedVector<float> dw;       // (R, groups, 4) block scales, zero past the row
  };
  template <int R>
  static void fill(const GemmInput& in, const MatrixView& w, int64_t n, RowCache& c) {
    const int64_t nb = in.K / kQBlock, G = groups(in.K);
    c.codes.resize(static_cast<size_t>(4 * G * 128));
    c.dw.resize(static_cast<size_t>(4 * G * 4));
    const int64_t stride = w.row_bytes();
    const __m128i low4 = _mm_set1_epi8(0x0f);
    for (int r = 0; r < R; ++r) {
      const auto* blk = reinterpret_cast<const BlockQ4_0*>(w.row_ptr(n) + r * stride);
      for (int64_t b = 0; b < 4 * G; ++b) {
        const int64_t g = b / 4, i = b % 4;
        uint8_t* dst = c.codes.data() + (r * G + g) * 128 + 16 * i;
        const __m128i raw = b < nb ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[b].qs)) : _mm_setzero_si128();
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm_and_si128(raw, low4));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 64), _mm_and_si128(_mm_srli_epi16(raw, 4), low4));
        c.dw[static_cast<size_t>((r * G + g) * 4 + i)] = b < nb ? _cvtsh_ss(blk[b].d) : 0.0f;
      }
    }
  }
  template <int R, int TT>
  static void cached_tile(const GemmInput& in, const MatrixView& w, const RowCache& c, int64_t n, int64_t t,
                          float out[4][4]) {
    (void)w;
    (void)n;
    const int64_t G = groups(in.K), Kq = 128 * G;
    const __m512i rep4 = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    __m512 acc[R][TT];
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) acc[r][j] = _mm512_setzero_ps();
    }
    const int8_t* quads = in.q4_quads.data() + t * Kq;  // (TT, Kq)
    const int32_t* neg_off = in.q4_off.data() + t * Kq / 8;
    const float* lane_d = in.q4_d.data() + t * Kq / 8;
    for (int64_t g = 0; g < G; ++g) {
      for (int r = 0; r < R; ++r) {
        const uint8_t* codes = c.codes.data() + (r * G + g) * 128;
        const __m512i lo = _mm512_loadu_si512(codes), hi = _mm512_loadu_si512(codes + 64);
        const __m512 dw =
            _mm512_permutexvar_ps(rep4, _mm512_castps128_ps512(_mm_loadu_ps(c.dw.data() + (r * G + g) * 4)));
        for (int j = 0; j < TT; ++j) {
          const int8_t* a = quads + j * Kq + g * 128;
          __m512i is = _mm512_loadu_si512(neg_off + j * Kq / 8 + g * 16);
          is = _mm512_dpbusd_epi32(is, lo, _mm512_loadu_si512(a));
          is = _mm512_dpbusd_epi32(is, hi, _mm512_loadu_si512(a + 64));
          const __m512 sc = _mm512_mul_ps(dw, _mm512_loadu_ps(lane_d + j * Kq / 8 + g * 16));
          acc[r][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), sc, acc[r][j]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) out[r][j] = hsum(acc[r][j]);
    }
  }
};

// GGUF Q4_0 repacked as Q4_0R (packed_formats.h) when the model loads: per 16 blocks, their scales side by side and
// their codes in 32-byte chunks whose 4-byte lane i belongs to block i. A block's integer dot then builds up in one
// lane over 8 vpdpbusd (4 chunks, low and high nibbles), with no nibble moved across lanes. The float work (convert,
// scale, multiply-add) runs once per 16 blocks, in one 512-bit register. Decode (q4r_decode_rows) and prefill take the
// same lanes in the same order, so the same bits. Q40Kern on the file's layout is bound by its per-block scale work
// (bench/RESULTS.md, decode ceiling table).
struct Q40RKern {
  static constexpr int kDecodeRows = 1;  // decode runs decode_rows

  // Decode (one token): the low and high nibbles of each chunk, both 8-block halves in one register.
  static void decode_rows(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& o) {
    const __m512i low4 = _mm512_set1_epi8(0x0f), high4 = _mm512_set1_epi8(static_cast<char>(0xf0));
    q4r_decode_rows<kQ4RGroupBytes, /*kShift=*/0, /*kHighShift=*/4, /*kStreamPrefetch=*/true>(
        in, w, n0, n1, o, [&](const uint8_t* p, int j, __m512i& lo, __m512i& hi) {
          // Chunk j of blocks 0-7 in the low half, of blocks 8-15 in the high half.
          __m512i raw = join_halves(p + 32 + 32 * j, p + 32 + 128 + 32 * j);
          asm("" : "+v"(raw));  // one register for both masks (else each would reload and insert it)
          lo = _mm512_and_si512(raw, low4);
          hi = _mm512_and_si512(raw, high4);  // 16 x the codes
        });
  }

  // Prefill: each 4-row tile's codes and scales, formed once into L1 for every token tile. The codes are unpacked
  // to one byte each in the order of the 512-bit registers (per chunk, low nibbles of both halves, then high
  // nibbles); the scales are widened to f32.
  struct RowCache {
    AlignedVector<uint8_t> codes;  // (R, groups, 4 chunks, 2 nibble halves, 64)
    AlignedVector<float> dw;       // (R, groups, 16)
  };
  template <int R>
  static void fill(const GemmInput& in, const MatrixView& w, int64_t n, RowCache& c) {
    const int64_t G = in.Kp / kQ4RGroup;
    c.codes.resize(static_cast<size_t>(4 * G * kQ4RGroup));
    c.dw.resize(static_cast<size_t>(4 * G * 16));
    const int64_t stride = w.row_bytes();
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = w.row_ptr(n) + r * stride;
      for (int64_t g = 0; g < G; ++g) {
        const uint8_t* p = row + g * kQ4RGroupBytes;
        uint8_t* dst = c.codes.data() + (r * G + g) * kQ4RGroup;
        for (int j = 0; j < 4; ++j) {
          for (int h = 0; h < 2; ++h) {
            const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 + 128 * h + 32 * j));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 128 * j + 32 * h), _mm256_and_si256(raw, low4));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 128 * j + 64 + 32 * h),
                                _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4));
          }
        }
        _mm512_storeu_ps(c.dw.data() + (r * G + g) * 16,
                         _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
      }
    }
  }
  template <int R, int TT>
  static void cached_tile(const GemmInput& in, const MatrixView& w, const RowCache& c, int64_t n, int64_t t,
                          float out[4][4]) {
    (void)w;
    (void)n;
    const int64_t G = in.Kp / kQ4RGroup, B = in.Kp / kQBlock;
    q4r_cached_tile<R, TT>(
        in, t, [&](int r, int64_t g) { return c.codes.data() + (r * G + g) * kQ4RGroup; },
        [&](int j, int64_t g) { return _mm512_loadu_si512(in.q4r_off.data() + (t + j) * B + 16 * g); },
        [&](__m512 acc, __m512i is, int r, int j, int64_t g) {
          const __m512 sc = _mm512_mul_ps(_mm512_loadu_ps(c.dw.data() + (r * G + g) * 16),
                                          _mm512_loadu_ps(in.d.data() + (t + j) * B + 16 * g));
          return _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), sc, acc);
        },
        out);
  }
};

}  // namespace

template <>
void gemm_rows_simd<Isa::Avx512, WeightFormat::Q4_0>(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1,
                                                     const GemmOut& out) {
  drive_tiles<Q40Kern>(in, w, n0, n1, out);
}

template <>
void gemm_rows_simd<Isa::Avx512, WeightFormat::Q4_0R>(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1,
                                                      const GemmOut& out) {
  drive_tiles<Q40RKern>(in, w, n0, n1, out);
}

}  // namespace ascent::kernels

#include "ascent/kernels/cpu/simd_avx512_end.h"
