// AVX2/FMA/F16C matmul engine for CPUs without AVX-512 (and tested on AVX-512 machines too): FMA for f32/f16/bf16;
// for int8 weights vpmaddubsw on the codes made signed again (add_signed_dot; int8 prefill widens both sides to 16
// bits for vpmaddwd), for 4- and 6-bit codes vpmaddubsw (exact there, see dot_u8s8).
// Same tiling and the same per-output arithmetic order for every tile shape as the AVX-512 variant.
#include <immintrin.h>

#include <cstring>

#include "ascent/kernels/cpu/gemm.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

#include "ascent/kernels/cpu/simd_avx2.h"

#include "ascent/kernels/cpu/gemm_tiles.h"
#include "ascent/kernels/cpu/q4k_simd.h"

namespace ascent::kernels {
namespace {

// The prefetch of the AVX2 decode loops that read one row at a time (int8, int4, Q8_0 and the repacked GGUF
// formats), so that each thread's weights are one run (model/weight_layout.h). A non-temporal prefetch
// kAvx2StreamAhead bytes ahead for every 32 bytes they load (Q8_0: every 34-byte block) asks for each line about
// twice. Asking once per line, and distances of 1, 3 or 8 KiB, all streamed less (measured with bench/ab_decode.py).
// The float kernels keep their L1 prefetch a tile ahead: they decode four rows at a time (FloatKern), and this
// prefetch on each row streamed markedly less for bf16.
constexpr int64_t kAvx2StreamAhead = 2048;

// gemm_tiles.h's stream_prefetch at this loop family's distance.
inline void avx2_stream_prefetch(const uint8_t* p) {
  prefetch_ahead<1, PrefetchTo::Stream>(p, kAvx2StreamAhead);
}

// avx2_stream_prefetch for each 32 bytes of a block of `bytes` at p (the repacked formats' groups and super-blocks).
inline void avx2_stream_prefetch_block(const void* p, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 32) avx2_stream_prefetch(static_cast<const uint8_t*>(p) + o);
}

// Sums w * a over 16 int16 pairs into 8 int32 lanes.
inline __m256i madd16(__m256i acc, __m256i w16, __m256i a16) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(w16, a16));
}

// Each lane's sum over its 4 columns of u8 codes times s8 activations with vpmaddubsw + vpmaddwd. It is exact only
// while a pair of products fits int16: codes of at most 6 bits (2 * 63 * 127 = 16002), not int8 weights.
inline __m256i dot_u8s8(__m256i codes, __m256i a, __m256i ones16) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(codes, a), ones16);
}

// int8 weights stored as code + 128 (I8, Q8_0R) times s8 activations with vpmaddubsw. On the stored unsigned bytes
// its 16-bit pair sums would overflow (255 x 127 x 2). So each chunk is made signed again (xor 0x80) and multiplied
// as |code| times the activation with the code's sign. That is at most 2 x 128 x 127 = 32512 per pair (activations
// are within +-127), so exact, then widened at once (two such sums would not fit). signed_codes gives the signed
// codes and their magnitudes from 32 stored bytes (-128 gives 128); add_signed_dot adds each lane's 4 products to is.
inline void signed_codes(__m256i stored, __m256i& w, __m256i& mag) {
  w = _mm256_xor_si256(stored, _mm256_set1_epi8(static_cast<char>(0x80)));
  mag = _mm256_abs_epi8(w);
}
inline __m256i add_signed_dot(__m256i is, __m256i w, __m256i mag, __m256i a) {
  return _mm256_add_epi32(is,
                          _mm256_madd_epi16(_mm256_maddubs_epi16(mag, _mm256_sign_epi8(a, w)), _mm256_set1_epi16(1)));
}

inline __m256i s8_16(const int8_t* p) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// f32, f16 and bf16 weights: 8 columns per step, the tail through a zero-padded copy.
template <WeightFormat WT>
struct FloatKern {
  // Decode takes 4 rows at a time, not one. Each output is one chain of dependent FMAs (the tile's arithmetic, kept
  // for batch invariance), which runs at one FMA latency per 8 columns: one chain streams well below a core's share
  // of memory, four keep up (measured with bench/ab_decode.py). The int8 and Q8_0 one-row loops are not bound by
  // latency, and four interleaved row streams only slow them.
  static constexpr int kDecodeRows = 4;
  // 4 rows x 3 tokens: 12 accumulators + 3 activations + 1 weight fill AVX2's 16 registers. 4 x 4 spills, and both
  // 4 x 4 and 4 x 2 ran f16 and bf16 prefill slower.
  static constexpr int64_t kTokens = 3;
  static __m256 widen(const uint8_t* row, int64_t k) {
    if constexpr (WT == WeightFormat::F32) {
      return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k);
    } else if constexpr (WT == WeightFormat::F16) {
      return _mm256_cvtph_ps(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + k)));
    } else {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + k));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
  }
  static __m256 widen_x(const GemmInput& in, int64_t t, int64_t k) {
    if constexpr (WT == WeightFormat::BF16) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in.xb.data() + t * in.Kp + k));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else {
      return _mm256_loadu_ps(in.x + t * in.K + k);
    }
  }
  template <int R, int TT>
  static void tile(const GemmInput& in, const MatrixView& w, int64_t n, int64_t t, float out[4][4]) {
    const int64_t K = in.K, elem = WT == WeightFormat::F32 ? 4 : 2;
    __m256 acc[R][TT];
    const uint8_t* rows[R];
    for (int r = 0; r < R; ++r) {
      rows[r] = w.row_ptr(n + r);
      for (int j = 0; j < TT; ++j) acc[r][j] = _mm256_setzero_ps();
    }
    const int64_t ahead = prefetch_distance(R * w.row_bytes());
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
      __m256 xv[TT];
      for (int j = 0; j < TT; ++j) xv[j] = widen_x(in, t + j, k);
      for (int r = 0; r < R; ++r) {
        prefetch_ahead<TT>(rows[r] + k * elem, ahead);
        const __m256 wv = widen(rows[r], k);
        for (int j = 0; j < TT; ++j) acc[r][j] = _mm256_fmadd_ps(wv, xv[j], acc[r][j]);
      }
    }
    if (k < K) {  // the last K % 8 columns, copied next to zeros
      alignas(32) uint8_t wt[R][32];
      alignas(32) float xt[TT][8];
      std::memset(wt, 0, sizeof(wt));
      std::memset(xt, 0, sizeof(xt));
      for (int r = 0; r < R; ++r) std::memcpy(wt[r], rows[r] + k * elem, static_cast<size_t>((K - k) * elem));
      for (int j = 0; j < TT; ++j) {
        for (int64_t i = k; i < K; ++i) {
          xt[j][i - k] = WT == WeightFormat::BF16 ? bf16_to_f32(in.xb[static_cast<size_t>((t + j) * in.Kp + i)])
                                                  : in.x[(t + j) * K + i];
        }
      }
      for (int r = 0; r < R; ++r) {
        const __m256 wv = widen(wt[r], 0);
        for (int j = 0; j < TT; ++j) acc[r][j] = _mm256_fmadd_ps(wv, _mm256_load_ps(xt[j]), acc[r][j]);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) out[r][j] = hsum8(acc[r][j]);
    }
  }
};

// A prefill tile's R x TT accumulators in registers: zeroed, then body(acc) adds each step in the kernel's order,
// then each output is its accumulator's lane sum (as the kernel's decode ends).
template <int R, int TT, class Body>
inline void register_tile(float out[4][4], Body body) {
  __m256 acc[R][TT];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < TT; ++j) acc[r][j] = _mm256_setzero_ps();
  }
  body(acc);
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < TT; ++j) out[r][j] = hsum8(acc[r][j]);
  }
}

