// Parameter gradients are sums over rows (tokens, heads). sum_over_rows takes them in one fixed order whatever the
// thread count: rows in blocks of kSumBlock, each block summed in row order into its own double partial, the
// partials then added in block order. So a training step's weight gradients are the same bits run to run.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ascent/base/thread_pool.h"

namespace ascent::kernels {

constexpr int64_t kSumBlock = 32;

// add_row(r, acc) adds row r's `width` contributions to acc (width doubles); it may also write row r's own outputs
// (a norm's dx), since it runs exactly once per row. Returns the `width` totals over rows [0, rows).
template <class AddRow>
std::vector<double> sum_over_rows(int64_t rows, int64_t width, AddRow&& add_row) {
  const int64_t blocks = (rows + kSumBlock - 1) / kSumBlock;
  std::vector<double> part(static_cast<size_t>(blocks * width), 0.0);
  ThreadPool::global().parallel_for(blocks, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      double* acc = part.data() + b * width;
      for (int64_t r = b * kSumBlock; r < std::min(rows, (b + 1) * kSumBlock); ++r) add_row(r, acc);
    }
  });
  std::vector<double> total(static_cast<size_t>(width), 0.0);
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t i = 0; i < width; ++i) total[static_cast<size_t>(i)] += part[static_cast<size_t>(b * width + i)];
  }
  return total;
}

}  // namespace ascent::kernels
