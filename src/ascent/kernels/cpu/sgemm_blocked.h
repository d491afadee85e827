// The blocked sgemm driver shared by sgemm_avx2.cc and sgemm_avx512.cc, which include it after their
// `#pragma GCC target` (hence the anonymous namespace: each file compiles its own copy for its instruction set).
// Per thread, for an N range of C: for each NC-wide column block and each KC-deep slice of k, B's slice is packed
// into NR-wide panels (k-major, zero-padded); then for each MC-row block of A, its MR-row strips are packed (k-major)
// and the microkernel runs each panel against each strip. The transposes happen in the packing (8x8 register
// transposes), so the microkernel reads both operands contiguously. Between k slices the partial sums live in C itself,
// stored exactly, so each element is one FMA chain over k in order whatever KC, the tile it falls in, or the thread
// split.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>

#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/sgemm.h"

namespace ascent::kernels {
namespace {

// How a tile's sums start at the first k slice (Zero, Scale: s = beta * c) and at the later ones (Load: s = c).
enum class Init { Zero, Scale, Load };

struct Problem {
  int64_t M, N, K;
  GemmOperand a, b;
  float beta;
  float* c;
  int64_t ldc;
};

// A thread's packing buffer, 64-byte aligned, grown as needed and kept for the thread's next call.
class Scratch {
 public:
  float* get(int64_t n) {
    if (n > cap_) {
      buf_.reset(static_cast<float*>(::operator new[](static_cast<size_t>(n) * sizeof(float), std::align_val_t{64})));
      cap_ = n;
    }
    return buf_.get();
  }

 private:
  struct Free {
    void operator()(float* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  std::unique_ptr<float[], Free> buf_;
  int64_t cap_ = 0;
};

// Rows r[0..7] become columns.
inline void transpose8(__m256 r[8]) {
  __m256 t[8], s[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {
    const __m256 *lo = t + 4 * h, *hi = t + 4 * h + 2;
    s[4 * h + 0] = _mm256_shuffle_ps(lo[0], hi[0], _MM_SHUFFLE(1, 0, 1, 0));
    s[4 * h + 1] = _mm256_shuffle_ps(lo[0], hi[0], _MM_SHUFFLE(3, 2, 3, 2));
    s[4 * h + 2] = _mm256_shuffle_ps(lo[1], hi[1], _MM_SHUFFLE(1, 0, 1, 0));
    s[4 * h + 3] = _mm256_shuffle_ps(lo[1], hi[1], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x31);
  }
}

// dst[k * W + w] = src[w * ld + k] for w < width (0 beyond, up to W), k < kc: a strip of `width` stored rows read
// as columns. Full 8x8 blocks go through registers, the edges element by element.
template <int W>
void pack_columns(const float* src, int64_t ld, int width, int64_t kc, float* dst) {
  const int w8 = width / 8 * 8;
  const int64_t k8 = kc / 8 * 8;
  for (int w = 0; w < w8; w += 8) {
    for (int64_t k = 0; k < k8; k += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + (w + i) * ld + k);
      transpose8(r);
      for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + (k + i) * W + w, r[i]);
    }
    for (int64_t k = k8; k < kc; ++k) {
      for (int i = 0; i < 8; ++i) dst[k * W + w + i] = src[(w + i) * ld + k];
    }
  }
  for (int64_t k = 0; k < kc; ++k) {
    for (int w = w8; w < width; ++w) dst[k * W + w] = src[w * ld + k];
    for (int w = width; w < W; ++w) dst[k * W + w] = 0.0f;
  }
}

// dst[k * W + w] = src[k * ld + w] for w < width (0 beyond, up to W), k < kc: stored rows copied as they are.
template <int W>
void pack_rows(const float* src, int64_t ld, int width, int64_t kc, float* dst) {
  for (int64_t k = 0; k < kc; ++k) {
    const float* s = src + k * ld;
    float* d = dst + k * W;
    int w = 0;
    if (width == W) {
      for (; w + 8 <= W; w += 8) _mm256_storeu_ps(d + w, _mm256_loadu_ps(s + w));
    }
    for (; w < width; ++w) d[w] = s[w];
    for (; w < W; ++w) d[w] = 0.0f;
  }
}

// op(B)'s columns j0 .. j0 + nc - 1, k slice pc .. pc + kc - 1, as panels of NR columns, panel q at dst + q * kc *
// NR holding element (k, j) at k * NR + j. Stored rows are read front to back, so DRAM streams them: a stored B
// row by row across all panels, a transposed one NR stored rows at a time.
template <int NR>
void pack_b_f32(const GemmOperand& b, int64_t pc, int64_t kc, int64_t j0, int64_t nc, float* dst) {
  const int64_t panels = (nc + NR - 1) / NR;
  for (int64_t q = 0; q < panels; ++q) {
    const int nr = static_cast<int>(std::min<int64_t>(NR, nc - q * NR));
    if (b.transposed) pack_columns<NR>(b.data + (j0 + q * NR) * b.ld + pc, b.ld, nr, kc, dst + q * kc * NR);
  }
  if (b.transposed) return;
  for (int64_t k = 0; k < kc; ++k) {
    const float* s = b.data + (pc + k) * b.ld + j0;
    for (int64_t q = 0; q < panels; ++q) {
      const int nr = static_cast<int>(std::min<int64_t>(NR, nc - q * NR));
      pack_rows<NR>(s + q * NR, b.ld, nr, 1, dst + q * kc * NR + k * NR);
    }
  }
}

// op(A)'s rows i0 .. i0 + mr - 1, k slice pc .. pc + kc - 1, as a strip dst[k * MR + i].
template <int MR>
void pack_a_f32(const GemmOperand& a, int64_t i0, int mr, int64_t pc, int64_t kc, float* dst) {
  if (a.transposed) {
    // MR values from each of kc stored rows far apart: no hardware prefetcher follows that many short pieces, so the
    // next line of each row (the strips after this one read it) is requested now.
    // The address is formed as an integer: past the last strip it lies beyond A, which a prefetch may name but a
    // pointer may not.
    const float* src = a.data + pc * a.ld + i0;
    for (int64_t k = 0; k < kc; ++k) {
      __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(src + k * a.ld) + 64), 0, 3);
    }
    pack_rows<MR>(src, a.ld, mr, kc, dst);
  } else {
    pack_columns<MR>(a.data + i0 * a.ld + pc, a.ld, mr, kc, dst);
  }
}

// x[0 .. n) rounded to fp16 (to nearest even, as f32_to_f16 rounds; a NaN stays a NaN) and widened back, in place.
inline void round_f16_8(float* x) {
  _mm256_storeu_ps(x, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x), _MM_FROUND_TO_NEAREST_INT)));
}
inline void round_f16(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) round_f16_8(x + i);
  if (i == n) return;
  float t[8] = {};
  std::memcpy(t, x + i, static_cast<size_t>(n - i) * sizeof(float));
  round_f16_8(t);
  std::memcpy(x + i, t, static_cast<size_t>(n - i) * sizeof(float));
}

