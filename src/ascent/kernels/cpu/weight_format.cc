#include "ascent/kernels/cpu/weight_format.h"

#include <utility>

#include "ascent/base/error.h"
#include "ascent/kernels/cpu/packed_formats.h"

namespace ascent::kernels {
namespace {

// Each file format with a repacked layout, and that layout.
constexpr std::pair<WeightFormat, WeightFormat> kRepacks[] = {{WeightFormat::Q8_0, WeightFormat::Q8_0R},
                                                              {WeightFormat::Q4_0, WeightFormat::Q4_0R},
                                                              {WeightFormat::Q4_K, WeightFormat::Q4_KR},
                                                              {WeightFormat::Q6_K, WeightFormat::Q6_KR}};

}  // namespace

std::string_view format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::Q8_0R:
      return "q8_0r";
    case WeightFormat::Q4_0R:
      return "q4_0r";
    case WeightFormat::Q4_KR:
      return "q4_kr";
    case WeightFormat::Q6_KR:
      return "q6_kr";
    default:
      return dtype_name(values_type(f));
  }
}

WeightFormat format_of(DType t) {
  switch (t) {
    case DType::F32:
      return WeightFormat::F32;
    case DType::F16:
      return WeightFormat::F16;
    case DType::BF16:
      return WeightFormat::BF16;
    case DType::I8:
      return WeightFormat::I8;
    case DType::I4:
      return WeightFormat::I4;
    case DType::Q8_0:
      return WeightFormat::Q8_0;
    case DType::Q4_0:
      return WeightFormat::Q4_0;
    case DType::Q4_K:
      return WeightFormat::Q4_K;
    case DType::Q6_K:
      return WeightFormat::Q6_K;
    case DType::I32:
      break;
  }
  fail("matmul: no kernel reads {} weights", dtype_name(t));
}

DType values_type(WeightFormat f) {
  switch (f) {
    case WeightFormat::F32:
      return DType::F32;
    case WeightFormat::F16:
      return DType::F16;
    case WeightFormat::BF16:
      return DType::BF16;
    case WeightFormat::I8:
      return DType::I8;
    case WeightFormat::I4:
      return DType::I4;
    case WeightFormat::Q8_0:
    case WeightFormat::Q8_0R:
      return DType::Q8_0;
    case WeightFormat::Q4_0:
    case WeightFormat::Q4_0R:
      return DType::Q4_0;
    case WeightFormat::Q4_K:
    case WeightFormat::Q4_KR:
      return DType::Q4_K;
    case WeightFormat::Q6_K:
    case WeightFormat::Q6_KR:
      return DType::Q6_K;
  }
  return DType::F32;
}

WeightFormat repacked_format(WeightFormat f) {
  for (const auto& [file, repacked] : kRepacks) {
    if (f == file) return repacked;
  }
  return f;
}

int64_t padded_cols(WeightFormat f, int64_t cols) {
  if (f == WeightFormat::Q4_0R || f == WeightFormat::Q4_KR || f == WeightFormat::Q8_0R) {
    return (cols + kQ4RGroup - 1) / kQ4RGroup * kQ4RGroup;
  }
  if (f == WeightFormat::I8 || f == WeightFormat::I4) return padded_cols(values_type(f), cols);
  // Every other kernel pads its activations to 64 columns, as int8 does (whole vectors, no tail).
  return (cols + kIntRowAlign - 1) / kIntRowAlign * kIntRowAlign;
}

int64_t row_bytes(WeightFormat f, int64_t cols) {
  const DType t = values_type(f);
  if (f == WeightFormat::Q4_0R || f == WeightFormat::Q8_0R) return storage_bytes(t, padded_cols(f, cols));
  return ascent::row_bytes(t, cols);
}

int64_t MatrixView::nbytes() const {
  return (format == WeightFormat::I4 ? int4_stored_rows(rows) : rows) * row_bytes();
}

MatrixView view_of(const Tensor& t) {
  ASCENT_CHECK(t.shape.size() == 2, "matmul: weight must be 2-D, got {}", shape_str(t.shape));
  return MatrixView{format_of(t.dtype), t.shape[0],    t.shape[1], static_cast<const uint8_t*>(t.data),
                    t.scales,           t.input_scale, t.group};
}

MatrixView row_slice(const MatrixView& m, int64_t r0, int64_t r1) {
  ASCENT_CHECK(0 <= r0 && r0 < r1 && r1 <= m.rows, "row_slice: rows [{}, {}) of a matrix of {} rows", r0, r1, m.rows);
  ASCENT_CHECK(m.format != WeightFormat::I4 || r0 % kInt4Rows == 0,
               "row_slice: int4 rows start at a block of {}, not {}", kInt4Rows, r0);
  MatrixView v = m;
  v.rows = r1 - r0;
  v.data = m.data + r0 * m.row_bytes();
  // int8: one scale per row; int4: per 16-row block, (padded cols / group) x 16 of them (dtype.h int4_scale_index).
  if (m.format == WeightFormat::I8) v.scales = m.scales + r0;
  if (m.format == WeightFormat::I4) v.scales = m.scales + r0 * (padded_cols(m.format, m.cols) / m.group);
  return v;
}

}  // namespace ascent::kernels
