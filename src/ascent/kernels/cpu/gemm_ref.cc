// Reference matmul engine: one output at a time in plain C++, defining each format's arithmetic (gemm.h) for the
// faster variants and the kernel tests. Integer formats sum exactly in int32 per row (i8) or per group/block
// (i4, q8_0, q8_0r, q4_0, q4_0r, q4_k, q4_kr, q6_k, q6_kr) and scale in f32 in ascending group order.
#include <vector>

#include "ascent/base/error.h"
#include "ascent/kernels/cpu/gemm.h"
#include "ascent/kernels/cpu/ops.h"

namespace ascent::kernels {
namespace {

// Q4_0's integer dot per block against nb blocks of activations a with scales da. The codes are read through
// scale(b) (block b's f16 scale) and byte(b, m) (byte m of its qs): shared by Q4_0 and Q4_0R, which hold the same
// codes.
template <class Scale, class Byte>
float dot_q4_0(const int8_t* a, const float* da, int64_t nb, Scale scale, Byte byte) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t s = 0;
    for (int j = 0; j < kQBlock / 2; ++j) {
      const uint8_t q = byte(b, j);
      s += a[b * kQBlock + j] * ((q & 0x0f) - 8) + a[b * kQBlock + j + 16] * ((q >> 4) - 8);
    }
    acc += static_cast<float>(s) * (f16_to_f32(scale(b)) * da[b]);
  }
  return acc;
}

// Q4_K's dot against K activations a with block scales da, per 32-element sub-block j (one activation block):
// d * scale_j * sum(a * code) - dmin * min_j * sum(a), times da. Shared by Q4_K and Q4_KR, which hold the same
// values (read through q4k_scale_min and q4k_code).
template <class Block>
float dot_q4_k(const Block* blk, const int8_t* a, const float* da, int64_t K) {
  float acc = 0.0f;
  for (int64_t sb = 0; sb < K / kQKBlock; ++sb) {
    const float d = f16_to_f32(blk[sb].d), dmin = f16_to_f32(blk[sb].dmin);
    for (int j = 0; j < kQKBlock / kQBlock; ++j) {
      int sc, m;
      q4k_scale_min(blk[sb], j, sc, m);
      const int8_t* ab = a + sb * kQKBlock + j * kQBlock;
      int32_t sq = 0, sa = 0;
      for (int i = 0; i < kQBlock; ++i) {
        sq += ab[i] * q4k_code(blk[sb], j * kQBlock + i);
        sa += ab[i];
      }
      acc += (static_cast<float>(sq) * (d * static_cast<float>(sc)) -
              static_cast<float>(sa) * (dmin * static_cast<float>(m))) *
             da[sb * (kQKBlock / kQBlock) + j];
    }
  }
  return acc;
}

// Q6_K's dot against K activations a with block scales da, per 32-element activation block j: two 16-element
// sub-blocks, each d * scale * sum(a * value), times da: shared by Q6_K and Q6_KR (values read through q6k_value).
template <class Block>
float dot_q6_k(const Block* blk, const int8_t* a, const float* da, int64_t K) {
  float acc = 0.0f;
  for (int64_t sb = 0; sb < K / kQKBlock; ++sb) {
    const float d = f16_to_f32(blk[sb].d);
    for (int j = 0; j < kQKBlock / kQBlock; ++j) {
      int32_t s[2] = {0, 0};
      for (int i = 0; i < kQBlock; ++i) {
        s[i / 16] += a[sb * kQKBlock + j * kQBlock + i] * q6k_value(blk[sb], j * kQBlock + i);
      }
      acc += (static_cast<float>(s[0]) * (d * static_cast<float>(blk[sb].scales[2 * j])) +
              static_cast<float>(s[1]) * (d * static_cast<float>(blk[sb].scales[2 * j + 1]))) *
             da[sb * (kQKBlock / kQBlock) + j];
    }
  }
  return acc;
}

