// General f32 matrix products for training, where both operands change every step (activations and the weights
// being trained), so no operand is repacked at load: C (M, N) = op(A) op(B) + beta * C, row-major, op(X) = X or X^T.
// A linear layer's three products are one call each:
//   forward   y (T, N)  = x (T, K) @ W (N, K)^T      sgemm(false, true,  T, N, K, x, K, W, K, 0, y, N)
//   input     dx (T, K) = dy (T, N) @ W (N, K)       sgemm(false, false, T, K, N, dy, N, W, K, 0, dx, K)
//   weight    dW (N, K) += dy (T, N)^T @ x (T, K)    sgemm(true, false,  N, K, T, dy, N, x, K, 1, dW, K)
// Every element of C is summed over k in one fixed order whatever the thread count, so results are reproducible
// run to run (exact resume depends on it).
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
// The plain loop every variant must match to rounding; one thread.
void sgemm_ref(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, float beta, float* c, int64_t ldc);

}  // namespace ascent::kernels
