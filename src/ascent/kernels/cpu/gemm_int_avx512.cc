// AVX-512 kernels for Ascent's int8 and int4 weights (tensor/dtype.h): vpdpbusd dot products against activations
// quantized per token, exact in int32, scaled per row (int8) or per group (int4, in blocks of 16 rows).
#include "ascent/kernels/cpu/gemm_avx512_common.h"

namespace ascent::kernels {
namespace {

// I8: one int32 sum per output over the whole padded row, then the row and token scales.
struct I8Kern {
  static constexpr int kDecodeRows = 1;
  // Decode (one token): rows [n0, n1) in one loop, since a tile call per row costs a noticeable share of a row.
  // Two independent chains of vpdpbusd, added at the end: integer sums are exact in any order, so this is bitwise
  // the sum the tiles compute. With one chain, each row's instructions stay in flight longer, and fewer of the next
  // rows' loads fit in the out-of-order window.
  // The rows are one contiguous run, read a whole cache line per load in order. No software prefetch: the steps are
  // so light (one load and one vpdpbusd per 64 bytes) that the hardware prefetchers follow the run better than a
  // prefetch per line does (measured with bench/ab_decode.py). Which prefetch wins has changed between hosts, so
  // measure again before adding one.
  static void decode_rows(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& o) {
    const int64_t Kp = in.Kp;
    const int64_t stride = w.row_bytes();
    const int8_t* a = in.q.data();
    const int32_t offset = 128 * in.qsum[0];
    const float d = in.d[0];
    const uint8_t* row = w.row_ptr(n0);
    prefetch_span(a, Kp);
    for (int64_t n = n0; n < n1; ++n, row += stride) {
      __m512i acc0 = _mm512_setzero_si512(), acc1 = _mm512_setzero_si512();
      int64_t k = 0;
      for (; k + 128 <= Kp; k += 128) {
        acc0 = dpbusd(acc0, _mm512_loadu_si512(row + k), _mm512_loadu_si512(a + k));
        acc1 = dpbusd(acc1, _mm512_loadu_si512(row + k + 64), _mm512_loadu_si512(a + k + 64));
      }
      if (k < Kp) {
        acc0 = dpbusd(acc0, _mm512_loadu_si512(row + k), _mm512_loadu_si512(a + k));
      }
      const int32_t s = hsum_epi32(_mm512_add_epi32(acc0, acc1)) - offset;
      float res[4][4];
      res[0][0] = static_cast<float>(s) * w.scales[n] * d;  // the reference's expression
      store_tile<1>(o, 0, 1, n, res);
    }
  }
  template <int R, int TT>
  static void tile(const GemmInput& in, const MatrixView& w, int64_t n, int64_t t, float out[4][4]) {
    const int64_t Kp = in.Kp;
    __m512i acc[R][TT];
    // Row addresses from one stride (no calls inside the loops, so GCC unrolls them and keeps acc in registers).
    const int64_t stride = w.row_bytes();
    const uint8_t* w0 = w.row_ptr(n);
    const uint8_t* rows[R];
    const int64_t ahead = prefetch_distance(R * stride);
    for (int r = 0; r < R; ++r) {
      rows[r] = w0 + r * stride;
      for (int j = 0; j < TT; ++j) acc[r][j] = _mm512_setzero_si512();
    }
    const int8_t* a = in.q.data() + t * Kp;
    for (int64_t k = 0; k < Kp; k += 64) {
      __m512i av[TT];
      for (int j = 0; j < TT; ++j) av[j] = _mm512_loadu_si512(a + j * Kp + k);
      for (int r = 0; r < R; ++r) {
        prefetch_ahead<TT>(rows[r] + k, ahead);
        const __m512i wv = _mm512_loadu_si512(rows[r] + k);
        for (int j = 0; j < TT; ++j) acc[r][j] = dpbusd(acc[r][j], wv, av[j]);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) {
        const auto tj = static_cast<size_t>(t + j);
        const int32_t s = hsum_epi32(acc[r][j]) - 128 * in.qsum[tj];
        out[r][j] = static_cast<float>(s) * w.scales[n + r] * in.d[tj];  // the reference's expression
      }
    }
  }
};

// I4 in blocks of 16 rows (dtype.h): lane i of every vector is row 16b + i. A step's 64 bytes (16 rows x 8 columns)
// are one load, two nibble masks and two vpdpbusd against the step's 8 activations, broadcast as two 4-byte groups.
// Each group's int32 sum, starting from int4_offsets' term, is converted and scaled for 16 rows at once. The float
// work is thus one multiply and one add per group and 16 rows, with no horizontal sum per row.
// The scales stay in their own array (w.scales), a second stream of 1/17 of the bytes: interleaving them with the
// codes gained nothing beyond noise.
// Every path forms each (token, row) from the same integers with the same float operations as the reference
// (product, then sum, per group in ascending order): the same bits at any tile, token or thread count.
struct I4Kern {
  static void run(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& o) {
    if (n0 >= n1) return;
    with_int4_group(w, [&]<int GROUP>() {
      if (in.T == 1) {
        decode<GROUP>(in, w, n0, n1, o);
      } else {
        prefill<GROUP>(in, w, n0, n1, o);
      }
    });
  }

