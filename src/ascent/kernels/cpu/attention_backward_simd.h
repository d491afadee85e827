// Training attention's backward (ops.h attention_backward) over a SIMD traits type V, in f32: attention_avx512.cc
// and attention_avx2.cc include it after their target pragma (V as in attention_flash.h: zero, set1, load, store,
// add, sub, mul, max, fma, exp, reduce_max, hsum, scores).
//
// One work item per (sequence, kv head), as the reference's: the item owns that head's dk and dv, so no output has
// two writers, and every sum runs in one fixed order whatever thread runs the item. K and V are held transposed,
// (D, keys) with keys padded to whole vectors, so a query row's scores q . k_j and dout . v_j come W keys per FMA
// chain, no horizontal sums. Head rows are zero-padded to whole vectors (Dp), so any head size works. A key outside a
// row's window adds a zero product (probability and dscore 0): finite sums keep their value.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ascent/base/aligned.h"
#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/ops.h"

namespace ascent::kernels {
namespace {

// Query rows are taken kRows at a time, so each key's dk and dv are loaded and stored once per block of rows rather
// than once per row, and the score dot products run kRows chains per key tile.
constexpr int kRows = 4;

struct BackwardScratch {
  AlignedVector<float> kt, vt;    // (D, Tp): K and V transposed
  AlignedVector<float> kr;        // (T, Dp): K rows, zero-padded
  AlignedVector<float> dk, dv;    // (T, Dp): the item's sums, before dk's scale
  AlignedVector<float> q, g, dq;  // (kRows, Dp): a block's query rows, their douts, their dq sums
  AlignedVector<float> s, ds, p;  // (kRows, Tp): scores, then dscores and probabilities
};

// raw[r][tile] = sum over d of x[r][d] * t[d][tile keys] for the kRows rows of x (Dp apart) and tiles tile0 ..
// tile0 + NT - 1: W keys' dot products per tile, one FMA chain per (row, tile) in order of d; kRows * NT chains in
// flight.
template <class V, int NT>
inline void key_dots_n(const float* x, int64_t Dp, const float* t, int64_t D, int64_t Tp, int64_t tile0, float* raw) {
  using F = typename V::F;
  constexpr int64_t W = V::kLanes;
  F acc[kRows][NT];
  for (int r = 0; r < kRows; ++r)
    for (int n = 0; n < NT; ++n) acc[r][n] = V::zero();
  const float* col = t + tile0 * W;
  for (int64_t d = 0; d < D; ++d) {
    F kv[NT];
    for (int n = 0; n < NT; ++n) kv[n] = V::load(col + d * Tp + n * W);
    for (int r = 0; r < kRows; ++r) {
      const F xd = V::set1(x[r * Dp + d]);
      for (int n = 0; n < NT; ++n) acc[r][n] = V::fma(xd, kv[n], acc[r][n]);
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int n = 0; n < NT; ++n) V::store(raw + r * Tp + (tile0 + n) * W, acc[r][n]);
}

// key_dots_n over tiles [tile0, tile1), two at a time.
template <class V>
inline void key_dots(const float* x, int64_t Dp, const float* t, int64_t D, int64_t Tp, int64_t tile0, int64_t tile1,
                     float* raw) {
  int64_t tile = tile0;
  for (; tile + 2 <= tile1; tile += 2) key_dots_n<V, 2>(x, Dp, t, D, Tp, tile, raw);
  if (tile < tile1) key_dots_n<V, 1>(x, Dp, t, D, Tp, tile, raw);
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
    s.q.assign(static_cast<size_t>(kRows * Dp), 0.0f);
    s.g.assign(static_cast<size_t>(kRows * Dp), 0.0f);
    s.dq.resize(static_cast<size_t>(kRows * Dp));
    s.s.resize(static_cast<size_t>(kRows * Tp));
    s.ds.resize(static_cast<size_t>(kRows * Tp));
    s.p.resize(static_cast<size_t>(kRows * Tp));
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
        for (int64_t t0 = 0; t0 < T; t0 += kRows) {
          // Rows t0 .. t0 + nr - 1; a block's missing rows (at T's end) have zero q and dout and are not written.
          const int nr = static_cast<int>(std::min<int64_t>(kRows, T - t0));
          int64_t first[kRows], at[kRows];
          for (int r = 0; r < kRows; ++r) {
            const int64_t t = t0 + r;
            first[r] = d.window > 0 ? std::max<int64_t>(0, t - d.window + 1) : 0;
            at[r] = (row0 + t) * q_stride + h * D;
            if (r < nr) {
              std::copy(q + at[r], q + at[r] + D, qr + r * Dp);
              std::copy(dout + at[r], dout + at[r] + D, gr + r * Dp);
            } else {
              std::fill(qr + r * Dp, qr + r * Dp + D, 0.0f);
              std::fill(gr + r * Dp, gr + r * Dp + D, 0.0f);
            }
          }
          // Keys lo .. hi cover every row's first .. t; each row's keys outside its own range score -inf, so their
          // probabilities and dscores are 0 and add nothing below.
          const int64_t lo = first[0], hi = t0 + nr - 1;
          const int64_t tile0 = lo / W, tiles = hi / W + 1;
          key_dots<V>(qr, Dp, kt, D, Tp, tile0, tiles, sc);
          key_dots<V>(gr, Dp, vt, D, Tp, tile0, tiles, dsc);
          for (int r = 0; r < nr; ++r) {
            float *scr = sc + r * Tp, *pr_r = pr + r * Tp, *dsr = dsc + r * Tp;
            F mx = V::set1(-INFINITY);
            for (int64_t tile = tile0; tile < tiles; ++tile) {
              const F st = V::scores(V::load(scr + tile * W), d.scale, tile * W, first[r], t0 + r);
              V::store(scr + tile * W, st);
              mx = V::max(mx, st);
            }
            const F m = V::set1(V::reduce_max(mx));
            F sum = V::zero();
            for (int64_t tile = tile0; tile < tiles; ++tile) {
              const F e = V::exp(V::sub(V::load(scr + tile * W), m));
              V::store(pr_r + tile * W, e);
              sum = V::add(sum, e);
            }
            // With p normalised and D_t = dout_t . out_t: ds_j = p_j (dout_t . v_j - D_t).
            const F inv = V::set1(1.0f / V::hsum(sum));
            const F Dt = V::set1(dot_f32(dout + at[r], out + at[r], D));
            for (int64_t tile = tile0; tile < tiles; ++tile) {
              const F p = V::mul(V::load(pr_r + tile * W), inv);
              V::store(pr_r + tile * W, p);
              V::store(dsr + tile * W, V::mul(p, V::sub(V::load(dsr + tile * W), Dt)));
            }
          }
          for (int r = nr; r < kRows; ++r) {
            std::fill(pr + r * Tp + tile0 * W, pr + r * Tp + tiles * W, 0.0f);
            std::fill(dsc + r * Tp + tile0 * W, dsc + r * Tp + tiles * W, 0.0f);
          }
          // dq_t = scale sum_j ds_j k_j; dk_j += ds_j q_t (scaled at the end); dv_j += p_j dout_t. dq's sum runs in
          // order of j, dk's and dv's in order of (h, t).
          for (int64_t c = 0; c < Dp; c += W) {
            F acc[kRows], qv[kRows], gv[kRows];
            for (int r = 0; r < kRows; ++r) {
              acc[r] = V::zero();
              qv[r] = V::load(qr + r * Dp + c);
              gv[r] = V::load(gr + r * Dp + c);
            }
            for (int64_t j = lo; j <= hi; ++j) {
              const F kj = V::load(kr + j * Dp + c);
              F dkj = V::load(dks + j * Dp + c), dvj = V::load(dvs + j * Dp + c);
              for (int r = 0; r < kRows; ++r) {
                const F ds = V::set1(dsc[r * Tp + j]), pj = V::set1(pr[r * Tp + j]);
                acc[r] = V::fma(ds, kj, acc[r]);
                dkj = V::fma(ds, qv[r], dkj);
                dvj = V::fma(pj, gv[r], dvj);
              }
              V::store(dks + j * Dp + c, dkj);
              V::store(dvs + j * Dp + c, dvj);
            }
            for (int r = 0; r < kRows; ++r) V::store(dqs + r * Dp + c, acc[r]);
          }
          for (int r = 0; r < nr; ++r)
            for (int64_t c = 0; c < D; ++c) dq[at[r] + c] = d.scale * dqs[r * Dp + c];
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
