// Row loops dispatched by ISA (isa.h):
// - widening a stored row to f32 and rounding one to f16, every variant bitwise the reference's;
// - the SiLU / SwiGLU activations. The SIMD variants use a vector exp: within 2 ulp of the reference, and the same
//   bits wherever the same ISA runs them, fused or not;
// - GELU (tanh) forward and backward, and SwiGLU's backward (below);
// - one row of the LM head's cross-entropy: softmax, loss and dlogits in place (cross_entropy_row). The SIMD
//   variants take e^(z - max) in f32 with the vector exp and sum it in double, as the reference sums its double exps.
// - LayerNorm's row statistics and one row of its backward, sums in double as norm_cpu.cc's reference takes them;
//   every variant bitwise the reference's.
// And prefetch_span, a row's lines requested at once.

// GELU's SIMD variants take 0.5 (1 + tanh(u)) as 1 / (1 + e^-2u): no tanh, and none of the reference's cancellation
// in 1 + tanh(u) for negative x, so they lie nearer float64 than the reference does (within 13 ulp where |y| >= 1e-3;
// the reference, 435). An element's result depends only on its inputs and the ISA, so any split across threads gives
// the same bits.
#pragma once

#include <cstdint>
#include <utility>

#include "ascent/tensor/dtype.h"

namespace ascent::kernels {

void dequantize_row_avx2(DType t, const void* src, float* dst, int64_t n);
void narrow_row_f16_avx2(const float* x, int64_t n, uint16_t* y);
void silu_row_avx2(const float* x, int64_t n, float* y);
void swiglu_row_avx2(const float* gate, const float* up, int64_t n, float* y);
void silu_row_avx512(const float* x, int64_t n, float* y);
void swiglu_row_avx512(const float* gate, const float* up, int64_t n, float* y);
void gelu_tanh_row_avx2(const float* x, int64_t n, float* y);
void gelu_tanh_backward_row_avx2(const float* x, const float* dy, int64_t n, float* dx);
void swiglu_backward_row_avx2(const float* gate, const float* up, const float* dy, int64_t n, float* dgate, float* dup);
void gelu_tanh_row_avx512(const float* x, int64_t n, float* y);
void gelu_tanh_backward_row_avx512(const float* x, const float* dy, int64_t n, float* dx);
void swiglu_backward_row_avx512(const float* gate, const float* up, const float* dy, int64_t n, float* dgate,
                                float* dup);
double cross_entropy_row_avx2(float* z, int64_t V, int32_t target, float loss_scale, bool grad);
double cross_entropy_row_avx512(float* z, int64_t V, int32_t target, float loss_scale, bool grad);
std::pair<double, double> layer_norm_stats_avx512(const float* xr, int64_t C, float eps);
void layer_norm_backward_row_avx512(const float* xr, const float* dyr, const float* w, int64_t C, float eps,
                                    double* acc, float* dxr);

// Dispatching entry points used by the kernels.
void widen_row(DType t, const void* src, float* dst, int64_t n);
// y = x rounded to f16 (IEEE half bits) as f32_to_f16 rounds it, NaN included (an f16 KV cache's stores).
void narrow_row_f16(const float* x, int64_t n, uint16_t* y);
// y = x / (1 + e^-x)
void silu_row(const float* x, int64_t n, float* y);
// y = silu(gate) * up
void swiglu_row(const float* gate, const float* up, int64_t n, float* y);
// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
void gelu_tanh_row(const float* x, int64_t n, float* y);
// dx = dy * gelu_tanh'(x); dx may alias dy.
void gelu_tanh_backward_row(const float* x, const float* dy, int64_t n, float* dx);
// swiglu_row's gradients: dgate = dy * up * silu'(gate), dup = dy * silu(gate). Either may alias dy.
void swiglu_backward_row(const float* gate, const float* up, const float* dy, int64_t n, float* dgate, float* dup);
// The loss -log softmax(z)[target] of one row of logits z (V), target in [0, V); with grad, z is replaced by
// d(loss_scale * loss) / dz = loss_scale * (softmax(z) - onehot(target)).
double cross_entropy_row(float* z, int64_t V, int32_t target, float loss_scale, bool grad);

// Every cache line of the `bytes` at p requested at once into L1, for data another core just wrote. Examples: the
// caller's quantized activations in a decode matmul, or a matmul's outputs before the norm or SwiGLU that reads
// them. Where the two cores sit on different dies, a loop over them would otherwise meet those misses one after
// another. Lines already in L1 cost a cycle each.
inline void prefetch_span(const void* p, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(static_cast<const char*>(p) + o, /*rw=*/0, /*locality=*/3);
}

}  // namespace ascent::kernels
