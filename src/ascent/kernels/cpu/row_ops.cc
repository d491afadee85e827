#include "ascent/kernels/cpu/row_ops.h"

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

}  // namespace ascent::kernels
