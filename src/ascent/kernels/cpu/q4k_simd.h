// Q4_K's packed sub-block scales and minimums as one register of bytes, shared by the AVX2 and AVX-512 matmul
// kernels. Include only after the file's `#pragma GCC target` (it needs SSSE3's byte shuffle): each including file
// gets its own copy compiled for its ISA (hence the anonymous namespace). The scalar definition is q4k_scale_min
// (tensor/dtype.h), which the reference kernel uses.
#pragma once

#include <immintrin.h>

#include "ascent/tensor/dtype.h"

namespace ascent::kernels {
namespace {

// The 8 six-bit scales and 8 six-bit minimums of a super-block, interleaved: byte 2j scale j, byte 2j + 1 minimum j.
// The 12 packed bytes hold scales 0-3 and minimums 0-3 in the low 6 bits of bytes 0-3 and 4-7. Scales and minimums
// 4-7 lie in the low and high nibbles of bytes 8-11, with their top 2 bits in the top 2 bits of bytes 0-3 and 4-7.
// Two byte shuffles of the block's first 16 bytes (d, dmin, then the 12) replace a scalar unpacking per sub-block.
inline __m128i q4k_scales_mins(const BlockQ4_K& b) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&b));
  // Source of each value's low bits (scales at raw bytes 4-7 and 12-15, minimums at 8-11 and 12-15).
  const __m128i low = _mm_shuffle_epi8(raw, _mm_setr_epi8(4, 8, 5, 9, 6, 10, 7, 11, 12, 12, 13, 13, 14, 14, 15, 15));
  // Values 4-7: the top 2 bits come from bytes 4-7 (scales) and 8-11 (minimums); -1 (0x80 set) gives 0.
  const __m128i top = _mm_shuffle_epi8(raw, _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, 4, 8, 5, 9, 6, 10, 7, 11));
  const __m128i keep6 = _mm_setr_epi8(63, 63, 63, 63, 63, 63, 63, 63, 15, 0, 15, 0, 15, 0, 15, 0);
  const __m128i high4 = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 0, 15, 0, 15, 0, 15);
  return _mm_or_si128(_mm_or_si128(_mm_and_si128(low, keep6), _mm_and_si128(_mm_srli_epi16(low, 4), high4)),
                      _mm_and_si128(_mm_srli_epi16(top, 2), _mm_set1_epi8(0x30)));
}

// The f16 pair d, dmin of a super-block as one 32-bit word: broadcast and widened with vcvtph2ps it gives d, dmin
// alternating, exactly as _cvtsh_ss widens each, matching q4k_scales_mins' interleaving.
inline int q4k_d_dmin(const BlockQ4_K& b) {
  return static_cast<int>(b.d | static_cast<uint32_t>(b.dmin) << 16);
}

}  // namespace
}  // namespace ascent::kernels
