#include "ascent/kernels/cpu/adamw.h"

#include <cmath>

#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/isa.h"

namespace ascent::kernels {

void adamw_update_ref(float* __restrict w, const float* __restrict grad, float* __restrict m, float* __restrict v,
                      int64_t n, const AdamWStep& s) {
  const float one_b1 = 1.0f - s.b1, one_b2 = 1.0f - s.b2;
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * s.grad_scale;
    const float wi = w[i] * s.decay;
    const float mi = m[i] * s.b1 + g * one_b1;
    const float vi = v[i] * s.b2 + g * g * one_b2;
    m[i] = mi;
    v[i] = vi;
    w[i] = wi - s.step_size * (mi / (std::sqrt(vi) / s.bc2_sqrt + s.eps));
  }
}

void adamw_update(float* w, const float* grad, float* m, float* v, int64_t n, const AdamWStep& s) {
  const bool simd = active_isa() == Isa::Avx512;
  ThreadPool::global().parallel_for(n, [&](int64_t i0, int64_t i1) {
    if (simd) {
      adamw_update_avx512(w + i0, grad + i0, m + i0, v + i0, i1 - i0, s);
    } else {
      adamw_update_ref(w + i0, grad + i0, m + i0, v + i0, i1 - i0, s);
    }
  });
}

}  // namespace ascent::kernels
