// AdamW's element-wise update (train/optimizer.h owns the schedule and bias corrections): for each i, in f32,
//   g = grad[i] * grad_scale;  w = w[i] * decay
//   m[i] = m[i] * b1 + g * (1 - b1);  v[i] = v[i] * b2 + g * g * (1 - b2)
//   w[i] = w - step_size * (m[i] / (sqrt(v[i]) / bc2_sqrt + eps))
// torch.optim.AdamW's order of operations, each rounded once (no fused multiply-add), so every variant gives the
// reference's bits. The gradient is only read.
#pragma once

#include <cstdint>

namespace ascent::kernels {

struct AdamWStep {
  float b1, b2, step_size, bc2_sqrt, eps, decay, grad_scale;
};

// Threaded over the global pool.
void adamw_update(float* w, const float* grad, float* m, float* v, int64_t n, const AdamWStep& s);
void adamw_update_ref(float* w, const float* grad, float* m, float* v, int64_t n, const AdamWStep& s);
void adamw_update_avx512(float* w, const float* grad, float* m, float* v, int64_t n, const AdamWStep& s);

}  // namespace ascent::kernels