// bf16 prefill: each 4-row tile's weights are widened to f32 once (zero past K, to a whole number of 8) for all the
// token block's tiles, not once per row and token triple (two instructions per 8 weights). The cached tile runs
// tile's FMAs in tile's order (its zero-padded tail is the same products), so the same bits as decode. f16 keeps
// FloatKern's tile: its f32 activations leave token blocks of 36, over which a 90 KiB f32 copy of a 4 x 5632 tile
// does not pay (measured with ascent bench: the copy doubles the L2 traffic).
struct Bf16Kern : FloatKern<WeightFormat::BF16> {
  struct RowCache {
    AlignedVector<float> w;  // (R, K rounded up to 8)
  };
  template <int R>
  static void fill(const GemmInput& in, const MatrixView& w, int64_t n, RowCache& c) {
    const int64_t K = in.K, K8 = (K + 7) / 8 * 8;
    c.w.resize(static_cast<size_t>(R * K8));
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = w.row_ptr(n + r);
      float* dst = c.w.data() + r * K8;
      int64_t k = 0;
      for (; k + 8 <= K; k += 8) _mm256_store_ps(dst + k, widen(row, k));
      if (k < K) {
        alignas(32) uint8_t wt[32] = {};
        std::memcpy(wt, row + 2 * k, static_cast<size_t>(2 * (K - k)));
        _mm256_store_ps(dst + k, widen(wt, 0));
      }
    }
  }
  template <int R, int TT>
  static void cached_tile(const GemmInput& in, const MatrixView& w, const RowCache& c, int64_t n, int64_t t,
                          float out[4][4]) {
    (void)w;
    (void)n;
    const int64_t K8 = (in.K + 7) / 8 * 8;
    register_tile<R, TT>(out, [&](__m256(&acc)[R][TT]) {
      for (int64_t k = 0; k < K8; k += 8) {  // xb's rows are zero-padded to Kp (a multiple of 64)
        __m256 xv[TT];
        for (int j = 0; j < TT; ++j) xv[j] = widen_x(in, t + j, k);
        for (int r = 0; r < R; ++r) {
          const __m256 wv = _mm256_load_ps(c.w.data() + r * K8 + k);
          for (int j = 0; j < TT; ++j) acc[r][j] = _mm256_fmadd_ps(wv, xv[j], acc[r][j]);
        }
      }
    });
  }
};

struct I8Kern {
  static constexpr int kDecodeRows = 1;  // decode runs decode_rows
  static constexpr int64_t kTokens = 2;  // 4 x 2 tiles: int8 prefill ran faster than 4 x 4 (spills) or 4 x 3

  // Decode: one row at a time (each thread's rows are one stream), 64 bytes a step into two accumulators, with
  // avx2_stream_prefetch. Each 32 bytes run signed through vpmaddubsw (add_signed_dot): 6 vector operations, against
  // 8 with both sides widened to 16 bits as tile does, 4 of them widening shuffles. Both choices stream more of the
  // read bandwidth than tile<1, 1> does (measured with bench/ab_decode.py). The int32 sums are exact either way, so
  // tile<1, 1>'s bits.
  static void decode_rows(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& o) {
    const int64_t Kp = in.Kp;  // a multiple of 64 (I8 rows are padded so)
    const int64_t stride = w.row_bytes();
    const int8_t* a = in.q.data();  // (Kp,)
    prefetch_span(a, Kp);
    const uint8_t* row = w.row_ptr(n0);
    for (int64_t n = n0; n < n1; ++n, row += stride) {
      __m256i acc[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
      for (int64_t k = 0; k < Kp; k += 64) {
        for (int u = 0; u < 2; ++u) {
          avx2_stream_prefetch(row + k + 32 * u);
          __m256i wv, mag;
          signed_codes(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + k + 32 * u)), wv, mag);
          acc[u] = add_signed_dot(acc[u], wv, mag, _mm256_load_si256(reinterpret_cast<const __m256i*>(a + k + 32 * u)));
        }
      }
      float res[4][4];
      const int32_t s = hsum8_epi32(_mm256_add_epi32(acc[0], acc[1]));
      res[0][0] = static_cast<float>(s) * w.scales[n] * in.d[0];
      store_tile<1>(o, 0, 1, n, res);
    }
  }

  template <int R, int TT>
  static void tile(const GemmInput& in, const MatrixView& w, int64_t n, int64_t t, float out[4][4]) {
    const int64_t Kp = in.Kp;
    __m256i acc[R][TT];
    const uint8_t* rows[R];
    for (int r = 0; r < R; ++r) {
      rows[r] = w.row_ptr(n + r);
      for (int j = 0; j < TT; ++j) acc[r][j] = _mm256_setzero_si256();
    }
    const int64_t ahead = prefetch_distance(R * w.row_bytes());
    const int8_t* a = in.q.data() + t * Kp;
    for (int64_t k = 0; k < Kp; k += 16) {
      __m256i av[TT];
      for (int j = 0; j < TT; ++j) av[j] = s8_16(a + j * Kp + k);
      for (int r = 0; r < R; ++r) {
        prefetch_ahead<TT>(rows[r] + k, ahead);
        const __m256i wv = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[r] + k)));
        for (int j = 0; j < TT; ++j) acc[r][j] = madd16(acc[r][j], wv, av[j]);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) {
        const auto tj = static_cast<size_t>(t + j);
        const int32_t s = hsum8_epi32(acc[r][j]) - 128 * in.qsum[tj];
        out[r][j] = static_cast<float>(s) * w.scales[n + r] * in.d[tj];
      }
    }
  }
};

