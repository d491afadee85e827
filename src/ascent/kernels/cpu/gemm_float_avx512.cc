// AVX-512 kernels for float weights: f32 and f16 times f32 activations with FMA (16 columns per step, the tail
// masked), bf16 times bf16-rounded activations with vdpbf16ps. Each output is accumulated lane-wise in one 512-bit
// register over K and reduced once, so only the float summation order differs from the reference.
#include "ascent/kernels/cpu/gemm_avx512_common.h"

namespace ascent::kernels {
namespace {

// Decode for the float kernels: rows in pairs through Kern::body<R, 1>, prefetching into L2.
template <class Kern>
void decode_pairs(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& o, bool masked) {
  decode_in_pairs(n0, n1, o, [&]<int R>(int64_t n, float res[4][4]) {
    if (masked) {
      Kern::template body<R, 1, true, PrefetchTo::L2>(in, w, n, 0, res);
    } else {
      Kern::template body<R, 1, false, PrefetchTo::L2>(in, w, n, 0, res);
    }
  });
}

// f32 and f16 weights times f32 activations, 16 columns per step, the tail masked.
template <WeightFormat WT>
struct FloatKern {
  static constexpr int kDecodeRows = 1;  // decode runs decode_rows
  static __m512 load_w(const uint8_t* row, int64_t k, __mmask16 m) {
    if constexpr (WT == WeightFormat::F32) {
      return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + k);
    } else {
      return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(row) + k));
    }
  }
  static __m512 load_w(const uint8_t* row, int64_t k) {
    if constexpr (WT == WeightFormat::F32) {
      return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + k);
    } else {
      return _mm512_cvtph_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(row) + k)));
    }
  }
  // kMasked: rows whose length is not a multiple of 16 take a mask on every step. Only when K needs it: a mask in
  // the loop makes GCC 12 store every accumulator to the stack on every step (measured 2x slower), and a masked
  // tail after the loop does the same.
  template <int R, int TT, bool kMasked, PrefetchTo kTo = PrefetchTo::L1>
  static void body(const GemmInput& in, const MatrixView& w, int64_t n, int64_t t, float out[4][4]) {
    const int64_t K = in.K, Kp = in.Kp;
    const int64_t stride = w.row_bytes();
    const uint8_t* w0 = w.row_ptr(n);
    const int64_t ahead = prefetch_distance(R * stride, kTo);
    __m512 acc[R][TT];
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) acc[r][j] = _mm512_setzero_ps();
    }
    const float* x = in.xf.data() + t * Kp;  // zero-padded to Kp
    for (int64_t k = 0; k < K; k += 16) {
      __m512 xv[TT];
      for (int j = 0; j < TT; ++j) xv[j] = _mm512_loadu_ps(x + j * Kp + k);
      for (int r = 0; r < R; ++r) {
        const uint8_t* row = w0 + r * stride;
        prefetch_ahead<TT, kTo>(row + k * (WT == WeightFormat::F32 ? 4 : 2), ahead);
        __m512 wv;
        if constexpr (kMasked) {
          wv = load_w(row, k, static_cast<__mmask16>(K - k >= 16 ? 0xffff : (1u << (K - k)) - 1));
        } else {
          wv = load_w(row, k);
        }
        for (int j = 0; j < TT; ++j) acc[r][j] = _mm512_fmadd_ps(wv, xv[j], acc[r][j]);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) out[r][j] = hsum(acc[r][j]);
    }
  }
  template <int R, int TT>
  static void tile(const GemmInput& in, const MatrixView& w, int64_t n, int64_t t, float out[4][4]) {
    if (in.K % 16 == 0) {
      body<R, TT, false>(in, w, n, t, out);
    } else {
      body<R, TT, true>(in, w, n, t, out);
    }
  }
  // Decode (one token): rows in pairs, body<2, 1>, prefetching into L2. Each output is one chain of multiply-adds
  // (the tiles' arithmetic, so the same bits). One row at a time is bound by that chain's latency, 4 cycles per 16
  // weights; a pair runs two chains. The pair also shares each load of the f32 activations, which for a long row
  // (5632 columns, 22 KiB) do not stay in L1 beside the streaming weights. Pairs with the L2 prefetch stream
  // markedly more of the read bandwidth than single rows or the L1 prefetch (bench/RESULTS.md, decode table).
  static void decode_rows(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& o) {
    decode_pairs<FloatKern>(in, w, n0, n1, o, in.K % 16 != 0);
  }
};

