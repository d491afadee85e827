// The inner loops of attention and embedding, dispatched by ISA (isa.h): widen a stored row to f32, and dot two f32
// rows. Every variant returns bitwise the reference's result.
#pragma once

#include <cstdint>

#include "ascent/tensor/dtype.h"

namespace ascent::kernels {

float dot_f32_avx2(const float* a, const float* b, int64_t n);
void dequantize_row_avx2(DType t, const void* src, float* dst, int64_t n);

// Dispatching entry points used by the kernels.
float dot_row(const float* a, const float* b, int64_t n);
void widen_row(DType t, const void* src, float* dst, int64_t n);

}  // namespace ascent::kernels