// I4 in blocks of 16 rows (dtype.h), each taken as two halves of 8 rows: lane i of a vector is row 8h + i of the
// block. A step's 32 bytes per half are one load, two nibble masks and two vpmaddubsw against the step's 8
// activations, broadcast as two 4-byte groups. Each group's int32 sum (from int4_offsets' term) is scaled for 8 rows
// at once: the reference's product, then sum, per group, so the same bits as the reference and AVX-512.
// Prefill tiles one half by four tokens; decode takes both halves of a block for its single token.
struct I4Kern {
  template <int GROUP, int NH, int TT>
  static void tile(const GemmInput& in, const MatrixView& w, const int32_t* off, int64_t b, int h0, int64_t t,
                   int64_t n0, int64_t n1, const GemmOut& o) {
    constexpr int64_t kSteps = GROUP / 8;
    const int64_t Kp = in.Kp, G = Kp / GROUP, block_bytes = kInt4Rows * Kp / 2;
    const __m256i low4 = _mm256_set1_epi8(0x0f), ones16 = _mm256_set1_epi16(1);
    const uint8_t* p = static_cast<const uint8_t*>(w.data) + b * block_bytes + 32 * h0;
    const int64_t ahead = prefetch_distance(block_bytes);
    __m256 acc[NH][TT];
    for (int h = 0; h < NH; ++h) {
      for (int j = 0; j < TT; ++j) acc[h][j] = _mm256_setzero_ps();
    }
    const auto* a = reinterpret_cast<const int32_t*>(in.q.data() + t * Kp);
    const int64_t a_stride = Kp / 4;
    for (int64_t g = 0; g < G; ++g) {
      __m256i is[NH][TT];
      for (int j = 0; j < TT; ++j) {
        for (int h = 0; h < NH; ++h) is[h][j] = _mm256_set1_epi32(off[j * G + g]);
      }
      // Prefill adds four steps' pair sums in 16 bits before one widening: each vpmaddubsw pair sum is at most
      // 2 x 15 x 128 = 3840, so eight fit (30720); decode widens after every step (summing four was slower there).
      constexpr int64_t kSum = TT > 1 ? 4 : 1;
      for (int64_t st0 = g * kSteps; st0 < (g + 1) * kSteps; st0 += kSum) {
        __m256i s16[NH][TT];
        for (int64_t st = st0; st < st0 + kSum; ++st) {
          __m256i lo[NH], hi[NH];
          for (int h = 0; h < NH; ++h) {
            if constexpr (NH == 2 && TT == 1) {  // decode
              avx2_stream_prefetch(p + st * 64 + 32 * h);
            } else {
              prefetch_ahead<TT>(p + st * 64 + 32 * h, ahead);
            }
            const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + st * 64 + 32 * h));
            lo[h] = _mm256_and_si256(raw, low4);
            hi[h] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
          }
          for (int j = 0; j < TT; ++j) {
            const __m256i a0 = _mm256_set1_epi32(a[j * a_stride + 2 * st]);
            const __m256i a1 = _mm256_set1_epi32(a[j * a_stride + 2 * st + 1]);
            for (int h = 0; h < NH; ++h) {
              const __m256i two = _mm256_add_epi16(_mm256_maddubs_epi16(lo[h], a0), _mm256_maddubs_epi16(hi[h], a1));
              s16[h][j] = st == st0 ? two : _mm256_add_epi16(s16[h][j], two);
            }
          }
        }
        for (int j = 0; j < TT; ++j) {
          for (int h = 0; h < NH; ++h) is[h][j] = _mm256_add_epi32(is[h][j], _mm256_madd_epi16(s16[h][j], ones16));
        }
      }
      for (int h = 0; h < NH; ++h) {
        const __m256 sc = _mm256_loadu_ps(w.scales + ((b * G + g) * kInt4Rows + 8 * (h0 + h)));
        for (int j = 0; j < TT; ++j) {
          acc[h][j] = _mm256_add_ps(acc[h][j], _mm256_mul_ps(_mm256_cvtepi32_ps(is[h][j]), sc));
        }
      }
    }
    for (int h = 0; h < NH; ++h) {
      for (int j = 0; j < TT; ++j) {
        alignas(32) float v[8];
        _mm256_store_ps(v, _mm256_mul_ps(acc[h][j], _mm256_set1_ps(in.d[static_cast<size_t>(t + j)])));
        store_rows(o, t + j, b * kInt4Rows + 8 * (h0 + h), 8, n0, n1, v);
      }
    }
  }

  static void run(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& o) {
    if (n0 >= n1) return;
    auto go = [&]<int GROUP>() {
      const int64_t G = in.Kp / GROUP;
      const int32_t* off = int4_offsets(in, GROUP);  // (T, G)
      const int64_t b0 = n0 / kInt4Rows, b1 = (n1 + kInt4Rows - 1) / kInt4Rows;
      if (in.T == 1) {
        for (int64_t b = b0; b < b1; ++b) tile<GROUP, 2, 1>(in, w, off, b, 0, 0, n0, n1, o);
        return;
      }
      const int64_t tok_block = token_block(in.Kp);
      for (int64_t t0 = 0; t0 < in.T; t0 += tok_block) {
        const int64_t t1 = tile_min(in.T, t0 + tok_block);
        for (int64_t b = b0; b < b1; ++b) {
          for (int h = 0; h < 2; ++h) {
            if (b * kInt4Rows + 8 * h >= n1 || b * kInt4Rows + 8 * h + 8 <= n0) continue;  // outside the range
            for (int64_t t = t0; t < t1; t += 4) {
              with_tile_size(tile_min(4, t1 - t),
                             [&]<int TT>() { tile<GROUP, 1, TT>(in, w, off + t * G, b, h, t, n0, n1, o); });
            }
          }
        }
      }
    };
    with_int4_group(w, go);
  }
};

// GGUF Q8_0: signed weights and activations, so 16-bit widening with vpmaddwd as for int8.
struct Q80Kern {
  static constexpr int kDecodeRows = 1;
  // Signed int16 weights of columns 0..15 and 16..31 of block b.
  static void load_w(const uint8_t* row, int64_t b, __m256i& w0, __m256i& w1, float& d) {
    const auto& blk = reinterpret_cast<const BlockQ8_0*>(row)[b];
    w0 = s8_16(blk.qs);
    w1 = s8_16(blk.qs + 16);
    d = _cvtsh_ss(blk.d);
  }
  template <int R, int TT>
  static void tile(const GemmInput& in, const MatrixView& w, int64_t n, int64_t t, float out[4][4]) {
    const int64_t Kp = in.Kp, nb = in.K / kQBlock, B = Kp / kQBlock;
    __m256 acc[R][TT];
    const uint8_t* rows[R];
    for (int r = 0; r < R; ++r) {
      rows[r] = w.row_ptr(n + r);
      for (int j = 0; j < TT; ++j) acc[r][j] = _mm256_setzero_ps();
    }
    const int64_t ahead = prefetch_distance(R * w.row_bytes());
    const int8_t* a = in.q.data() + t * Kp;
    for (int64_t b = 0; b < nb; ++b) {
      __m256i a0[TT], a1[TT];
      for (int j = 0; j < TT; ++j) {
        a0[j] = s8_16(a + j * Kp + b * kQBlock);
        a1[j] = s8_16(a + j * Kp + b * kQBlock + 16);
      }
      for (int r = 0; r < R; ++r) {
        __m256i w0, w1;
        float dw;
        if constexpr (R == 1 && TT == 1) {  // decode
          avx2_stream_prefetch(rows[r] + b * static_cast<int64_t>(sizeof(BlockQ8_0)));
        } else {
          prefetch_ahead<TT>(rows[r] + b * static_cast<int64_t>(sizeof(BlockQ8_0)), ahead);
        }
        load_w(rows[r], b, w0, w1, dw);
        for (int j = 0; j < TT; ++j) {
          const __m256i s = _mm256_add_epi32(_mm256_madd_epi16(w0, a0[j]), _mm256_madd_epi16(w1, a1[j]));
          const __m256 scale = _mm256_set1_ps(dw * in.d[static_cast<size_t>((t + j) * B + b)]);
          acc[r][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), scale, acc[r][j]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) out[r][j] = hsum8(acc[r][j]);
    }
  }
};

// GGUF Q4_0 with vpmaddubsw (exact for 4-bit codes): a block's 32 codes (low nibbles columns 0-15, high 16-31)
// times its activations, minus 8 * each lane's activation sum.
struct Q40Kern {
  static constexpr int kDecodeRows = 4;
  template <int R, int TT>
  static void tile(const GemmInput& in, const MatrixView& w, int64_t n, int64_t t, float out[4][4]) {
    const int64_t Kp = in.Kp, nb = in.K / kQBlock, B = Kp / kQBlock;
    const __m256i low4 = _mm256_set1_epi8(0x0f), nibble_shift = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
    const __m256i eight = _mm256_set1_epi8(8), ones16 = _mm256_set1_epi16(1);
    __m256 acc[R][TT];
    const BlockQ4_0* rows[R];
    for (int r = 0; r < R; ++r) {
      rows[r] = reinterpret_cast<const BlockQ4_0*>(w.row_ptr(n + r));
      for (int j = 0; j < TT; ++j) acc[r][j] = _mm256_setzero_ps();
    }
    const int64_t ahead = prefetch_distance(R * w.row_bytes());
    const int8_t* a = in.q.data() + t * Kp;
    for (int64_t b = 0; b < nb; ++b) {
      __m256i av[TT], off[TT];  // the block's activations; 8 * each lane's activation sum
      for (int j = 0; j < TT; ++j) {
        av[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + j * Kp + b * kQBlock));
        off[j] = dot_u8s8(eight, av[j], ones16);
      }
      for (int r = 0; r < R; ++r) {
        const BlockQ4_0& blk = rows[r][b];
        prefetch_ahead<TT>(&blk, ahead);
        // The 16 bytes in both halves (a broadcasting load, no insert), the upper half shifted down a nibble.
        const __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs)));
        const __m256i codes = _mm256_and_si256(_mm256_srlv_epi32(q, nibble_shift), low4);
        const float dw = _cvtsh_ss(blk.d);
        for (int j = 0; j < TT; ++j) {
          const __m256i s = _mm256_sub_epi32(dot_u8s8(codes, av[j], ones16), off[j]);
          const __m256 scale = _mm256_set1_ps(dw * in.d[static_cast<size_t>((t + j) * B + b)]);
          acc[r][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), scale, acc[r][j]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) out[r][j] = hsum8(acc[r][j]);
    }
  }
};

