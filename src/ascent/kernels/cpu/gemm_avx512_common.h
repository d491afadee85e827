// Shared by the AVX-512 matmul kernels, one file per weight format (gemm_<format>_avx512.cc): this header turns on
// the AVX-512 target for the rest of the including file, and holds the instruction helpers and loops several formats
// use. Include it after every other header (standard headers compiled for the AVX-512 target could give other files
// AVX-512 copies of their inline functions), and end the file with simd_avx512_end.h.
//
// Unsigned-by-signed trick: vpdpbusd multiplies u8 by s8. I8/I4 weights are stored offset-binary (q + 128, q + 8)
// and activations are s8, so the offset comes out as 128 * sum(a) or 8 * sum(a), subtracted exactly in int32.
// GGUF Q8_0 weights are s8: they are flipped to offset-binary on the fly with one xor.
#include <immintrin.h>

#include <cstring>
#include <type_traits>
#include <vector>

#include "ascent/kernels/cpu/gemm.h"

#include "ascent/kernels/cpu/simd_avx512_begin.h"

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16,fma,f16c")

#include "ascent/kernels/cpu/simd_avx512.h"

#include "ascent/kernels/cpu/gemm_tiles.h"
#include "ascent/kernels/cpu/q4k_simd.h"

namespace ascent::kernels {
namespace {

// acc + u8 x s8 dot products (vpdpbusd) in inline assembly. With the intrinsic, GCC 12 copies every accumulator of
// the int8 tile to a fresh register on each loop iteration, 16 extra moves per 16 dot products, which slows int8
// prefill markedly. "vm" lets the signed operand come straight from memory. The other kernels' loops compile
// without the copies, and the assembly form is no faster there.
inline __m512i dpbusd(__m512i acc, __m512i u8, __m512i s8) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "vm"(s8));
  return acc;
}

// dpbusd against 4 signed bytes at s8 broadcast to every lane, as the instruction's own {1to16} memory operand.
// _mm512_set1_epi32 would cost a vpbroadcastd more: GCC 12 does not fold it into the asm operand. int4's decode
// loop takes two per 64 bytes of weights, six instructions instead of eight; that loop is bound by its instructions
// per byte when memory is fast.
inline __m512i dpbusd_bcast(__m512i acc, __m512i u8, const int32_t* s8) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u8), "m"(*s8));
  return acc;
}

// 32 bytes at lo in the low half of a 512-bit register, 32 at hi in the high half. Q4_0R's two 8-block halves of a
// chunk lie 128 bytes apart. Q8_0R's 544-byte groups put every other 64-byte code vector across two cache lines,
// where each 32-byte half stays within one.
inline __m512i join_halves(const void* lo, const void* hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(static_cast<const __m256i*>(lo))),
                            _mm256_loadu_si256(static_cast<const __m256i*>(hi)), 1);
}

// A 512-bit load GCC keeps in a register. Left to itself, GCC folds the load into every instruction that reads the
// value, so each byte is loaded twice. Examples: vpand zmm, zmm, [mem] and vpsrlw zmm, [mem], 4 on the same
// weights; a row pair's two vpdpbusd on the same activations.
inline __m512i load_reg512(const void* p) {
  __m512i v = _mm512_loadu_si512(p);
  asm("" : "+v"(v));
  return v;
}

// For a single token's decode loops: minus each lane's activation sum (GemmInput::lane_sum) times 2^shift, the
// exact offset term a kernel with codes stored as value + 2^shift adds to each lane's vpdpbusd sum. Formed once per
// call into a per-thread buffer (Kp / 4 values) instead of once per row.
inline const int32_t* scaled_lane_offsets(const GemmInput& in, int shift) {
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

// The prefill tile of the kernels whose codes lie in GemmInput::q4r's order. Q40RKern and Q4KRKern unpack theirs so
// into a RowCache; Q80RKern's weights hold them so. Per 512-column group g and row r: the 8 code registers at
// codes(r, g) (per chunk q, the low nibbles at 128 q, the high ones at 128 q + 64) against tokens t..t+TT-1. Each
// lane's integer sum starts at init(j, g); then acc = scale(acc, sums, r, j, g), the format's float step.
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
// at a time, so that each thread's rows are one contiguous run. Row pairs would share each activation load, but two
// interleaved streams defeat the hardware prefetchers: pairs ran slower from memory even with a software prefetch.
// Q4_0R prefetches its groups' lines as a decode stream (kStreamPrefetch). Q8_0R, twice the bytes for the same work,
// leaves them to the hardware prefetchers, which follow its run better (measured with bench/ab_decode.py).
// A whole group in one 512-bit register takes about 45 instructions, half as many as two 256-bit halves: headroom a
// core needs when memory is fast. Two chains suffice, since the loop is not bound by their latency.
template <int64_t kGroupBytes, int kShift, int kHighShift, bool kStreamPrefetch, class Codes>
void q4r_decode_rows(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& o, Codes codes) {
  const int64_t G = in.Kp / kQ4RGroup;
  const int8_t* acts = in.q4r.data();
  const int32_t* off = in.q4r_off.data();
  const float* da = in.d.data();
  // The row pointer stepped by a stride taken once: row_ptr's row_bytes is an out-of-line call, which per row makes
  // the compiler spill and reload the loop's registers around it.
  const int64_t stride = w.row_bytes();
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
      // One 512-bit register's lanes are the group's 16 blocks. Chunk j's two code vectors (codes(grp, j, c0, c1))
      // meet the activations in q4r_cached_tile's order: at 128 j the low halves of both 8-block halves, at
      // 128 j + 64 the high ones. The first chain starts at the blocks' offset terms (q4r_off << kShift). The second
      // holds its codes times 2^kHighShift and is shifted back once, exactly, at the end. Q4_0R masks its high
      // nibbles in place (kHighShift 4), one instruction fewer per 64 bytes; Q8_0R's codes lie as they are
      // (kHighShift 0). The two integer chains add up to the prefill tile's one. y += sums x (scale x activation
      // scale) is its float step on the same lanes in the same order, so decode gives the prefill tile's bits.
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

// GGUF K-quants against per-32-block int8 activations, one 64-column chunk (two activation blocks) per step. Each
// lane's vpdpbusd sum covers 4 columns of one sub-block, so the sub-block scales are applied lane-wise in f32. A
// chunk's lanes carry 2 (Q4_K, 32 columns each) or 4 (Q6_K, 16 each) scales, gathered with one permute from the
// super-block's scale vector.
// K is the format's kernel (Q4KKern, Q6KKern) with body<R, TT> for several tokens; a single token runs its
// decode_rows, which computes the same lanes in 256-bit halves.
template <class K>
struct KQuantKern {
  template <int R, int TT>
  static void tile(const GemmInput& in, const MatrixView& w, int64_t n, int64_t t, float out[4][4]) {
    K::template body<R, TT>(in, w, n, t, out);
  }
  // For token t's activations av at column k (a 64-column chunk): each lane's block scale, and each lane's sum of
  // its 4 activations. Lanes 0-7 take block k / 32, lanes 8-15 the next. Decode reads the same values from lane_d
  // and lane_sum.
  static __m512 lane_scales(const GemmInput& in, int64_t t, int64_t k) {
    const float* d = in.d.data() + t * (in.Kp / kQBlock) + k / kQBlock;
    return _mm512_insertf32x8(_mm512_set1_ps(d[0]), _mm256_set1_ps(d[1]), 1);
  }
  static __m512i lane_sums(__m512i av) { return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), av); }
};

}  // namespace
}  // namespace ascent::kernels
