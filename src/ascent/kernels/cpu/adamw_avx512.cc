// AVX-512 AdamW update: adamw.h's expression sixteen values at a time, each operation rounded as the reference rounds
// it (separate multiplies and adds, IEEE division and square root), so the same bits.
#include <immintrin.h>

#include "ascent/kernels/cpu/adamw.h"

#include "ascent/kernels/cpu/simd_avx512_begin.h"

#pragma GCC target("avx512f")

namespace ascent::kernels {

void adamw_update_avx512(float* w, const float* grad, float* m, float* v, int64_t n, const AdamWStep& s) {
  const __m512 b1 = _mm512_set1_ps(s.b1), b2 = _mm512_set1_ps(s.b2);
  const __m512 one_b1 = _mm512_set1_ps(1.0f - s.b1), one_b2 = _mm512_set1_ps(1.0f - s.b2);
  const __m512 gs = _mm512_set1_ps(s.grad_scale), decay = _mm512_set1_ps(s.decay);
  const __m512 step = _mm512_set1_ps(s.step_size), bc2 = _mm512_set1_ps(s.bc2_sqrt), eps = _mm512_set1_ps(s.eps);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_mul_ps(_mm512_loadu_ps(grad + i), gs);
    const __m512 wi = _mm512_mul_ps(_mm512_loadu_ps(w + i), decay);
    const __m512 mi = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(m + i), b1), _mm512_mul_ps(g, one_b1));
    const __m512 vi =
        _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(v + i), b2), _mm512_mul_ps(_mm512_mul_ps(g, g), one_b2));
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc2), eps);
    _mm512_storeu_ps(w + i, _mm512_sub_ps(wi, _mm512_mul_ps(step, _mm512_div_ps(mi, denom))));
  }
  adamw_update_ref(w + i, grad + i, m + i, v + i, n - i, s);
}

}  // namespace ascent::kernels

#include "ascent/kernels/cpu/simd_avx512_end.h"
