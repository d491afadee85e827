// Element types and their storage, as files hold them. F32/F16/BF16 are plain arrays. Q8_0 and Q4_0 are GGUF's
// 32-element blocks (one f16 scale and 32 signed 8-bit or 4-bit values), and Q4_K and Q6_K its 256-element
// super-blocks. They are stored exactly as GGUF lays them out, so weights run in place from a mapped file. Layouts a
// backend makes for its own kernels are not DTypes (kernels/cpu/packed_formats.h).
// I8 and I4 are Ascent's own weight formats (tensor/quantize.h): rows padded (I8 to 64 elements, I4 to 128), stored
// offset-binary (q + 128, q + 8), with scales held beside the data in the Tensor. I8 is row-major; I4 comes in
// blocks of 16 rows (kInt4Rows). I32 holds token ids and positions.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace ascent {

enum class DType : uint8_t { F32, F16, BF16, Q8_0, Q4_0, I32, I8, I4, Q4_K, Q6_K };

// I8 rows are padded to a multiple of 64 elements and I4 rows to 128 (whole groups of every size) so the integer
// kernels never need a tail.
constexpr int64_t kIntRowAlign = 64;
constexpr int64_t kInt4RowAlign = 128;
// I4 is laid out in blocks of 16 rows, the last block padded with rows of code 8 and scale 0. One 512-bit load then
// holds 16 rows x 8 columns, and one vpdpbusd lane is one row. So a single token's dot products need no horizontal
// sums, and a group's scale multiply covers 16 rows at once. Block b holds rows 16b..16b+15 as Kp / 8 steps of 64
// bytes. In step o, byte 4i + j holds column 8o + j of row 16b + i in its low nibble, and column 8o + 4 + j in its
// high nibble. Scales are (blocks, groups, 16): row 16b + i's scale of group g lies at (b * groups + g) * 16 + i
// (int4_byte, int4_scale_index).
constexpr int64_t kInt4Rows = 16;  // rows per I4 block

// Rows an I4 matrix of n rows stores (whole blocks).
inline int64_t int4_stored_rows(int64_t n) {
  return (n + kInt4Rows - 1) / kInt4Rows * kInt4Rows;
}
// The byte of I4 element (r, k) for rows padded to kp columns; the element is its low nibble when k % 8 < 4, else
// its high nibble.
inline int64_t int4_byte(int64_t kp, int64_t r, int64_t k) {
  return r / kInt4Rows * (kInt4Rows * kp / 2) + k / 8 * 64 + r % kInt4Rows * 4 + k % 4;
}
inline int int4_code(const uint8_t* data, int64_t kp, int64_t r, int64_t k) {
  const uint8_t b = data[int4_byte(kp, r, k)];
  return k % 8 < 4 ? b & 0x0f : b >> 4;
}
// Where row r's scale of group g lies among an I4 matrix's scales (`groups` per row).
inline int64_t int4_scale_index(int64_t groups, int64_t r, int64_t g) {
  return (r / kInt4Rows * groups + g) * kInt4Rows + r % kInt4Rows;
}

constexpr int kQBlock = 32;
struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[kQBlock];
};
static_assert(sizeof(BlockQ8_0) == 34);

struct BlockQ4_0 {
  uint16_t d;               // f16 scale
  uint8_t qs[kQBlock / 2];  // element j in the low nibble of qs[j], element j+16 in the high nibble
};
static_assert(sizeof(BlockQ4_0) == 18);

