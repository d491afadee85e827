#include "ascent/tensor/tensor.h"

#include <fmt/format.h>

#include <algorithm>

#include "ascent/base/aligned.h"
#include "ascent/base/error.h"

namespace ascent {

std::string shape_str(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    // A shape read from a damaged file ([2^40, 2^40]) must fail here, not wrap into a size that passes the checks.
    if (__builtin_mul_overflow(n, d, &n)) fail("shape {} has more elements than an int64 holds", shape_str(s));
  }
  return n;
}

Tensor make_owned(DType dtype, Shape shape) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  auto buf = aligned_alloc_bytes(static_cast<size_t>(t.nbytes()));
  t.data = buf.get();
  t.owner = std::shared_ptr<const void>(buf.release(), AlignedDeleter{});
  return t;
}

Tensor row_slice(const Tensor& t, int64_t r0, int64_t r1) {
  ASCENT_CHECK(t.shape.size() == 2 && t.data != nullptr, "row_slice: {} is not a plain matrix", shape_str(t.shape));
  ASCENT_CHECK(0 <= r0 && r0 < r1 && r1 <= t.rows(), "row_slice: rows [{}, {}) of a matrix of {} rows", r0, r1,
               t.rows());
  ASCENT_CHECK(t.dtype != DType::I4 || r0 % kInt4Rows == 0, "row_slice: I4 rows start at a block of {}, not {}",
               kInt4Rows, r0);
  Tensor v = t;
  v.packed = nullptr;
  v.shape = {r1 - r0, t.cols()};
  v.data = static_cast<const uint8_t*>(t.data) + r0 * row_bytes(t.dtype, t.cols());
  // I8: one scale per row; I4: per 16-row block, (padded cols / group) x 16 of them (dtype.h int4_scale_index).
  if (t.dtype == DType::I8) v.scales = t.scales + r0;
  if (t.dtype == DType::I4) v.scales = t.scales + r0 * (padded_cols(t.dtype, t.cols()) / t.group);
  return v;
}

void row_to_f32(const Tensor& t, int64_t r, float* dst) {
  const int64_t K = t.cols();
  if (t.dtype == DType::I8) {
    const uint8_t* row = t.row_ptr(r);
    const float s = t.scales[r];
    for (int64_t k = 0; k < K; ++k) dst[k] = s * static_cast<float>(static_cast<int>(row[k]) - 128);
  } else if (t.dtype == DType::I4) {
    const int64_t Kp = padded_cols(t.dtype, K), groups = Kp / t.group;
    const auto* data = static_cast<const uint8_t*>(t.data);
    for (int64_t k = 0; k < K; ++k) {
      const int q = int4_code(data, Kp, r, k) - 8;
      dst[k] = t.scales[int4_scale_index(groups, r, k / t.group)] * static_cast<float>(q);
    }
  } else {
    dequantize_row(t.dtype, t.row_ptr(r), dst, K);
    return;
  }
  if (t.input_scale != nullptr) {
    for (int64_t k = 0; k < K; ++k) dst[k] *= t.input_scale[k];
  }
}

Tensor to_f32(const Tensor& t) {
  return convert(t, DType::F32);
}

Tensor convert(const Tensor& t, DType dtype) {
  Tensor out = make_owned(dtype, t.shape);
  std::vector<float> row(static_cast<size_t>(t.cols()));
  auto* dst = static_cast<uint8_t*>(const_cast<void*>(out.data));
  const int64_t dst_row = row_bytes(dtype, t.cols());
  for (int64_t r = 0; r < t.rows(); ++r) {
    row_to_f32(t, r, row.data());
    quantize_row(dtype, row.data(), dst + r * dst_row, t.cols());
  }
  return out;
}

}  // namespace ascent
