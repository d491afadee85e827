// AVX-512 matmul engine: VNNI (vpdpbusd) for the int8/int4 and GGUF block formats, vdpbf16ps for bf16, FMA for
// f32/f16. Each output is accumulated lane-wise in one 512-bit register over K and reduced once, so only the
// float summation order differs from the reference (integer sums are exact).
//
// Unsigned-by-signed trick: vpdpbusd multiplies u8 by s8. I8/I4 weights are stored offset-binary (q + 128, q + 8)
// and activations are s8, so the offset comes out as 128 * sum(a) or 8 * sum(a), subtracted exactly in int32.
// GGUF Q8_0 weights are s8: they are flipped to offset-binary on the fly with one xor.
#include <immintrin.h>

#include <cstring>
#include <type_traits>
#include <vector>

#include "ascent/kernels/cpu/gemm.h"

#pragma GCC push_options
// GCC 12's AVX-512 cast intrinsics (_mm512_castsi256_si512, ...) leave the upper half undefined on purpose and
// trip -Wuninitialized inside the system header (GCC bug 105593); the warning is noise in this file only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16,fma,f16c")

#include "ascent/kernels/cpu/simd_avx512.h"

#include "ascent/kernels/cpu/gemm_tiles.h"
#include "ascent/kernels/cpu/q4k_simd.h"

namespace ascent::kernels {
namespace {

// acc + u8 x s8 dot products (vpdpbusd) in inline assembly: with the intrinsic, GCC 12 copies every accumulator
// of the int8 tile to a fresh register on each loop iteration (16 extra moves per 16 dot products; measured +36%
// int8 pp512 without them). "vm" lets the signed operand come straight from memory. The other kernels' loops
// compile without the copies, and the assembly form measured no faster there.
inline __m512i dpbusd(__m512i acc, __m512i u8, __m512i s8) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "vm"(s8));
  return acc;
}

// dpbusd against 4 signed bytes at s8 broadcast to every lane, as the instruction's own {1to16} memory operand: one
// instruction where _mm512_set1_epi32 (which GCC 12 does not fold into the asm operand) costs a vpbroadcastd more.
// int4's decode loop takes two per 64 bytes of weights; with them its eight instructions per 64 bytes are six, which
// in the fast memory state, where that loop is bound by its instructions per byte, ran tl16 int4 decode 2-5% faster
// (bench/RESULTS.md, session 28).
inline __m512i dpbusd_bcast(__m512i acc, __m512i u8, const int32_t* s8) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u8), "m"(*s8));
  return acc;
}

// 32 bytes at lo in the low half of a 512-bit register, 32 at hi in the high half: Q4_0R's two 8-block halves of a
// chunk lie 128 bytes apart, and Q8_0R's 544-byte groups put every other 64-byte code vector across two cache
// lines, where each 32-byte half stays within one.
inline __m512i join_halves(const void* lo, const void* hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(static_cast<const __m256i*>(lo))),
                            _mm256_loadu_si256(static_cast<const __m256i*>(hi)), 1);
}

// A 512-bit load GCC keeps in a register: left to itself it folds the load into every instruction that reads the
// value (vpand zmm, zmm, [mem] and vpsrlw zmm, [mem], 4 both reading the same weights; a row pair's two vpdpbusd
// both reading the same activations), so each byte was loaded twice.
inline __m512i load_reg512(const void* p) {
  __m512i v = _mm512_loadu_si512(p);
  asm("" : "+v"(v));
  return v;
}

// For a single token's decode loops: minus each lane's activation sum (GemmInput::lane_sum) times 2^shift, the
// exact offset term a kernel with codes stored as value + 2^shift adds to each lane's vpdpbusd sum. Formed once per
// call into a per-thread buffer (Kp / 4 values) instead of once per row.
const int32_t* scaled_lane_offsets(const GemmInput& in, int shift) {
  thread_local AlignedVector<int32_t> neg_off;
  neg_off.resize(in.lane_sum.size());
  for (size_t i = 0; i < neg_off.size(); i += 8) {
    const __m256i sums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in.lane_sum.data() + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(neg_off.data() + i),
                        _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_sll_epi32(sums, _mm_cvtsi32_si128(shift))));
  }
  return neg_off.data();
}

// The 128 codes of 64 packed bytes (two 32-byte chunks c0, c1 of the Q4_K layout): [0] the low nibbles
// (columns 0-31 of c0, then of c1), [1] the high nibbles (columns 32-63 of c0, then of c1). No lane crossing.
inline void split_nibbles(const uint8_t* p, __m512i out[2]) {
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i raw = _mm512_loadu_si512(p);
  out[0] = _mm512_and_si512(raw, low4);
  out[1] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
}

// Decode rows [n0, n1) two at a time, the last one alone: rows.template operator()<R>(n, res) puts rows n..n+R-1
// (R = 2, or 1 at the end) in res[r][0], stored here. The kernels that take their single token's rows in pairs
// (FloatKern, q4r_decode_rows) share this loop.
template <class Rows>
void decode_in_pairs(int64_t n0, int64_t n1, const GemmOut& o, Rows&& rows) {
  for (int64_t n = n0; n < n1; n += 2) {
    float res[4][4];
    if (n + 2 <= n1) {
      rows.template operator()<2>(n, res);
      store_tile<2>(o, 0, 1, n, res);
    } else {
      rows.template operator()<1>(n, res);
      store_tile<1>(o, 0, 1, n, res);
    }
  }
}

// Decode for the float kernels: rows in pairs through Kern::body<R, 1>, prefetching into L2.
template <class Kern>
void decode_pairs(const GemmInput& in, const Tensor& w, int64_t n0, int64_t n1, const GemmOut& o, bool masked) {
  decode_in_pairs(n0, n1, o, [&]<int R>(int64_t n, float res[4][4]) {
    if (masked) {
      Kern::template body<R, 1, true, PrefetchTo::L2>(in, w, n, 0, res);
    } else {
      Kern::template body<R, 1, false, PrefetchTo::L2>(in, w, n, 0, res);
    }
  });
}

