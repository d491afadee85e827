#include "ascent/kernels/cpu/row_ops.h"

#include <algorithm>
#include <cmath>

#include "ascent/kernels/cpu/isa.h"
#include "ascent/kernels/cpu/ops.h"

namespace ascent::kernels {

void widen_row(DType t, const void* src, float* dst, int64_t n) {
  if (active_isa() == Isa::Ref) {
    dequantize_row(t, src, dst, n);
  } else {
    dequantize_row_avx2(t, src, dst, n);
  }
}

void narrow_row_f16(const float* x, int64_t n, uint16_t* y) {
  if (active_isa() == Isa::Ref) {
    for (int64_t i = 0; i < n; ++i) y[i] = f32_to_f16(x[i]);
  } else {
    narrow_row_f16_avx2(x, n, y);
  }
}

void silu_row(const float* x, int64_t n, float* y) {
  switch (active_isa()) {
    case Isa::Avx512:
      return silu_row_avx512(x, n, y);
    case Isa::Avx2:
      return silu_row_avx2(x, n, y);
    case Isa::Ref:
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i]));
  }
}

void swiglu_row(const float* gate, const float* up, int64_t n, float* y) {
  switch (active_isa()) {
    case Isa::Avx512:
      return swiglu_row_avx512(gate, up, n, y);
    case Isa::Avx2:
      return swiglu_row_avx2(gate, up, n, y);
    case Isa::Ref:
      for (int64_t i = 0; i < n; ++i) y[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  }
}

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
}  // namespace

void gelu_tanh_row(const float* x, int64_t n, float* y) {
  switch (active_isa()) {
    case Isa::Avx512:
      return gelu_tanh_row_avx512(x, n, y);
    case Isa::Avx2:
      return gelu_tanh_row_avx2(x, n, y);
    case Isa::Ref:
      for (int64_t i = 0; i < n; ++i) {
        const float v = x[i];
        y[i] = 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
      }
  }
}

void gelu_tanh_backward_row(const float* x, const float* dy, int64_t n, float* dx) {
  switch (active_isa()) {
    case Isa::Avx512:
      return gelu_tanh_backward_row_avx512(x, dy, n, dx);
    case Isa::Avx2:
      return gelu_tanh_backward_row_avx2(x, dy, n, dx);
    case Isa::Ref:
      for (int64_t i = 0; i < n; ++i) {
        const float v = x[i], g = dy[i];  // g read before dx[i] is written: dx may alias dy
        const float th = std::tanh(kSqrt2OverPi * (v + 0.044715f * v * v * v));
        const float du = kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * v * v);
        dx[i] = g * (0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du);
      }
  }
}

void swiglu_backward_row(const float* gate, const float* up, const float* dy, int64_t n, float* dgate, float* dup) {
  switch (active_isa()) {
    case Isa::Avx512:
      return swiglu_backward_row_avx512(gate, up, dy, n, dgate, dup);
    case Isa::Avx2:
      return swiglu_backward_row_avx2(gate, up, dy, n, dgate, dup);
    case Isa::Ref:
      for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i], u = up[i], d = dy[i];  // all read before either output: both may alias dy
        const float sig = 1.0f / (1.0f + std::exp(-g));
        dgate[i] = d * u * (sig * (1.0f + g * (1.0f - sig)));
        dup[i] = d * (g * sig);
      }
  }
}

double cross_entropy_row(float* z, int64_t V, int32_t target, float loss_scale, bool grad) {
  switch (active_isa()) {
    case Isa::Avx512:
      return cross_entropy_row_avx512(z, V, target, loss_scale, grad);
    case Isa::Avx2:
      return cross_entropy_row_avx2(z, V, target, loss_scale, grad);
    case Isa::Ref:
      break;
  }
  const float mx = *std::max_element(z, z + V);
  double sum = 0.0;
  for (int64_t j = 0; j < V; ++j) sum += std::exp(static_cast<double>(z[j]) - mx);
  const double loss = std::log(sum) + mx - z[target];
  if (grad) {
    const double inv = 1.0 / sum;
    for (int64_t j = 0; j < V; ++j) {
      const double pj = std::exp(static_cast<double>(z[j]) - mx) * inv;
      z[j] = static_cast<float>(loss_scale * (pj - (j == target ? 1.0 : 0.0)));
    }
  }
  return loss;
}

}  // namespace ascent::kernels
