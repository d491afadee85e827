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
  ASCENT_CHECK(t.shape.size() == 2 && t.parts == nullptr && t.data != nullptr, "row_slice: {} is not a plain matrix",
               shape_str(t.shape));
  ASCENT_CHECK(0 <= r0 && r0 < r1 && r1 <= t.rows(), "row_slice: rows [{}, {}) of a matrix of {} rows", r0, r1,
               t.rows());
  ASCENT_CHECK(t.dtype != DType::I4 || r0 % kInt4Rows == 0, "row_slice: I4 rows start at a block of {}, not {}",
               kInt4Rows, r0);
  Tensor v = t;
  v.shape = {r1 - r0, t.cols()};
  v.data = static_cast<const uint8_t*>(t.data) + r0 * row_bytes(t.dtype, t.cols());
  // I8: one scale per row; I4: per 16-row block, (padded cols / group) x 16 of them (dtype.h int4_scale_index).
  if (t.dtype == DType::I8) v.scales = t.scales + r0;
  if (t.dtype == DType::I4) v.scales = t.scales + r0 * (padded_cols(t.dtype, t.cols()) / t.group);
  return v;
}

const RowPart* part_of(const Tensor& t, int64_t r) {
  if (t.parts == nullptr) return nullptr;
  const auto& parts = *t.parts;
  const auto it =
      std::upper_bound(parts.begin(), parts.end(), r, [](int64_t v, const RowPart& p) { return v < p.row0; });
  ASCENT_CHECK(it != parts.begin() && r < t.rows(), "row {} is outside a split matrix of {} rows", r, t.rows());
  return &*(it - 1);
}

void row_to_f32(const Tensor& t, int64_t r, float* dst) {
  if (const RowPart* p = part_of(t, r)) return row_to_f32(p->rows, r - p->row0, dst);
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

void repack(const Tensor& t, const Tensor& dst) {
  const DType to = repacked_type(t.dtype);
  ASCENT_CHECK(to != t.dtype && t.shape.size() == 2, "repack: needs a 2-D q8_0, q4_0, q4_k or q6_k tensor, got {} {}",
               dtype_name(t.dtype), shape_str(t.shape));
  ASCENT_CHECK(dst.dtype == to && dst.shape == t.shape, "repack to {}: destination {} {} for {}", dtype_name(to),
               dtype_name(dst.dtype), shape_str(dst.shape), shape_str(t.shape));
  auto* out = static_cast<uint8_t*>(const_cast<void*>(dst.data));
  const int64_t dst_row = row_bytes(to, t.cols());
  for (int64_t r = 0; r < t.rows(); ++r) {
    if (to == DType::Q8_0R) {
      repack_row_q8_0r(reinterpret_cast<const BlockQ8_0*>(t.row_ptr(r)), t.cols() / kQBlock, out + r * dst_row);
    } else if (to == DType::Q4_0R) {
      repack_row_q4_0r(reinterpret_cast<const BlockQ4_0*>(t.row_ptr(r)), t.cols() / kQBlock, out + r * dst_row);
    } else if (to == DType::Q4_KR) {
      repack_q4_kr(reinterpret_cast<const BlockQ4_K*>(t.row_ptr(r)), t.cols() / kQKBlock,
                   reinterpret_cast<BlockQ4_KR*>(out + r * dst_row));
    } else {
      repack_q6_kr(reinterpret_cast<const BlockQ6_K*>(t.row_ptr(r)), t.cols() / kQKBlock,
                   reinterpret_cast<BlockQ6_KR*>(out + r * dst_row));
    }
  }
}

Tensor repack(const Tensor& t) {
  Tensor out = make_owned(repacked_type(t.dtype), t.shape);
  repack(t, out);
  return out;
}

}  // namespace ascent
