// AVX-512 kernels for GGUF Q6_K weights, as the file holds them and repacked (packed_formats.h: Q6_KR): integer
// sums per 16-column sub-block against per-block int8 activations, the sub-block scales applied lane-wise.
#include "ascent/kernels/cpu/gemm_avx512_common.h"

namespace ascent::kernels {
namespace {

// Q6_K: lane value = d * scale_s * sum(a * (code - 32)) over 4 columns of 16-column sub-block s, times the
// activation block scale. The -32 enters as -32 * sum(a) per lane before the products, so sums stay exact.
struct Q6KKern : KQuantKern<Q6KKern> {
  static constexpr int kDecodeRows = 1;  // decode runs decode_rows
  // Chunk cc (0, 1) of half h: 64 six-bit codes from 64 bytes of low nibbles and 32 bytes of high bit pairs.
  // Columns 0-31 of the half take ql[l] low nibbles and qh[l] bits 0-1, 32-63 ql[l + 32] and bits 2-3; chunk 1
  // (columns 64-127) the high nibbles and bits 4-5, 6-7.
  static __m512i codes(const BlockQ6_K& b, int h, int cc) {
    const __m512i x = _mm512_loadu_si512(b.ql + 64 * h);
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * h));
    const __m512i hh = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 2), 1);
    const __m512i low4 = _mm512_set1_epi8(0x0f), bits45 = _mm512_set1_epi8(0x30);
    if (cc == 0) {
      return _mm512_or_si512(_mm512_and_si512(x, low4), _mm512_and_si512(_mm512_slli_epi16(hh, 4), bits45));
    }
    return _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(x, 4), low4), _mm512_and_si512(hh, bits45));
  }
  // Prefill: a row tile's codes are assembled once into L1 for every token tile (the same bytes `codes` gives, so
  // the same bits as decode).
  struct RowCache {
    AlignedVector<uint8_t> codes;  // (4, K) six-bit codes in column order
  };
  template <int R>
  static void fill(const GemmInput& in, const MatrixView& w, int64_t n, RowCache& c) {
    c.codes.resize(static_cast<size_t>(4 * in.K));
    const int64_t stride = w.row_bytes();
    for (int r = 0; r < R; ++r) {
      const auto* blk = reinterpret_cast<const BlockQ6_K*>(w.row_ptr(n) + r * stride);
      for (int64_t sb = 0; sb < in.K / kQKBlock; ++sb) {
        for (int ch = 0; ch < 4; ++ch) {
          _mm512_storeu_si512(c.codes.data() + r * in.K + sb * kQKBlock + 64 * ch, codes(blk[sb], ch / 2, ch % 2));
        }
      }
    }
  }
  template <int R, int TT>
  static void cached_tile(const GemmInput& in, const MatrixView& w, const RowCache& c, int64_t n, int64_t t,
                          float out[4][4]) {
    body<R, TT, /*kCached=*/true>(in, w, n, t, out, c.codes.data());
  }
  // Decode (one token), rows [n0, n1) one at a time, one sequential stream per thread: body<1, 1>'s arithmetic in
  // 256-bit halves. The halves are lanes 0-7 and 8-15 of body's register, columns 0-31 and 32-63 of each 64-column
  // chunk. So the same integer sums, products and sums per lane: the same bits. The codes are assembled per half
  // without inserts, and the sub-block scales picked with in-half permutes. The activation offsets (-32 x each
  // lane's sum) are formed once per call. Where 512-bit instructions run as two halves (Zen 4), a four-row 512-bit
  // tile is bound by its instruction count.
  static void decode_rows(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& o) {
    const int64_t nsb = in.K / kQKBlock;
    const int64_t stride = w.row_bytes();
    const int64_t ahead = prefetch_distance(stride, PrefetchTo::L2);
    const int32_t* neg_off = scaled_lane_offsets(in, /*shift=*/5);  // -32 x each lane's sum, as body forms it
    const int8_t* a = in.q.data();
    const float* lane_d = in.lane_d.data();
    const __m256i low4 = _mm256_set1_epi8(0x0f), bits45 = _mm256_set1_epi8(0x30);
    const uint8_t* row = w.row_ptr(n0);
    for (int64_t n = n0; n < n1; ++n, row += stride) {
      const auto* blk = reinterpret_cast<const BlockQ6_K*>(row);
      __m256 y[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
      for (int64_t sb = 0; sb < nsb; ++sb) {
        const BlockQ6_K& b = blk[sb];
        prefetch_block<1, PrefetchTo::L2>(&b, sizeof(BlockQ6_K), ahead);
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(b.d));
        const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
        const __m256 dsc[2] = {_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc8))),  // sub-blocks 0-7
                               _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc8, 8))))};
        for (int c = 0; c < 4; ++c) {  // 64-column chunk c: quarter c % 2 of half c / 2 (see codes())
          const int hf = c / 2;
          const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * hf));
          for (int g = 0; g < 2; ++g) {  // columns 32g .. 32g + 31 of the chunk
            const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * hf + 32 * g));
            const __m256i hh = g == 0 ? qh : _mm256_srli_epi16(qh, 2);
            const __m256i q =
                c % 2 == 0
                    ? _mm256_or_si256(_mm256_and_si256(x, low4), _mm256_and_si256(_mm256_slli_epi16(hh, 4), bits45))
                    : _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(x, 4), low4), _mm256_and_si256(hh, bits45));
            const int64_t k = sb * kQKBlock + 64 * c + 32 * g;
            const int j = (4 * c + 2 * g) % 8;  // the half's first sub-block within dsc[(4c + 2g) / 8]
            const __m256 sc = _mm256_permutevar8x32_ps(dsc[(4 * c + 2 * g) / 8],
                                                       _mm256_setr_epi32(j, j, j, j, j + 1, j + 1, j + 1, j + 1));
            const __m256i is =
                _mm256_dpbusd_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(neg_off + k / 4)), q,
                                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + k)));
            y[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(sc, _mm256_loadu_ps(lane_d + k / 4)), y[g]);
          }
        }
      }
      float res[4][4];
      res[0][0] = hsum(y[0], y[1]);
      store_tile<1>(o, 0, 1, n, res);
    }
  }
  // kCached: codes read from a RowCache's rows (cached) instead of assembled from the blocks.
  template <int R, int TT, bool kCached = false>
  static void body(const GemmInput& in, const MatrixView& w, int64_t n, int64_t t, float out[4][4],
                   const uint8_t* cached = nullptr) {
    const int64_t Kp = in.Kp;
    const int64_t stride = w.row_bytes();
    const uint8_t* w0 = w.row_ptr(n);
    const int64_t ahead = prefetch_distance(R * stride);
    const __m512i quarter = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);  // sub-block of a lane
    __m512 acc[R][TT];
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) acc[r][j] = _mm512_setzero_ps();
    }
    const int8_t* a = in.q.data() + t * Kp;
    for (int64_t sb = 0; sb < in.K / kQKBlock; ++sb) {
      __m512 dsc[R];  // d * the 16 sub-block scales
      for (int r = 0; r < R; ++r) {
        const auto* blk = reinterpret_cast<const BlockQ6_K*>(w0 + r * stride) + sb;
        prefetch_block<TT>(blk, sizeof(BlockQ6_K), ahead);
        dsc[r] = _mm512_mul_ps(
            _mm512_set1_ps(_cvtsh_ss(blk->d)),
            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->scales)))));
      }
      for (int c = 0; c < 4; ++c) {
        const int64_t k = sb * kQKBlock + 64 * c;
        __m512i av[TT], neg[TT];
        __m512 da[TT];
        for (int j = 0; j < TT; ++j) {
          av[j] = _mm512_loadu_si512(a + j * Kp + k);
          da[j] = lane_scales(in, t + j, k);
          neg[j] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(lane_sums(av[j]), 5));
        }
        const __m512i idx = _mm512_add_epi32(quarter, _mm512_set1_epi32(4 * c));
        for (int r = 0; r < R; ++r) {
          __m512i q;
          if constexpr (kCached) {
            q = _mm512_loadu_si512(cached + r * in.K + k);
          } else {
            q = codes(*(reinterpret_cast<const BlockQ6_K*>(w0 + r * stride) + sb), c / 2, c % 2);
          }
          const __m512 sc = _mm512_permutexvar_ps(idx, dsc[r]);
          for (int j = 0; j < TT; ++j) {
            const __m512i is = _mm512_dpbusd_epi32(neg[j], q, av[j]);
            acc[r][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(sc, da[j]), acc[r][j]);
          }
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) out[r][j] = hsum(acc[r][j]);
    }
  }
};