  // Stores block b's 16 results (acc times the token's scale) for token t, the rows of [n0, n1) only.
  static void store_block(const GemmOut& o, int64_t t, int64_t b, int64_t n0, int64_t n1, __m512 acc, float d) {
    alignas(64) float v[16];
    _mm512_store_ps(v, _mm512_mul_ps(acc, _mm512_set1_ps(d)));
    store_rows(o, t, b * kInt4Rows, kInt4Rows, n0, n1, v);
  }

  // acc + float(is) * scales: the reference's product, then sum.
  static __m512 scale_add(__m512 acc, __m512i is, const float* scales) {
    return _mm512_add_ps(acc, _mm512_mul_ps(_mm512_cvtepi32_ps(is), _mm512_loadu_ps(scales)));
  }

  // Decode reads one block after another, each a contiguous run of 16 x Kp / 2 bytes, with four vpdpbusd chains in
  // flight. Each line is prefetched as a decode stream (PrefetchTo::Stream). GCC 12 issues a group's 16 prefetches
  // together at the group's start, 4 KiB ahead; that burst is what bench/ab_decode.py measured.
  // The loop spends five instructions per 64 bytes, plus the prefetch: the high nibbles are masked in place, not
  // shifted down, and the activations' broadcasts fold into the vpdpbusd as memory operands (dpbusd_bcast). When
  // memory is fast, fewer instructions per byte measured faster. What binds the loop then is mostly its arithmetic's
  // dependence on the lines it loads, so extra independent instructions cost little. Loading a group ahead into
  // registers, separate vpbroadcastd, and a layout holding two rows' codes per byte all ran slower.
  template <int GROUP>
  static void decode(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& o) {
    constexpr int64_t kSteps = GROUP / 8;  // 64-byte steps per group
    const int64_t Kp = in.Kp, G = Kp / GROUP, block_bytes = kInt4Rows * Kp / 2;
    const int32_t* off = int4_offsets(in, GROUP);
    const auto* a = reinterpret_cast<const int32_t*>(in.q.data());  // 4 activations per element
    const auto* base = static_cast<const uint8_t*>(w.data);
    const __m512i low4 = _mm512_set1_epi8(0x0f), high4 = _mm512_set1_epi8(static_cast<char>(0xf0));
    const int64_t b1 = (n1 + kInt4Rows - 1) / kInt4Rows;
    prefetch_span(a, Kp);
    for (int64_t b = n0 / kInt4Rows; b < b1; ++b) {
      const uint8_t* p = base + b * block_bytes;
      const float* sc = w.scales + b * G * kInt4Rows;
      __m512 acc = _mm512_setzero_ps();
      const int32_t* ak = a;
      for (int64_t g = 0; g < G; ++g) {
        // Four chains (low and high nibbles of even and odd steps), added at the group's end (exact). The high
        // nibbles stay in place (16 x the code: no shift per step) and their chains' sum, 16 x an integer below
        // 2^21 for groups up to 128, is shifted back once per group.
        __m512i is[4] = {_mm512_set1_epi32(off[g]), _mm512_setzero_si512(), _mm512_setzero_si512(),
                         _mm512_setzero_si512()};
        for (int64_t st = 0; st < kSteps; st += 2) {
          for (int c = 0; c < 2; ++c, ak += 2, p += 64) {
            stream_prefetch(p);
            const __m512i raw = load_reg512(p);
            is[2 * c] = dpbusd_bcast(is[2 * c], _mm512_and_si512(raw, low4), ak);
            is[2 * c + 1] = dpbusd_bcast(is[2 * c + 1], _mm512_and_si512(raw, high4), ak + 1);
          }
        }
        const __m512i high = _mm512_srai_epi32(_mm512_add_epi32(is[1], is[3]), 4);
        const __m512i sum = _mm512_add_epi32(_mm512_add_epi32(is[0], is[2]), high);
        acc = scale_add(acc, sum, sc + g * kInt4Rows);
      }
      store_block(o, 0, b, n0, n1, acc, in.d[0]);
    }
  }