// GGUF K-quants against per-32-block int8 activations (gemm.h): 32 columns per step with dot_u8s8 (exact for
// their codes), each lane's int32 sum covering 4 columns; the sub-block scales (and Q4_K's minimums times the
// activation sums) are applied lane-wise in f32.
struct Q4KKern {
  static constexpr int kDecodeRows = 4;
  static constexpr int64_t kTokens = 2;  // 4 x 2 accumulators leave registers for codes and activations
  // A super-block's 8 sub-block scales times d and 8 minimums times dmin, interleaved: out[2j] scale j, out[2j + 1]
  // minimum j (q4k_simd.h).
  static void scales_mins(const BlockQ4_K& b, float out[16]) {
    const __m128i v = q4k_scales_mins(b);
    const __m256 dd = _mm256_cvtph_ps(_mm_set1_epi32(q4k_d_dmin(b)));
    _mm256_storeu_ps(out, _mm256_mul_ps(dd, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v))));
    _mm256_storeu_ps(out + 8, _mm256_mul_ps(dd, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8)))));
  }
  // The minimum terms are summed per sub-block against the token's scaled block sums (kq_dax) in a scalar beside
  // each accumulator, and subtracted once at the end.
  template <int R, int TT>
  static void tile(const GemmInput& in, const MatrixView& w, int64_t n, int64_t t, float out[4][4]) {
    const int64_t Kp = in.Kp, B = Kp / kQBlock, nsb = in.K / kQKBlock;
    const __m256i low4 = _mm256_set1_epi8(0x0f), ones16 = _mm256_set1_epi16(1);
    __m256 acc[R][TT];
    float mins[R][TT];
    const BlockQ4_K* rows[R];
    for (int r = 0; r < R; ++r) {
      rows[r] = reinterpret_cast<const BlockQ4_K*>(w.row_ptr(n + r));
      for (int j = 0; j < TT; ++j) {
        acc[r][j] = _mm256_setzero_ps();
        mins[r][j] = 0.0f;
      }
    }
    const int64_t ahead = prefetch_distance(R * w.row_bytes());
    const int8_t* a = in.q.data() + t * Kp;
    for (int64_t sb = 0; sb < nsb; ++sb) {
      alignas(32) float sm[R][16];
      for (int r = 0; r < R; ++r) {
        prefetch_block<TT>(&rows[r][sb], sizeof(BlockQ4_K), ahead);
        scales_mins(rows[r][sb], sm[r]);
      }
      for (int sub = 0; sub < 8; ++sub) {  // 32 columns: low (even sub) or high (odd) nibbles of 32 bytes
        const int64_t k = sb * kQKBlock + 32 * sub, b = k / kQBlock;
        __m256i av[TT];
        for (int j = 0; j < TT; ++j) av[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + j * Kp + k));
        for (int r = 0; r < R; ++r) {
          const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[r][sb].qs + 32 * (sub / 2)));
          const __m256i codes = _mm256_and_si256(sub % 2 != 0 ? _mm256_srli_epi16(raw, 4) : raw, low4);
          for (int j = 0; j < TT; ++j) {
            const float da = in.d[static_cast<size_t>((t + j) * B + b)];
            const __m256i is = dot_u8s8(codes, av[j], ones16);
            acc[r][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_set1_ps(sm[r][2 * sub] * da), acc[r][j]);
            mins[r][j] += sm[r][2 * sub + 1] * in.kq_dax[static_cast<size_t>(((t + j) * nsb + sb) * 16 + 2 * sub + 1)];
          }
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) out[r][j] = hsum8(acc[r][j]) - mins[r][j];
    }
  }
};

struct Q6KKern {
  static constexpr int kDecodeRows = 4;
  static constexpr int64_t kTokens = 2;
  // Codes (0..63) of run r (32 columns) of half h: in 32 * r + l, the low (r < 2) or high nibble of
  // ql[64h + 32 (r % 2) + l] under bits 2r, 2r + 1 of qh[32h + l].
  static __m256i codes(const BlockQ6_K& b, int h, int r) {
    const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h + 32 * (r % 2)));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * h));
    const __m256i nib = _mm256_and_si256(r < 2 ? ql : _mm256_srli_epi16(ql, 4), _mm256_set1_epi8(0x0f));
    // Bits 2r, 2r + 1 moved to bits 4, 5 (shifts of 16-bit lanes; the mask drops what crossed a byte).
    const __m256i top = r == 3 ? _mm256_srli_epi16(qh, 2) : _mm256_sll_epi16(qh, _mm_cvtsi32_si128(4 - 2 * r));
    return _mm256_or_si256(nib, _mm256_and_si256(top, _mm256_set1_epi8(0x30)));
  }
  template <int R, int TT>
  static void tile(const GemmInput& in, const MatrixView& w, int64_t n, int64_t t, float out[4][4]) {
    const int64_t Kp = in.Kp, B = Kp / kQBlock;
    const __m256i ones16 = _mm256_set1_epi16(1), thirty_two = _mm256_set1_epi8(32);
    __m256 acc[R][TT];
    const BlockQ6_K* rows[R];
    for (int r = 0; r < R; ++r) {
      rows[r] = reinterpret_cast<const BlockQ6_K*>(w.row_ptr(n + r));
      for (int j = 0; j < TT; ++j) acc[r][j] = _mm256_setzero_ps();
    }
    const int64_t ahead = prefetch_distance(R * w.row_bytes());
    const int8_t* a = in.q.data() + t * Kp;
    for (int64_t sb = 0; sb < in.K / kQKBlock; ++sb) {
      // d * the 16 sub-block scales of each row, formed once per super-block: the same products the runs below
      // would form pair by pair, so the same values.
      alignas(32) float dsc[R][16];
      for (int r = 0; r < R; ++r) {
        prefetch_block<TT>(&rows[r][sb], sizeof(BlockQ6_K), ahead);
        const __m128i s8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[r][sb].scales));
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(rows[r][sb].d));
        _mm256_store_ps(dsc[r], _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(s8))));
        _mm256_store_ps(dsc[r] + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(s8, 8)))));
      }
      for (int run = 0; run < 8; ++run) {  // 32 columns: two 16-column sub-blocks, lanes 0-3 and 4-7
        const int64_t k = sb * kQKBlock + 32 * run, b = k / kQBlock;
        __m256i av[TT], off[TT];  // activations; 32 * each lane's activation sum
        for (int j = 0; j < TT; ++j) {
          av[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + j * Kp + k));
          off[j] = dot_u8s8(thirty_two, av[j], ones16);
        }
        for (int r = 0; r < R; ++r) {
          const BlockQ6_K& blk = rows[r][sb];
          // Lanes 0-3 sub-block 2 run, 4-7 the next.
          const int s0 = (2 * run) % 8;
          const __m256 sc = _mm256_permutevar8x32_ps(_mm256_load_ps(dsc[r] + 8 * (run / 4)),
                                                     _mm256_setr_epi32(s0, s0, s0, s0, s0 + 1, s0 + 1, s0 + 1, s0 + 1));
          const __m256i q = codes(blk, run / 4, run % 4);
          for (int j = 0; j < TT; ++j) {
            const float da = in.d[static_cast<size_t>((t + j) * B + b)];
            const __m256i is = _mm256_sub_epi32(dot_u8s8(q, av[j], ones16), off[j]);  // sum of a * (code - 32)
            acc[r][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(sc, _mm256_set1_ps(da)), acc[r][j]);
          }
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) out[r][j] = hsum8(acc[r][j]);
    }
  }
};

