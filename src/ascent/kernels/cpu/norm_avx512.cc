// AVX-512 LayerNorm rows: the reference's double sums (norm_cpu.cc) eight values at a time. Lane j of each
// accumulator is the reference's partial sum j (sum8's interleaving), the lanes are combined in sum8's order and each
// double operation is the reference's own (no fused multiply-add: CMakeLists.txt sets -ffp-contract=off), so every
// result is bitwise the reference's.
#include <immintrin.h>

#include <cmath>
#include <utility>

#include "ascent/kernels/cpu/row_ops.h"

#include "ascent/kernels/cpu/simd_avx512_begin.h"

#pragma GCC target("avx512f")

namespace ascent::kernels {
namespace {

inline __m512d widen8(const float* p) {
  return _mm512_cvtps_pd(_mm256_loadu_ps(p));
}

// sum8's closing order over the eight lanes.
inline double combine8(__m512d v) {
  alignas(64) double p[8];
  _mm512_store_pd(p, v);
  return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

}  // namespace

std::pair<double, double> layer_norm_stats_avx512(const float* xr, int64_t C, float eps) {
  const int64_t c8 = C / 8 * 8;
  const auto n = static_cast<double>(C);
  __m512d s = _mm512_setzero_pd();
  for (int64_t c = 0; c < c8; c += 8) s = _mm512_add_pd(s, widen8(xr + c));
  double sum = combine8(s);
  for (int64_t c = c8; c < C; ++c) sum += static_cast<double>(xr[c]);
  const double mean = sum / n;
  const __m512d vm = _mm512_set1_pd(mean);
  __m512d q = _mm512_setzero_pd();
  for (int64_t c = 0; c < c8; c += 8) {
    const __m512d d = _mm512_sub_pd(widen8(xr + c), vm);
    q = _mm512_add_pd(q, _mm512_mul_pd(d, d));
  }
  double var = combine8(q);
  for (int64_t c = c8; c < C; ++c) var += (xr[c] - mean) * (xr[c] - mean);
  return {mean, 1.0 / std::sqrt(var / n + eps)};
}

void layer_norm_backward_row_avx512(const float* xr, const float* dyr, const float* w, int64_t C, float eps,
                                    double* acc, float* dxr) {
  const int64_t c8 = C / 8 * 8;
  const auto n = static_cast<double>(C);
  const auto [mean, inv] = layer_norm_stats_avx512(xr, C, eps);
  const __m512d vm = _mm512_set1_pd(mean), vi = _mm512_set1_pd(inv);
  // g = dy * w and xhat = (x - mean) * inv, as the reference forms them.
  __m512d sg = _mm512_setzero_pd(), sgx = _mm512_setzero_pd();
  for (int64_t c = 0; c < c8; c += 8) {
    const __m512d g = _mm512_mul_pd(widen8(dyr + c), widen8(w + c));
    const __m512d xhat = _mm512_mul_pd(_mm512_sub_pd(widen8(xr + c), vm), vi);
    sg = _mm512_add_pd(sg, g);
    sgx = _mm512_add_pd(sgx, _mm512_mul_pd(g, xhat));
  }
  double sum_g = combine8(sg), sum_gx = combine8(sgx);
  for (int64_t c = c8; c < C; ++c) sum_g += static_cast<double>(dyr[c]) * w[c];
  for (int64_t c = c8; c < C; ++c) sum_gx += static_cast<double>(dyr[c]) * w[c] * ((xr[c] - mean) * inv);
  const double mg = sum_g / n, mgx = sum_gx / n;
  const __m512d vmg = _mm512_set1_pd(mg), vmgx = _mm512_set1_pd(mgx);
  for (int64_t c = 0; c < c8; c += 8) {
    const __m512d dy = widen8(dyr + c);
    const __m512d xhat = _mm512_mul_pd(_mm512_sub_pd(widen8(xr + c), vm), vi);
    _mm512_storeu_pd(acc + c, _mm512_add_pd(_mm512_loadu_pd(acc + c), _mm512_mul_pd(dy, xhat)));
    _mm512_storeu_pd(acc + C + c, _mm512_add_pd(_mm512_loadu_pd(acc + C + c), dy));
    const __m512d g = _mm512_mul_pd(dy, widen8(w + c));
    const __m512d dx = _mm512_mul_pd(vi, _mm512_sub_pd(_mm512_sub_pd(g, vmg), _mm512_mul_pd(xhat, vmgx)));
    _mm256_storeu_ps(dxr + c, _mm512_cvtpd_ps(dx));
  }
  for (int64_t c = c8; c < C; ++c) {
    const double xhat = (xr[c] - mean) * inv;
    acc[c] += dyr[c] * xhat;
    acc[C + c] += dyr[c];
    dxr[c] = static_cast<float>(inv * (static_cast<double>(dyr[c]) * w[c] - mg - xhat * mgx));
  }
}

}  // namespace ascent::kernels

#include "ascent/kernels/cpu/simd_avx512_end.h"
