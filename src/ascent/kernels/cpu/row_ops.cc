#include "ascent/kernels/cpu/row_ops.h"

#include "ascent/kernels/cpu/isa.h"
#include "ascent/kernels/cpu/ops.h"

namespace ascent::kernels {

float dot_row(const float* a, const float* b, int64_t n) {
  return active_isa() == Isa::Ref ? dot_f32(a, b, n) : dot_f32_avx2(a, b, n);
}

void widen_row(DType t, const void* src, float* dst, int64_t n) {
  if (active_isa() == Isa::Ref) {
    dequantize_row(t, src, dst, n);
  } else {
    dequantize_row_avx2(t, src, dst, n);
  }
}

}  // namespace ascent::kernels