// Kern with both operands rounded to fp16 as they are packed (sgemm_f16): the microkernel multiplies what it always
// does, now fp16 values, each product exact in f32.
template <class Kern>
struct F16Rounded : Kern {
  static void pack_a(const GemmOperand& a, int64_t i0, int mr, int64_t pc, int64_t kc, float* dst) {
    Kern::pack_a(a, i0, mr, pc, kc, dst);
    round_f16(dst, Kern::packed_k(kc) * Kern::MR);
  }
  static void pack_b(const GemmOperand& b, int64_t pc, int64_t kc, int64_t j0, int64_t nc, float* dst) {
    Kern::pack_b(b, pc, kc, j0, nc, dst);
    round_f16(dst, (nc + Kern::NR - 1) / Kern::NR * Kern::packed_k(kc) * Kern::NR);
  }
};

// A tile at C's edge runs the full microkernel on a copy, so its sums are the interior tiles' sums.
template <class Kern>
void run_tile(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, int mr, int nr, Init init,
              float beta) {
  constexpr int MR = Kern::MR, NR = Kern::NR;
  if (mr == MR && nr == NR) return Kern::kernel(kc, ap, bp, c, ldc, init, beta);
  alignas(64) float t[MR * NR] = {};
  if (init != Init::Zero) {
    for (int i = 0; i < mr; ++i) std::memcpy(t + i * NR, c + i * ldc, static_cast<size_t>(nr) * sizeof(float));
  }
  Kern::kernel(kc, ap, bp, t, NR, init, beta);
  for (int i = 0; i < mr; ++i) std::memcpy(c + i * ldc, t + i * NR, static_cast<size_t>(nr) * sizeof(float));
}

// Where k slice `slice` (KC deep, the last one what is left) of A's strip `strip` starts in an A packed whole: slices
// one after another, each its strips one after another.
template <class Kern>
int64_t packed_a_offset(int64_t m_strips, int64_t slice, int64_t strip, int64_t kc) {
  return (slice * m_strips * Kern::packed_k(Kern::KC) + strip * Kern::packed_k(kc)) * Kern::MR;
}