// f32 and f16 weights times f32 activations, 16 columns per step, the tail masked.
template <DType WT>
struct FloatKern {
  static constexpr int kDecodeRows = 1;  // decode runs decode_rows
  static __m512 load_w(const uint8_t* row, int64_t k, __mmask16 m) {
    if constexpr (WT == DType::F32) {
      return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + k);
    } else {
      return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(row) + k));
    }
  }
  static __m512 load_w(const uint8_t* row, int64_t k) {
    if constexpr (WT == DType::F32) {
      return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + k);
    } else {
      return _mm512_cvtph_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(row) + k)));
    }
  }
  // kMasked: rows whose length is not a multiple of 16 take a mask on every step. Only when K needs it: a mask in
  // the loop makes GCC 12 store every accumulator to the stack on every step (measured 2x slower), and a masked
  // tail after the loop does the same.
  template <int R, int TT, bool kMasked, PrefetchTo kTo = PrefetchTo::L1>
  static void body(const GemmInput& in, const Tensor& w, int64_t n, int64_t t, float out[4][4]) {
    const int64_t K = in.K, Kp = in.Kp;
    const int64_t stride = row_bytes(w.dtype, w.shape[1]);
    const uint8_t* w0 = w.row_ptr(n);
    const int64_t ahead = prefetch_distance(R * stride, kTo);
    __m512 acc[R][TT];
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) acc[r][j] = _mm512_setzero_ps();
    }
    const float* x = in.xf.data() + t * Kp;  // zero-padded to Kp
    for (int64_t k = 0; k < K; k += 16) {
      __m512 xv[TT];
      for (int j = 0; j < TT; ++j) xv[j] = _mm512_loadu_ps(x + j * Kp + k);
      for (int r = 0; r < R; ++r) {
        const uint8_t* row = w0 + r * stride;
        prefetch_ahead<TT, kTo>(row + k * (WT == DType::F32 ? 4 : 2), ahead);
        __m512 wv;
        if constexpr (kMasked) {
          wv = load_w(row, k, static_cast<__mmask16>(K - k >= 16 ? 0xffff : (1u << (K - k)) - 1));
        } else {
          wv = load_w(row, k);
        }
        for (int j = 0; j < TT; ++j) acc[r][j] = _mm512_fmadd_ps(wv, xv[j], acc[r][j]);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) out[r][j] = hsum(acc[r][j]);
    }
  }
  template <int R, int TT>
  static void tile(const GemmInput& in, const Tensor& w, int64_t n, int64_t t, float out[4][4]) {
    if (in.K % 16 == 0) {
      body<R, TT, false>(in, w, n, t, out);
    } else {
      body<R, TT, true>(in, w, n, t, out);
    }
  }
  // Decode (one token): rows in pairs, body<2, 1>, prefetching into L2. Each output is one chain of multiply-adds
  // (the tiles' arithmetic, so the same bits), and one row at a time was bound by that chain's latency (4 cycles
  // per 16 weights: f16 26 GB/s from L2 on one core; a pair runs two chains). The pair also shares each load of
  // the f32 activations, which for a 5632-column row (22 KiB) did not stay in L1 beside the streaming weights: a
  // 40-matrix stream of 2048x5632 f16 from DRAM ran at 51-65% of a plain read one row at a time, 86-89% in pairs
  // with L2 prefetch (70% with L1's).
  static void decode_rows(const GemmInput& in, const Tensor& w, int64_t n0, int64_t n1, const GemmOut& o) {
    decode_pairs<FloatKern>(in, w, n0, n1, o, in.K % 16 != 0);
  }
};

// bf16 weights times bf16-rounded activations with vdpbf16ps, 32 columns per step.
struct Bf16Kern {
  static constexpr int kDecodeRows = 1;  // decode runs decode_rows
  // kMasked only when K is not a multiple of 32 (see FloatKern: a mask in the loop costs GCC's register
  // allocation the accumulators).
  template <int R, int TT, bool kMasked, PrefetchTo kTo = PrefetchTo::L1>
  static void body(const GemmInput& in, const Tensor& w, int64_t n, int64_t t, float out[4][4]) {
    const int64_t K = in.K, Kp = in.Kp;
    const int64_t stride = row_bytes(w.dtype, w.shape[1]);
    const uint8_t* w0 = w.row_ptr(n);
    const int64_t ahead = prefetch_distance(R * stride, kTo);  // bytes
    __m512 acc[R][TT];
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) acc[r][j] = _mm512_setzero_ps();
    }
    const uint16_t* x = in.xb.data() + t * Kp;  // zero-padded to Kp
    for (int64_t k = 0; k < K; k += 32) {
      __m512bh xv[TT];
      for (int j = 0; j < TT; ++j) xv[j] = (__m512bh)_mm512_loadu_si512(x + j * Kp + k);
      for (int r = 0; r < R; ++r) {
        const uint16_t* row = reinterpret_cast<const uint16_t*>(w0 + r * stride);
        prefetch_ahead<TT, kTo>(row + k, ahead);
        __m512bh wv;
        if constexpr (kMasked) {
          const auto m = K - k >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << (K - k)) - 1);
          wv = (__m512bh)_mm512_maskz_loadu_epi16(m, row + k);
        } else {
          wv = (__m512bh)_mm512_loadu_si512(row + k);
        }
        for (int j = 0; j < TT; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], wv, xv[j]);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) out[r][j] = hsum(acc[r][j]);
    }
  }
  template <int R, int TT>
  static void tile(const GemmInput& in, const Tensor& w, int64_t n, int64_t t, float out[4][4]) {
    if (in.K % 32 == 0) {
      body<R, TT, false>(in, w, n, t, out);
    } else {
      body<R, TT, true>(in, w, n, t, out);
    }
  }
  // Decode (one token): one row at a time, one vdpbf16ps chain, each 64-byte load a whole cache line of one
  // contiguous run, prefetched as a decode stream (PrefetchTo::Stream; before it, with no software prefetch, the
  // hardware prefetchers alone had followed such a run best: tl16 bf16 tg32 --no-mmap, alternating builds (Zen 4):
  // one thread 67-70% -> 83-86% of a one-thread read; two threads 44-61% -> 68-79% in the fast memory state,
  // 81-82% -> 88-100% in the slow one). (Rows in pairs with the L2 prefetch, as
  // FloatKern does, were it before: one row's chain bound it from L2, which now runs at 77 GB/s on one core.) The
  // same bits as the tiles (body<1, 1>). f16 one row at a time, whose 32-byte loads take half a line each, measured
  // 69-77% against its pairs' 83%.
  static void decode_rows(const GemmInput& in, const Tensor& w, int64_t n0, int64_t n1, const GemmOut& o) {
    prefetch_span(in.xb.data(), in.Kp * 2);
    for (int64_t n = n0; n < n1; ++n) {
      float res[4][4];
      if (in.K % 32 != 0) {
        body<1, 1, true, PrefetchTo::Stream>(in, w, n, 0, res);
      } else {
        body<1, 1, false, PrefetchTo::Stream>(in, w, n, 0, res);
      }
      store_tile<1>(o, 0, 1, n, res);
    }
  }
};

