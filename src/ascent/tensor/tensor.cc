#include "ascent/tensor/tensor.h"

#include <fmt/format.h>

#include "ascent/base/aligned.h"

namespace ascent {

std::string shape_str(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
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

Tensor to_f32(const Tensor& t) {
  return convert(t, DType::F32);
}

Tensor convert(const Tensor& t, DType dtype) {
  Tensor out = make_owned(dtype, t.shape);
  std::vector<float> row(static_cast<size_t>(t.cols()));
  auto* dst = static_cast<uint8_t*>(const_cast<void*>(out.data));
  const int64_t dst_row = storage_bytes(dtype, t.cols());
  for (int64_t r = 0; r < t.rows(); ++r) {
    dequantize_row(t.dtype, t.row_ptr(r), row.data(), t.cols());
    quantize_row(dtype, row.data(), dst + r * dst_row, t.cols());
  }
  return out;
}

}  // namespace ascent