// GGUF's K-quant super-blocks of 256 elements, read as llama.cpp writes them (Q4_K_M files mix both).
constexpr int kQKBlock = 256;
struct BlockQ4_K {
  uint16_t d;                // f16 scale of the sub-block scales
  uint16_t dmin;             // f16 scale of the sub-block minimums
  uint8_t scales[12];        // 8 sub-blocks of 32: 6-bit scale and 6-bit minimum each, packed
  uint8_t qs[kQKBlock / 2];  // per 64 elements: the first 32 in low nibbles, the next 32 in high nibbles
};
static_assert(sizeof(BlockQ4_K) == 144);
struct BlockQ6_K {
  uint8_t ql[kQKBlock / 2];      // low 4 bits
  uint8_t qh[kQKBlock / 4];      // high 2 bits
  int8_t scales[kQKBlock / 16];  // one per 16 elements
  uint16_t d;                    // f16 super-block scale
};
static_assert(sizeof(BlockQ6_K) == 210);
inline bool is_kquant(DType t) {
  return t == DType::Q4_K || t == DType::Q6_K;
}
// Sub-block j's 6-bit scale and minimum in Q4_K's packing: j < 4 in the low 6 bits of s[j] and s[j + 4]; j >= 4
// split between the nibbles of s[j + 4] and the top 2 bits of s[j - 4] and s[j].
inline void q4k_scale_min(const uint8_t* s, int j, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}
// Sub-block j's scale and minimum, and code e (0..255, unsigned 4-bit), of a Q4_K super-block.
inline void q4k_scale_min(const BlockQ4_K& b, int j, int& sc, int& m) {
  q4k_scale_min(b.scales, j, sc, m);
}
inline int q4k_code(const BlockQ4_K& b, int e) {
  const uint8_t v = b.qs[e / 64 * 32 + e % 32];
  return e % 64 < 32 ? v & 0x0f : v >> 4;
}
// Signed 6-bit value e (0..255) of a Q6_K super-block. Q6_K: per half of 128, runs of 32 take the
// low or high nibble of ql[l] or ql[l + 32] and 2 bits of qh[l] above it, minus 32.
inline int q6k_value(const BlockQ6_K& b, int e) {
  const int h = e / 128, r = e % 128 / 32, l = e % 32;
  const uint8_t low = b.ql[64 * h + (r % 2) * 32 + l];
  const int nib = r < 2 ? low & 0x0f : low >> 4;
  return (nib | (((b.qh[32 * h + l] >> (2 * r)) & 3) << 4)) - 32;
}
std::string_view dtype_name(DType t);
// Parses "f32", "f16", "bf16", "q8_0", "q4_0" (case-insensitive); throws naming the text otherwise.
DType parse_dtype(std::string_view name);
// Elements per storage block (32 for Q8_0/Q4_0, else 1) and bytes per block.
int64_t block_elems(DType t);
int64_t block_bytes(DType t);
bool is_quantized(DType t);
// Bytes that n elements occupy; throws if n is not a whole number of blocks.
int64_t storage_bytes(DType t, int64_t n);
// The row length an I8 or I4 matrix stores: 64 or 128 columns whole, so the integer kernels never need a tail; other
// types store `cols`.
inline int64_t padded_cols(DType t, int64_t cols) {
  if (t != DType::I8 && t != DType::I4) return cols;
  const int64_t a = t == DType::I4 ? kInt4RowAlign : kIntRowAlign;
  return (cols + a - 1) / a * a;
}
// Bytes one row of `cols` elements occupies (I8 and I4 rows padded as padded_cols says).
int64_t row_bytes(DType t, int64_t cols);
// I8 and I4 need their scales (Tensor-level: row_to_f32 in tensor.h); the row functions below refuse them.
inline bool is_int_weight(DType t) {
  return t == DType::I8 || t == DType::I4;
}
// Values already rounded to a grid: GGUF quants (K-quants included) and Ascent's I8/I4. Writing them into another
// rounded type rounds twice (convert and quantize say so).
inline bool is_rounded(DType t) {
  return is_quantized(t) || is_kquant(t) || is_int_weight(t);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);  // round to nearest even, saturating to inf like IEEE