float dot_int(const GemmInput& in, const MatrixView& w, int64_t t, int64_t n) {
  const int8_t* a = in.q.data() + t * in.Kp;
  const uint8_t* row = w.format == WeightFormat::I4 ? nullptr : w.row_ptr(n);  // I4 rows interleave (dtype.h)
  switch (w.format) {
    case WeightFormat::I8: {
      int32_t acc = 0;
      for (int64_t k = 0; k < in.Kp; ++k) acc += a[k] * (static_cast<int>(row[k]) - 128);
      return static_cast<float>(acc) * w.scales[n] * in.d[static_cast<size_t>(t)];
    }
    case WeightFormat::I4: {
      const int64_t G = in.Kp / w.group;
      const auto* data = static_cast<const uint8_t*>(w.data);
      float acc = 0.0f;
      for (int64_t g = 0; g < G; ++g) {
        int32_t s = 0;
        for (int64_t k = g * w.group; k < (g + 1) * w.group; ++k) s += a[k] * (int4_code(data, in.Kp, n, k) - 8);
        // Product and sum rounded apart (no fused multiply-add), as every variant does.
        const float p = static_cast<float>(s) * w.scales[int4_scale_index(G, n, g)];
        acc += p;
      }
      return acc * in.d[static_cast<size_t>(t)];
    }
    case WeightFormat::Q8_0: {
      const auto* blk = reinterpret_cast<const BlockQ8_0*>(row);
      const int64_t B = in.Kp / kQBlock;
      float acc = 0.0f;
      for (int64_t b = 0; b < in.K / kQBlock; ++b) {
        int32_t s = 0;
        for (int j = 0; j < kQBlock; ++j) s += a[b * kQBlock + j] * blk[b].qs[j];
        acc += static_cast<float>(s) * (f16_to_f32(blk[b].d) * in.d[static_cast<size_t>(t * B + b)]);
      }
      return acc;
    }
    case WeightFormat::Q8_0R: {
      const int64_t B = in.Kp / kQBlock;
      float acc = 0.0f;
      for (int64_t b = 0; b < in.K / kQBlock; ++b) {
        int32_t s = 0;
        for (int j = 0; j < kQBlock; ++j) s += a[b * kQBlock + j] * q8r_code(row, b, j);
        acc += static_cast<float>(s) * (f16_to_f32(q8r_scale(row, b)) * in.d[static_cast<size_t>(t * B + b)]);
      }
      return acc;
    }
    case WeightFormat::Q4_0: {
      const auto* blk = reinterpret_cast<const BlockQ4_0*>(row);
      return dot_q4_0(
          a, in.d.data() + t * (in.Kp / kQBlock), in.K / kQBlock, [&](int64_t b) { return blk[b].d; },
          [&](int64_t b, int m) { return blk[b].qs[m]; });
    }
    case WeightFormat::Q4_0R:
      return dot_q4_0(
          a, in.d.data() + t * (in.Kp / kQBlock), in.K / kQBlock, [&](int64_t b) { return q4r_scale(row, b); },
          [&](int64_t b, int m) { return q4r_byte(row, b, m); });
    case WeightFormat::Q4_K:
      return dot_q4_k(reinterpret_cast<const BlockQ4_K*>(row), a, in.d.data() + t * (in.Kp / kQBlock), in.K);
    case WeightFormat::Q4_KR:
      return dot_q4_k(reinterpret_cast<const BlockQ4_KR*>(row), a, in.d.data() + t * (in.Kp / kQBlock), in.K);
    case WeightFormat::Q6_K:
      return dot_q6_k(reinterpret_cast<const BlockQ6_K*>(row), a, in.d.data() + t * (in.Kp / kQBlock), in.K);
    case WeightFormat::Q6_KR:
      return dot_q6_k(reinterpret_cast<const BlockQ6_KR*>(row), a, in.d.data() + t * (in.Kp / kQBlock), in.K);
    default:
      fail("matmul: no integer kernel for {} weights", format_name(w.format));
  }
}

}  // namespace

void gemm_rows_ref(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& out) {
  const int64_t K = in.K;
  if (in.kind == ActKind::Int8PerToken || in.kind == ActKind::Int8PerBlock) {
    for (int64_t n = n0; n < n1; ++n) {
      for (int64_t t = 0; t < in.T; ++t) store_out(out, t, n, dot_int(in, w, t, n));
    }
    return;
  }
  std::vector<float> row(static_cast<size_t>(K));                                // (K,) one weight row in f32
  std::vector<float> xr(in.kind == ActKind::BF16 ? static_cast<size_t>(K) : 0);  // (K,) one bf16 activation row
  for (int64_t n = n0; n < n1; ++n) {
    row_to_f32(w, n, row.data());
    for (int64_t t = 0; t < in.T; ++t) {
      const float* x = in.x + t * K;
      if (in.kind == ActKind::BF16) {
        for (int64_t k = 0; k < K; ++k)
          xr[static_cast<size_t>(k)] = bf16_to_f32(in.xb[static_cast<size_t>(t * in.Kp + k)]);
        x = xr.data();
      }
      store_out(out, t, n, dot_f32(x, row.data(), K));
    }
  }
}

}  // namespace ascent::kernels
