// AVX-512 kernels for float weights: f32 and f16 times f32 activations with FMA (16 columns per step, the tail
// masked), bf16 times bf16-rounded activations with vdpbf16ps. Each output is accumulated lane-wise in one 512-bit
// register over K and reduced once, so only the float summation order differs from the reference.
#include <unistd.h>

#include <algorithm>

#include "ascent/base/cpu_features.h"
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
  // markedly more of the read bandwidth than single rows or the L1 prefetch (measured with bench/ab_decode.py).
  static void decode_rows(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& o) {
    decode_pairs<FloatKern>(in, w, n0, n1, o, in.K % 16 != 0);
  }
};

// f16 weights: FloatKern<F16>, whose prefill converts each row's f16 with a vcvtph2ps per row and step of every 4 x 4
// tile. On an Intel core that is two uops on the FMA ports for every four FMAs, so such a tile runs at most two thirds
// of the FMA peak. Where a token block holds enough token tiles, prefill instead widens each 4-row tile to f32 once
// per block and runs the tiles on packed operands (widen_rows, pack_tokens), over K in chunks so that a chunk of both
// stays in L1 (each tile's accumulators kept between chunks). Each output's lanes add the same products in the same
// k order and are summed by the same hsum: the same bits as the tile and decode.
struct F16Kern : FloatKern<WeightFormat::F16> {
  static constexpr int64_t kChunk = 1024;  // columns per chunk: 16 KiB of each operand
  static constexpr int64_t kMinTiles = 8;  // token tiles per block that pay for widening a row tile

  static void run(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& o) {
    if (in.T == 1) return decode_rows(in, w, n0, n1, o);
    const int64_t Kp = in.Kp;
    // Activations of a quarter of L2 per block (sysconf; 256 KiB if unknown), as token_block's 256 KiB on a 1 MiB L2.
    static const int64_t budget = std::max<int64_t>(int64_t{256} << 10, ::sysconf(_SC_LEVEL2_CACHE_SIZE) / 4);
    const int64_t tok_block = tile_min(128, budget / (Kp * 4) / 4 * 4);
    if (tile_min(in.T, tok_block) < 4 * kMinTiles)
      return drive_tile_loop<FloatKern<WeightFormat::F16>>(in, w, n0, n1, o);
    thread_local AlignedVector<float> rows, xs, acc;
    rows.resize(static_cast<size_t>(4 * Kp));         // (Kp / 16, 4, 16): 4 rows' 16 columns side by side
    xs.resize(static_cast<size_t>(tok_block * Kp));   // per token tile, (Kp / 16, 4, 16)
    acc.resize(static_cast<size_t>(tok_block * 64));  // per token tile, (4, 4, 16)
    for (int64_t t0 = 0; t0 < in.T; t0 += tok_block) {
      const int64_t t1 = tile_min(in.T, t0 + tok_block);
      for (int64_t t = t0; t < t1; t += 4) pack_tokens(in, t, tile_min(4, t1 - t), xs.data() + (t - t0) * Kp);
      for (int64_t n = n0; n < n1; n += 4) {
        with_tile_size(tile_min(4, n1 - n), [&]<int R>() {
          widen_rows<R>(in, w, n, rows.data());
          for (int64_t k0 = 0; k0 < in.K; k0 += kChunk) {
            const int64_t k1 = tile_min(in.K, k0 + kChunk);
            for (int64_t t = t0; t < t1; t += 4) {
              float* a = acc.data() + (t - t0) * 64;
              with_tile_size(tile_min(4, t1 - t), [&]<int TT>() {
                chunk<R, TT>(rows.data(), xs.data() + (t - t0) * Kp, k0, k1, a);
                if (k1 == in.K) {
                  float res[4][4];
                  for (int r = 0; r < R; ++r) {
                    for (int j = 0; j < TT; ++j) res[r][j] = hsum(_mm512_loadu_ps(a + (r * 4 + j) * 16));
                  }
                  store_tile<R>(o, t, TT, n, res);
                }
              });
            }
          }
        });
      }
    }
  }

  // Rows n .. n + R - 1 in f32, 16 columns of each row side by side; zero past K, as FloatKern's masked load reads.
  template <int R>
  static void widen_rows(const GemmInput& in, const MatrixView& w, int64_t n, float* out) {
    for (int r = 0; r < R; ++r) {
      const auto* row = reinterpret_cast<const uint16_t*>(w.row_ptr(n + r));
      for (int64_t k = 0; k < in.Kp; k += 16) {
        const int64_t left = in.K - k;
        const auto m = static_cast<__mmask16>(left >= 16 ? 0xffff : left > 0 ? (1u << left) - 1 : 0);
        _mm512_storeu_ps(out + (k / 16 * 4 + r) * 16, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + k)));
      }
    }
  }

  // Tokens t .. t + tt - 1 of the f32 activations (zero-padded to Kp), 16 columns of each side by side.
  static void pack_tokens(const GemmInput& in, int64_t t, int64_t tt, float* out) {
    for (int64_t k = 0; k < in.Kp; k += 16) {
      for (int64_t j = 0; j < 4; ++j) {
        const __m512 v = j < tt ? _mm512_loadu_ps(in.xf.data() + (t + j) * in.Kp + k) : _mm512_setzero_ps();
        _mm512_storeu_ps(out + (k / 16 * 4 + j) * 16, v);
      }
    }
  }

  // Columns [k0, k1) of a token tile against the widened rows, into the accumulators at a (zero at k0 = 0).
  template <int R, int TT>
  static void chunk(const float* rows, const float* x, int64_t k0, int64_t k1, float* a) {
    __m512 acc[R][TT];
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) acc[r][j] = k0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(a + (r * 4 + j) * 16);
    }
    for (int64_t s = k0 / 16; s < (k1 + 15) / 16; ++s) {
      __m512 xv[TT];
      for (int j = 0; j < TT; ++j) xv[j] = _mm512_loadu_ps(x + (s * 4 + j) * 16);
      for (int r = 0; r < R; ++r) {
        const __m512 wv = _mm512_loadu_ps(rows + (s * 4 + r) * 16);
        for (int j = 0; j < TT; ++j) acc[r][j] = _mm512_fmadd_ps(wv, xv[j], acc[r][j]);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) _mm512_storeu_ps(a + (r * 4 + j) * 16, acc[r][j]);
    }
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
  // Decode (one token), each output the tiles' arithmetic (body), so the same bits either way. On Intel cores a
  // non-temporal prefetch fills L1 alone and holds a fill buffer for a whole memory latency, which caps a core's
  // stream: rows go in pairs with the L2 prefetch, as FloatKern runs them. On AMD cores one row at a time, one
  // vdpbf16ps chain on whole 64-byte lines prefetched as a decode stream (PrefetchTo::Stream), reads faster.
  static void decode_rows(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& o) {
    static const bool intel = cpu_features().intel;
    if (intel) return decode_pairs<Bf16Kern>(in, w, n0, n1, o, in.K % 32 != 0);
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
  drive_tiles<F16Kern>(in, w, n0, n1, out);
}

template <>
void gemm_rows_simd<Isa::Avx512, WeightFormat::BF16>(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1,
                                                     const GemmOut& out) {
  drive_tiles<Bf16Kern>(in, w, n0, n1, out);
}

}  // namespace ascent::kernels

#include "ascent/kernels/cpu/simd_avx512_end.h"
