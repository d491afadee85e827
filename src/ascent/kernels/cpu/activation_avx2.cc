// AVX2 SiLU and SwiGLU rows: the reference's expression x / (1 + e^-x) (times up) with an 8-lane exp
// (simd_avx2.h, about 1 ulp) and an exact division. The unfused graph ops and the fused matmul + SwiGLU call the same
// row function. Also GELU (tanh) forward and backward and SwiGLU's backward, as row_ops.h describes.
#include <immintrin.h>

#include <cmath>

#include "ascent/kernels/cpu/row_ops.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")

#include "ascent/kernels/cpu/simd_avx2.h"

namespace ascent::kernels {
namespace {

inline __m256 silu8(__m256 x) {
  const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

// GELU's 0.5 (1 + tanh(u)) = 1 / (1 + e^-2u), u = sqrt(2/pi) (x + 0.044715 x^3): e^-2u is returned. Where it
// overflows (x below about -9) the quotients below give 0 and -0, as the limits are; NaN stays NaN.
inline __m256 gelu_exp8(__m256 x) {
  const __m256 inner = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(0.044715f), _mm256_mul_ps(x, x)), x, x);
  return exp8(_mm256_mul_ps(inner, _mm256_set1_ps(-2.0f * 0.7978845608028654f)));
}

inline __m256 gelu8(__m256 x) {
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), gelu_exp8(x)));
}

// d/dx of x s(x), s = 1 / (1 + e^-2u): s + 2 x s (1 - s) u'(x), u' = sqrt(2/pi) (1 + 3 0.044715 x^2). 1 - s is
// taken as e^-2u s where s is near 1 (e^-2u < 1), so that it keeps its relative precision.
inline __m256 gelu_grad8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f), e = gelu_exp8(x);
  const __m256 s = _mm256_div_ps(one, _mm256_add_ps(one, e));
  const __m256 oms = _mm256_blendv_ps(_mm256_sub_ps(one, s), _mm256_mul_ps(e, s), _mm256_cmp_ps(e, one, _CMP_LT_OQ));
  const __m256 du = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f),
                                  _mm256_fmadd_ps(_mm256_set1_ps(3.0f * 0.044715f), _mm256_mul_ps(x, x), one));
  const __m256 t = _mm256_mul_ps(_mm256_mul_ps(_mm256_add_ps(x, x), s), oms);
  return _mm256_fmadd_ps(t, du, s);
}

// SwiGLU's gradients for one vector: dgate = d u silu'(g), dup = d silu(g).
inline void swiglu_grad8(__m256 g, __m256 u, __m256 d, __m256* dgate, __m256* dup) {
  const __m256 one = _mm256_set1_ps(1.0f);
  // silu' = sig (1 + g (1 - sig)), 1 - sig taken as e^-g sig where sig is near 1, as in gelu_grad8.
  const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
  const __m256 sig = _mm256_div_ps(one, _mm256_add_ps(one, e));
  const __m256 oms =
      _mm256_blendv_ps(_mm256_sub_ps(one, sig), _mm256_mul_ps(e, sig), _mm256_cmp_ps(e, one, _CMP_LT_OQ));
  const __m256 dsilu = _mm256_mul_ps(sig, _mm256_fmadd_ps(g, oms, one));
  *dgate = _mm256_mul_ps(_mm256_mul_ps(d, u), dsilu);
  *dup = _mm256_mul_ps(d, _mm256_mul_ps(g, sig));
}

inline __m256i tail_mask8(int64_t left) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left < 8 ? left : 8)), idx);
}

// y[i] = F(a[i], b[i]) for i < n, eight lanes at a time and the last partial vector masked. Both inputs are loaded
// before y is stored, so y may alias either. F is a template argument, not a lambda: GCC does not give a lambda this
// file's target pragma.
template <__m256 (*F)(__m256, __m256)>
inline void map_row8(const float* a, const float* b, int64_t n, float* y) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, F(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  if (i < n) {
    const __m256i m = tail_mask8(n - i);
    _mm256_maskstore_ps(y + i, m, F(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m)));
  }
}

// A one-input function as map_row8 takes it (the second input, the same row, is unused and its loads dead).
template <__m256 (*F)(__m256)>
inline __m256 first8(__m256 x, __m256) {
  return F(x);
}

inline __m256 swiglu8(__m256 g, __m256 u) {
  return _mm256_mul_ps(silu8(g), u);
}

inline __m256 gelu_backward8(__m256 x, __m256 dy) {
  return _mm256_mul_ps(dy, gelu_grad8(x));
}

}  // namespace

void silu_row_avx2(const float* x, int64_t n, float* y) {
  map_row8<first8<silu8>>(x, x, n, y);
}

void swiglu_row_avx2(const float* gate, const float* up, int64_t n, float* y) {
  map_row8<swiglu8>(gate, up, n, y);
}

void gelu_tanh_row_avx2(const float* x, int64_t n, float* y) {
  map_row8<first8<gelu8>>(x, x, n, y);
}

void gelu_tanh_backward_row_avx2(const float* x, const float* dy, int64_t n, float* dx) {
  map_row8<gelu_backward8>(x, dy, n, dx);
}

void swiglu_backward_row_avx2(const float* gate, const float* up, const float* dy, int64_t n, float* dgate,
                              float* dup) {
  // All three inputs are read before either store: both outputs may alias dy.
  __m256 dg, du;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    swiglu_grad8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i), _mm256_loadu_ps(dy + i), &dg, &du);
    _mm256_storeu_ps(dgate + i, dg);
    _mm256_storeu_ps(dup + i, du);
  }
  if (i < n) {
    const __m256i m = tail_mask8(n - i);
    swiglu_grad8(_mm256_maskload_ps(gate + i, m), _mm256_maskload_ps(up + i, m), _mm256_maskload_ps(dy + i, m), &dg,
                 &du);
    _mm256_maskstore_ps(dgate + i, m, dg);
    _mm256_maskstore_ps(dup + i, m, du);
  }
}

double cross_entropy_row_avx2(float* z, int64_t V, int32_t target, float loss_scale, bool grad) {
  const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
  // Elements i .. i + 7 of z, -inf past the row (so its e^(z - m) is 0).
  const auto load = [&](int64_t i) {
    if (i + 8 <= V) return _mm256_loadu_ps(z + i);
    const __m256i k = tail_mask8(V - i);
    return _mm256_blendv_ps(neg_inf, _mm256_maskload_ps(z + i, k), _mm256_castsi256_ps(k));
  };
  __m256 mx = neg_inf;
  for (int64_t i = 0; i < V; i += 8) mx = _mm256_max_ps(mx, load(i));
  const float m = hmax8(mx);
  const float zt = z[target];
  // e^(z - m) in f32, summed in double in a fixed order; kept in z for the gradient.
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  for (int64_t i = 0; i < V; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(load(i), _mm256_set1_ps(m)));
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    if (grad) _mm256_maskstore_ps(z + i, tail_mask8(V - i), e);
  }
  const __m256d s = _mm256_add_pd(s0, s1);
  const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
  const double sum = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
  if (grad) {
    const double et = z[target];
    const __m256 c = _mm256_set1_ps(static_cast<float>(loss_scale / sum));
    for (int64_t i = 0; i < V; i += 8) {
      const __m256i k = tail_mask8(V - i);
      _mm256_maskstore_ps(z + i, k, _mm256_mul_ps(c, _mm256_maskload_ps(z + i, k)));
    }
    z[target] = static_cast<float>(loss_scale * (et / sum - 1.0));
  }
  return std::log(sum) + m - zt;
}

}  // namespace ascent::kernels

#pragma GCC pop_options