// I8: one int32 sum per output over the whole padded row, then the row and token scales.
struct I8Kern {
  static constexpr int kDecodeRows = 1;
  // Decode (one token), rows [n0, n1) in one loop (with a tile call per row: 55 vs 71 GB/s from L2, one core):
  // two independent chains of vpdpbusd, added at the end. Integer sums are exact in any order, so this is bitwise
  // the sum the tiles compute; one chain kept each row's instructions in flight longer, and fewer of the next
  // rows' loads fit in the out-of-order window. The rows are one contiguous run read a whole cache line per load in
  // order, with no software prefetch: its steps are light enough (one load and one vpdpbusd per 64 bytes) that the
  // hardware prefetchers follow the run better than a prefetch per line does (Zen 5, session 30: tl16 int8 tg64
  // --no-mmap, bench/ab_decode.py, five series of 8-10 rounds against the non-temporal prefetch 8 KiB ahead: x1.064,
  // x1.024, x0.944, x1.063, x1.030 t/s; decode_ceiling --dram on one buffer, fast state, 72-75% -> 88%).
  // History: on the Zen 4 no software prefetch had beaten the L1 one of the tiles (tl16 int8 tg32, one thread 68-79%
  // -> 88-92% of a one-thread read), and on this Zen 5 in sessions 19-21 the non-temporal prefetch had measured best
  // (bench/RESULTS.md): the host's prefetchers have since changed what wins, so measure again before reinstating one.
  static void decode_rows(const GemmInput& in, const Tensor& w, int64_t n0, int64_t n1, const GemmOut& o) {
    const int64_t Kp = in.Kp;
    const int64_t stride = row_bytes(w.dtype, w.shape[1]);
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
  static void tile(const GemmInput& in, const Tensor& w, int64_t n, int64_t t, float out[4][4]) {
    const int64_t Kp = in.Kp;
    __m512i acc[R][TT];
    // Row addresses from one stride (no calls inside the loops, so GCC unrolls them and keeps acc in registers).
    const int64_t stride = row_bytes(w.dtype, w.shape[1]);
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

// I4 in blocks of 16 rows (dtype.h): lane i of every vector is row 16b + i, so a step's 64 bytes (16 rows x 8
// columns) are one load, two nibble masks and two vpdpbusd against the step's 8 activations broadcast as two
// 4-byte groups. Each group's int32 sum (starting from int4_offsets' term) is converted and scaled for 16 rows at
// once; the float work is one multiply and one add per group and 16 rows, not per row (the row-major layout
// before it spent as much on conversion and scaling as on dot products, and a horizontal sum per row).
// Decode reads one block after another, each a contiguous run of 16 x Kp / 2 bytes, with four vpdpbusd chains in
// flight, each line prefetched as a decode stream (PrefetchTo::Stream: Zen 5, tl16 int4 tg128 81% -> 89% of the
// read, 111 -> 132 t/s). The source asks for one prefetch per line, but GCC 12 issues a group's 16 together at the
// group's start, 4 KiB ahead; that burst is what was measured. Before that, no software prefetch had streamed best
// (Zen 4, tl16 int4 tg32 --no-mmap,
// alternating builds: one thread 78-85% of a one-thread read against 63-68% with the other kernels' L2 prefetch
// 8 KiB ahead and 55-60% with two blocks at a time; two threads 77-83% in the slow memory state, 62-67% in the fast
// one). Its high nibbles are masked in place, not shifted
// down: in the fast memory state this stream is bound by the core's instructions per byte, and one fewer per 64
// bytes (7, not 8) raised a two-thread stream of 5632 x 2048 matrices from DRAM from 72% to 84% of the read measured
// around it (slow state 90% -> 95%); the model's tg32 from 62% to 69% (fast) and 83% to 89% (slow). A layout of 32
// rows per block with both nibbles against one activation (5 per 64 bytes) measured the same 84%. The activations'
// broadcasts, folded into the vpdpbusd as memory operands (dpbusd_bcast), leave five (and the prefetch). Prefill tiles
// three blocks by four tokens (12 accumulators) and reads a block's codes once per tile.
// The scales stay in their own array (w.scales), a second stream of 1/17 of the bytes. Interleaved after each
// group's codes, they made decode stream 0-3 points of a same-bytes read faster in a scratch decode_ceiling --dram
// run, within the host's noise. Broadcasts as separate vpbroadcastd, a layout whose byte holds two rows' codes
// (one vpdpbusd on the raw byte, one on its low nibble), and loads a group ahead in registers each ran slower
// (session 31, bench/RESULTS.md). That does not pay for a change of format.
// What binds it in a fast minute is less the instruction count than the arithmetic's dependence on the lines it
// loads. Session 33 ran decode_ceiling --dram with variants that are not valid kernels. With the masks and dot
// products on a register, the loaded lines only feeding a vpord chain, the loop streamed 78-91% of the same-bytes read
// against 72-80.5% in six series of seven. Extra independent instructions cost nothing. Loading each group's lines a
// group ahead into registers (valid) ran worse: 59% against 72%.
// Every path forms each (token, row) from the same integers with the same float operations as the reference
// (product, then sum, per group in ascending order): the same bits at any tile, token or thread count.
struct I4Kern {
  static void run(const GemmInput& in, const Tensor& w, int64_t n0, int64_t n1, const GemmOut& o) {
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

  template <int GROUP>
  static void decode(const GemmInput& in, const Tensor& w, int64_t n0, int64_t n1, const GemmOut& o) {
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
  static void tile(const GemmInput& in, const Tensor& w, const int32_t* off, int64_t b, int64_t t, int64_t n0,
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

  template <int GROUP>
  static void prefill(const GemmInput& in, const Tensor& w, int64_t n0, int64_t n1, const GemmOut& o) {
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
  static void body(const GemmInput& in, const Tensor& w, int64_t n, int64_t t, float out[4][4],
                   const RowCache* cache = nullptr) {
    const int64_t nb = in.K / kQBlock;
    __m512 acc[R][TT];
    // Row addresses from one stride (no calls inside the loops, so GCC unrolls them and keeps acc in registers).
    const int64_t stride = row_bytes(w.dtype, w.shape[1]);
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
  // (even blocks) in y[0] and 8-15 (odd blocks) in y[1], so the same products and sums per lane and the same
  // bits. Built from 256-bit parts, the loop needs no inserts or cross-lane moves, which on Zen 4 (512-bit
  // instructions run as two halves) cost as much as the arithmetic; the offset term is formed once per call from
  // the single token's lane sums (gemm.h), the activation scales read from its lane vector, and the row loop is
  // here rather than one tile call per row. One row at a time also makes each thread's weights one sequential
  // stream. From L2 on one core 25 -> 30 GB/s, tg64 37 -> 45 t/s in pairs. The block scale is converted in place:
  // from a table of all f16 values, whose lines the streamed weights keep evicting, it ran at 33 t/s.
  static void decode_rows(const GemmInput& in, const Tensor& w, int64_t n0, int64_t n1, const GemmOut& o) {
    const int64_t nb = in.K / kQBlock;
    const int64_t stride = row_bytes(w.dtype, w.shape[1]);
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
  static void tile(const GemmInput& in, const Tensor& w, int64_t n, int64_t t, float out[4][4]) {
    if ((in.K / kQBlock) % 2 == 0) {
      body<R, TT, true>(in, w, n, t, out);
    } else {
      body<R, TT, false>(in, w, n, t, out);
    }
  }

  // Prefill: each 4-row tile's codes and block scales, as load_w gives them (codes unsigned, scales widened from
  // f16), are formed once into L1 for all its token tiles instead of once per token tile; the cached tile then does
  // body's arithmetic on them, so the same bits. The scales stay two floats per block pair: as 16-lane vectors
  // the cache no longer fit L1 beside the activations for long rows (measured q8_0 -8%).
  struct RowCache {
    AlignedVector<uint8_t> codes;  // (R, pairs, 64) unsigned codes of blocks b, b + 1
    AlignedVector<float> dw;       // (R, pairs, 2) their scales (widened from f16)
  };
  template <int R>
  static void fill(const GemmInput& in, const Tensor& w, int64_t n, RowCache& c) {
    const int64_t nb = in.K / kQBlock, pairs = (nb + 1) / 2;
    c.codes.resize(static_cast<size_t>(4 * pairs * 64));
    c.dw.resize(static_cast<size_t>(4 * pairs * 2));
    const int64_t stride = row_bytes(w.dtype, w.shape[1]);
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
  static void cached_tile(const GemmInput& in, const Tensor& w, const RowCache& c, int64_t n, int64_t t,
                          float out[4][4]) {
    // The loop bound covers an odd last block either way: kPairs only steers load_w, which the cache replaces.
    body<R, TT, /*kPairs=*/true, /*kCached=*/true>(in, w, n, t, out, &c);
  }
};

// GGUF Q4_0 rows against per-block int8 activations, in the lane order of GemmInput's q4_* layout (gemm.h): each
// 32-bit lane sums 8 columns of one block, the low and high nibbles of the same 4 packed bytes, so the nibbles are
// split in place (an and, a shift and an and per two blocks) and never moved across lanes, and the float work
// (convert, scale, multiply-add) is done once per 8 columns instead of once per 4. Lanes per 128 columns (4 blocks):
// 0-3 block 0, 4-7 block 1, 8-11 block 2, 12-15 block 3; prefill holds them in one 512-bit register per group,
// decode in two 256-bit halves (blocks 0-1, 2-3), and both accumulate lane by lane in the same order and reduce
// with hsum: the same bits. Measured on Zen 4 (one core, weights in L2): the two-blocks-per-lane decode 20 -> 26
// GB/s against the previous one-block-per-256-bit loop, which was bound by its per-block float work.
struct Q40Kern {
  static constexpr int kDecodeRows = 1;  // decode runs decode_rows
  static int64_t groups(int64_t K) { return (K + 127) / 128; }

  // Decode (one token), rows [n0, n1) one at a time, each thread's weights one sequential stream.
  static void decode_rows(const GemmInput& in, const Tensor& w, int64_t n0, int64_t n1, const GemmOut& o) {
    const int64_t nb = in.K / kQBlock, full = nb / 4, G = groups(in.K);
    const int64_t stride = row_bytes(w.dtype, w.shape[1]);
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
  static void fill(const GemmInput& in, const Tensor& w, int64_t n, RowCache& c) {
    const int64_t nb = in.K / kQBlock, G = groups(in.K);
    c.codes.resize(static_cast<size_t>(4 * G * 128));
    c.dw.resize(static_cast<size_t>(4 * G * 4));
    const int64_t stride = row_bytes(w.dtype, w.shape[1]);
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
  static void cached_tile(const GemmInput& in, const Tensor& w, const RowCache& c, int64_t n, int64_t t,
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

// The prefill tile of the kernels whose codes lie in GemmInput::q4r's order (Q40RKern and Q4KRKern unpack theirs so
// into a RowCache, Q80RKern's weights hold them so): per 512-column group g and row r, the 8 code registers at codes(r,
// g) (per chunk q, the low nibbles at 128 q, the high ones at 128 q + 64) against tokens t..t+TT-1, each lane's integer
// sum starting at init(j, g), then acc = scale(acc, sums, r, j, g), the format's float step.
template <int R, int TT, class Codes, class Init, class Scale>
void q4r_cached_tile(const GemmInput& in, int64_t t, Codes codes, Init init, Scale scale, float out[4][4]) {
  const int64_t Kp = in.Kp, G = Kp / kQ4RGroup;
  __m512 acc[R][TT];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < TT; ++j) acc[r][j] = _mm512_setzero_ps();
  }
  for (int64_t g = 0; g < G; ++g) {
    for (int r = 0; r < R; ++r) {
      const uint8_t* cp = codes(r, g);
      __m512i lo[4], hi[4];
      for (int q = 0; q < 4; ++q) {
        lo[q] = _mm512_loadu_si512(cp + 128 * q);
        hi[q] = _mm512_loadu_si512(cp + 128 * q + 64);
      }
      for (int j = 0; j < TT; ++j) {
        const int8_t* a = in.q4r.data() + (t + j) * Kp + g * kQ4RGroup;
        __m512i is = init(j, g);
        for (int q = 0; q < 4; ++q) {
          is = _mm512_dpbusd_epi32(is, lo[q], _mm512_loadu_si512(a + 128 * q));
          is = _mm512_dpbusd_epi32(is, hi[q], _mm512_loadu_si512(a + 128 * q + 64));
        }
        acc[r][j] = scale(acc[r][j], is, r, j, g);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < TT; ++j) out[r][j] = hsum(acc[r][j]);
  }
}

// The decode loop of the kernels whose codes lie in GemmInput::q4r's order (Q40RKern, Q80RKern): rows [n0, n1) one
// at a time, so that each thread's rows are one contiguous run. Q4_0R's groups' lines are prefetched as a decode
// stream (kStreamPrefetch: PrefetchTo::Stream); Q8_0R's, twice the bytes for the same work, are left to the hardware
// prefetchers, which follow its run better (Zen 5, session 30: tl16 q8_0 tg64 --no-mmap, bench/ab_decode.py, 8
// rounds, x1.104 t/s, faster in 7; q4_0 without it x0.998 and x1.031, neutral, so it keeps it). Per
// 512-column group of kGroupBytes (its 16 f16 scales first), one 512-bit register's lanes (blocks 0-15) start at the
// blocks' offset terms (q4r_off << kShift) and sum codes(p, j, c0, c1), chunk j's two code vectors for all 16 blocks,
// against the activations in q4r_cached_tile's order (at 128 j, the low halves of both 8-block halves side by side;
// at 128 j + 64, the high ones); then y += sums x (scale x activation scale): the prefill tile's float step on the
// same lanes in the same order, and hsum(y) is the reduction the two 256-bit halves it replaced ended in, so the
// same bits. Q4_0R's high nibbles are masked in place (kHighShift 4), one instruction fewer per 64 bytes, as int4's
// decode does; Q8_0R (kHighShift 0) runs the same two chains on its codes as they lie.
//
// History, for whoever tunes it next. Until session 22 this loop ran each group as two 256-bit halves (95
// instructions per Q4_0R group); this one takes ~45. One core from L2 (`decode_ceiling --cpu N`, Zen 5, alternated):
// q4_0r 58-64 -> 85-93 GB/s, q8_0r 87-94 -> 127, on either vCPU. In the model, tl16 q4_0 tg128 --no-mmap
// (`bench/ab_decode.py`, five series of alternated rounds): about +1 point of the read, the median of the paired
// rounds (from -5 to +4 each), so neutral within this host's noise; q8_0 the same (bench/RESULTS.md, session 22).
// It stays for the compute headroom, which the fast memory state asks of a core. Earlier 512-bit attempts
// (sessions 15-20: 512-bit code loads straddling lines, the prefill tile's unpacked lanes) measured worse in the
// model (82% -> 76%); this one loads each chunk's two 32-byte halves and inserts one into the other. Rows in
// pairs, each pair's two rows prefetched into L2 (they share each activation load), ran faster from L2 but slower
// from memory; pairs without the software prefetch ran at half the speed: two interleaved streams defeat the
// prefetchers. The 256-bit loop's chains split four ways instead of two (integer sums, so the same bits) ran no
// faster from L2: it was not bound by latency.
template <int64_t kGroupBytes, int kShift, int kHighShift, bool kStreamPrefetch, class Codes>
void q4r_decode_rows(const GemmInput& in, const Tensor& w, int64_t n0, int64_t n1, const GemmOut& o, Codes codes) {
  const int64_t G = in.Kp / kQ4RGroup;
  const int8_t* acts = in.q4r.data();
  const int32_t* off = in.q4r_off.data();
  const float* da = in.d.data();
  // The row pointer stepped by a stride taken once: row_ptr's row_bytes is an out-of-line call, which per row had
  // the compiler spill and reload the loop's registers around it.
  const int64_t stride = row_bytes(w.dtype, w.shape[1]);
  const uint8_t* row = w.row_ptr(n0);
  prefetch_span(acts, in.Kp);
  prefetch_span(off, in.Kp / kQBlock * 4);
  prefetch_span(da, in.Kp / kQBlock * 4);
  for (int64_t n = n0; n < n1; ++n, row += stride) {
    __m512 y = _mm512_setzero_ps();
    for (int64_t g = 0; g < G; ++g) {
      const int8_t* a = acts + g * kQ4RGroup;
      const uint8_t* grp = row + g * kGroupBytes;
      if constexpr (kStreamPrefetch) prefetch_block<1, PrefetchTo::Stream>(grp, kGroupBytes, kStreamAheadBlocks);
      // The first code vectors' chain and the second's, which holds its codes times 2^kHighShift (high nibbles
      // masked in place): shifted back once, exactly, at the end.
      __m512i is0 = _mm512_slli_epi32(_mm512_loadu_si512(off + 16 * g), kShift);
      __m512i is1 = _mm512_setzero_si512();
      for (int j = 0; j < 4; ++j) {
        __m512i c0, c1;
        codes(grp, j, c0, c1);
        is0 = dpbusd(is0, c0, _mm512_loadu_si512(a + 128 * j));
        is1 = dpbusd(is1, c1, _mm512_loadu_si512(a + 128 * j + 64));
      }
      const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(grp)));
      const __m512i sum = _mm512_add_epi32(is0, _mm512_srai_epi32(is1, kHighShift));
      y = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(dw, _mm512_loadu_ps(da + 16 * g)), y);
    }
    float res[4][4];
    res[0][0] = hsum(y);
    store_tile<1>(o, 0, 1, n, res);
  }
}

// GGUF Q4_0 repacked as Q4_0R (dtype.h) when the model loads: per 16 blocks, their scales side by side and their
// codes in 32-byte chunks whose 4-byte lane i belongs to block i. A block's integer dot then builds up in one lane
// over 8 vpdpbusd (4 chunks, low and high nibbles), with no nibble moved across lanes, and the float work (convert,
// scale, multiply-add) runs once per 16 blocks, in one 512-bit register in decode (q4r_decode_rows) and prefill,
// the same lanes in the same order, so the same bits. One core, weights in L2 (Zen 4): 40 GB/s against 25 for
// Q40Kern on the file's layout, whose per-block scale work bound it.
struct Q40RKern {
  static constexpr int kDecodeRows = 1;  // decode runs decode_rows

  // Decode (one token): the low and high nibbles of each chunk, both 8-block halves in one register.
  static void decode_rows(const GemmInput& in, const Tensor& w, int64_t n0, int64_t n1, const GemmOut& o) {
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

  // Prefill: each 4-row tile's codes, unpacked to one byte each in the order of the 512-bit registers (per chunk,
  // low nibbles of both halves, then high nibbles), and its scales widened to f32, formed once into L1 for every
  // token tile.
  struct RowCache {
    AlignedVector<uint8_t> codes;  // (R, groups, 4 chunks, 2 nibble halves, 64)
    AlignedVector<float> dw;       // (R, groups, 16)
  };
  template <int R>
  static void fill(const GemmInput& in, const Tensor& w, int64_t n, RowCache& c) {
    const int64_t G = in.Kp / kQ4RGroup;
    c.codes.resize(static_cast<size_t>(4 * G * kQ4RGroup));
    c.dw.resize(static_cast<size_t>(4 * G * 16));
    const int64_t stride = row_bytes(w.dtype, w.shape[1]);
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
  static void cached_tile(const GemmInput& in, const Tensor& w, const RowCache& c, int64_t n, int64_t t,
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

// GGUF Q8_0 repacked as Q8_0R (dtype.h) when the model loads, as Q4_0R is for Q4_0: per 16 blocks the scales side
// by side and the codes, unsigned (code + 128), in GemmInput::q4r's order, so a block's integer dot builds up in one
// lane and the float work (convert, scale, multiply-add) runs once per 8 blocks instead of once per block, as Q80Kern
// on the file's layout must. The unsigned codes' offset, minus 128 x each block's activation sum, is 16 x q4r_off.
// Decode (q4r_decode_rows) and prefill (q4r_cached_tile) both take one 512-bit register of 16 blocks, the codes read
// in place (they already lie in its order), the same lanes in the same order, so the same bits. One core, weights
// in L2 (Zen 4): 60 GB/s against 31 for Q80Kern on the file's layout.
struct Q80RKern {
  static constexpr int kDecodeRows = 1;  // decode runs decode_rows

  // Decode (one token): the codes as they lie (offset 128, so the offset terms shifted by 4: x 16).
  static void decode_rows(const GemmInput& in, const Tensor& w, int64_t n0, int64_t n1, const GemmOut& o) {
    q4r_decode_rows<kQ8RGroupBytes, /*kShift=*/4, /*kHighShift=*/0, /*kStreamPrefetch=*/false>(
        in, w, n0, n1, o, [&](const uint8_t* p, int j, __m512i& c0, __m512i& c1) {
          c0 = join_halves(p + 32 + 128 * j, p + 64 + 128 * j);
          c1 = join_halves(p + 96 + 128 * j, p + 128 + 128 * j);
        });
  }

  // Prefill: the shared tile on the codes in place (no unpacking to cache), scales widened per group.
  template <int R, int TT>
  static void tile(const GemmInput& in, const Tensor& w, int64_t n, int64_t t, float out[4][4]) {
    const int64_t stride = row_bytes(w.dtype, w.shape[1]), B = in.Kp / kQBlock;
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

// GGUF K-quants against per-32-block int8 activations, one 64-column chunk (two activation blocks) per step. Each
// lane's vpdpbusd sum covers 4 columns of one sub-block, so the sub-block scales are applied lane-wise in f32: the
// lanes of a chunk carry 2 (Q4_K, 32 columns each) or 4 (Q6_K, 16 each) scales, gathered with one permute from the
// super-block's scale vector.
// K is the format's kernel (Q4KKern, Q6KKern) with body<R, TT> for several tokens; a single token runs its
// decode_rows, which computes the same lanes in 256-bit halves.
template <class K>
struct KQuantKern {
  template <int R, int TT>
  static void tile(const GemmInput& in, const Tensor& w, int64_t n, int64_t t, float out[4][4]) {
    K::template body<R, TT>(in, w, n, t, out);
  }
  // For token t's activations av at column k (a 64-column chunk): each lane's block scale (lanes 0-7 block k / 32,
  // lanes 8-15 the next) and each lane's sum of its 4 activations (decode reads the same values from lane_d and
  // lane_sum).
  static __m512 lane_scales(const GemmInput& in, int64_t t, int64_t k) {
    const float* d = in.d.data() + t * (in.Kp / kQBlock) + k / kQBlock;
    return _mm512_insertf32x8(_mm512_set1_ps(d[0]), _mm256_set1_ps(d[1]), 1);
  }
  static __m512i lane_sums(__m512i av) { return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), av); }
};

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
  // Per super-block and row, sm (scales_mins) times the tokens' kq_dax gives in lane 2j d * scale_j * the block
  // scale and in lane 2j + 1 dmin * min_j * the block's scaled activation sum: the minimum terms are subtracted
  // there once per super-block (into the odd lanes) and the scale factors permuted to the lanes of each chunk.
  // One token keeps that product for the 4 chunks; several (prefill) form it per chunk (registers), the same
  // products in the same order, so the same bits.
  template <int R, int TT, bool kCached = false>
  static void body(const GemmInput& in, const Tensor& w, int64_t n, int64_t t, float out[4][4],
                   const RowCache* cache = nullptr) {
    const int64_t stride = row_bytes(w.dtype, w.shape[1]);
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
      // Two 64-column chunks (64 packed bytes) at a time: the low nibbles of both are one register (sub-blocks
      // 2p, 2p + 2 in lanes 0-7, 8-15), the high nibbles another (2p + 1, 2p + 3), so the activations are paired
      // the same way: columns 0-31 with 64-95 and 32-63 with 96-127.
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

  // Decode (one token), rows [n0, n1) one at a time: body<1, 1>'s arithmetic in 256-bit halves. Its
  // register's lanes 0-7 take sub-blocks 0, 1, 4, 5 of each super-block (in that order) and lanes 8-15 sub-blocks
  // 2, 3, 6, 7; here y[0] and y[1] take the same sub-blocks in the same order, each a 32-byte chunk's low or high
  // nibbles against the paired activations, so the same products and sums per lane: the same bits. Each chunk's
  // scale factor is broadcast from its register by an in-half permute (broadcasts from a stack copy of the
  // factors measured slower on the Zen 4: one core from L2 18.4 against 19.6 GB/s, tg64 63 against 66 t/s in
  // pairs), and one sequential stream per thread; on Zen 4, which runs 512-bit instructions as two halves, the
  // four-row 512-bit tile was bound by its instructions.
  static void decode_rows(const GemmInput& in, const Tensor& w, int64_t n0, int64_t n1, const GemmOut& o) {
    const int64_t nsb = in.K / kQKBlock;
    const int64_t stride = row_bytes(w.dtype, w.shape[1]);
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

  // Prefill: each 4-row tile's codes (nibbles unpacked) and its super-blocks' scale and minimum vectors (d and
  // dmin already applied, as scales_mins() gives them) are formed once into L1 for all its token tiles; the cached tile
  // does body's arithmetic on them, so the same bits.
  struct RowCache {
    AlignedVector<uint8_t> codes;  // (R, K / 64, 64)
    AlignedVector<float> sm;       // (R, K / 256, 16): scales_mins of each super-block
  };
  template <int R>
  static void fill(const GemmInput& in, const Tensor& w, int64_t n, RowCache& c) {
    const int64_t nsb = in.K / kQKBlock;
    c.codes.resize(static_cast<size_t>(4 * nsb * kQKBlock));
    c.sm.resize(static_cast<size_t>(4 * nsb * 16));
    const int64_t stride = row_bytes(w.dtype, w.shape[1]);
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
  static void cached_tile(const GemmInput& in, const Tensor& w, const RowCache& c, int64_t n, int64_t t,
                          float out[4][4]) {
    body<R, TT, /*kCached=*/true>(in, w, n, t, out, &c);
  }
};

// Q4_KR (dtype.h): Q4_K's codes regrouped so that each vpdpbusd lane sums columns of one 32-column sub-block. A
// super-block's 8 integer sub-block sums then build up in the 8 lanes of one 256-bit register, and the float work
// (convert, scale, minimum term) runs once per super-block where Q4KKern's runs once per 64-column chunk. Per lane
// i (sub-block i) of each super-block:
//   y_i += float(sum(a * code) * scale_i) * (d * da_i),  then  y_i -= (dmin * min_i) * (da_i * sum(a))
// (one rounding: fnmadd). The integer sum times the 6-bit scale is exact in int32 and in f32 (< 2^22), and
// dmin * min_i is exact (an f16 times a 6-bit integer). Even super-blocks accumulate in lanes 0-7 and odd ones in
// lanes 8-15 of the prefill tile's 512-bit accumulators, decode's two 256-bit ones likewise, each reduced once by
// hsum: the same bits for every tile and token count. The activations come in the same order as Q4_0R's
// (GemmInput::q4r), whose 512-column groups are two super-blocks here.
struct Q4KRKern {
  static constexpr int kDecodeRows = 1;  // decode runs decode_rows

  // A super-block's 8 scales (int32), d in every lane, and dmin * min_i. Q4_KR's scale bytes (dtype.h) unpack
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
  // spread them over the lanes: ~16 instructions against ~30 for two factors calls and the three inserts joining
  // their halves, which were a third of decode's loop. Zen 5, one core from L2 (`decode_ceiling --cpu N q4_kr`,
  // alternated with the build before, three times on each vCPU): 55 -> 61 GB/s.
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
  // (one 512-column activation group) per step. The loop is bound by its instruction count, so: the high nibbles
  // enter vpdpbusd in place (raw & 0xf0, 16 x the code), their sum shifted back once (exact: a multiple of 16), which
  // saves a shift per 32 bytes; the low and high sums run as two chains (integer sums, exact in any order).
  static void decode_rows(const GemmInput& in, const Tensor& w, int64_t n0, int64_t n1, const GemmOut& o) {
    const int64_t nsb = in.K / kQKBlock;
    const int64_t stride = row_bytes(w.dtype, w.shape[1]);
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
    // each). Zen 5, one core, weights in L2 (`decode_ceiling q4_kr`, 3 alternations): 39 -> 49 GB/s; tl16 q4_k tg64
    // (`bench/ab_decode.py`, alternating builds): in the fast memory state (reads ~78 GB/s, 5 rounds) 113.8 -> 141.0
    // t/s, 68% -> 84% of the read, the kernel's compute showing; at ~60 GB/s (13 rounds) 76-79% -> 76-81%. Not
    // measured on the Zen 4, whose 512-bit instructions run as two 256-bit halves.
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
      // covers them all): GCC otherwise kept one pointer each and a counter, six increments per group (L2 as above,
      // 61 -> 63 GB/s). The odd last super-block, if any, takes the next group's first half at the same index.
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

  // Prefill: each 4-row tile's codes, unpacked to one byte each in the order of the 512-bit registers (per pair of
  // super-blocks and chunk j, the low nibbles of both, then the high nibbles), and its factors, formed once into L1
  // for every token tile. A missing odd super-block (K an odd number of them) is zero codes and factors, which add
  // exact zeros to lanes 8-15 (accumulators that start at +0 never hold -0).
  struct RowCache {
    AlignedVector<uint8_t> codes;  // (R, K / 512 rounded up, 4 chunks, 2 nibble halves, 64)
    AlignedVector<int32_t> sc;     // (R, K / 512 rounded up, 16): the scales
    AlignedVector<float> f;        // (R, K / 512 rounded up, 2, 16): d, then dmin * min
  };
  template <int R>
  static void fill(const GemmInput& in, const Tensor& w, int64_t n, RowCache& c) {
    const int64_t nsb = in.K / kQKBlock, NP = in.Kp / kQ4RGroup;
    c.codes.resize(static_cast<size_t>(4 * NP * kQ4RGroup));
    c.sc.resize(static_cast<size_t>(4 * NP * 16));
    c.f.resize(static_cast<size_t>(4 * NP * 32));
    const int64_t stride = row_bytes(w.dtype, w.shape[1]);
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
  static void cached_tile(const GemmInput& in, const Tensor& w, const RowCache& c, int64_t n, int64_t t,
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

// Q6_K: lane value = d * scale_s * sum(a * (code - 32)) over 4 columns of 16-column sub-block s, times the
// activation block scale. The -32 enters as -32 * sum(a) per lane before the products, so sums stay exact.
struct Q6KKern : KQuantKern<Q6KKern> {
  static constexpr int kDecodeRows = 1;  // decode runs decode_rows
  // Chunk cc (0, 1) of half h: 64 six-bit codes from 64 bytes of low nibbles and 32 bytes of high bit pairs.
  // Columns 0-31 of the half take ql[l] low nibbles and qh[l] bits 0-1, 32-63 ql[l + 32] and bits 2-3; chunk 1
  // (columns 64-127) the high nibbles and bits 4-5, 6-7.
  static __m512i codes(const BlockQ6_K& b, int h, int cc) {
    const __m512i x = _mm512_loadu_si512(b.ql + 64 * h);
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * h));
    const __m512i hh = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 2), 1);
    const __m512i low4 = _mm512_set1_epi8(0x0f), bits45 = _mm512_set1_epi8(0x30);
    if (cc == 0) {
      return _mm512_or_si512(_mm512_and_si512(x, low4), _mm512_and_si512(_mm512_slli_epi16(hh, 4), bits45));
    }
    return _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(x, 4), low4), _mm512_and_si512(hh, bits45));
  }
  // Prefill: a row tile's codes are assembled once into L1 for every token tile (the same bytes `codes` gives, so
  // the same bits as decode).
  struct RowCache {
    AlignedVector<uint8_t> codes;  // (4, K) six-bit codes in column order
  };
  template <int R>
  static void fill(const GemmInput& in, const Tensor& w, int64_t n, RowCache& c) {
    c.codes.resize(static_cast<size_t>(4 * in.K));
    const int64_t stride = row_bytes(w.dtype, w.shape[1]);
    for (int r = 0; r < R; ++r) {
      const auto* blk = reinterpret_cast<const BlockQ6_K*>(w.row_ptr(n) + r * stride);
      for (int64_t sb = 0; sb < in.K / kQKBlock; ++sb) {
        for (int ch = 0; ch < 4; ++ch) {
          _mm512_storeu_si512(c.codes.data() + r * in.K + sb * kQKBlock + 64 * ch, codes(blk[sb], ch / 2, ch % 2));
        }
      }
    }
  }
  template <int R, int TT>
  static void cached_tile(const GemmInput& in, const Tensor& w, const RowCache& c, int64_t n, int64_t t,
                          float out[4][4]) {
    body<R, TT, /*kCached=*/true>(in, w, n, t, out, c.codes.data());
  }
  // Decode (one token), rows [n0, n1) one at a time: body<1, 1>'s arithmetic in 256-bit halves (lanes
  // 0-7 and 8-15 of its register: columns 0-31 and 32-63 of each 64-column chunk), so the same integer sums,
  // products and sums per lane: the same bits. The codes are assembled per half without inserts, the sub-block
  // scales picked with in-half permutes, the activation offsets (-32 x each lane's sum) formed once per call, and
  // each thread reads one sequential stream; on Zen 4, which runs 512-bit instructions as two halves, the
  // four-row 512-bit tile was bound by its instructions.
  static void decode_rows(const GemmInput& in, const Tensor& w, int64_t n0, int64_t n1, const GemmOut& o) {
    const int64_t nsb = in.K / kQKBlock;
    const int64_t stride = row_bytes(w.dtype, w.shape[1]);
    const int64_t ahead = prefetch_distance(stride, PrefetchTo::L2);
    const int32_t* neg_off = scaled_lane_offsets(in, /*shift=*/5);  // -32 x each lane's sum, as body forms it
    const int8_t* a = in.q.data();
    const float* lane_d = in.lane_d.data();
    const __m256i low4 = _mm256_set1_epi8(0x0f), bits45 = _mm256_set1_epi8(0x30);
    const uint8_t* row = w.row_ptr(n0);
    for (int64_t n = n0; n < n1; ++n, row += stride) {
      const auto* blk = reinterpret_cast<const BlockQ6_K*>(row);
      __m256 y[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
      for (int64_t sb = 0; sb < nsb; ++sb) {
        const BlockQ6_K& b = blk[sb];
        prefetch_block<1, PrefetchTo::L2>(&b, sizeof(BlockQ6_K), ahead);
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(b.d));
        const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
        const __m256 dsc[2] = {_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc8))),  // sub-blocks 0-7
                               _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc8, 8))))};
        for (int c = 0; c < 4; ++c) {  // 64-column chunk c: quarter c % 2 of half c / 2 (see codes())
          const int hf = c / 2;
          const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * hf));
          for (int g = 0; g < 2; ++g) {  // columns 32g .. 32g + 31 of the chunk
            const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * hf + 32 * g));
            const __m256i hh = g == 0 ? qh : _mm256_srli_epi16(qh, 2);
            const __m256i q =
                c % 2 == 0
                    ? _mm256_or_si256(_mm256_and_si256(x, low4), _mm256_and_si256(_mm256_slli_epi16(hh, 4), bits45))
                    : _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(x, 4), low4), _mm256_and_si256(hh, bits45));
            const int64_t k = sb * kQKBlock + 64 * c + 32 * g;
            const int j = (4 * c + 2 * g) % 8;  // the half's first sub-block within dsc[(4c + 2g) / 8]
            const __m256 sc = _mm256_permutevar8x32_ps(dsc[(4 * c + 2 * g) / 8],
                                                       _mm256_setr_epi32(j, j, j, j, j + 1, j + 1, j + 1, j + 1));
            const __m256i is =
                _mm256_dpbusd_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(neg_off + k / 4)), q,
                                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + k)));
            y[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(sc, _mm256_loadu_ps(lane_d + k / 4)), y[g]);
          }
        }
      }
      float res[4][4];
      res[0][0] = hsum(y[0], y[1]);
      store_tile<1>(o, 0, 1, n, res);
    }
  }
  // kCached: codes read from a RowCache's rows (cached) instead of assembled from the blocks.
  template <int R, int TT, bool kCached = false>
  static void body(const GemmInput& in, const Tensor& w, int64_t n, int64_t t, float out[4][4],
                   const uint8_t* cached = nullptr) {
    const int64_t Kp = in.Kp;
    const int64_t stride = row_bytes(w.dtype, w.shape[1]);
    const uint8_t* w0 = w.row_ptr(n);
    const int64_t ahead = prefetch_distance(R * stride);
    const __m512i quarter = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);  // sub-block of a lane
    __m512 acc[R][TT];
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) acc[r][j] = _mm512_setzero_ps();
    }
    const int8_t* a = in.q.data() + t * Kp;
    for (int64_t sb = 0; sb < in.K / kQKBlock; ++sb) {
      __m512 dsc[R];  // d * the 16 sub-block scales
      for (int r = 0; r < R; ++r) {
        const auto* blk = reinterpret_cast<const BlockQ6_K*>(w0 + r * stride) + sb;
        prefetch_block<TT>(blk, sizeof(BlockQ6_K), ahead);
        dsc[r] = _mm512_mul_ps(
            _mm512_set1_ps(_cvtsh_ss(blk->d)),
            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->scales)))));
      }
      for (int c = 0; c < 4; ++c) {
        const int64_t k = sb * kQKBlock + 64 * c;
        __m512i av[TT], neg[TT];
        __m512 da[TT];
        for (int j = 0; j < TT; ++j) {
          av[j] = _mm512_loadu_si512(a + j * Kp + k);
          da[j] = lane_scales(in, t + j, k);
          neg[j] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(lane_sums(av[j]), 5));
        }
        const __m512i idx = _mm512_add_epi32(quarter, _mm512_set1_epi32(4 * c));
        for (int r = 0; r < R; ++r) {
          __m512i q;
          if constexpr (kCached) {
            q = _mm512_loadu_si512(cached + r * in.K + k);
          } else {
            q = codes(*(reinterpret_cast<const BlockQ6_K*>(w0 + r * stride) + sb), c / 2, c % 2);
          }
          const __m512 sc = _mm512_permutexvar_ps(idx, dsc[r]);
          for (int j = 0; j < TT; ++j) {
            const __m512i is = _mm512_dpbusd_epi32(neg[j], q, av[j]);
            acc[r][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(sc, da[j]), acc[r][j]);
          }
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) out[r][j] = hsum(acc[r][j]);
    }
  }
};

