// The CPU backend's handle on a weight (Tensor::packed): its own copy of a matrix, in the format its kernels read
// fastest, with the rows placed where its decode threads stream them (model/weight_layout.h). And CpuMatrix, the
// form every matmul entry point reads a weight in: that copy where the load made one, else the tensor's own bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "ascent/kernels/cpu/weight_format.h"
#include "ascent/tensor/tensor.h"

namespace ascent::kernels {

// Rows [row0, row0 + rows.rows) of a matrix whose parts lie at separate addresses.
struct RowPart {
  int64_t row0 = 0;
  MatrixView rows;
  // The bytes the thread that reads this part in decode streams next: the rest of its run after this part, or for
  // the run's last part the whole run (the next token's first call). Empty where unknown.
  std::span<const uint8_t> next;
};

struct PackedWeight final : BackendWeight {
  WeightFormat format = WeightFormat::F32;
  int64_t rows = 0, cols = 0;
  const float* input_scale = nullptr;
  int32_t group = 0;
  std::vector<RowPart> parts;  // in row order, covering [0, rows); one part for a matrix kept whole
  bool by_thread = false;      // each part lies in the run of the decode thread that streams it
  std::shared_ptr<const void> owner;
};

// t with a backend copy of its matrix, whole, repacked into repacked_format (q8_0, q4_0, q4_k, q6_k; other formats
// copied as they are): what a load makes, for tests and benchmarks.
Tensor with_packed_copy(const Tensor& t, WeightFormat to);

// A matmul's weight as the kernels read it: w's packed copy, or w's own bytes as one part. w must outlive it.
class CpuMatrix {
 public:
  explicit CpuMatrix(const Tensor& w);

  // Rows in one view (a matrix kept whole) or several (rows placed by thread).
  std::span<const RowPart> parts() const {
    return packed_ != nullptr ? std::span<const RowPart>(packed_->parts) : std::span<const RowPart>(&whole_, 1);
  }
  WeightFormat format() const { return parts().front().rows.format; }
  int64_t rows() const { return packed_ != nullptr ? packed_->rows : whole_.rows.rows; }
  int64_t cols() const { return parts().front().rows.cols; }
  // Whether the load placed the rows by decode thread (weight_layout.h): each part then names what follows it.
  bool by_thread() const { return packed_ != nullptr && packed_->by_thread; }
  // The part holding row r.
  const RowPart& part_of(int64_t r) const;
  // A view with every property of the matrix but its rows: what the activations' preparation reads (gemm.h).
  const MatrixView& any_view() const { return parts().front().rows; }

 private:
  const PackedWeight* packed_ = nullptr;
  RowPart whole_;
};

}  // namespace ascent::kernels
