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

// A backend's own copy of a weight, laid out for its kernels (the CPU backend's: kernels/cpu/packed_weight.h). Only
// that backend reads it; everyone else reads the tensor's own bytes.
struct BackendWeight {
  virtual ~BackendWeight() = default;
};

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
  // Set where a load gave a backend its own copy of this matrix (model/weight_layout.h). The tensor's data still
  // holds the values in `dtype`, readable by anyone; the backend's kernels read the copy.
  std::shared_ptr<const BackendWeight> packed;

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

// Rows [r0, r1) of a matrix as a view of its bytes (and scales): for I4, r0 a multiple of its 16-row blocks. The view
// has no backend copy.
Tensor row_slice(const Tensor& t, int64_t r0, int64_t r1);

// A new tensor owning a zeroed buffer of the given type and shape.
Tensor make_owned(DType dtype, Shape shape);
// Row r of t as f32 (cols() values), for every storage type including I8/I4.
void row_to_f32(const Tensor& t, int64_t r, float* dst);
// A new owned f32 copy of t, converted from any storage type.
Tensor to_f32(const Tensor& t);
// A new owned tensor holding t's values converted to `dtype` (rounding/quantizing row by row).
Tensor convert(const Tensor& t, DType dtype);

}  // namespace ascent