// bf16 weights times bf16-rounded activations with vdpbf16ps, 32 columns per step.
struct Bf16Kern {
  static constexpr int kDecodeRows = 1;  // decode runs decode_rows
  // kMasked only when K is not a multiple of 32 (see FloatKern: a mask in the loop costs GCC's register
  // allocation the accumulators).
  template <int R, int TT, bool kMasked, PrefetchTo kTo = PrefetchTo::L1>
  static void body(const GemmInput& in, const MatrixView& w, int64_t n, int64_t t, float out[4][4]) {
    const int64_t K = in.K, Kp = in.Kp;
    const int64_t stride = w.row_bytes();
    const uint8_t* w0 = w.row_ptr(n);
    const int64_t ahead = prefetch_distance(R * stride, kTo);  // bytes
    __m512 acc[R][TT];
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) acc[r][j] = _mm512_setzero_ps();
    }
    const uint16_t* x = in.xb.data() + t * Kp;  // zero-padded to Kp
    for (int64_t k = 0; k < K; k += 32) {
      __m512bh xv[TT];
      for (int j = 0; j < TT; ++j) xv[j] = (__m512bh)_mm512_loadu_si512(x + j * Kp + k);
      for (int r = 0; r < R; ++r) {
        const uint16_t* row = reinterpret_cast<const uint16_t*>(w0 + r * stride);
        prefetch_ahead<TT, kTo>(row + k, ahead);
        __m512bh wv;
        if constexpr (kMasked) {
          const auto m = K - k >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << (K - k)) - 1);
          wv = (__m512bh)_mm512_maskz_loadu_epi16(m, row + k);
        } else {
          wv = (__m512bh)_mm512_loadu_si512(row + k);
        }
        for (int j = 0; j < TT; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], wv, xv[j]);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) out[r][j] = hsum(acc[r][j]);
    }
  }
  template <int R, int TT>
  static void tile(const GemmInput& in, const MatrixView& w, int64_t n, int64_t t, float out[4][4]) {
    if (in.K % 32 == 0) {
      body<R, TT, false>(in, w, n, t, out);
    } else {
      body<R, TT, true>(in, w, n, t, out);
    }
  }
  // Decode (one token): one row at a time, one vdpbf16ps chain, the same bits as the tiles (body<1, 1>). Each
  // 64-byte load is a whole cache line of one contiguous run, prefetched as a decode stream (PrefetchTo::Stream). A
  // vdpbf16ps chain covers 32 weights per step, so one row is not bound by its latency from L2, as f32 and f16 are.
  // f16 one row at a time, whose 32-byte loads take half a line each, streams less than its pairs do.
  static void decode_rows(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& o) {
    prefetch_span(in.xb.data(), in.Kp * 2);
    for (int64_t n = n0; n < n1; ++n) {
      float res[4][4];
      if (in.K % 32 != 0) {
        body<1, 1, true, PrefetchTo::Stream>(in, w, n, 0, res);
      } else {
        body<1, 1, false, PrefetchTo::Stream>(in, w, n, 0, res);
      }
      store_tile<1>(o, 0, 1, n, res);
    }
  }
};

}  // namespace

template <>
void gemm_rows_simd<Isa::Avx512, WeightFormat::F32>(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1,
                                                    const GemmOut& out) {
  drive_tiles<FloatKern<WeightFormat::F32>>(in, w, n0, n1, out);
}

template <>
void gemm_rows_simd<Isa::Avx512, WeightFormat::F16>(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1,
                                                    const GemmOut& out) {
  drive_tiles<FloatKern<WeightFormat::F16>>(in, w, n0, n1, out);
}

template <>
void gemm_rows_simd<Isa::Avx512, WeightFormat::BF16>(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1,
                                                     const GemmOut& out) {
  drive_tiles<Bf16Kern>(in, w, n0, n1, out);
}

}  // namespace ascent::kernels

#include "ascent/kernels/cpu/gemm_simd_end.h"
