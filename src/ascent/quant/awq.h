// Activation-aware int4 quantization, after AWQ (Lin et al., 2023). Given calibration activations X (R, K) of a linear
// layer, it searches a per-input-channel scale s = mean|x|^alpha (alpha on a grid). The scale minimizes the layer's
// output error || X W^T - X Q(W diag(s))^T diag(1/s) ||. Then, per group, it searches the clipping ratio of the range
// that minimizes that group's share of the output error. The result is stored as an I4 tensor with input_scale = 1/s.
// Refuses nothing silently: shapes are checked; without calibration rows, use quantize_int4 (round to nearest).
#pragma once

#include <cstdint>
#include <vector>

#include "ascent/tensor/tensor.h"

namespace ascent::quant {

// Calibration rows of one linear layer's input: the first rows seen (up to a cap) and every row's |x| sum.
struct CalibRows {
  int64_t K = 0;
  int64_t cap = 256;
  std::vector<float> x;         // (rows, K)
  std::vector<double> abs_sum;  // (K,)
  int64_t seen = 0;
  int64_t rows() const { return K == 0 ? 0 : static_cast<int64_t>(x.size()) / K; }
  void add(const float* rows_x, int64_t n, int64_t k);
};

struct AwqResult {
  Tensor q;
  float alpha = 0.0f;
  double err_rtn = 0.0, err_scaled = 0.0, err_final = 0.0;  // relative output errors
};
AwqResult awq_int4(const Tensor& w, int group, const CalibRows& c);

}  // namespace ascent::quant
