// Activation preparation for the matmul engine (gemm.h): int8 quantization per token or per 32-element block, and
// bf16 rounding. It touches T * K values once per matmul, against T * K * N multiply-adds, so it is scalar code
// threaded over tokens. The exceptions are the int8 quantization and the q4r code placement: under AVX-512 and AVX2
// they run in gemm_input_avx512.cc and gemm_input_avx2.cc (same bits). A decode step prepares its single token on
// one thread while the other waits. Buffers are resized, not reassigned, and only the padding is zeroed: callers
// keep a GemmInput across calls, so prefill does not fault in (and clear) megabytes of fresh pages for every matmul.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "ascent/base/error.h"
#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/gemm.h"
#include "ascent/kernels/cpu/isa.h"

namespace ascent::kernels {

// Without the poison, a NaN would be lost. A max over |x| skips it, so d comes out finite, and the NaN's code is
// whatever the float-to-int conversion makes of it (undefined behaviour in scalar code). A quantized model with a
// NaN activation would then go on generating plausible text.
float poison_span(int64_t n, int8_t* q, int32_t* sum) {
  std::fill(q, q + n, int8_t{0});
  if (sum != nullptr) *sum = 0;
  return std::numeric_limits<float>::quiet_NaN();
}

namespace {

// Quantizes n values (scaled by s when given) to int8 with d = amax / 127, rounding to nearest even; returns d.
float quantize_span(const float* x, const float* s, int64_t n, int8_t* q, int32_t* sum) {
  float amax = 0.0f;
  bool finite = true;
  for (int64_t k = 0; k < n; ++k) {
    const float v = s != nullptr ? x[k] * s[k] : x[k];
    finite = finite && std::isfinite(v);
    amax = std::max(amax, std::fabs(v));
  }
  if (!finite) return poison_span(n, q, sum);
  const float d = amax / 127.0f;
  const float id = inverse_scale(d);
  // Adding and subtracting 1.5 * 2^23 rounds |v| < 2^22 to the nearest integer, ties to even, as nearbyint does
  // in the default rounding mode, without a libm call per value (v is at most 127 here).
  constexpr float kRound = 12582912.0f;
  int32_t total = 0;
  for (int64_t k = 0; k < n; ++k) {
    const float v = (s != nullptr ? x[k] * s[k] : x[k]) * id;
    const int r = static_cast<int>((v + kRound) - kRound);
    q[k] = static_cast<int8_t>(r < -127 ? -127 : r > 127 ? 127 : r);
    total += q[k];
  }
  if (sum != nullptr) *sum = total;
  return d;
}

// One token's Q4_0 layout (gemm.h: q4_quads, q4_off, q4_d) from its per-block quantized row q (K columns) and
// block scales d; the group past K is zero-filled to 128 columns.
void q4_layout(const int8_t* q, const float* d, int64_t K, int8_t* quads, int32_t* off, float* lane_d) {
  const int64_t nb = K / kQBlock;
  for (int64_t g = 0; g * 4 < nb; ++g) {
    for (int64_t i = 0; i < 4; ++i) {  // block 4g + i
      const int64_t b = 4 * g + i;
      for (int64_t h = 0; h < 2; ++h) {  // columns 0-15, then 16-31
        int8_t* dst = quads + g * 128 + h * 64 + i * 16;
        if (b < nb) {
          std::copy(q + b * kQBlock + h * 16, q + b * kQBlock + h * 16 + 16, dst);
        } else {
          std::fill(dst, dst + 16, int8_t{0});
        }
      }
      for (int64_t l = 0; l < 4; ++l) {
        int32_t sum = 0;
        for (int64_t e = 0; b < nb && e < 4; ++e) sum += q[b * kQBlock + 4 * l + e] + q[b * kQBlock + 16 + 4 * l + e];
        off[g * 16 + i * 4 + l] = -8 * sum;
        lane_d[g * 16 + i * 4 + l] = b < nb ? d[b] : 0.0f;
      }
    }
  }
}

// One token's Q6_KR layout (gemm.h: q6r, q6r_off, q6r_d) from its per-block quantized row q and block scales d
// (K columns, a multiple of 256).
void q6r_layout(const int8_t* q, const float* d, int64_t K, int8_t* out, int32_t* off, float* lane_d) {
  for (int64_t s = 0; s < K / 16; ++s) {  // sub-block s: super-block s / 16, half s % 16 / 8, lane s % 8
    const int8_t* a = q + 16 * s;
    int32_t sum = 0;
    for (int64_t c = 0; c < 16; ++c) sum += a[c];
    off[s] = -32 * sum;
    lane_d[s] = d[s / 2];
    for (int64_t k = 0; k < 4; ++k) {
      int8_t* dst = out + s / 16 * kQKBlock + 64 * k + 32 * (s % 16 / 8) + 4 * (s % 8);
      std::copy(a + 4 * k, a + 4 * k + 4, dst);
    }
  }
}

// The SIMD quantizers give quantize_span's bits for finite values. For a span whose values times s hold a NaN or an
// infinity (a non-finite x or s, or a product that overflows), they return NaN, and the span gets quantize_span's
// NaN scale and zero codes here. The test rides in their max pass: two separate passes over x and s would cost a
// decode step's single-threaded preparation about as much as the quantization itself.
float quantize_any(const float* x, const float* s, int64_t n, int8_t* q, int32_t* sum) {
  if (active_isa() == Isa::Ref) return quantize_span(x, s, n, q, sum);
  const float d =
      active_isa() == Isa::Avx512 ? quantize_span_avx512(x, s, n, q, sum) : quantize_span_avx2(x, s, n, q, sum);
  return std::isfinite(d) ? d : poison_span(n, q, sum);
}

// nb blocks of 32 values through a SIMD quantizer of G blocks at a time (gemm.h). Whole groups go in place. The last
// blocks, fewer than G, go as a group padded with zero blocks, whose first ones are copied out (each block's result
// is its own).
template <int G>
void quantize_block_groups(void (*group)(const float*, int8_t*, float*, int32_t*), const float* x, int64_t nb,
                           int8_t* q, float* d, int32_t* sum) {
  int64_t b = 0;
  for (; b + G <= nb; b += G) group(x + kQBlock * b, q + kQBlock * b, d + b, sum + b);
  if (b == nb) return;
  const int64_t n = nb - b;
  alignas(64) float xt[G * kQBlock] = {};
  int8_t qt[G * kQBlock];
  float dt[G];
  int32_t st[G];
  std::copy_n(x + kQBlock * b, kQBlock * n, xt);
  group(xt, qt, dt, st);
  std::copy_n(qt, kQBlock * n, q + kQBlock * b);
  std::copy_n(dt, n, d + b);
  std::copy_n(st, n, sum + b);
}

// nb blocks of 32 values, each quantized as quantize_span does one: codes at q + 32 b, d[b], sum[b].
void quantize_blocks(const float* x, int64_t nb, int8_t* q, float* d, int32_t* sum) {
  switch (active_isa()) {
    case Isa::Avx512:
      return quantize_block_groups<16>(quantize_blocks32x16_avx512, x, nb, q, d, sum);
    case Isa::Avx2:
      return quantize_block_groups<8>(quantize_blocks32x8_avx2, x, nb, q, d, sum);
    case Isa::Ref:
      break;
  }
  for (int64_t b = 0; b < nb; ++b) d[b] = quantize_span(x + b * kQBlock, nullptr, kQBlock, q + b * kQBlock, &sum[b]);
}

// GemmInput::sum32 for one token's codes (Kp / 32 blocks).
void code_sums32(const int8_t* q, int64_t nb, int32_t* out) {
  switch (active_isa()) {
    case Isa::Avx512:
      return code_sums32_avx512(q, nb, out);
    case Isa::Avx2:
      return code_sums32_avx2(q, nb, out);
    case Isa::Ref:
      break;
  }
  for (int64_t c = 0; c < nb; ++c) {
    int32_t s = 0;
    for (int j = 0; j < 32; ++j) s += q[c * 32 + j];
    out[c] = s;
  }
}

// The weight formats whose SIMD kernels read the activations in GemmInput::q4r's order.
bool reads_q4r(WeightFormat t) {
  return t == WeightFormat::Q4_0R || t == WeightFormat::Q4_KR || t == WeightFormat::Q8_0R;
}

// The weight formats whose AVX-512 decode loops read GemmInput::lane_sum and lane_d.
bool reads_lanes(WeightFormat t) {
  return t == WeightFormat::Q8_0 || t == WeightFormat::Q6_K;
}

}  // namespace

ActKind act_kind(WeightFormat weight) {
  switch (weight) {
    case WeightFormat::BF16:
      return ActKind::BF16;
    case WeightFormat::I8:
    case WeightFormat::I4:
      return ActKind::Int8PerToken;
    case WeightFormat::Q8_0:
    case WeightFormat::Q8_0R:
    case WeightFormat::Q4_0:
    case WeightFormat::Q4_0R:
    case WeightFormat::Q4_K:
    case WeightFormat::Q4_KR:
    case WeightFormat::Q6_K:
    case WeightFormat::Q6_KR:
      return ActKind::Int8PerBlock;
    default:
      return ActKind::F32;
  }
}

bool gemm_input_fits(const GemmInput& in, const MatrixView& w) {
  return in.kind == act_kind(w.format) && w.cols == in.K && in.Kp == padded_cols(w.format, in.K) &&
         (in.kind != ActKind::Int8PerToken || in.input_scale == w.input_scale) &&
         (w.format != WeightFormat::Q4_0 || in.q4_ready) && (w.format != WeightFormat::Q4_K || in.kq_ready) &&
         (!reads_q4r(w.format) || in.q4r_ready) && (w.format != WeightFormat::Q6_KR || in.q6r_ready) &&
         (w.format != WeightFormat::I4 || in.sum32_ready) && (in.T != 1 || !reads_lanes(w.format) || in.lanes_ready);
}

void prepare_gemm_input(const float* x, int64_t T, const MatrixView& w, GemmInput& in) {
  const int64_t K = w.cols;
  in.x = x;
  in.T = T;
  in.K = K;
  in.kind = act_kind(w.format);
  in.input_scale = in.kind == ActKind::Int8PerToken ? w.input_scale : nullptr;
  in.Kp = padded_cols(w.format, K);
  in.q4_ready = false;
  in.q4r_ready = false;
  in.kq_ready = false;
  in.q6r_ready = false;
  in.sum32_ready = false;
  in.lanes_ready = false;
  const auto TKp = static_cast<size_t>(T * in.Kp);
  // Tokens are independent: prefill prepares them on every thread (decode's single token runs inline).
  auto per_token = [T](const auto& fn) {
    ThreadPool::global().parallel_for(T, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) fn(t);
    });
  };
  switch (in.kind) {
    case ActKind::F32:
      // A zero-padded copy lets the SIMD loops read whole vectors at the row end.
      in.xf.resize(TKp);
      per_token([&](int64_t t) {
        float* row = in.xf.data() + t * in.Kp;
        std::copy(x + t * K, x + (t + 1) * K, row);
        std::fill(row + K, row + in.Kp, 0.0f);
      });
      return;
    case ActKind::BF16:
      in.xb.resize(TKp);
      per_token([&](int64_t t) {
        uint16_t* row = in.xb.data() + t * in.Kp;
        for (int64_t k = 0; k < K; ++k) row[k] = f32_to_bf16(x[t * K + k]);
        std::fill(row + K, row + in.Kp, uint16_t{0});
      });
      return;
    case ActKind::Int8PerToken:
      in.q.resize(TKp);
      in.d.resize(static_cast<size_t>(T));
      in.qsum.resize(static_cast<size_t>(T));
      in.sum32_ready = w.format == WeightFormat::I4;
      if (in.sum32_ready) in.sum32.resize(static_cast<size_t>(T * in.Kp / 32));
      per_token([&](int64_t t) {
        int8_t* row = in.q.data() + t * in.Kp;
        in.d[static_cast<size_t>(t)] = quantize_any(x + t * K, w.input_scale, K, row, &in.qsum[static_cast<size_t>(t)]);
        std::fill(row + K, row + in.Kp, int8_t{0});
        if (in.sum32_ready) code_sums32(row, in.Kp / 32, in.sum32.data() + t * in.Kp / 32);
      });
      break;
    case ActKind::Int8PerBlock: {
      ASCENT_CHECK(K % kQBlock == 0, "matmul: {} weight {} needs K a multiple of {}", format_name(w.format),
                   fmt::format("({}, {})", w.rows, w.cols), kQBlock);
      in.q.resize(TKp);
      const int64_t B = in.Kp / kQBlock;
      in.d.resize(static_cast<size_t>(T * B));
      // K-quant weights also get kq_dax and kq_pairs (Q6_K too, so that a Q4_K_M model's Q6_K and Q4_K matrices can
      // share one input), Q4_0 weights the q4_* layout, Q4_0R, Q4_KR and Q8_0R the q4r*, Q6_KR the q6r* (gemm.h).
      const bool super_blocks = (w.format == WeightFormat::Q4_K || w.format == WeightFormat::Q6_K) && K % kQKBlock == 0;
      in.kq_ready = super_blocks;
      if (super_blocks) {
        in.kq_dax.resize(static_cast<size_t>(T * K / kQKBlock * 16));
        in.kq_pairs.resize(static_cast<size_t>(T * K));
      }
      // Only the SIMD kernels read those layouts (q4_*: the AVX-512 Q4_0 kernel; q4r*, q6r*: the AVX-512 and AVX2
      // repacked ones); the flags say the input was prepared for the format.
      in.q4_ready = w.format == WeightFormat::Q4_0;
      in.q4r_ready = reads_q4r(w.format);
      in.q6r_ready = w.format == WeightFormat::Q6_KR;
      const bool q4 = in.q4_ready && avx512_kernel_runs(w.format);
      const bool q4r = in.q4r_ready && repacked_kernel_runs(w.format);
      const bool q6r = in.q6r_ready && repacked_kernel_runs(w.format);
      const int64_t Kq = (K + 127) / 128 * 128;
      if (q4) {
        in.q4_quads.resize(static_cast<size_t>(T * Kq));
        in.q4_off.resize(static_cast<size_t>(T * Kq / 8));
        in.q4_d.resize(static_cast<size_t>(T * Kq / 8));
      }
      if (q4r) {
        in.q4r.resize(TKp);
        in.q4r_off.resize(static_cast<size_t>(T * B));
        in.q4r_dsa.resize(static_cast<size_t>(T * B));
      }
      if (q6r) {
        in.q6r.resize(static_cast<size_t>(T * K));
        in.q6r_off.resize(static_cast<size_t>(T * K / 16));
        in.q6r_d.resize(static_cast<size_t>(T * K / 16));
      }
      per_token([&](int64_t t) {
        int8_t* row = in.q.data() + t * in.Kp;
        float* d = in.d.data() + t * B;
        const int64_t nb = K / kQBlock;
        thread_local std::vector<int32_t> sums;  // each block's codes' sum; per thread, kept (no allocation per call)
        sums.resize(static_cast<size_t>(nb));
        quantize_blocks(x + t * K, nb, row, d, sums.data());
        for (int64_t b = 0; b < nb; ++b) {
          const int32_t sum = sums[static_cast<size_t>(b)];
          if (super_blocks) {
            float* dax = in.kq_dax.data() + t * K / kQBlock * 2;  // 16 floats per 8 blocks
            dax[2 * b] = d[b];
            dax[2 * b + 1] = d[b] * static_cast<float>(sum);
          }
          if (q4r) {  // per block, minus 8 x its activations' sum and d times that sum
            in.q4r_off[static_cast<size_t>(t * B + b)] = -8 * sum;
            in.q4r_dsa[static_cast<size_t>(t * B + b)] = d[b] * static_cast<float>(sum);
          }
        }
        std::fill(row + K, row + in.Kp, int8_t{0});
        std::fill(d + K / kQBlock, d + B, 0.0f);
        if (super_blocks) {  // each 128 columns as 0-31, 64-95, 32-63, 96-127
          for (int64_t k = 0; k < K; k += 128) {
            for (int64_t q = 0; q < 4; ++q) {
              const int8_t* src = row + k + (q % 2) * 64 + (q / 2) * 32;
              std::copy(src, src + 32, in.kq_pairs.data() + t * K + k + 32 * q);
            }
          }
        }
        if (q4r) {  // the padding blocks past K: sum 0, d 0
          std::fill(in.q4r_off.begin() + t * B + K / kQBlock, in.q4r_off.begin() + (t + 1) * B, 0);
          std::fill(in.q4r_dsa.begin() + t * B + K / kQBlock, in.q4r_dsa.begin() + (t + 1) * B, 0.0f);
          // Only the SIMD kernels read these codes (repacked_kernel_runs: AVX2 at least).
          if (active_isa() == Isa::Avx512) {
            q4r_codes_avx512(row, in.Kp, in.q4r.data() + t * in.Kp);
          } else {
            q4r_codes_avx2(row, in.Kp, in.q4r.data() + t * in.Kp);
          }
        }
        if (q6r)
          q6r_layout(row, d, K, in.q6r.data() + t * K, in.q6r_off.data() + t * K / 16, in.q6r_d.data() + t * K / 16);
        if (q4)
          q4_layout(row, d, K, in.q4_quads.data() + t * Kq, in.q4_off.data() + t * Kq / 8, in.q4_d.data() + t * Kq / 8);
      });
      break;
    }
  }
  // A single token for a Q8_0 or Q6_K weight also gets the per-lane vectors their AVX-512 decode loops read (gemm.h).
  if (T == 1 && in.kind == ActKind::Int8PerBlock && reads_lanes(w.format)) {
    in.lanes_ready = true;
    const int64_t lanes = in.Kp / 4;
    in.lane_sum.resize(static_cast<size_t>(lanes));
    in.lane_d.resize(static_cast<size_t>(lanes));
    for (int64_t i = 0; i < lanes; ++i) {
      const int8_t* q = in.q.data() + 4 * i;
      in.lane_sum[static_cast<size_t>(i)] = q[0] + q[1] + q[2] + q[3];
      in.lane_d[static_cast<size_t>(i)] = in.d[static_cast<size_t>(4 * i / kQBlock)];
    }
  }
}

namespace {

using GemmRowsFn = void (*)(const GemmInput&, const MatrixView&, int64_t, int64_t, const GemmOut&);

// A SIMD variant's kernels, indexed by WeightFormat.
template <Isa kIsa>
constexpr std::array<GemmRowsFn, kWeightFormatCount> kGemmTable = []<size_t... I>(std::index_sequence<I...>) {
  return std::array<GemmRowsFn, kWeightFormatCount>{&gemm_rows_simd<kIsa, kWeightFormats[I]>...};
}
(std::make_index_sequence<kWeightFormatCount>{});

}  // namespace

void gemm_rows(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& out) {
  const auto f = static_cast<size_t>(w.format);
  switch (matmul_isa(w.format)) {
    case Isa::Ref:
      return gemm_rows_ref(in, w, n0, n1, out);
    case Isa::Avx2:
      return kGemmTable<Isa::Avx2>[f](in, w, n0, n1, out);
    case Isa::Avx512:
      return kGemmTable<Isa::Avx512>[f](in, w, n0, n1, out);
  }
}

}  // namespace ascent::kernels