// Q6_KR (packed_formats.h): Q6_K's codes regrouped so that each vpdpbusd lane sums columns of one 16-column sub-block.
// A super-block's 16 integer sub-block sums build up in the 16 lanes of two 256-bit registers (decode) or one 512-bit
// one (prefill). The float work runs once per super-block; Q6KKern's runs once per 32 columns. Per lane s (sub-block s)
// of each super-block:
//   y_s += float((sum(a * code) - 32 * sum(a)) * scale_s) * (d * da_s)
// The integer sum times the 8-bit scale is exact in int32 and in f32 (|.| < 2^23). Decode's two registers are the
// 512-bit accumulator's halves, reduced once by hsum: the same bits for every tile and token count.
struct Q6KRKern {
  static constexpr int kDecodeRows = 1;  // decode runs decode_rows

  // The 6-bit codes of steps 0-3 of half h (the 8 sub-blocks 8h..8h+7): low 4 bits from ql's nibbles, top 2 from
  // qh's bit pairs (packed_formats.h), each a byte of 0..63.
  static void codes(const BlockQ6_KR& b, int h, __m256i out[4]) {
    const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h));
    const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h + 32));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * h));
    const __m256i low4 = _mm256_set1_epi8(0x0f), bits45 = _mm256_set1_epi8(0x30);
    // (A & 0x0f) | (B & 0x30): A the nibble's byte, B the bit pair moved to bits 4-5 (shifts cross bytes; the
    // masks drop what crossed).
    auto join = [&](__m256i nib, __m256i pair) {
      return _mm256_ternarylogic_epi32(_mm256_and_si256(nib, low4), pair, bits45, 0xf8);
    };
    out[0] = join(ql0, _mm256_slli_epi16(qh, 4));
    out[1] = join(ql1, _mm256_slli_epi16(qh, 2));
    out[2] = join(_mm256_srli_epi16(ql0, 4), qh);
    out[3] = join(_mm256_srli_epi16(ql1, 4), _mm256_srli_epi16(qh, 2));
  }

  // Decode (one token), rows [n0, n1) one at a time, each thread's weights one sequential stream, a super-block's
  // two halves in two 256-bit registers. One 512-bit pass over both halves takes about 40 instructions per
  // super-block against 64, and runs faster from L2, yet streams slower from DRAM (measured with bench/ab_decode.py).
  // Why is open.
  static void decode_rows(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1, const GemmOut& o) {
    const int64_t nsb = in.K / kQKBlock;
    const int64_t stride = w.row_bytes();
    const int64_t ahead = kStreamAheadBlocks;
    const uint8_t* row = w.row_ptr(n0);
    prefetch_span(in.q6r.data(), in.K);
    prefetch_span(in.q6r_off.data(), in.K / 16 * 4);
    prefetch_span(in.q6r_d.data(), in.K / 16 * 4);
    for (int64_t n = n0; n < n1; ++n, row += stride) {
      const auto* blk = reinterpret_cast<const BlockQ6_KR*>(row);
      const int8_t* a = in.q6r.data();
      const int32_t* off = in.q6r_off.data();
      const float* lane_d = in.q6r_d.data();
      __m256 y[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};  // sub-blocks 0-7 and 8-15 of each super-block
      for (int64_t sb = 0; sb < nsb; ++sb, a += kQKBlock, off += 16, lane_d += 16) {
        const BlockQ6_KR& b = blk[sb];
        prefetch_block<1, PrefetchTo::Stream>(&b, sizeof(BlockQ6_KR), ahead);
        const __m256 d = _mm256_cvtph_ps(_mm_set1_epi16(static_cast<int16_t>(b.d)));
        for (int h = 0; h < 2; ++h) {
          __m256i q[4];
          codes(b, h, q);
          __m256i is = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(off + 8 * h));
          for (int k = 0; k < 4; ++k) {
            is = _mm256_dpbusd_epi32(is, q[k],
                                     _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 64 * k + 32 * h)));
          }
          const __m256i sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.scales + 8 * h)));
          y[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_mullo_epi32(is, sc)),
                                 _mm256_mul_ps(d, _mm256_loadu_ps(lane_d + 8 * h)), y[h]);
        }
      }
      float res[4][4];
      res[0][0] = hsum(y[0], y[1]);
      store_tile<1>(o, 0, 1, n, res);
    }
  }

  // Prefill: each 4-row tile's codes (one byte each, per super-block and step the two halves side by side), scales
  // and d, formed once into L1 for every token tile.
  struct RowCache {
    AlignedVector<uint8_t> codes;  // (R, K / 256, 4 steps, 64)
    AlignedVector<int32_t> sc;     // (R, K / 256, 16)
    AlignedVector<float> d;        // (R, K / 256, 16): d in every lane
  };
  template <int R>
  static void fill(const GemmInput& in, const MatrixView& w, int64_t n, RowCache& c) {
    const int64_t nsb = in.K / kQKBlock;
    c.codes.resize(static_cast<size_t>(4 * nsb * kQKBlock));
    c.sc.resize(static_cast<size_t>(4 * nsb * 16));
    c.d.resize(static_cast<size_t>(4 * nsb * 16));
    const int64_t stride = w.row_bytes();
    for (int r = 0; r < R; ++r) {
      const auto* blk = reinterpret_cast<const BlockQ6_KR*>(w.row_ptr(n) + r * stride);
      for (int64_t sb = 0; sb < nsb; ++sb) {
        const int64_t i = r * nsb + sb;
        for (int h = 0; h < 2; ++h) {
          __m256i q[4];
          codes(blk[sb], h, q);
          for (int k = 0; k < 4; ++k) {
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(c.codes.data() + i * kQKBlock + 64 * k + 32 * h), q[k]);
          }
        }
        _mm512_storeu_si512(c.sc.data() + i * 16,
                            _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[sb].scales))));
        _mm512_storeu_ps(c.d.data() + i * 16, _mm512_cvtph_ps(_mm256_set1_epi16(static_cast<int16_t>(blk[sb].d))));
      }
    }
  }
  template <int R, int TT>
  static void cached_tile(const GemmInput& in, const MatrixView& w, const RowCache& c, int64_t n, int64_t t,
                          float out[4][4]) {
    (void)w;
    (void)n;
    const int64_t K = in.K, nsb = K / kQKBlock;
    __m512 acc[R][TT];
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) acc[r][j] = _mm512_setzero_ps();
    }
    for (int64_t sb = 0; sb < nsb; ++sb) {
      for (int r = 0; r < R; ++r) {
        const int64_t i = r * nsb + sb;
        __m512i q[4];
        for (int k = 0; k < 4; ++k) q[k] = _mm512_loadu_si512(c.codes.data() + i * kQKBlock + 64 * k);
        const __m512i sc = _mm512_loadu_si512(c.sc.data() + i * 16);
        const __m512 d = _mm512_loadu_ps(c.d.data() + i * 16);
        for (int j = 0; j < TT; ++j) {
          const int8_t* a = in.q6r.data() + (t + j) * K + sb * kQKBlock;
          __m512i is = _mm512_loadu_si512(in.q6r_off.data() + (t + j) * (K / 16) + 16 * sb);
          for (int k = 0; k < 4; ++k) is = _mm512_dpbusd_epi32(is, q[k], _mm512_loadu_si512(a + 64 * k));
          acc[r][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_mullo_epi32(is, sc)),
                                      _mm512_mul_ps(d, _mm512_loadu_ps(in.q6r_d.data() + (t + j) * (K / 16) + 16 * sb)),
                                      acc[r][j]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < TT; ++j) out[r][j] = hsum(acc[r][j]);
    }
  }
};

}  // namespace

template <>
void gemm_rows_simd<Isa::Avx512, WeightFormat::Q6_K>(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1,
                                                     const GemmOut& out) {
  drive_tiles<Q6KKern>(in, w, n0, n1, out);
}

template <>
void gemm_rows_simd<Isa::Avx512, WeightFormat::Q6_KR>(const GemmInput& in, const MatrixView& w, int64_t n0, int64_t n1,
                                                      const GemmOut& out) {
  drive_tiles<Q6KRKern>(in, w, n0, n1, out);
}

}  // namespace ascent::kernels

#include "ascent/kernels/cpu/simd_avx512_end.h"
