// Training attention's backward (ops.h attention_backward) over a SIMD traits type V, in f32: attention_avx512.cc
// and attention_avx2.cc include it after their target pragma (V as in attention_flash.h: zero, set1, load, store,
// add, sub, mul, max, fma, exp, reduce_max, hsum, scores).
//
// One work item per (sequence, kv head), as the reference's: the item owns that head's dk and dv, so no output has
// two writers, and every sum runs in one fixed order whatever thread runs the item. K and V are held transposed,
// (D, keys) with keys padded to whole vectors, so a query row's scores q . k_j and dout . v_j come W keys per FMA
// chain, no horizontal sums. Head rows are zero-padded to whole vectors (Dp), so any head size works.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ascent/base/aligned.h"
#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/ops.h"

namespace ascent::kernels {
namespace {

struct BackwardScratch {
  AlignedVector<float> kt, vt;    // (D, Tp): K and V transposed
  AlignedVector<float> kr;        // (T, Dp): K rows, zero-padded
  AlignedVector<float> dk, dv;    // (T, Dp): the item's sums, before dk's scale
  AlignedVector<float> q, g, dq;  // (Dp,): one query row, its dout, its dq sum
  AlignedVector<float> s, ds, p;  // (Tp,): scores, then dscores and probabilities
};

// raw[tile] = sum over d of x[d] * t[d][tile keys] for tiles tile0 .. tile0 + NT - 1: W keys' dot products with x per
// tile, one FMA chain per tile in order of d (so a tile's sums do not depend on NT); NT chains in flight.
template <class V, int NT>
inline void key_dots_n(const float* x, const float* t, int64_t D, int64_t Tp, int64_t tile0, float* raw) {
  using F = typename V::F;
  constexpr int64_t W = V::kLanes;
  F acc[NT];
  for (int n = 0; n < NT; ++n) acc[n] = V::zero();
  const float* col = t + tile0 * W;
  for (int64_t d = 0; d < D; ++d) {
    const F xd = V::set1(x[d]);
    for (int n = 0; n < NT; ++n) acc[n] = V::fma(xd, V::load(col + d * Tp + n * W), acc[n]);
  }
  for (int n = 0; n < NT; ++n) V::store(raw + (tile0 + n) * W, acc[n]);
}

// key_dots_n over tiles [tile0, tile1), four at a time.
template <class V>
inline void key_dots(const float* x, const float* t, int64_t D, int64_t Tp, int64_t tile0, int64_t tile1, float* raw) {
  int64_t tile = tile0;
  for (; tile + 4 <= tile1; tile += 4) key_dots_n<V, 4>(x, t, D, Tp, tile, raw);
  switch (tile1 - tile) {
    case 3:
      return key_dots_n<V, 3>(x, t, D, Tp, tile, raw);
    case 2:
      return key_dots_n<V, 2>(x, t, D, Tp, tile, raw);
    case 1:
      return key_dots_n<V, 1>(x, t, D, Tp, tile, raw);
    default:
      return;
  }
}

template <class V>
void attention_backward_simd(const float* q, const float* k, const float* v, const float* out, const float* dout,
                             const AttentionTrainDims& d, float* dq, float* dk, float* dv) {
  using F = typename V::F;
  constexpr int64_t W = V::kLanes;
  const int64_t T = d.seq, D = d.head_dim, group = d.n_heads / d.n_kv_heads;
  const int64_t Tp = (T + W - 1) / W * W, Dp = (D + W - 1) / W * W;
  const int64_t q_stride = d.n_heads * D, kv_stride = d.n_kv_heads * D;
  auto body = [&](int64_t i0, int64_t i1) {
    thread_local BackwardScratch s;
    s.kt.assign(static_cast<size_t>(D * Tp), 0.0f);
    s.vt.assign(static_cast<size_t>(D * Tp), 0.0f);
    s.kr.assign(static_cast<size_t>(T * Dp), 0.0f);
    s.dk.resize(static_cast<size_t>(T * Dp));
    s.dv.resize(static_cast<size_t>(T * Dp));
    s.q.assign(static_cast<size_t>(Dp), 0.0f);
    s.g.assign(static_cast<size_t>(Dp), 0.0f);
    s.dq.resize(static_cast<size_t>(Dp));
    s.s.resize(static_cast<size_t>(Tp));
    s.ds.resize(static_cast<size_t>(Tp));
    s.p.resize(static_cast<size_t>(Tp));
    // Raw pointers: stores through float* could alias the vectors' own fields, which would be reloaded every time.
    float *kt = s.kt.data(), *vt = s.vt.data(), *kr = s.kr.data(), *dks = s.dk.data(), *dvs = s.dv.data();
    float *qr = s.q.data(), *gr = s.g.data(), *dqs = s.dq.data(), *sc = s.s.data(), *dsc = s.ds.data(),
          *pr = s.p.data();
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t row0 = i / d.n_kv_heads * T, kvh = i % d.n_kv_heads;
      const float* kh = k + row0 * kv_stride + kvh * D;  // key j of this head: kh + j * kv_stride
      const float* vh = v + row0 * kv_stride + kvh * D;
      for (int64_t j = 0; j < T; ++j) {
        for (int64_t c = 0; c < D; ++c) {
          kt[c * Tp + j] = kh[j * kv_stride + c];
          vt[c * Tp + j] = vh[j * kv_stride + c];
        }
        std::copy(kh + j * kv_stride, kh + j * kv_stride + D, kr + j * Dp);
      }
      std::fill(dks, dks + T * Dp, 0.0f);
      std::fill(dvs, dvs + T * Dp, 0.0f);
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        for (int64_t t = 0; t < T; ++t) {
          const int64_t at = (row0 + t) * q_stride + h * D;
          std::copy(q + at, q + at + D, qr);
          std::copy(dout + at, dout + at + D, gr);
          const int64_t first = d.window > 0 ? std::max<int64_t>(0, t - d.window + 1) : 0;
          const int64_t tile0 = first / W, tiles = t / W + 1;  // the tiles holding keys first .. t
          // Scores (keys outside first .. t are -inf, so their probabilities are 0), their max, e^(s - max).
          key_dots<V>(qr, kt, D, Tp, tile0, tiles, sc);
          F mx = V::set1(-INFINITY);
          for (int64_t tile = tile0; tile < tiles; ++tile) {
            const F st = V::scores(V::load(sc + tile * W), d.scale, tile * W, first, t);
            V::store(sc + tile * W, st);
            mx = V::max(mx, st);
          }
          const F m = V::set1(V::reduce_max(mx));
          F sum = V::zero();
          for (int64_t tile = tile0; tile < tiles; ++tile) {
            const F e = V::exp(V::sub(V::load(sc + tile * W), m));
            V::store(pr + tile * W, e);
            sum = V::add(sum, e);
          }
          // With p normalised and D_t = dout_t . out_t: ds_j = p_j (dout_t . v_j - D_t).
          const F inv = V::set1(1.0f / V::hsum(sum));
          const F Dt = V::set1(dot_f32(dout + at, out + at, D));
          key_dots<V>(gr, vt, D, Tp, tile0, tiles, dsc);
          for (int64_t tile = tile0; tile < tiles; ++tile) {
            const F p = V::mul(V::load(pr + tile * W), inv);
            V::store(pr + tile * W, p);
            V::store(dsc + tile * W, V::mul(p, V::sub(V::load(dsc + tile * W), Dt)));
          }
          // dq_t = scale sum_j ds_j k_j; dk_j += ds_j q_t (scaled at the end); dv_j += p_j dout_t. Each sum in
          // order of j (dq) or of (h, t) (dk, dv).
          std::fill(dqs, dqs + Dp, 0.0f);
          for (int64_t j = first; j <= t; ++j) {
            const F ds = V::set1(dsc[j]), pj = V::set1(pr[j]);
            const float* kj = kr + j * Dp;
            float* dkj = dks + j * Dp;
            float* dvj = dvs + j * Dp;
            for (int64_t c = 0; c < Dp; c += W) {
              V::store(dqs + c, V::fma(ds, V::load(kj + c), V::load(dqs + c)));
              V::store(dkj + c, V::fma(ds, V::load(qr + c), V::load(dkj + c)));
              V::store(dvj + c, V::fma(pj, V::load(gr + c), V::load(dvj + c)));
            }
          }
          for (int64_t c = 0; c < D; ++c) dq[at + c] = d.scale * dqs[c];
        }
      }
      for (int64_t j = 0; j < T; ++j) {
        float* dkj = dk + (row0 + j) * kv_stride + kvh * D;
        float* dvj = dv + (row0 + j) * kv_stride + kvh * D;
        for (int64_t c = 0; c < D; ++c) {
          dkj[c] = d.scale * dks[j * Dp + c];
          dvj[c] = dvs[j * Dp + c];
        }
      }
    }
  };
  ThreadPool::global().parallel_for_dynamic(d.batch * d.n_kv_heads, 1, body);
}

}  // namespace
}  // namespace ascent::kernels