// The 4-bit codes of the repacked GGUF formats (Q4_0R's 8-block halves, Q4_KR's super-blocks: packed_formats.h). p
// holds 4 chunks of 32 bytes, with 4 bytes of each block (sub-block) i in lane i. Out come bytes: the low nibbles of
// chunk j in lo[j], the high ones in hi[j]. GCC folds the first mask's load into vpand, so each chunk is loaded twice,
// and that stays: pinning one load per chunk (an empty asm on raw) ran faster from L2 but slower from DRAM. As in the
// AVX-512 int4 loop, what the lines' loads feed decides how well they stream.
inline void unpack_q4r(const uint8_t* p, __m256i lo[4], __m256i hi[4]) {
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  for (int j = 0; j < 4; ++j) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * j));
    lo[j] = _mm256_and_si256(raw, low4);
    hi[j] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
  }
}
// Lane i's integer dot of those codes with one token's activations in GemmInput::q4r's order (a: its 512-column
// group plus 32 x the half or super-block), added to init. Four vpmaddubsw pair sums (each at most 2 x 15 x 127)
// add in 16 bits before one widening: 15240 fits. The widening vpmaddwd multiplies by w16, whose two 16-bit halves
// of lane i should be equal: 1 for the plain sum, or a sub-block scale (Q4_KR), giving sum x scale exactly.
inline __m256i dot_q4r(const __m256i lo[4], const __m256i hi[4], const int8_t* a, __m256i init,
                       __m256i w16 = _mm256_set1_epi16(1)) {
  __m256i is = init;
  for (int j = 0; j < 4; j += 2) {
    __m256i s16 = _mm256_setzero_si256();
    for (int c = j; c < j + 2; ++c) {
      const auto* ac = reinterpret_cast<const __m256i*>(a + 128 * c);
      s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(lo[c], _mm256_loadu_si256(ac)));
      s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(hi[c], _mm256_loadu_si256(ac + 2)));
    }
    is = _mm256_add_epi32(is, _mm256_madd_epi16(s16, w16));
  }
  return is;
}

// The repacked formats' decode_rows: rows n0..n1 one after another (one stream per thread), row_dot(row) giving
// each row's accumulator, whose lane sum is the output (as their prefill tiles end).
template <class RowDot>
inline void decode_each_row(const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& o, RowDot row_dot) {
  const int64_t stride = w.row_bytes();
  const uint8_t* row = w.row_ptr(n0);
  for (int64_t n = n0; n < n1; ++n, row += stride) {
    float res[4][4];
    res[0][0] = hsum8(row_dot(row));
    store_tile<1>(o, 0, 1, n, res);
  }
}

// Q4_KR's and Q6_KR's prefill tile over their RowCache, which holds each 4-row tile's codes and factors, formed once
// into L1 for all the token block's tiles (as the AVX-512 kernels do). That is much faster than forming them per
// row and token pair in register tiles. A row at a time: its TT accumulators sit in registers beside the codes,
// zeroed, then body(r, acc) adds row r's steps in decode_rows' order, so the same bits. Each output is its
// accumulator's lane sum. Q4_0R's unpacking is lighter: a cache does not pay there, so it keeps its 4 x 2 tile.
template <int R, int TT, class Body>
inline void cached_rows(float out[4][4], Body body) {
  for (int r = 0; r < R; ++r) {
    __m256 acc[TT];
    for (int j = 0; j < TT; ++j) acc[j] = _mm256_setzero_ps();
    body(r, acc);
    for (int j = 0; j < TT; ++j) out[r][j] = hsum8(acc[j]);
  }
}

// unpack_q4r's registers to and from a RowCache (256 bytes: lo[0..3], then hi[0..3]).
inline void store_q4r(const __m256i lo[4], const __m256i hi[4], uint8_t* p) {
  for (int q = 0; q < 4; ++q) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(p) + q, lo[q]);
    _mm256_store_si256(reinterpret_cast<__m256i*>(p) + 4 + q, hi[q]);
  }
}
inline void load_q4r(const uint8_t* p, __m256i lo[4], __m256i hi[4]) {
  for (int q = 0; q < 4; ++q) {
    lo[q] = _mm256_load_si256(reinterpret_cast<const __m256i*>(p) + q);
    hi[q] = _mm256_load_si256(reinterpret_cast<const __m256i*>(p) + 4 + q);
  }
}

// GGUF Q4_0 repacked as Q4_0R (packed_formats.h) when the model loads, as for the AVX-512 kernel. Per 16 blocks: their
// f16 scales side by side, then two halves of 8 blocks whose 32-byte chunks hold 4 bytes of each block in lane i. A
// block's integer dot builds up in one 32-bit lane (vpmaddubsw, vpmaddwd), and no nibble moves across lanes. The float
// work (one convert, one scale product, one multiply-add) runs once per 8 blocks. Q40Kern on the file's layout pays it
// per block and row, which holds it below the rate a core must stream (bench/RESULTS.md, decode ceiling table). Decode
// and prefill take each half's 8 lanes in the same order: y += sums x (scale x activation scale), half 0 then half 1
// per group, hsum at the end. So they give the same bits.
struct Q40RKern {
  static constexpr int kDecodeRows = 1;  // decode runs decode_rows: one row at a time, one stream per thread
  static constexpr int64_t kTokens = 2;  // 4 x 2 accumulators beside a half's 8 code registers

