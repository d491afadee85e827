// The matmul engine behind matmul_forward and its fused variants: y (T, N) = x (T, K) @ w (N, K)^T for every weight
// format, as GEMV (T = 1, decode) and GEMM (prefill) in reference, AVX2 and AVX-512 (VNNI, BF16) variants.
//
// Batch invariance: a row's result depends only on that row of x. Every variant computes each (token, output) with
// the same instruction sequence whatever the tile, token count or thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "ascent/base/aligned.h"
#include "ascent/kernels/cpu/isa.h"
#include "ascent/kernels/cpu/packed_formats.h"

namespace ascent::kernels {

// What each weight format computes (act_kind: the activations it consumes). The reference defines it; faster
// variants match it to rounding.
//   f32, f16   f32 activations times the weights, widened exactly.
//   bf16       activations rounded to bf16 (vdpbf16ps), products summed in f32.
//   i8, i4     activations quantized to int8, one scale per token (after input_scale); integer dot products.
//              i8 is scaled per row, i4 per group: each group's exact sum times its scale, added in ascending
//              group order, so every variant gives the reference's bits.
//   q8_0, q4_0 activations quantized to int8 per 32-element block (as llama.cpp); integer dot per block.
//   q4_k, q6_k the same activations (llama.cpp's Q8_K has one scale per 256). Integer dot per sub-block: 32
//              elements for q4_k, minus dmin * min * the block's activation sum; 16 for q6_k. Times the
//              super-block's f16 scale and the sub-block's integer scale.
//   q4_0r, q8_0r, q4_kr, q6_kr: repacked for the SIMD kernels (packed_formats.h); same arithmetic, same codes.
enum class ActKind { F32, BF16, Int8PerToken, Int8PerBlock };
ActKind act_kind(WeightFormat weight);

// A matmul's activations in the form its weight format consumes. Built once per matmul input and shared by every
// weight that reads the same x with the same input_scale (Q/K/V, gate/up).
struct GemmInput {
  const float* x = nullptr;  // (T, K)
  int64_t T = 0, K = 0;
  ActKind kind = ActKind::F32;
  const float* input_scale = nullptr;  // the weight's input_scale this was built with (int kinds)
  int64_t Kp = 0;                      // padded row length of q and xb
  AlignedVector<int8_t> q;             // (T, Kp) int8, zero past K
  AlignedVector<float> d;              // (T,) per token or (T, Kp / 32) per block
  AlignedVector<int32_t> qsum;         // (T,) sum of each token's q (per-token kind)
  // Per-token kind prepared for an I4 weight (sum32_ready; I4's offset terms): the sum of each 32 columns of q.
  bool sum32_ready = false;
  AlignedVector<int32_t> sum32;  // (T, Kp / 32)
  // Decode only (T == 1, per-block kind) and prepared for a Q8_0 or Q6_K weight (lanes_ready): per-token work the
  // AVX-512 Q8_0 and Q6_K decode loops would otherwise redo for every row. lane_sum[i] = q[4i] + ... + q[4i + 3],
  // the activations one vpdpbusd lane multiplies; lane_d[i] = d[4i / 32], that lane's block scale.
  bool lanes_ready = false;
  AlignedVector<int32_t> lane_sum;  // (Kp / 4,)
  AlignedVector<float> lane_d;      // (Kp / 4,)
  // Per-block kind prepared for a Q4_K or Q6_K weight (kq_ready), every T; only the Q4_K kernels read them. For
  // super-block s of token t, 16 floats: lane 2j is the scale d of its 32-column block j, lane 2j + 1 is d times
  // that block's activation sum. So the AVX-512 Q4_K kernel gets its block scales and its per-super-block minimum
  // term in one vector.
  AlignedVector<float> kq_dax;  // (T, K / 256, 16)
  // The same, q with each 128 columns reordered 0-31, 64-95, 32-63, 96-127: the pairing of the AVX-512 Q4_K
  // kernel, which takes the low nibbles of two 32-byte chunks in one register and the high nibbles in another.
  AlignedVector<int8_t> kq_pairs;  // (T, K)
  bool kq_ready = false;
  // Per-block kind prepared for a Q4_0 weight (q4_ready), every T; built only where the AVX-512 kernel, its only
  // reader, runs. q in that kernel's order: one vpdpbusd lane sums 8 columns of one block, its quarter l's columns
  // 4l..4l+3 and 16+4l..16+4l+3. Those are the low and high nibbles of the same 4 packed bytes, so the kernel never
  // moves nibbles across lanes. Per 128 columns (4 blocks, 16 lanes): columns 0-15 of each block, then columns
  // 16-31 of each. Per lane: minus 8 x the sum of its 8 activations (the codes' offset), and its block's scale.
  // Zero past K, up to Kq = K rounded up to 128.
  bool q4_ready = false;
  AlignedVector<int8_t> q4_quads;  // (T, Kq)
  AlignedVector<int32_t> q4_off;   // (T, Kq / 8)
  AlignedVector<float> q4_d;       // (T, Kq / 8)
  // Per-block kind prepared for a Q4_0R, Q4_KR or Q8_0R weight (q4r_ready), every T; built only where a repacked kernel
  // runs (repacked_kernel_runs). q in the order of those formats' codes (packed_formats.h): vpdpbusd lane i of chunk j
  // of half h multiplies bytes 4j..4j+3 of block (Q4_KR: sub-block) i. Per 512 columns (16 blocks; Q4_KR: 2
  // super-blocks), for each chunk j: the low-nibble columns (4j..4j+3 of each block) of half 0, then half 1, then the
  // high-nibble columns (16+4j..16+4j+3) of both halves. Kp is a whole number of 512 columns. Per block: Q4_0R's offset
  // term, minus 8 x the sum of its 32 activations, and Q4_KR's minimum term's activation side, its scale d times that
  // sum. Q8_0R's codes lie in this same order (its offset term, minus 128 x the sum, is 16 x q4r_off).
  bool q4r_ready = false;
  AlignedVector<int8_t> q4r;       // (T, Kp)
  AlignedVector<int32_t> q4r_off;  // (T, Kp / 32)
  AlignedVector<float> q4r_dsa;    // (T, Kp / 32)
  // Per-block kind prepared for a Q6_KR weight (q6r_ready), every T; built only where a repacked kernel runs. q in the
  // order of Q6_KR's codes (packed_formats.h): vpdpbusd lane i of half h multiplies columns of sub-block 8h + i. Per
  // super-block, for each step k (0-3): 32 bytes for half 0 (lane i: columns 16i + 4k .. 16i + 4k + 3), then 32 for
  // half 1 (columns 128 + ...). Per 16-column sub-block: minus 32 x the sum of its activations (the codes' offset), and
  // its 32-column block's scale.
  bool q6r_ready = false;
  AlignedVector<int8_t> q6r;       // (T, K)
  AlignedVector<int32_t> q6r_off;  // (T, K / 16)
  AlignedVector<float> q6r_d;      // (T, K / 16)
  AlignedVector<uint16_t> xb;      // (T, Kp) bf16, zero past K
  AlignedVector<float> xf;         // (T, Kp) f32, zero past K (f32 and f16 weights)
};

// Prepares x for weight w (throws naming the weight shape when K differs).
void prepare_gemm_input(const float* x, int64_t T, const MatrixView& w, GemmInput& in);
// True when `in` already suits w (same kind and input_scale), so one GemmInput serves several weights.
bool gemm_input_fits(const GemmInput& in, const MatrixView& w);

// Where results go: with c = n - n_base, y[t * ldy + c] = residual[t * ldy + c] + (dot + bias[n]); bias and
// residual may be null, y may alias residual. n_base lets a caller collect a slice of columns in a small buffer.
struct GemmOut {
  float* y = nullptr;
  int64_t ldy = 0;
  const float* bias = nullptr;
  const float* residual = nullptr;
  int64_t n_base = 0;
};

// Computes output columns [n0, n1) of x @ w^T for every token, with the active ISA.
void gemm_rows(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& out);

// The quantized form of a span holding a NaN or an infinity, or whose scaled values overflow: codes 0, sum 0 (where
// given), and d = NaN, returned. Every output it feeds is then NaN, as the same matmul in floats gives. Every ISA's
// quantizers give it so (gemm_input.cc).
float poison_span(int64_t n, int8_t* q, int32_t* sum);

// Quantizes n values (times s where given) to int8 with d = amax / 127, rounding to nearest even; returns d and,
// with sum, the codes' sum. The AVX-512 and AVX2 variants (gemm_input_avx512.cc, gemm_input_avx2.cc) give the scalar
// code's bits (gemm_input.cc) for finite values; so do the block functions below (the q4r ones only move bytes). A
// span whose values (times s) hold a NaN or an infinity is not theirs to quantize: they return NaN at once, codes
// and sum unwritten. prepare_gemm_input then gives it d = NaN and zero codes in every ISA, as the scalar code does.
float quantize_span_avx512(const float* x, const float* s, int64_t n, int8_t* q, int32_t* sum);
float quantize_span_avx2(const float* x, const float* s, int64_t n, int8_t* q, int32_t* sum);

// quantize_span_avx512 over 16 (AVX2: 8) consecutive 32-value blocks of x (no s) at once, so that their reductions
// and divisions share vectors. Block i's codes go to q + 32 i, its d to d[i] and its codes' sum to sum[i], the same
// bits as a call per block. A block holding a NaN or an infinity gets the scalar code's poisoned result: zero codes,
// sum 0, d = NaN. gemm_input.cc's quantize_blocks runs them over a row, its last blocks padded to a whole group.
void quantize_blocks32x16_avx512(const float* x, int8_t* q, float* d, int32_t* sum);
void quantize_blocks32x8_avx2(const float* x, int8_t* q, float* d, int32_t* sum);

// The sums of nb consecutive blocks of 32 int8 codes at q (GemmInput::sum32), exact.
void code_sums32_avx512(const int8_t* q, int64_t nb, int32_t* out);
void code_sums32_avx2(const int8_t* q, int64_t nb, int32_t* out);

// GemmInput::q4r's codes for one token from its per-block quantized row q (Kp columns, a whole number of 512). Per
// 512 columns, 4-byte column group c of block i goes to lane i of chunk c % 4, half c / 4 (GemmInput's order). The
// AVX-512 variant moves them by 32-bit gathers, the AVX2 one by 8 x 8 transposes of 32-bit words: data movement only.
void q4r_codes_avx512(const int8_t* q, int64_t Kp, int8_t* out);
void q4r_codes_avx2(const int8_t* q, int64_t Kp, int8_t* out);

// The reference kernel, every format (gemm_ref.cc).
void gemm_rows_ref(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& out);
// A SIMD variant's kernel for one format: AVX-512 in gemm_<format>_avx512.cc, AVX2 in gemm_avx2.cc. gemm_rows finds
// them through one table per variant, built from ASCENT_WEIGHT_FORMATS.
template <Isa kIsa, WeightFormat kFormat>
void gemm_rows_simd(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& out);
#define ASCENT_DECLARE_GEMM_KERNELS(F)                                                                     \
  template <>                                                                                              \
  void gemm_rows_simd<Isa::Avx2, WeightFormat::F>(const GemmInput&, const MatrixView&, int64_t, int64_t,   \
                                                  const GemmOut&);                                         \
  template <>                                                                                              \
  void gemm_rows_simd<Isa::Avx512, WeightFormat::F>(const GemmInput&, const MatrixView&, int64_t, int64_t, \
                                                    const GemmOut&);
ASCENT_WEIGHT_FORMATS(ASCENT_DECLARE_GEMM_KERNELS)
#undef ASCENT_DECLARE_GEMM_KERNELS

inline void store_out(const GemmOut& o, int64_t t, int64_t n, float dot) {
  const float v = dot + (o.bias != nullptr ? o.bias[n] : 0.0f);
  const int64_t i = t * o.ldy + (n - o.n_base);
  o.y[i] = o.residual != nullptr ? o.residual[i] + v : v;
}

}  // namespace ascent::kernels
