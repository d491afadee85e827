// Tensor: a typed, shaped, row-major view over bytes that someone else owns (a mapped file, an arena) or that the
// tensor co-owns through `owner`. Shapes are outermost-first as in PyTorch: a linear weight is (N_out, K_in).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ascent/tensor/dtype.h"

namespace ascent {

using Shape = std::vector<int64_t>;
struct RowPart;

std::string shape_str(const Shape& s);  // "(2048, 128)"
int64_t numel(const Shape& s);

struct Tensor {
  DType dtype = DType::F32;
  Shape shape;
  const void* data = nullptr;
  std::shared_ptr<const void> owner;  // keeps owned storage alive; null for views into mapped files

  // I8 and I4 weights only. scales: (rows,) for I8, (blocks of 16 rows, padded_cols / group, 16) for I4 (dtype.h).
  // input_scale: optional
  // (cols,) multiplier applied to the activations before they are quantized (activation-aware scaling: the
  // weight was divided by it column-wise). They point into the same file or owner as data.
  const float* scales = nullptr;
  const float* input_scale = nullptr;
  int32_t group = 0;
  // Set on a matrix whose rows a model load placed in runs at separate addresses (model/weight_layout.h: each
  // decode thread's rows of every matmul one after another). Then data and scales are null and parts, in row order,
  // hold every row; only the matmul entry points and the embedding lookup (kernels/cpu/ops.h) and row_to_f32 read
  // such a matrix.
  std::shared_ptr<const std::vector<RowPart>> parts;

  int64_t numel() const { return ascent::numel(shape); }
  int64_t nbytes() const {
    if (shape.empty()) return storage_bytes(dtype, 1);
    return (dtype == DType::I4 ? int4_stored_rows(rows()) : rows()) * row_bytes(dtype, cols());
  }
  int64_t rows() const { return shape.size() < 2 ? 1 : numel() / shape.back(); }
  int64_t cols() const { return shape.empty() ? 1 : shape.back(); }
  // Not for I4, whose rows interleave in blocks of 16 (dtype.h: int4_byte).
  const uint8_t* row_ptr(int64_t r) const { return static_cast<const uint8_t*>(data) + r * row_bytes(dtype, cols()); }
  const float* f32() const { return static_cast<const float*>(data); }
};

// Rows [row0, row0 + rows.rows()) of a split matrix (Tensor::parts): `rows` is a plain tensor of those rows.
struct RowPart {
  int64_t row0 = 0;
  Tensor rows;
  // The bytes the thread that reads this part in decode streams next (model/weight_layout.h): the rest of its run
  // after this part, or for the run's last part the whole run (the next token's first call). Empty where unknown.
  std::span<const uint8_t> next;
};

// Rows [r0, r1) of a plain matrix as a view of its bytes (and scales): for I4, r0 a multiple of its 16-row blocks.
Tensor row_slice(const Tensor& t, int64_t r0, int64_t r1);
// The part of a split matrix holding row r, or null for a plain matrix.
const RowPart* part_of(const Tensor& t, int64_t r);

// A new tensor owning a zeroed buffer of the given type and shape.
Tensor make_owned(DType dtype, Shape shape);
// Row r of t as f32 (cols() values), for every storage type including I8/I4.
void row_to_f32(const Tensor& t, int64_t r, float* dst);
// A new owned f32 copy of t, converted from any storage type.
Tensor to_f32(const Tensor& t);
// A new owned tensor holding t's values converted to `dtype` (rounding/quantizing row by row).
Tensor convert(const Tensor& t, DType dtype);
// A Q8_0, Q4_0, Q4_K or Q6_K matrix repacked, bit for bit, into Q8_0R, Q4_0R, Q4_KR or Q6_KR (repacked_type: the
// AVX-512 kernels' layouts, dtype.h): into dst (a tensor of that type and t's shape whose data the caller provides,
// e.g. a slice of one buffer for all of a model's weights), or into a new owned tensor.
void repack(const Tensor& t, const Tensor& dst);
Tensor repack(const Tensor& t);

}  // namespace ascent
