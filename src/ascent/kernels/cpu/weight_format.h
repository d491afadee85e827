// The formats the CPU matmul engine reads a weight in, and the view its kernels take of a matrix.
//
// A weight's file type (tensor/dtype.h: f32, f16, bf16, int8, int4, q8_0, q4_0, q4_k, q6_k) is what every layer
// sees. The CPU backend may also hold a matrix in a repacked layout of its own (packed_formats.h: q8_0r, q4_0r, q4_kr,
// q6_kr), made at load for its SIMD kernels. Those layouts never reach a file, a DType or another backend: they live
// behind the tensor's backend handle (packed_weight.h). WeightFormat names both kinds, in the one list every ISA's
// kernel table follows (gemm.h).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "ascent/tensor/dtype.h"
#include "ascent/tensor/tensor.h"

namespace ascent::kernels {

// The one list of formats: X(name) for each. The enum, kWeightFormats and every SIMD variant's kernel table (gemm.h)
// are made from it, so a format added here needs a kernel in every variant or the build fails.
#define ASCENT_WEIGHT_FORMATS(X) \
  X(F32) X(F16) X(BF16) X(I8) X(I4) X(Q8_0) X(Q4_0) X(Q4_K) X(Q6_K) X(Q8_0R) X(Q4_0R) X(Q4_KR) X(Q6_KR)

#define ASCENT_WEIGHT_FORMAT_ENUMERATOR(F) F,
enum class WeightFormat : uint8_t { ASCENT_WEIGHT_FORMATS(ASCENT_WEIGHT_FORMAT_ENUMERATOR) };
#undef ASCENT_WEIGHT_FORMAT_ENUMERATOR

// Every format, in enum order.
#define ASCENT_WEIGHT_FORMAT_VALUE(F) WeightFormat::F,
inline constexpr std::array kWeightFormats = {ASCENT_WEIGHT_FORMATS(ASCENT_WEIGHT_FORMAT_VALUE)};
#undef ASCENT_WEIGHT_FORMAT_VALUE
inline constexpr int kWeightFormatCount = static_cast<int>(kWeightFormats.size());

std::string_view format_name(WeightFormat f);
// The format of a file type; throws for a type no matmul reads (i32).
WeightFormat format_of(DType t);
// The file type whose values a format holds (q4_0r: q4_0).
DType values_type(WeightFormat f);
// The repacked layout the SIMD kernels read a file format in (q4_0 -> q4_0r), or f itself where there is none.
WeightFormat repacked_format(WeightFormat f);
inline bool is_repacked(WeightFormat f) {
  return f == WeightFormat::Q8_0R || f == WeightFormat::Q4_0R || f == WeightFormat::Q4_KR || f == WeightFormat::Q6_KR;
}
// Formats whose values are 4-, 6- or 8-bit codes under scales, multiplied with int8-quantized activations.
inline bool is_integer_format(WeightFormat f) {
  return f != WeightFormat::F32 && f != WeightFormat::F16 && f != WeightFormat::BF16;
}

// The row length the activations are padded to: int8 rows to 64 columns, int4 to 128, and q4_0r, q8_0r and q4_kr
// to whole 512-column groups (q4_kr keeps whole super-blocks, but its AVX-512 kernel takes two per step).
int64_t padded_cols(WeightFormat f, int64_t cols);
// Bytes one row of `cols` elements occupies (int8, q4_0r and q8_0r rows padded as padded_cols says; int4 per
// 16-row block, a row's share).
int64_t row_bytes(WeightFormat f, int64_t cols);

// A matrix (rows, cols) as the kernels read it: the codes in `format`, and for int8/int4 their scales (dtype.h).
struct MatrixView {
  WeightFormat format = WeightFormat::F32;
  int64_t rows = 0, cols = 0;
  const uint8_t* data = nullptr;
  const float* scales = nullptr;       // int8: (rows,); int4: (blocks of 16 rows, padded_cols / group, 16)
  const float* input_scale = nullptr;  // (cols,) or null: the activations' column multipliers (activation-aware)
  int32_t group = 0;                   // int4's group size

  int64_t row_bytes() const { return kernels::row_bytes(format, cols); }
  // Not for int4, whose rows interleave in blocks of 16 (dtype.h: int4_byte).
  const uint8_t* row_ptr(int64_t r) const { return data + r * row_bytes(); }
  int64_t nbytes() const;
};

// A 2-D tensor's own bytes as a view in its file type's format; throws naming the shape for anything else.
MatrixView view_of(const Tensor& t);
// Rows [r0, r1) of m as a view of its bytes (and scales); for int4, r0 a multiple of its 16-row blocks.
MatrixView row_slice(const MatrixView& m, int64_t r0, int64_t r1);

}  // namespace ascent::kernels
