#include "ascent/kernels/cpu/packed_weight.h"

#include <algorithm>

#include <cstring>

#include "ascent/base/aligned.h"
#include "ascent/base/error.h"
#include "ascent/kernels/cpu/packed_formats.h"

namespace ascent::kernels {

Tensor with_packed_copy(const Tensor& t, WeightFormat to) {
  const MatrixView src = view_of(t);
  ASCENT_CHECK(to == src.format || to == repacked_format(src.format), "{} cannot be packed as {}",
               format_name(src.format), format_name(to));
  ASCENT_CHECK(src.format != WeightFormat::I8 && src.format != WeightFormat::I4, "{} copies need their scales",
               format_name(src.format));
  auto packed = std::make_shared<PackedWeight>();
  MatrixView dst = src;
  dst.format = to;
  auto buf = aligned_alloc_bytes(static_cast<size_t>(dst.nbytes()));
  dst.data = buf.get();
  if (to == src.format) {
    std::memcpy(buf.get(), src.data, static_cast<size_t>(src.nbytes()));
  } else {
    repack(src, dst);
  }
  packed->owner = std::shared_ptr<const void>(buf.release(), AlignedDeleter{});
  packed->format = to;
  packed->rows = src.rows;
  packed->cols = src.cols;
  packed->input_scale = src.input_scale;
  packed->group = src.group;
  packed->parts.push_back({0, dst, {}});
  Tensor out = t;
  out.packed = std::move(packed);
  return out;
}

CpuMatrix::CpuMatrix(const Tensor& w) {
  packed_ = dynamic_cast<const PackedWeight*>(w.packed.get());
  if (packed_ != nullptr && packed_->parts.empty()) packed_ = nullptr;
  if (packed_ == nullptr) whole_.rows = view_of(w);
}

const RowPart& CpuMatrix::part_of(int64_t r) const {
  ASCENT_CHECK(0 <= r && r < rows(), "row {} is outside a matrix of {} rows", r, rows());
  const std::span<const RowPart> ps = parts();
  const auto it = std::upper_bound(ps.begin(), ps.end(), r, [](int64_t v, const RowPart& p) { return v < p.row0; });
  return *(it - 1);
}

}  // namespace ascent::kernels
