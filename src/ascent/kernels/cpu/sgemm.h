// General f32 matrix products for training, where both operands change every step (activations and the weights
// being trained), so no operand is repacked at load: C (M, N) = op(A) op(B) + beta * C, row-major, op(X) = X or X^T.
// A linear layer's three products are one call each:
//   forward   y (T, N)  = x (T, K) @ W (N, K)^T      sgemm(false, true,  T, N, K, x, K, W, K, 0, y, N)
//   input     dx (T, K) = dy (T, N) @ W (N, K)       sgemm(false, false, T, K, N, dy, N, W, K, 0, dx, K)
//   weight    dW (N, K) += dy (T, N)^T @ x (T, K)    sgemm(true, false,  N, K, T, dy, N, x, K, 1, dW, K)

// Summation order, the same in every variant (ref, AVX2, AVX-512), for any thread count and any M or N: each
// element starts as s = beta * c (0 when beta = 0) and takes s = fma(a_ik, b_kj, s) for k = 0, 1, ..., K - 1, one
// rounding per step. So every variant gives the same bits, and row i of C does not depend on the other rows in the
// call: a sequence's logits do not change with the batch it runs in, and an exact resume reproduces a run.
#pragma once

#include <cstdint>

namespace ascent::kernels {

struct GemmOperand {
  const float* data;
  int64_t ld;       // elements between consecutive rows of the stored matrix
  bool transposed;  // op(X) = X^T: the stored matrix is (K, M) for A, (N, K) for B
};

// C (M, N) = op(A) (M, K) @ op(B) (K, N) + beta * C; beta = 0 ignores C's previous contents (NaN included).
void sgemm(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, float beta, float* c, int64_t ldc);
// The plain loop in the order above; one thread.
void sgemm_ref(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, float beta, float* c, int64_t ldc);

// sgemm with A and B rounded to bf16 (to nearest even, as f32_to_bf16) and their products summed in f32: mixed
// precision training's matmuls. Under AVX-512 BF16, vdpbf16ps adds two products at a time: s = beta * c, then for
// each pair (k, k + 1) in order one vdpbf16ps step (bf16 denormal inputs count as zero there). Elsewhere the
// rounded operands run sgemm's f32 order, each product exact. Either way row i does not depend on M or threads.
void sgemm_bf16(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, float beta, float* c, int64_t ldc);

// sgemm with A and B rounded to fp16 (to nearest even; beyond fp16's range to infinity), their products summed in
// f32 in sgemm's order, each product exact. It is an fp16 matmul with f32 accumulation: pure fp16 training (O3) runs
// its matmuls on fp16 weights and activations. The SIMD variants round the operands as they pack them, so the f32
// master weights are never copied. Every variant gives the same bits (a NaN's payload aside).
void sgemm_f16(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, float beta, float* c, int64_t ldc);

// The variants sgemm dispatches to by active_isa() (isa.h); same contract.
void sgemm_avx2(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, float beta, float* c, int64_t ldc);
void sgemm_avx512(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, float beta, float* c, int64_t ldc);
void sgemm_f16_avx2(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, float beta, float* c, int64_t ldc);
void sgemm_f16_avx512(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, float beta, float* c, int64_t ldc);
void sgemm_bf16_avx512(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, float beta, float* c,
                       int64_t ldc);

}  // namespace ascent::kernels
