// AVX2 sgemm: a 6 x 16 microkernel (12 accumulators, two B vectors and a broadcast of A per k, within the 16 ymm
// registers) over the blocked driver of sgemm_blocked.h. Each output lane is one FMA chain over k in order.
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

#include "ascent/kernels/cpu/sgemm_blocked.h"

namespace ascent::kernels {
namespace {

struct Avx2Kern {
  static constexpr int MR = 6, NR = 16;
  static constexpr int64_t KC = 256, NC = 1024, MC = 252;
  static int64_t packed_k(int64_t kc) { return kc; }
  static void pack_a(const GemmOperand& a, int64_t i0, int mr, int64_t pc, int64_t kc, float* dst) {
    pack_a_f32<MR>(a, i0, mr, pc, kc, dst);
  }
  static void pack_b(const GemmOperand& b, int64_t pc, int64_t kc, int64_t j0, int64_t nc, float* dst) {
    pack_b_f32<NR>(b, pc, kc, j0, nc, dst);
  }
  static void kernel(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, Init init, float beta) {
    __m256 acc[MR][2];
    const __m256 vb = _mm256_set1_ps(beta);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      for (int v = 0; v < 2; ++v) {
        if (init == Init::Zero) {
          acc[i][v] = _mm256_setzero_ps();
        } else {
          const __m256 x = _mm256_loadu_ps(c + i * ldc + v * 8);
          acc[i][v] = init == Init::Scale ? _mm256_mul_ps(vb, x) : x;
        }
      }
    }
    for (int64_t k = 0; k < kc; ++k) {
      const __m256 b0 = _mm256_load_ps(bp + k * NR), b1 = _mm256_load_ps(bp + k * NR + 8);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m256 av = _mm256_broadcast_ss(ap + k * MR + i);
        acc[i][0] = _mm256_fmadd_ps(av, b0, acc[i][0]);
        acc[i][1] = _mm256_fmadd_ps(av, b1, acc[i][1]);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      for (int v = 0; v < 2; ++v) _mm256_storeu_ps(c + i * ldc + v * 8, acc[i][v]);
    }
  }
};

}  // namespace

void sgemm_avx2(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, float beta, float* c, int64_t ldc) {
  blocked<Avx2Kern>(Problem{M, N, K, a, b, beta, c, ldc});
}

void sgemm_f16_avx2(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, float beta, float* c, int64_t ldc) {
  blocked<F16Rounded<Avx2Kern>>(Problem{M, N, K, a, b, beta, c, ldc});
}

}  // namespace ascent::kernels

#pragma GCC pop_options