// C's rows m0 .. m1 - 1 and columns n0 .. n1 - 1 on the calling thread. With a_packed (all of A packed as
// packed_a_offset lays it out; then m0 is 0) its strips are read from there instead of being packed here.
template <class Kern>
void blocked_part(const Problem& p, int64_t m0, int64_t m1, int64_t n0, int64_t n1, const float* a_packed) {
  constexpr int MR = Kern::MR, NR = Kern::NR;
  static_assert(Kern::MC % MR == 0, "an A block is whole strips, so a block's strips index a packed A (ic / MR)");
  thread_local Scratch a_buf, b_buf;
  for (int64_t jc = n0; jc < n1; jc += Kern::NC) {
    const int64_t nc = std::min<int64_t>(Kern::NC, n1 - jc), panels = (nc + NR - 1) / NR;
    for (int64_t pc = 0; pc < p.K; pc += Kern::KC) {
      const int64_t kc = std::min<int64_t>(Kern::KC, p.K - pc);
      const int64_t b_size = Kern::packed_k(kc) * NR;
      float* bp = b_buf.get(panels * b_size);
      Kern::pack_b(p.b, pc, kc, jc, nc, bp);
      const Init init = pc > 0 ? Init::Load : p.beta == 0.0f ? Init::Zero : Init::Scale;
      const int64_t a_size = Kern::packed_k(kc) * MR;
      for (int64_t ic = m0; ic < m1; ic += Kern::MC) {
        const int64_t mc = std::min<int64_t>(Kern::MC, m1 - ic), strips = (mc + MR - 1) / MR;
        const float* ap = nullptr;
        if (a_packed != nullptr) {
          ap = a_packed + packed_a_offset<Kern>((p.M + MR - 1) / MR, pc / Kern::KC, ic / MR, kc);
        } else {
          float* dst = a_buf.get(strips * a_size);
          for (int64_t s = 0; s < strips; ++s) {
            Kern::pack_a(p.a, ic + s * MR, static_cast<int>(std::min<int64_t>(MR, mc - s * MR)), pc, kc,
                         dst + s * a_size);
          }
          ap = dst;
        }
        for (int64_t q = 0; q < panels; ++q) {
          const int nr = static_cast<int>(std::min<int64_t>(NR, nc - q * NR));
          for (int64_t s = 0; s < strips; ++s) {
            const int64_t ir = ic + s * MR;
            const int mr = static_cast<int>(std::min<int64_t>(MR, mc - s * MR));
            run_tile<Kern>(kc, ap + s * a_size, bp + q * b_size, p.c + ir * p.ldc + jc + q * NR, p.ldc, mr, nr, init,
                           p.beta);
          }
        }
      }
    }
  }
}

// The most bytes of A packed whole for threads that split N (see blocked): a GPT-2 layer's activations (256 rows of
// up to 3072) fit, an LM head's logits (128 rows of 50257) do not, and are packed strip by strip as they are used.
constexpr int64_t kSharedABytes = int64_t{4} << 20;

// The whole product on the global pool: threads take contiguous shares of N's panels, or of M's strips when N has
// too few panels to go round. Which thread computes an element changes nothing in how it is computed. Threads that
// split N all read all of A: rather than each packing it again for every column block, they first pack it once
// together, then compute from that copy.
template <class Kern>
void blocked(const Problem& p) {
  if (p.M == 0 || p.N == 0) return;
  if (p.K == 0) {
    for (int64_t i = 0; i < p.M; ++i) {
      for (int64_t j = 0; j < p.N; ++j) {
        float& c = p.c[i * p.ldc + j];
        c = p.beta == 0.0f ? 0.0f : p.beta * c;
      }
    }
    return;
  }
  constexpr int MR = Kern::MR, NR = Kern::NR;
  ThreadPool& pool = ThreadPool::global();
  const int threads = pool.size();
  const int64_t n_panels = (p.N + NR - 1) / NR, m_strips = (p.M + MR - 1) / MR;
  // Below about a million multiply-adds a second thread's wake-up costs more than it saves.
  if (threads == 1 || p.M * p.N * p.K < (int64_t{1} << 20)) return blocked_part<Kern>(p, 0, p.M, 0, p.N, nullptr);
  const bool split_n = n_panels >= 2 * threads || n_panels >= m_strips;
  const int64_t slices = (p.K + Kern::KC - 1) / Kern::KC;
  const int64_t a_floats = packed_a_offset<Kern>(m_strips, slices, 0, Kern::KC);
  const float* a_packed = nullptr;
  if (split_n && a_floats * static_cast<int64_t>(sizeof(float)) <= kSharedABytes) {
    thread_local Scratch shared;  // the calling thread's; the workers read it during this call only
    float* dst = shared.get(a_floats);
    pool.parallel_for(slices * m_strips, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) {
        const int64_t slice = j / m_strips, strip = j % m_strips, pc = slice * Kern::KC;
        const int64_t kc = std::min<int64_t>(Kern::KC, p.K - pc);
        Kern::pack_a(p.a, strip * MR, static_cast<int>(std::min<int64_t>(MR, p.M - strip * MR)), pc, kc,
                     dst + packed_a_offset<Kern>(m_strips, slice, strip, kc));
      }
    });
    a_packed = dst;
  }
  pool.parallel_for(threads, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const auto [s0, s1] = ThreadPool::share(split_n ? n_panels : m_strips, threads, static_cast<int>(t));
      if (s0 == s1) continue;
      if (split_n) {
        blocked_part<Kern>(p, 0, p.M, s0 * NR, std::min(p.N, s1 * NR), a_packed);
      } else {
        blocked_part<Kern>(p, s0 * MR, std::min(p.M, s1 * MR), 0, p.N, nullptr);
      }
    }
  });
}

}  // namespace
}  // namespace ascent::kernels