  // Half h's 8 block scales, from the group's f16 scales at grp.
  static __m256 scales(const uint8_t* grp, int h) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(grp + 16 * h)));
  }
  // acc += half h's dots (from its offset terms, minus 8 x each block's activation sum) x (the 8 blocks' weight
  // scales dw x their activation scales), for one token: a its group's activations, off and da its group's 16 terms.
  static __m256 half(__m256 acc, const __m256i lo[4], const __m256i hi[4], __m256 dw, int h, const int8_t* a,
                     const int32_t* off, const float* da) {
    const __m256i is = dot_q4r(lo, hi, a + 32 * h, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(off + 8 * h)));
    return scale_add(acc, is, dw, da + 8 * h);
  }
  // acc += a half's 8 integer dots is x (their weight scales dw x activation scales da): the float step, once per 8
  // blocks (Q8_0R's too).
  static __m256 scale_add(__m256 acc, __m256i is, __m256 dw, const float* da) {
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(dw, _mm256_loadu_ps(da)), acc);
  }

  static void decode_rows(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& o) {
    const int64_t G = in.Kp / kQ4RGroup;
    prefetch_span(in.q4r.data(), in.Kp);
    prefetch_span(in.q4r_off.data(), in.Kp / kQBlock * 4);
    prefetch_span(in.d.data(), in.Kp / kQBlock * 4);
    decode_each_row(w, n0, n1, o, [&](const uint8_t* row) {
      __m256 y = _mm256_setzero_ps();
      for (int64_t g = 0; g < G; ++g) {
        const uint8_t* grp = row + g * kQ4RGroupBytes;
        avx2_stream_prefetch_block(grp, kQ4RGroupBytes);
        for (int h = 0; h < 2; ++h) {
          __m256i lo[4], hi[4];
          unpack_q4r(grp + 32 + 128 * h, lo, hi);
          y = half(y, lo, hi, scales(grp, h), h, in.q4r.data() + g * kQ4RGroup, in.q4r_off.data() + 16 * g,
                   in.d.data() + 16 * g);
        }
      }
      return y;
    });
  }

  template <int R, int TT>
  static void tile(const GemmInput& in, const MatrixView& w, int64_t n, int64_t t, float out[4][4]) {
    const int64_t Kp = in.Kp, G = Kp / kQ4RGroup, B = Kp / kQBlock;
    const int64_t stride = w.row_bytes();
    const uint8_t* w0 = w.row_ptr(n);
    const int64_t ahead = prefetch_distance(R * stride);
    register_tile<R, TT>(out, [&](__m256(&acc)[R][TT]) {
      for (int64_t g = 0; g < G; ++g) {
        for (int h = 0; h < 2; ++h) {
          for (int r = 0; r < R; ++r) {
            const uint8_t* grp = w0 + r * stride + g * kQ4RGroupBytes;
            if (h == 0) prefetch_block<TT>(grp, kQ4RGroupBytes, ahead);
            __m256i lo[4], hi[4];
            unpack_q4r(grp + 32 + 128 * h, lo, hi);
            const __m256 dw = scales(grp, h);
            for (int j = 0; j < TT; ++j) {
              const int64_t b = (t + j) * B + 16 * g;
              acc[r][j] = half(acc[r][j], lo, hi, dw, h, in.q4r.data() + (t + j) * Kp + g * kQ4RGroup,
                               in.q4r_off.data() + b, in.d.data() + b);
            }
          }
        }
      }
    });
  }
};

// GGUF Q8_0 repacked as Q8_0R (packed_formats.h) when the model loads, as for the AVX-512 kernel. Per 16 blocks: their
// f16 scales, then the codes (+128) in GemmInput::q4r's activation order, 4 bytes of block 8h + i in lane i of each
// 32-byte chunk of half h. Q80Kern on the file's layout pays a scale product, a convert and a multiply-add per block,
// row and token, and widens both sides to 16 bits. Here a block's dot builds up in one 32-bit lane, each chunk signed
// again for vpmaddubsw (add_signed_dot), and the float work runs once per 8 blocks. Decode and prefill take each half's
// 8 lanes in the same order: y += sums x (scale x activation scale), half 0 then half 1 per group, hsum at the end. So
// they give the same bits.
struct Q80RKern {
  static constexpr int kDecodeRows = 1;  // decode runs decode_rows: one row at a time, one stream per thread
  static constexpr int64_t kTokens = 4;  // a row at a time: its 4 tokens' sums and accumulators in registers

  // The 8 chunks of half h (codes at grp + 32, activations at a, the same offsets): (j, p) at 128 j + 64 p + 32 h.
  static constexpr int64_t chunk(int c, int h) { return 128 * (c / 2) + 64 * (c % 2) + 32 * h; }
  // Chunk c's codes back to signed bytes, and their magnitudes (vpmaddubsw's unsigned side; -128 gives 128).
  static void codes(const uint8_t* grp, int c, int h, __m256i& w, __m256i& mag) {
    signed_codes(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(grp + 32 + chunk(c, h))), w, mag);
  }
  // Lane i's running dot (block 8h + i) plus chunk c's 4 products for one token's activations a (its group).
  static __m256i add_chunk(__m256i is, __m256i w, __m256i mag, const int8_t* a, int c, int h) {
    return add_signed_dot(is, w, mag, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + chunk(c, h))));
  }

  static void decode_rows(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& o) {
    const int64_t G = in.Kp / kQ4RGroup;
    prefetch_span(in.q4r.data(), in.Kp);
    prefetch_span(in.d.data(), in.Kp / kQBlock * 4);
    decode_each_row(w, n0, n1, o, [&](const uint8_t* row) {
      __m256 y = _mm256_setzero_ps();
      for (int64_t g = 0; g < G; ++g) {
        const uint8_t* grp = row + g * kQ8RGroupBytes;
        const int8_t* a = in.q4r.data() + g * kQ4RGroup;
        avx2_stream_prefetch_block(grp, kQ8RGroupBytes);
        // Both halves' sums at once, so the group's lines are read in order (chunk c of half 0, then of half 1:
        // one line); the integer sums are exact, so the same values as prefill's half by half.
        __m256i is[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        for (int c = 0; c < 8; ++c) {
          for (int h = 0; h < 2; ++h) {
            __m256i wc, mag;
            codes(grp, c, h, wc, mag);
            is[h] = add_chunk(is[h], wc, mag, a, c, h);
          }
        }
        for (int h = 0; h < 2; ++h) {
          y = Q40RKern::scale_add(y, is[h], Q40RKern::scales(grp, h), in.d.data() + 16 * g + 8 * h);
        }
      }
      return y;
    });
  }

  // Prefill: a row at a time against TT tokens, each chunk's codes formed once for all of them.
  template <int R, int TT>
  static void tile(const GemmInput& in, const MatrixView& w, int64_t n, int64_t t, float out[4][4]) {
    const int64_t Kp = in.Kp, G = Kp / kQ4RGroup, B = Kp / kQBlock;
    const int64_t stride = w.row_bytes();
    const int64_t ahead = prefetch_distance(R * stride);
    cached_rows<R, TT>(out, [&](int r, __m256(&acc)[TT]) {
      const uint8_t* row = w.row_ptr(n) + r * stride;
      for (int64_t g = 0; g < G; ++g) {
        const uint8_t* grp = row + g * kQ8RGroupBytes;
        prefetch_block<TT>(grp, kQ8RGroupBytes, ahead);
        for (int h = 0; h < 2; ++h) {
          __m256i is[TT];
          for (int j = 0; j < TT; ++j) is[j] = _mm256_setzero_si256();
          for (int c = 0; c < 8; ++c) {
            __m256i wc, mag;
            codes(grp, c, h, wc, mag);
            for (int j = 0; j < TT; ++j)
              is[j] = add_chunk(is[j], wc, mag, in.q4r.data() + (t + j) * Kp + g * kQ4RGroup, c, h);
          }
          const __m256 dw = Q40RKern::scales(grp, h);
          for (int j = 0; j < TT; ++j)
            acc[j] = Q40RKern::scale_add(acc[j], is[j], dw, in.d.data() + (t + j) * B + 16 * g + 8 * h);
        }
      }
    });
  }
};