// Q6_KR (dtype.h): Q6_K's codes regrouped so that each vpdpbusd lane sums columns of one 16-column sub-block: a
// super-block's 16 integer sub-block sums build up in the 16 lanes of two 256-bit registers (decode) or one 512-bit
// one (prefill), and the float work runs once per super-block where Q6KKern's runs once per 32 columns. Per lane s
// (sub-block s) of each super-block:
//   y_s += float((sum(a * code) - 32 * sum(a)) * scale_s) * (d * da_s)
// The integer sum times the 8-bit scale is exact in int32 and in f32 (|.| < 2^23). Decode's two registers are the
// 512-bit accumulator's halves, reduced once by hsum: the same bits for every tile and token count.
struct Q6KRKern {
  static constexpr int kDecodeRows = 1;  // decode runs decode_rows

  // The 6-bit codes of steps 0-3 of half h (the 8 sub-blocks 8h..8h+7): low 4 bits from ql's nibbles, top 2 from
  // qh's bit pairs (dtype.h), each a byte of 0..63.
  static void codes(const BlockQ6_KR& b, int h, __m256i out[4]) {
    const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h));
    const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h + 32));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * h));
    const __m256i low4 = _mm256_set1_epi8(0x0f), bits45 = _mm256_set1_epi8(0x30);
    // (A & 0x0f) | (B & 0x30): A the nibble's byte, B the bit pair moved to bits 4-5 (shifts cross bytes; the
    // masks drop what crossed).
    auto join = [&](__m256i nib, __m256i pair) {
      return _mm256_ternarylogic_epi32(_mm256_and_si256(nib, low4), pair, bits45, 0xf8);
    };
    out[0] = join(ql0, _mm256_slli_epi16(qh, 4));
    out[1] = join(ql1, _mm256_slli_epi16(qh, 2));
    out[2] = join(_mm256_srli_epi16(ql0, 4), qh);
    out[3] = join(_mm256_srli_epi16(ql1, 4), _mm256_srli_epi16(qh, 2));
  }

  // Decode (one token), rows [n0, n1) one at a time, each thread's weights one sequential stream. Tried and
  // dropped (session 24): both halves of a super-block in one 512-bit pass (lanes 0-7 / 8-15, ~40 instructions per
  // super-block against ~64, the same bits) ran 43 -> 68-80 GB/s from L2 on one Zen 5 core, yet tl16 q6_k tg128
  // (`bench/ab_decode.py`, 42 rounds in four series) was slower in 32 of 42 rounds, median x0.95; loading qh as two
  // 32-byte halves instead of one line-crossing 64-byte load changed nothing (x0.945, 10 rounds). Why the leaner
  // loop streams slower from DRAM is open.
  static void decode_rows(const GemmInput& in, const Tensor& w, int64_t n0, int64_t n1, const GemmOut& o) {
    const int64_t nsb = in.K / kQKBlock;
    const int64_t stride = row_bytes(w.dtype, w.shape[1]);
    const int64_t ahead = kStreamAheadBlocks;
    const uint8_t* row = w.row_ptr(n0);
    prefetch_span(in.q6r.data(), in.K);
    prefetch_span(in.q6r_off.data(), in.K / 16 * 4);
    prefetch_span(in.q6r_d.data(), in.K / 16 * 4);
    for (int64_t n = n0; n < n1; ++n, row += stride) {
      const auto* blk = reinterpret_cast<const BlockQ6_KR*>(row);
      const int8_t* a = in.q6r.data();
      const int32_t* off = in.q6r_off.data();
      const float* lane_d = in.q6r_d.data();
      __m256 y[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};  // sub-blocks 0-7 and 8-15 of each super-block
      for (int64_t sb = 0; sb < nsb; ++sb, a += kQKBlock, off += 16, lane_d += 16) {
        const BlockQ6_KR& b = blk[sb];
        prefetch_block<1, PrefetchTo::Stream>(&b, sizeof(BlockQ6_KR), ahead);
        const __m256 d = _mm256_cvtph_ps(_mm_set1_epi16(static_cast<int16_t>(b.d)));
        for (int h = 0; h < 2; ++h) {
          __m256i q[4];
          codes(b, h, q);
          __m256i is = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(off + 8 * h));
          for (int k = 0; k < 4; ++k) {
            is = _mm256_dpbusd_epi32(is, q[k],
                                     _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 64 * k + 32 * h)));
          }
          const __m256i sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.scales + 8 * h)));
          y[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_mullo_epi32(is, sc)),
                                 _mm256_mul_ps(d, _mm256_loadu_ps(lane_d + 8 * h)), y[h]);
        }
      }
      float res[4][4];
      res[0][0] = hsum(y[0], y[1]);
      store_tile<1>(o, 0, 1, n, res);
    }
  }

  // Prefill: each 4-row tile's codes (one byte each, per super-block and step the two halves side by side), scales
  // and d, formed once into L1 for every token tile.
  struct RowCache {
    AlignedVector<uint8_t> codes;  // (R, K / 256, 4 steps, 64)
    AlignedVector<int32_t> sc;     // (R, K / 256, 16)
    AlignedVector<float> d;        // (R, K / 256, 16): d in every lane
  };
  template <int R>
  static void fill(const GemmInput& in, const Tensor& w, int64_t n, RowCache& c) {
    const int64_t nsb = in.K / kQKBlock;
    c.codes.resize(static_cast<size_t>(4 * nsb * kQKBlock));
    c.sc.resize(static_cast<size_t>(4 * nsb * 16));
    c.d.resize(static_cast<size_t>(4 * nsb * 16));
    const int64_t stride = row_bytes(w.dtype, w.shape[1]);
    for (int r = 0; r < R; ++r) {
      const auto* blk = reinterpret_cast<const BlockQ6_KR*>(w.row_ptr(n) + r * stride);
      for (int64_t sb = 0; sb < nsb; ++sb) {
        const int64_t i = r * nsb + sb;
        for (int h = 0; h < 2; ++h) {
          __m256i q[4];
          codes(blk[sb], h, q);
          for (int k = 0; k < 4; ++k) {
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(c.codes.data() + i * kQKBlock + 64 * k + 32 * h), q[k]);
          }
        }
        _mm512_storeu_si512(c.sc.data() + i * 16,
                            _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[sb].scales))));
        _mm512_storeu_ps(c.d.data() + i * 16, _mm512_cvtph_ps(_mm256_set1_epi16(static_cast<int16_t>(blk[sb].d))));
      }
    }
  }
  template <int R, int TT>
  static void cached_tile(const GemmInput& in, const Tensor& w, const RowCache& c, int64_t n, int64_t t,
                          float out[4][4]) {
    (void)w;
    (void)n;
    const int64_t K = in.K, nsb = K / kQKBlock;
    __m512 acc[R][TT];
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) acc[r][j] = _mm512_setzero_ps();
    }
    for (int64_t sb = 0; sb < nsb; ++sb) {
      for (int r = 0; r < R; ++r) {
        const int64_t i = r * nsb + sb;
        __m512i q[4];
        for (int k = 0; k < 4; ++k) q[k] = _mm512_loadu_si512(c.codes.data() + i * kQKBlock + 64 * k);
        const __m512i sc = _mm512_loadu_si512(c.sc.data() + i * 16);
        const __m512 d = _mm512_loadu_ps(c.d.data() + i * 16);
        for (int j = 0; j < TT; ++j) {
          const int8_t* a = in.q6r.data() + (t + j) * K + sb * kQKBlock;
          __m512i is = _mm512_loadu_si512(in.q6r_off.data() + (t + j) * (K / 16) + 16 * sb);
          for (int k = 0; k < 4; ++k) is = _mm512_dpbusd_epi32(is, q[k], _mm512_loadu_si512(a + 64 * k));
          acc[r][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_mullo_epi32(is, sc)),
                                      _mm512_mul_ps(d, _mm512_loadu_ps(in.q6r_d.data() + (t + j) * (K / 16) + 16 * sb)),
                                      acc[r][j]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) out[r][j] = hsum(acc[r][j]);
    }
  }
};

}  // namespace

void gemm_rows_avx512(const GemmInput& in, const Tensor& w, int64_t n0, int64_t n1, const GemmOut& out) {
  if (w.dtype == DType::Q4_K) return drive_tiles<Q4KKern>(in, w, n0, n1, out);
  if (w.dtype == DType::Q6_K) return drive_tiles<Q6KKern>(in, w, n0, n1, out);
  if (w.dtype == DType::Q4_0R) return drive_tiles<Q40RKern>(in, w, n0, n1, out);
  if (w.dtype == DType::Q8_0R) return drive_tiles<Q80RKern>(in, w, n0, n1, out);
  if (w.dtype == DType::Q4_KR) return drive_tiles<Q4KRKern>(in, w, n0, n1, out);
  if (w.dtype == DType::Q6_KR) return drive_tiles<Q6KRKern>(in, w, n0, n1, out);
  dispatch_formats<FloatKern<DType::F32>, FloatKern<DType::F16>, Bf16Kern, I8Kern, I4Kern, Q80Kern, Q40Kern>(in, w, n0,
                                                                                                             n1, out);
}

}  // namespace ascent::kernels

#pragma GCC diagnostic pop
#pragma GCC pop_options