inline float bf16_to_f32(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t f32_to_bf16(float f);  // round to nearest even; NaN stays NaN
// x rounded to the half type and widened back: the f32 that holds what storing x in that type keeps.
inline float bf16_rounded(float x) {
  return bf16_to_f32(f32_to_bf16(x));
}
inline float f16_rounded(float x) {
  return f16_to_f32(f32_to_f16(x));
}

// Whether a value is a NaN or an infinity, read from its exponent bits (all set): an integer test, which the compiler
// vectorizes over a row where a chain of float compares would not be reordered.
inline bool f32_nonfinite(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return (b & 0x7f800000u) == 0x7f800000u;
}
inline bool f16_nonfinite(uint16_t h) {
  return (h & 0x7c00u) == 0x7c00u;
}
inline bool bf16_nonfinite(uint16_t h) {
  return (h & 0x7f80u) == 0x7f80u;
}
// Whether every value of x is finite.
inline bool all_finite(std::span<const float> x) {
  bool bad = false;
  for (const float v : x) bad |= f32_nonfinite(v);
  return !bad;
}

// The multiplier that turns values into codes for a quantization scale d: 1 / d, or 0 where that is not finite.
// That covers d = 0 and a subnormal d below 1 / FLT_MAX, i.e. a span whose largest magnitude is under ~3.7e-37 for
// int8. Every value then codes as 0 rather than as x * inf, which is NaN for a zero value: code -127 in the SIMD
// quantizers, an undefined integer conversion in scalar code.
inline float inverse_scale(float d) {
  if (d == 0.0f) return 0.0f;
  const float id = 1.0f / d;
  return std::isinf(id) ? 0.0f : id;
}

// n elements of Q4_0 blocks read through scale(i) (block i's f16 scale) and byte(i, m) (byte m of its qs): shared
// by Q4_0 and the layouts a backend regroups its codes in.
template <class Scale, class Byte>
void dequantize_q4_0_blocks(float* dst, int64_t n, Scale scale, Byte byte) {
  for (int64_t i = 0; i < n / kQBlock; ++i) {
    const float d = f16_to_f32(scale(i));
    for (int j = 0; j < kQBlock / 2; ++j) {
      const uint8_t q = byte(i, j);
      dst[i * kQBlock + j] = d * static_cast<float>((q & 0x0f) - 8);
      dst[i * kQBlock + j + 16] = d * static_cast<float>((q >> 4) - 8);
    }
  }
}

// n elements of Q4_K super-blocks, or of a backend's regrouped copy of them, read through the q4k_scale_min and
// q4k_code overloads of the block type.
template <class Block>
void dequantize_q4_k_blocks(const Block* b, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQKBlock; ++i) {
    const float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
    float* y = dst + i * kQKBlock;
    for (int j = 0; j < kQKBlock / kQBlock; ++j) {  // sub-block j
      int sc, m;
      q4k_scale_min(b[i], j, sc, m);
      const float dj = d * static_cast<float>(sc), mj = dmin * static_cast<float>(m);
      for (int l = 0; l < kQBlock; ++l)
        y[kQBlock * j + l] = dj * static_cast<float>(q4k_code(b[i], kQBlock * j + l)) - mj;
    }
  }
}

// n elements of Q6_K super-blocks, or a regrouped copy, read through q6k_value: d * (scale * value).
template <class Block>
void dequantize_q6_k_blocks(const Block* b, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQKBlock; ++i) {
    const float d = f16_to_f32(b[i].d);
    for (int e = 0; e < kQKBlock; ++e) {
      dst[i * kQKBlock + e] = d * static_cast<float>(b[i].scales[e / 16] * q6k_value(b[i], e));
    }
  }
}

// Converts n elements of type t at src into f32 at dst (n a whole number of blocks).
void dequantize_row(DType t, const void* src, float* dst, int64_t n);
// Converts n f32 elements into type t (F32, F16, BF16, Q8_0, Q4_0);
// the quantizers follow GGUF's reference rounding so files we write decode the same in llama.cpp.
void quantize_row(DType t, const float* src, void* dst, int64_t n);
// Whether quantize_row writes type t: not I8/I4 (their scales are per row or group: tensor/quantize.h), not I32, not
// the K-quants (read, not written).
inline bool quantize_row_writes(DType t) {
  return !is_int_weight(t) && !is_kquant(t) && t != DType::I32;
}

}  // namespace ascent