// GGUF Q4_K repacked as Q4_KR (packed_formats.h) when the model loads, as for the AVX-512 kernel: a super-block's 8
// sub-blocks in the 8 lanes. Each sub-block's integer dot builds up in its lane. Its scale, its minimum and the
// super-block's d and dmin apply lane-wise once per super-block; Q4KKern on the file's layout moves them per 32
// columns. The float step is the AVX-512 kernel's: exact scale x sum in int32, then acc += that x d x activation scale,
// and acc -= dmin x minimum x the activation block's d x sum. One super-block per step, in order, so decode and prefill
// give the same bits.
struct Q4KRKern {
  static constexpr int kDecodeRows = 1;
  static constexpr int64_t kTokens = 4;  // per cached tile: a row's 4 accumulators beside its code registers

  // A super-block's factors, formed once per super-block for every token: its 8 scales (scale i in both 16-bit
  // halves of lane i, for dot_q4r's widening), d in every lane, and dmin x minimum i in lane i. The scale bytes
  // (packed_formats.h) take one widening, a broadcast, a variable shift and a select.
  struct Factors {
    __m256i sc16;
    __m256 d, wm;
  };
  static Factors factors(const BlockQ4_KR& b) {
    const __m256i s32 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.scales)));
    const __m256i sc = _mm256_and_si256(s32, _mm256_set1_epi32(63));
    int low_mins;  // scales[8..11]: minimums 0-3's low 4 bits in the low nibbles, 4-7's in the high
    std::memcpy(&low_mins, b.scales + 8, 4);
    const __m256i lows = _mm256_srlv_epi32(_mm256_set1_epi32(low_mins), _mm256_setr_epi32(0, 8, 16, 24, 4, 12, 20, 28));
    const __m256i low4 = _mm256_set1_epi32(0x0f);
    // Bits 0-3 from lows, bits 4-5 from scales[i] >> 2 (minimum i's top 2 bits).
    const __m256i m =
        _mm256_or_si256(_mm256_and_si256(lows, low4), _mm256_andnot_si256(low4, _mm256_srli_epi32(s32, 2)));
    const __m256 d = _mm256_cvtph_ps(_mm_set1_epi16(static_cast<int16_t>(b.d)));
    return {_mm256_or_si256(sc, _mm256_slli_epi32(sc, 16)), d,
            _mm256_mul_ps(_mm256_cvtph_ps(_mm_set1_epi16(static_cast<int16_t>(b.dmin))), _mm256_cvtepi32_ps(m))};
  }
  // acc += a super-block's contribution (its factors f) for one token: a its activations (q4r order, group + 32 x
  // its half), da and dsa its 8 blocks' activation scales and scale x sum.
  static __m256 step(__m256 acc, const Factors& f, const __m256i lo[4], const __m256i hi[4], const int8_t* a,
                     const float* da, const float* dsa) {
    const __m256i is = dot_q4r(lo, hi, a, _mm256_setzero_si256(), f.sc16);  // scale x sum, exact
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(f.d, _mm256_loadu_ps(da)), acc);
    return _mm256_fnmadd_ps(f.wm, _mm256_loadu_ps(dsa), acc);
  }

  static void decode_rows(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& o) {
    const int64_t nsb = in.K / kQKBlock;
    prefetch_span(in.q4r.data(), in.Kp);
    prefetch_span(in.d.data(), in.Kp / kQBlock * 4);
    prefetch_span(in.q4r_dsa.data(), in.Kp / kQBlock * 4);
    decode_each_row(w, n0, n1, o, [&](const uint8_t* row) {
      __m256 y = _mm256_setzero_ps();
      const auto* blk = reinterpret_cast<const BlockQ4_KR*>(row);
      for (int64_t sb = 0; sb < nsb; ++sb) {
        avx2_stream_prefetch_block(blk + sb, sizeof(BlockQ4_KR));
        __m256i lo[4], hi[4];
        unpack_q4r(blk[sb].qs, lo, hi);
        // Super-block sb is half sb % 2 of 512-column group sb / 2; its 8 blocks' scales at 8 sb.
        y = step(y, factors(blk[sb]), lo, hi, in.q4r.data() + sb / 2 * kQ4RGroup + 32 * (sb % 2), in.d.data() + 8 * sb,
                 in.q4r_dsa.data() + 8 * sb);
      }
      return y;
    });
  }

  // Prefill (cached_rows): per super-block, its codes and factors.
  struct RowCache {
    AlignedVector<uint8_t> codes;  // (R, nsb, 256): store_q4r
    AlignedVector<Factors> f;      // (R, nsb)
  };
  template <int R>
  static void fill(const GemmInput& in, const MatrixView& w, int64_t n, RowCache& c) {
    const int64_t nsb = in.K / kQKBlock, stride = w.row_bytes();
    c.codes.resize(static_cast<size_t>(R * nsb * 256));
    c.f.resize(static_cast<size_t>(R * nsb));
    for (int r = 0; r < R; ++r) {
      const auto* blk = reinterpret_cast<const BlockQ4_KR*>(w.row_ptr(n) + r * stride);
      for (int64_t sb = 0; sb < nsb; ++sb) {
        __m256i lo[4], hi[4];
        unpack_q4r(blk[sb].qs, lo, hi);
        store_q4r(lo, hi, c.codes.data() + (r * nsb + sb) * 256);
        c.f[static_cast<size_t>(r * nsb + sb)] = factors(blk[sb]);
      }
    }
  }
  template <int R, int TT>
  static void cached_tile(const GemmInput& in, const MatrixView& w, const RowCache& c, int64_t n, int64_t t,
                          float out[4][4]) {
    (void)w;
    (void)n;
    const int64_t Kp = in.Kp, B = Kp / kQBlock, nsb = in.K / kQKBlock;
    cached_rows<R, TT>(out, [&](int r, __m256(&acc)[TT]) {
      for (int64_t sb = 0; sb < nsb; ++sb) {
        __m256i lo[4], hi[4];
        load_q4r(c.codes.data() + (r * nsb + sb) * 256, lo, hi);
        const Factors& f = c.f[static_cast<size_t>(r * nsb + sb)];
        for (int j = 0; j < TT; ++j) {
          const int64_t b = (t + j) * B + 8 * sb;
          acc[j] = step(acc[j], f, lo, hi, in.q4r.data() + (t + j) * Kp + sb / 2 * kQ4RGroup + 32 * (sb % 2),
                        in.d.data() + b, in.q4r_dsa.data() + b);
        }
      }
    });
  }
};

// GGUF Q6_K repacked as Q6_KR (packed_formats.h) when the model loads, as for the AVX-512 kernel: each half of a
// super-block (8 sub-blocks of 16 columns) in the 8 lanes. A sub-block's integer dot builds up in its lane, and its
// scale applies lane-wise once per half; Q6KKern on the file's layout gathers scales per 32 columns. Activations are in
// GemmInput::q6r's order, each lane starting at its offset term (minus 32 x the sub-block's activation sum). Per
// super-block, half 0 then half 1 go into one accumulator (exact scale x sum in int32, then x d x the activation
// scale), in decode and prefill alike, so the same bits.
struct Q6KRKern {
  static constexpr int kDecodeRows = 1;
  static constexpr int64_t kTokens = 4;  // per cached tile: a row's 4 accumulators beside its code registers

