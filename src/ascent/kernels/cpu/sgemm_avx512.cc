// AVX-512 sgemm: an 8 x 48 microkernel (24 accumulators, three B vectors and a broadcast of A per k) over the
// blocked driver of sgemm_blocked.h. Each output lane is one FMA chain over k in order, as sgemm.h states.
// sgemm_bf16 runs the same tiles with vdpbf16ps on operands packed as bf16 pairs (k, k + 1) per 32-bit lane.
#include <immintrin.h>

#include "ascent/kernels/cpu/simd_avx512_begin.h"

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c")

#include "ascent/kernels/cpu/sgemm_blocked.h"

namespace ascent::kernels {
namespace {

// MR rows x NV * 16 columns. With MC = MR one A strip (8 KB at KC = 256) stays in L1 while the B block (KC x NC,
// 768 KB) streams past it from L2 (2 MB per core here). Measured against 14 x 32 tiles and against keeping B's
// panel in L1 instead (MC = 256): this was fastest on every training shape, if only by 5-10%.
// A tile's accumulators as Init says (zero, C as it is, or beta * C), and back into C: every kernel's first and last
// step, whatever it multiplies in between.
template <int MR, int NV>
__attribute__((always_inline)) inline void load_tile(__m512 (&acc)[MR][NV], const float* c, int64_t ldc, Init init,
                                                     float beta) {
  const __m512 vb = _mm512_set1_ps(beta);
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      if (init == Init::Zero) {
        acc[i][v] = _mm512_setzero_ps();
      } else {
        const __m512 x = _mm512_loadu_ps(c + i * ldc + v * 16);
        acc[i][v] = init == Init::Scale ? _mm512_mul_ps(vb, x) : x;
      }
    }
  }
}

template <int MR, int NV>
__attribute__((always_inline)) inline void store_tile(const __m512 (&acc)[MR][NV], float* c, int64_t ldc) {
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(c + i * ldc + v * 16, acc[i][v]);
  }
}

template <int MR_, int NV>
struct F32Kern {
  static constexpr int MR = MR_, NR = NV * 16;
  static constexpr int64_t KC = 256, NC = 768, MC = 8;
  static int64_t packed_k(int64_t kc) { return kc; }
  static void pack_a(const GemmOperand& a, int64_t i0, int mr, int64_t pc, int64_t kc, float* dst) {
    pack_a_f32<MR>(a, i0, mr, pc, kc, dst);
  }
  static void pack_b(const GemmOperand& b, int64_t pc, int64_t kc, int64_t j0, int64_t nc, float* dst) {
    pack_b_f32<NR>(b, pc, kc, j0, nc, dst);
  }
  static void kernel(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, Init init, float beta) {
    __m512 acc[MR][NV];
    load_tile<MR, NV>(acc, c, ldc, init, beta);
    for (int64_t k = 0; k < kc; ++k) {
      const float* b = bp + k * NR;
      __m512 bv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) bv[v] = _mm512_load_ps(b + v * 16);
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        const __m512 av = _mm512_set1_ps(ap[k * MR + i]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(av, bv[v], acc[i][v]);
      }
    }
    store_tile<MR, NV>(acc, c, ldc);
  }
};

// f32 bits rounded to bf16 as f32_to_bf16 rounds (to nearest even; a NaN stays a quiet NaN), in the low half.
inline __m256i round_bf16(__m256i x) {
  const __m256i nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

// Rows x0 (k) and x1 (k + 1, or zeros when null) of a packed f32 panel W wide, rounded to bf16 and interleaved: dst[w]
// holds x0[w] low, x1[w] high.
template <int W>
void bf16_pairs(const float* x0, const float* x1, uint32_t* dst) {
  for (int w = 0; w < W; w += 8) {
    const __m256i lo = round_bf16(_mm256_castps_si256(_mm256_loadu_ps(x0 + w)));
    const __m256i hi =
        x1 != nullptr ? round_bf16(_mm256_castps_si256(_mm256_loadu_ps(x1 + w))) : _mm256_setzero_si256();
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + w), _mm256_or_si256(lo, _mm256_slli_epi32(hi, 16)));
  }
}

// A packed f32 panel (kc x W) as bf16 pairs ((kc + 1) / 2 x W lanes of 32 bits).
template <int W>
void pair_panel(const float* f, int64_t kc, float* dst) {
  auto* d = reinterpret_cast<uint32_t*>(dst);
  for (int64_t k = 0; k < kc; k += 2) bf16_pairs<W>(f + k * W, k + 1 < kc ? f + (k + 1) * W : nullptr, d + k / 2 * W);
}

// The f32 kernel's tiles with the operands packed as bf16 pairs: one vdpbf16ps per pair of k.
template <int MR_, int NV>
struct Bf16Kern {
  static constexpr int MR = MR_, NR = NV * 16;
  static constexpr int64_t KC = 512, NC = 768, MC = 8;  // KC even: a pair never straddles two slices
  static int64_t packed_k(int64_t kc) { return (kc + 1) / 2; }
  static void pack_a(const GemmOperand& a, int64_t i0, int mr, int64_t pc, int64_t kc, float* dst) {
    thread_local Scratch f;
    float* t = f.get(kc * MR);
    pack_a_f32<MR>(a, i0, mr, pc, kc, t);
    pair_panel<MR>(t, kc, dst);
  }
  static void pack_b(const GemmOperand& b, int64_t pc, int64_t kc, int64_t j0, int64_t nc, float* dst) {
    thread_local Scratch f;
    const int64_t panels = (nc + NR - 1) / NR;
    float* t = f.get(panels * kc * NR);
    pack_b_f32<NR>(b, pc, kc, j0, nc, t);
    for (int64_t q = 0; q < panels; ++q) pair_panel<NR>(t + q * kc * NR, kc, dst + q * packed_k(kc) * NR);
  }
  static void kernel(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, Init init, float beta) {
    const auto* a32 = reinterpret_cast<const int32_t*>(ap);
    const auto* b32 = reinterpret_cast<const int32_t*>(bp);
    __m512 acc[MR][NV];
    load_tile<MR, NV>(acc, c, ldc, init, beta);
    const int64_t pairs = packed_k(kc);
    for (int64_t k = 0; k < pairs; ++k) {
      __m512bh bv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_load_si512(b32 + k * NR + v * 16);
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        const __m512bh av = (__m512bh)_mm512_set1_epi32(a32[k * MR + i]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], av, bv[v]);
      }
    }
    store_tile<MR, NV>(acc, c, ldc);
  }
};

}  // namespace

void sgemm_bf16_avx512(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, float beta, float* c,
                       int64_t ldc) {
  blocked<Bf16Kern<8, 3>>(Problem{M, N, K, a, b, beta, c, ldc});
}

void sgemm_f16_avx512(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, float beta, float* c,
                      int64_t ldc) {
  blocked<F16Rounded<F32Kern<8, 3>>>(Problem{M, N, K, a, b, beta, c, ldc});
}

void sgemm_avx512(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, float beta, float* c, int64_t ldc) {
  blocked<F32Kern<8, 3>>(Problem{M, N, K, a, b, beta, c, ldc});
}

}  // namespace ascent::kernels

#include "ascent/kernels/cpu/simd_avx512_end.h"
