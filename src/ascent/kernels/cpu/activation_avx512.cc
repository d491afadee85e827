// AVX-512 SiLU and SwiGLU rows: the reference's expression x / (1 + e^-x) (times up) with a vector exp
// (simd_avx512.h, about 1 ulp) and an exact division. The unfused graph ops and the fused matmul + SwiGLU call the
// same row function, so switching fusion off leaves results bitwise unchanged. Also GELU (tanh) forward and backward
// and SwiGLU's backward, as row_ops.h describes.
#include <immintrin.h>

#include <cmath>

#include "ascent/kernels/cpu/row_ops.h"

#include "ascent/kernels/cpu/simd_avx512_begin.h"

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma")

#include "ascent/kernels/cpu/simd_avx512.h"

namespace ascent::kernels {
namespace {

inline __m512 silu16(__m512 x) {
  const __m512 e = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), x));
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

// GELU's 0.5 (1 + tanh(u)) = 1 / (1 + e^-2u), u = sqrt(2/pi) (x + 0.044715 x^3): e^-2u is returned. Where it
// overflows (x below about -9) the quotients below give 0 and -0, as the limits are; NaN stays NaN.
inline __m512 gelu_exp16(__m512 x) {
  const __m512 inner = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(0.044715f), _mm512_mul_ps(x, x)), x, x);
  return exp_ps(_mm512_mul_ps(inner, _mm512_set1_ps(-2.0f * 0.7978845608028654f)));
}

// d/dx of x s(x), s = 1 / (1 + e^-2u): s + 2 x s (1 - s) u'(x), u' = sqrt(2/pi) (1 + 3 0.044715 x^2). 1 - s is
// taken as e^-2u s where s is near 1 (e^-2u < 1), so that it keeps its relative precision.
inline __m512 gelu_grad16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f), e = gelu_exp16(x);
  const __m512 s = _mm512_div_ps(one, _mm512_add_ps(one, e));
  const __m512 oms = _mm512_mask_mul_ps(_mm512_sub_ps(one, s), _mm512_cmp_ps_mask(e, one, _CMP_LT_OQ), e, s);
  const __m512 du = _mm512_mul_ps(_mm512_set1_ps(0.7978845608028654f),
                                  _mm512_fmadd_ps(_mm512_set1_ps(3.0f * 0.044715f), _mm512_mul_ps(x, x), one));
  const __m512 t = _mm512_mul_ps(_mm512_mul_ps(_mm512_add_ps(x, x), s), oms);
  return _mm512_fmadd_ps(t, du, s);
}

inline __mmask16 tail_mask(int64_t left) {
  return static_cast<__mmask16>(left >= 16 ? 0xffff : (1u << left) - 1);
}

// y[i] = F(a[i], b[i]) for i < n, sixteen lanes at a time, the last vector masked. Both inputs are loaded before y
// is stored, so y may alias either. F is a template argument, not a lambda: GCC does not give a lambda this file's
// target pragma.
template <__m512 (*F)(__m512, __m512)>
inline void map_row16(const float* a, const float* b, int64_t n, float* y) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, F(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
  }
}

// A one-input function as map_row16 takes it (the second input, the same row, is unused and its loads dead).
template <__m512 (*F)(__m512)>
inline __m512 first16(__m512 x, __m512) {
  return F(x);
}

inline __m512 swiglu16(__m512 g, __m512 u) {
  return _mm512_mul_ps(silu16(g), u);
}

inline __m512 gelu16(__m512 x) {
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), gelu_exp16(x)));
}

inline __m512 gelu_backward16(__m512 x, __m512 dy) {
  return _mm512_mul_ps(dy, gelu_grad16(x));
}

}  // namespace

void silu_row_avx512(const float* x, int64_t n, float* y) {
  map_row16<first16<silu16>>(x, x, n, y);
}

void swiglu_row_avx512(const float* gate, const float* up, int64_t n, float* y) {
  map_row16<swiglu16>(gate, up, n, y);
}

void gelu_tanh_row_avx512(const float* x, int64_t n, float* y) {
  map_row16<first16<gelu16>>(x, x, n, y);
}

void gelu_tanh_backward_row_avx512(const float* x, const float* dy, int64_t n, float* dx) {
  map_row16<gelu_backward16>(x, dy, n, dx);
}

void swiglu_backward_row_avx512(const float* gate, const float* up, const float* dy, int64_t n, float* dgate,
                                float* dup) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    // All three read before either store: both outputs may alias dy.
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i), u = _mm512_maskz_loadu_ps(m, up + i),
                 d = _mm512_maskz_loadu_ps(m, dy + i);
    // silu' = sig (1 + g (1 - sig)), 1 - sig taken as e^-g sig where sig is near 1, as in gelu_grad16.
    const __m512 e = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 sig = _mm512_div_ps(one, _mm512_add_ps(one, e));
    const __m512 oms = _mm512_mask_mul_ps(_mm512_sub_ps(one, sig), _mm512_cmp_ps_mask(e, one, _CMP_LT_OQ), e, sig);
    const __m512 dsilu = _mm512_mul_ps(sig, _mm512_fmadd_ps(g, oms, one));
    _mm512_mask_storeu_ps(dgate + i, m, _mm512_mul_ps(_mm512_mul_ps(d, u), dsilu));
    _mm512_mask_storeu_ps(dup + i, m, _mm512_mul_ps(d, _mm512_mul_ps(g, sig)));
  }
}

double cross_entropy_row_avx512(float* z, int64_t V, int32_t target, float loss_scale, bool grad) {
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  __m512 mx = neg_inf;
  for (int64_t i = 0; i < V; i += 16) mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(neg_inf, tail_mask(V - i), z + i));
  const float m = _mm512_reduce_max_ps(mx);
  const float zt = z[target];
  // e^(z - m) in f32 (lanes past the row: e^-inf = 0), summed in double in a fixed order; kept in z for the gradient.
  __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
  for (int64_t i = 0; i < V; i += 16) {
    const __mmask16 k = tail_mask(V - i);
    const __m512 e = exp_ps(_mm512_sub_ps(_mm512_mask_loadu_ps(neg_inf, k, z + i), _mm512_set1_ps(m)));
    s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
    if (grad) _mm512_mask_storeu_ps(z + i, k, e);
  }
  const double sum = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
  if (grad) {
    const double et = z[target];
    const __m512 c = _mm512_set1_ps(static_cast<float>(loss_scale / sum));
    for (int64_t i = 0; i < V; i += 16) {
      const __mmask16 k = tail_mask(V - i);
      _mm512_mask_storeu_ps(z + i, k, _mm512_mul_ps(c, _mm512_maskz_loadu_ps(k, z + i)));
    }
    z[target] = static_cast<float>(loss_scale * (et / sum - 1.0));
  }
  return std::log(sum) + m - zt;
}

}  // namespace ascent::kernels

#include "ascent/kernels/cpu/simd_avx512_end.h"
