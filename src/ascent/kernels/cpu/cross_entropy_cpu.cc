// The language-model head fused with its cross-entropy loss, `chunk` rows at a time: a chunk's logits (chunk, V) are
// the only ones held, and they become that chunk's dlogits in place. The three products go through sgemm; each row's
// softmax is row_ops.h's cross_entropy_row. Loss and gradients depend on chunk (dw is summed chunk by chunk), never on
// the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ascent/base/error.h"
#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/ops.h"
#include "ascent/kernels/cpu/row_ops.h"
#include "ascent/kernels/cpu/sgemm.h"

namespace ascent::kernels {

double lm_head_cross_entropy(const float* x, int64_t R, int64_t C, const float* w, int64_t V,
                             std::span<const int32_t> targets, float loss_scale, float* dx, float* dw, bool dw_zero,
                             int64_t chunk) {
  ASCENT_CHECK(chunk > 0, "lm_head_cross_entropy: chunk {} must be positive", chunk);
  ASCENT_CHECK(static_cast<int64_t>(targets.size()) == R, "lm_head_cross_entropy: {} targets for {} rows",
               targets.size(), R);
  for (int64_t r = 0; r < R; ++r) {
    ASCENT_CHECK(targets[static_cast<size_t>(r)] < V,
                 "lm_head_cross_entropy: target {} of row {} is outside the "
                 "vocabulary (size {})",
                 targets[static_cast<size_t>(r)], r, V);
  }
  const bool grad = dx != nullptr;
  std::vector<float> logits(static_cast<size_t>(std::min(chunk, R) * V));
  std::vector<double> row_loss(static_cast<size_t>(R), 0.0);
  for (int64_t r0 = 0; r0 < R; r0 += chunk) {
    const int64_t n = std::min(chunk, R - r0);
    const float* xc = x + r0 * C;
    sgemm(n, V, C, {xc, C, /*transposed=*/false}, {w, C, /*transposed=*/true}, 0.0f, logits.data(), V);
    ThreadPool::global().parallel_for(n, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        float* z = logits.data() + i * V;
        const int32_t target = targets[static_cast<size_t>(r0 + i)];
        if (target < 0) {  // an ignored row: no loss, no gradient
          if (grad) std::fill(z, z + V, 0.0f);
          continue;
        }
        row_loss[static_cast<size_t>(r0 + i)] = cross_entropy_row(z, V, target, loss_scale, grad);
      }
    });
    if (!grad) continue;
    // dx_chunk (n, C) = dlogits (n, V) @ w (V, C); dw (V, C) += dlogits^T (V, n) @ x_chunk (n, C)
    sgemm(n, C, V, {logits.data(), V, /*transposed=*/false}, {w, C, /*transposed=*/false}, 0.0f, dx + r0 * C, C);
    if (dw != nullptr) {
      const float beta = dw_zero && r0 == 0 ? 0.0f : 1.0f;  // dw's zeros need not be read
      sgemm(V, C, n, {logits.data(), V, /*transposed=*/true}, {xc, C, /*transposed=*/false}, beta, dw, C);
    }
  }
  double loss = 0.0;
  for (const double l : row_loss) loss += l;
  return loss;
}

}  // namespace ascent::kernels