  // The 6-bit codes of steps 0-3 of half h: low 4 bits from ql's nibbles, top 2 from qh's bit pairs (packed_formats.h),
  // each a byte of 0..63.
  static void codes(const BlockQ6_KR& b, int h, __m256i out[4]) {
    const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h));
    const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h + 32));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * h));
    const __m256i low4 = _mm256_set1_epi8(0x0f), bits45 = _mm256_set1_epi8(0x30);
    // The bit pair moved to bits 4-5 by 16-bit shifts: the masks drop what crossed a byte.
    auto join = [&](__m256i nib, __m256i pair) {
      return _mm256_or_si256(_mm256_and_si256(nib, low4), _mm256_and_si256(pair, bits45));
    };
    out[0] = join(ql0, _mm256_slli_epi16(qh, 4));
    out[1] = join(ql1, _mm256_slli_epi16(qh, 2));
    out[2] = join(_mm256_srli_epi16(ql0, 4), qh);
    out[3] = join(_mm256_srli_epi16(ql1, 4), _mm256_srli_epi16(qh, 2));
  }
  // Half h's 8 sub-block scales (int32).
  static __m256i scales(const BlockQ6_KR& b, int h) {
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.scales + 8 * h)));
  }
  // acc += half h's dots x its 8 scales sc x d x the activation scales, for one token: a, off and lane_d its
  // super-block's activations, offset terms and scales. Two vpmaddubsw pair sums (each at most 2 x 63 x 127) add in
  // 16 bits before widening: 32004 fits.
  static __m256 half(__m256 acc, int h, const __m256i q[4], __m256i sc, __m256 d, const int8_t* a, const int32_t* off,
                     const float* lane_d) {
    const __m256i ones16 = _mm256_set1_epi16(1);
    __m256i is = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(off + 8 * h));
    for (int k = 0; k < 4; k += 2) {
      const __m256i s16 = _mm256_add_epi16(
          _mm256_maddubs_epi16(q[k], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 64 * k + 32 * h))),
          _mm256_maddubs_epi16(q[k + 1],
                               _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 64 * (k + 1) + 32 * h))));
      is = _mm256_add_epi32(is, _mm256_madd_epi16(s16, ones16));
    }
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_mullo_epi32(is, sc)),
                           _mm256_mul_ps(d, _mm256_loadu_ps(lane_d + 8 * h)), acc);
  }

  static void decode_rows(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& o) {
    const int64_t K = in.K, nsb = K / kQKBlock;
    prefetch_span(in.q6r.data(), K);
    prefetch_span(in.q6r_off.data(), K / 16 * 4);
    prefetch_span(in.q6r_d.data(), K / 16 * 4);
    decode_each_row(w, n0, n1, o, [&](const uint8_t* row) {
      const auto* blk = reinterpret_cast<const BlockQ6_KR*>(row);
      __m256 y = _mm256_setzero_ps();
      for (int64_t sb = 0; sb < nsb; ++sb) {
        const BlockQ6_KR& b = blk[sb];
        avx2_stream_prefetch_block(&b, sizeof(BlockQ6_KR));
        const __m256 d = _mm256_cvtph_ps(_mm_set1_epi16(static_cast<int16_t>(b.d)));
        for (int h = 0; h < 2; ++h) {
          __m256i q[4];
          codes(b, h, q);
          y = half(y, h, q, scales(b, h), d, in.q6r.data() + sb * kQKBlock, in.q6r_off.data() + 16 * sb,
                   in.q6r_d.data() + 16 * sb);
        }
      }
      return y;
    });
  }

  // Prefill (cached_rows): per super-block, its d, and per half its 6-bit codes and 8 scales.
  struct RowCache {
    AlignedVector<uint8_t> codes;  // (R, nsb, 2, 4, 32)
    AlignedVector<int32_t> sc;     // (R, nsb, 2, 8)
    AlignedVector<float> d;        // (R, nsb, 8): d in every lane
  };
  template <int R>
  static void fill(const GemmInput& in, const MatrixView& w, int64_t n, RowCache& c) {
    const int64_t nsb = in.K / kQKBlock, stride = w.row_bytes();
    c.codes.resize(static_cast<size_t>(R * nsb * 256));
    c.sc.resize(static_cast<size_t>(R * nsb * 16));
    c.d.resize(static_cast<size_t>(R * nsb * 8));
    for (int r = 0; r < R; ++r) {
      const auto* blk = reinterpret_cast<const BlockQ6_KR*>(w.row_ptr(n) + r * stride);
      for (int64_t sb = 0; sb < nsb; ++sb) {
        const int64_t i = r * nsb + sb;
        _mm256_store_ps(c.d.data() + i * 8, _mm256_cvtph_ps(_mm_set1_epi16(static_cast<int16_t>(blk[sb].d))));
        for (int h = 0; h < 2; ++h) {
          __m256i q[4];
          codes(blk[sb], h, q);
          for (int k = 0; k < 4; ++k) {
            _mm256_store_si256(reinterpret_cast<__m256i*>(c.codes.data() + (2 * i + h) * 128) + k, q[k]);
          }
          _mm256_store_si256(reinterpret_cast<__m256i*>(c.sc.data() + (2 * i + h) * 8), scales(blk[sb], h));
        }
      }
    }
  }
  template <int R, int TT>
  static void cached_tile(const GemmInput& in, const MatrixView& w, const RowCache& c, int64_t n, int64_t t,
                          float out[4][4]) {
    (void)w;
    (void)n;
    const int64_t K = in.K, nsb = K / kQKBlock;
    cached_rows<R, TT>(out, [&](int r, __m256(&acc)[TT]) {
      for (int64_t sb = 0; sb < nsb; ++sb) {
        const int64_t i = r * nsb + sb;
        const __m256 d = _mm256_load_ps(c.d.data() + i * 8);
        for (int h = 0; h < 2; ++h) {
          __m256i q[4];
          for (int k = 0; k < 4; ++k) {
            q[k] = _mm256_load_si256(reinterpret_cast<const __m256i*>(c.codes.data() + (2 * i + h) * 128) + k);
          }
          const __m256i sc = _mm256_load_si256(reinterpret_cast<const __m256i*>(c.sc.data() + (2 * i + h) * 8));
          for (int j = 0; j < TT; ++j) {
            const int64_t s = (t + j) * (K / 16) + 16 * sb;
            acc[j] = half(acc[j], h, q, sc, d, in.q6r.data() + (t + j) * K + sb * kQKBlock, in.q6r_off.data() + s,
                          in.q6r_d.data() + s);
          }
        }
      }
    });
  }
};

}  // namespace

// Each format's kernel, as gemm_rows looks them up (gemm.h).
#define ASCENT_AVX2_KERNEL(F, KERN)                                                                                 \
  template <>                                                                                                       \
  void gemm_rows_simd<Isa::Avx2, WeightFormat::F>(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, \
                                                  const GemmOut& out) {                                             \
    drive_tiles<KERN>(in, w, n0, n1, out);                                                                          \
  }
ASCENT_AVX2_KERNEL(F32, FloatKern<WeightFormat::F32>)
ASCENT_AVX2_KERNEL(F16, FloatKern<WeightFormat::F16>)
ASCENT_AVX2_KERNEL(BF16, Bf16Kern)
ASCENT_AVX2_KERNEL(I8, I8Kern)
ASCENT_AVX2_KERNEL(I4, I4Kern)
ASCENT_AVX2_KERNEL(Q8_0, Q80Kern)
ASCENT_AVX2_KERNEL(Q4_0, Q40Kern)
ASCENT_AVX2_KERNEL(Q4_K, Q4KKern)
ASCENT_AVX2_KERNEL(Q6_K, Q6KKern)
ASCENT_AVX2_KERNEL(Q8_0R, Q80RKern)
ASCENT_AVX2_KERNEL(Q4_0R, Q40RKern)
ASCENT_AVX2_KERNEL(Q4_KR, Q4KRKern)
ASCENT_AVX2_KERNEL(Q6_KR, Q6KRKern)
#undef ASCENT_AVX2_KERNEL

}  // namespace ascent::kernels

#pragma GCC pop_options