  // NB blocks (16 NB rows from block b) by TT tokens from t.
  template <int GROUP, int NB, int TT>
  static void tile(const GemmInput& in, const MatrixView& w, const int32_t* off, int64_t b, int64_t t, int64_t n0,
                   int64_t n1, const GemmOut& o) {
    constexpr int64_t kSteps = GROUP / 8;
    const int64_t Kp = in.Kp, G = Kp / GROUP, block_bytes = kInt4Rows * Kp / 2;
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    const uint8_t* p[NB];
    __m512 acc[NB][TT];
    for (int i = 0; i < NB; ++i) {
      p[i] = static_cast<const uint8_t*>(w.data) + (b + i) * block_bytes;
      for (int j = 0; j < TT; ++j) acc[i][j] = _mm512_setzero_ps();
    }
    const auto* a = reinterpret_cast<const int32_t*>(in.q.data() + t * Kp);
    const int64_t a_stride = Kp / 4;
    for (int64_t g = 0; g < G; ++g) {
      __m512i is[NB][TT];
      for (int j = 0; j < TT; ++j) {
        const __m512i o0 = _mm512_set1_epi32(off[j * G + g]);
        for (int i = 0; i < NB; ++i) is[i][j] = o0;
      }
      for (int64_t st = g * kSteps; st < (g + 1) * kSteps; ++st) {
        __m512i lo[NB], hi[NB];
        for (int i = 0; i < NB; ++i) {
          const __m512i raw = load_reg512(p[i] + st * 64);
          lo[i] = _mm512_and_si512(raw, low4);
          hi[i] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
        }
        for (int j = 0; j < TT; ++j) {
          const __m512i a0 = _mm512_set1_epi32(a[j * a_stride + 2 * st]);
          const __m512i a1 = _mm512_set1_epi32(a[j * a_stride + 2 * st + 1]);
          for (int i = 0; i < NB; ++i) {
            is[i][j] = dpbusd(is[i][j], lo[i], a0);
            is[i][j] = dpbusd(is[i][j], hi[i], a1);
          }
        }
      }
      for (int i = 0; i < NB; ++i) {
        const float* sc = w.scales + ((b + i) * G + g) * kInt4Rows;
        for (int j = 0; j < TT; ++j) acc[i][j] = scale_add(acc[i][j], is[i][j], sc);
      }
    }
    for (int i = 0; i < NB; ++i) {
      for (int j = 0; j < TT; ++j) store_block(o, t + j, b + i, n0, n1, acc[i][j], in.d[static_cast<size_t>(t + j)]);
    }
  }

  // Prefill: tiles of three blocks by four tokens (12 accumulators), each reading a block's codes once.
  template <int GROUP>
  static void prefill(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& o) {
    const int64_t G = in.Kp / GROUP;
    const int32_t* off = int4_offsets(in, GROUP);  // (T, G)
    const int64_t tok_block = token_block(in.Kp);
    const int64_t b0 = n0 / kInt4Rows, b1 = (n1 + kInt4Rows - 1) / kInt4Rows;
    for (int64_t t0 = 0; t0 < in.T; t0 += tok_block) {
      const int64_t t1 = tile_min(in.T, t0 + tok_block);
      for (int64_t b = b0; b < b1; b += 3) {
        const int64_t nb = tile_min(3, b1 - b);
        for (int64_t t = t0; t < t1; t += 4) {
          with_tile_size(nb, [&]<int NB>() {
            if constexpr (NB <= 3) {
              with_tile_size(tile_min(4, t1 - t),
                             [&]<int TT>() { tile<GROUP, NB, TT>(in, w, off + t * G, b, t, n0, n1, o); });
            }
          });
        }
      }
    }
  }
};

}  // namespace

template <>
void gemm_rows_simd<Isa::Avx512, WeightFormat::I8>(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1,
                                                   const GemmOut& out) {
  drive_tiles<I8Kern>(in, w, n0, n1, out);
}

template <>
void gemm_rows_simd<Isa::Avx512, WeightFormat::I4>(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1,
                                                   const GemmOut& out) {
  drive_tiles<I4Kern>(in, w, n0, n1, out);
}

}  // namespace ascent::kernels

#include "ascent/kernels/cpu/simd_avx512_end.h"
