// Element types and their storage. F32/F16/BF16 are plain arrays; Q8_0 and Q4_0 are GGUF's 32-element blocks
// (one f16 scale and 32 signed 8-bit or 4-bit values), stored and used exactly as GGUF lays them out so that
// weights run in place from a mapped file. I8 and I4 are Ascent's own weight formats (tensor/quantize.h): rows
// padded (I8 to 64 elements, I4 to 128), stored offset-binary (q + 128, q + 8), with scales held beside the data in
// the Tensor. I8 is row-major. I4 is laid out in blocks of 16 rows (kInt4Rows; the last block padded with rows of
// code 8 and scale 0) so that one 512-bit load holds 16 rows x 8 columns and one vpdpbusd lane is one row: a
// single token's dot products then need no horizontal sums and a group's scale multiply covers 16 rows at once
// (on the Zen 4, from L2, one core: 22-35 -> 53-64 GB/s decode; prefill 54% -> 82-87% of the int8 dot peak in a
// kernel harness). Block b holds rows 16b..16b+15 as Kp / 8 steps of 64 bytes; in step o, byte 4i + j holds column
// 8o + j of row 16b + i in its low nibble and column 8o + 4 + j in its high nibble. Scales are (blocks, groups, 16):
// row 16b + i's scale of group g at (b * groups + g) * 16 + i (int4_byte, int4_scale_index).
// I32 holds token ids and positions.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace ascent {

// Q4_0R is Q4_0 repacked for the AVX-512 and AVX2 kernels (never in a file): the same codes and scales, per 16 blocks
// (512 columns, kQ4RGroup) 288 bytes: the 16 f16 scales, then per half (8 blocks) 4 chunks of 32 bytes whose 4-byte
// lane i holds bytes 4j..4j+3 of block i's qs (chunk j), so one vpdpbusd lane sums columns of one block and a block's
// scale is one lane of a vector. Rows are padded to whole groups (scale 0, codes 8).
// Q4_KR is Q4_K repacked for the AVX-512 and AVX2 kernels (never in a file), the same 144 bytes per super-block
// (BlockQ4_KR): d and dmin as Q4_K has them, the 6-bit scales and minimums re-laid for a vector unpacking, and the
// codes regrouped so that one vpdpbusd lane sums columns of one 32-column sub-block, as Q4_0R does for Q4_0's blocks.
// Q6_KR is Q6_K repacked likewise (BlockQ6_KR): one lane per 16-column sub-block. Q8_0R is Q8_0 repacked the same way
// as Q4_0R, per 16 blocks 544 bytes: the 16 f16 scales, then the codes as unsigned bytes (code + 128, so vpdpbusd's
// unsigned side needs no fix-up per step) in the order of GemmInput::q4r's activations: at 128 j + 64 p + 32 h,
// lane i holds columns 16 p + 4 j .. 16 p + 4 j + 3 of block 8 h + i. Rows are padded to whole groups (scale 0,
// codes 128).
enum class DType : uint8_t { F32, F16, BF16, Q8_0, Q4_0, I32, I8, I4, Q4_K, Q6_K, Q4_0R, Q4_KR, Q6_KR, Q8_0R };

// I8 rows are padded to a multiple of 64 elements and I4 rows to 128 (whole groups of every size) so the integer
// kernels never need a tail.
constexpr int64_t kIntRowAlign = 64;
constexpr int64_t kInt4RowAlign = 128;
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
constexpr int64_t kQ4RGroup = 512;       // columns per Q4_0R group
constexpr int64_t kQ4RGroupBytes = 288;  // bytes per Q4_0R group (16 blocks of 18)
constexpr int64_t kQ8RGroupBytes = 544;  // bytes per Q8_0R group (16 blocks of 34)

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
// Q4_KR's super-block: d and dmin as Q4_K's; the 16 six-bit scales and minimums laid out for a vector unpacking:
// scales[i] (i < 8) holds scale i in its low 6 bits and minimum i's top 2 bits above them, scales[8 + k] (k < 4)
// the low 4 bits of minimums k (low nibble) and k + 4 (high). Sub-block i's 32 codes as 16 bytes in Q4_0's
// pairing (byte m: code m in the low nibble, code m + 16 in the high one), byte m of sub-block i at
// qs[m / 4 * 32 + 4 * i + m % 4]: 4 chunks of 32 bytes, each a 4-byte lane per sub-block.
struct BlockQ4_KR {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kQKBlock / 2];
};
static_assert(sizeof(BlockQ4_KR) == 144);
struct BlockQ6_K {
  uint8_t ql[kQKBlock / 2];      // low 4 bits
  uint8_t qh[kQKBlock / 4];      // high 2 bits
  int8_t scales[kQKBlock / 16];  // one per 16 elements
  uint16_t d;                    // f16 super-block scale
};
static_assert(sizeof(BlockQ6_K) == 210);
// Q6_KR's super-block: scales and d as Q6_K's; the codes of sub-blocks 0-7 (columns 0-127) and 8-15 as two halves
// R, each 64 bytes of ql and 32 of qh whose 4-byte lane i belongs to sub-block 8R + i. Code c (0-15) of a sub-block,
// with step k = c / 4 and byte m = c % 4 of its lane: low 4 bits in ql[64R + 32 (k % 2) + 4i + m] (the low nibble
// for k < 2, the high one for k >= 2), top 2 bits in bits 2k, 2k + 1 of qh[32R + 4i + m].
struct BlockQ6_KR {
  uint8_t ql[kQKBlock / 2];
  uint8_t qh[kQKBlock / 4];
  int8_t scales[kQKBlock / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_KR) == 210);
inline bool is_kquant(DType t) {
  return t == DType::Q4_K || t == DType::Q6_K || t == DType::Q4_KR || t == DType::Q6_KR;
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
// Sub-block j's scale and minimum, and code e (0..255, unsigned 4-bit), of a Q4_K and of a Q4_KR super-block.
inline void q4k_scale_min(const BlockQ4_K& b, int j, int& sc, int& m) {
  q4k_scale_min(b.scales, j, sc, m);
}
inline void q4k_scale_min(const BlockQ4_KR& b, int j, int& sc, int& m) {
  sc = b.scales[j] & 63;
  m = (b.scales[j] >> 6) << 4 | (j < 4 ? b.scales[8 + j] & 0x0f : b.scales[4 + j] >> 4);
}
inline int q4k_code(const BlockQ4_K& b, int e) {
  const uint8_t v = b.qs[e / 64 * 32 + e % 32];
  return e % 64 < 32 ? v & 0x0f : v >> 4;
}
inline int q4k_code(const BlockQ4_KR& b, int e) {
  const int i = e / 32, m = e % 16;
  const uint8_t v = b.qs[m / 4 * 32 + 4 * i + m % 4];
  return e % 32 < 16 ? v & 0x0f : v >> 4;
}
// Signed 6-bit value e (0..255) of a Q6_K and of a Q6_KR super-block. Q6_K: per half of 128, runs of 32 take the
// low or high nibble of ql[l] or ql[l + 32] and 2 bits of qh[l] above it, minus 32.
inline int q6k_value(const BlockQ6_K& b, int e) {
  const int h = e / 128, r = e % 128 / 32, l = e % 32;
  const uint8_t low = b.ql[64 * h + (r % 2) * 32 + l];
  const int nib = r < 2 ? low & 0x0f : low >> 4;
  return (nib | (((b.qh[32 * h + l] >> (2 * r)) & 3) << 4)) - 32;
}
inline int q6k_value(const BlockQ6_KR& b, int e) {
  const int h = e / 128, i = e % 128 / 16, k = e % 16 / 4, m = e % 4;
  const uint8_t low = b.ql[64 * h + 32 * (k % 2) + 4 * i + m];
  const int nib = k < 2 ? low & 0x0f : low >> 4;
  return (nib | (((b.qh[32 * h + 4 * i + m] >> (2 * k)) & 3) << 4)) - 32;
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
// Bytes one row of `cols` elements occupies (I8, I4, Q4_0R and Q8_0R rows padded as padded_cols says).
int64_t row_bytes(DType t, int64_t cols);
// The row length the matmul kernels' activations are padded to. Q4_KR weight rows stay whole super-blocks, but
// its AVX-512 kernel takes two super-blocks per 512-bit step, so its activations pad to 512 columns.
inline int64_t padded_cols(DType t, int64_t cols) {
  const int64_t a = t == DType::I4                                                ? kInt4RowAlign
                    : t == DType::Q4_0R || t == DType::Q4_KR || t == DType::Q8_0R ? kQ4RGroup
                                                                                  : kIntRowAlign;
  return (cols + a - 1) / a * a;
}
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

// The multiplier that turns values into codes for a quantization scale d: 1 / d, or 0 where that is not finite (d = 0,
// or a subnormal d below 1 / FLT_MAX, i.e. a span whose largest magnitude is under ~3.7e-37 for int8), so every value
// codes as 0 rather than as x * inf (NaN for a zero value: code -127 in the SIMD quantizers, an undefined integer
// conversion in scalar code).
inline float inverse_scale(float d) {
  if (d == 0.0f) return 0.0f;
  const float id = 1.0f / d;
  return std::isinf(id) ? 0.0f : id;
}

// Block b's f16 scale in a Q4_0R or Q8_0R row (groups of 16 blocks of group_bytes, the scales first).
inline uint16_t r_group_scale(const uint8_t* row, int64_t b, int64_t group_bytes) {
  uint16_t d;
  std::memcpy(&d, row + b / 16 * group_bytes + 2 * (b % 16), 2);
  return d;
}
// Q4_0R row access (see DType): block b's f16 scale and byte m (0-15) of its qs, as BlockQ4_0 holds them.
inline uint16_t q4r_scale(const uint8_t* row, int64_t b) {
  return r_group_scale(row, b, kQ4RGroupBytes);
}
// Where byte m of block i (0-15) of a group lies in that Q4_0R group: chunk m / 4, lane i % 8 of half i / 8.
inline int64_t q4r_byte_at(int64_t i, int m) {
  return 32 + i / 8 * 128 + m / 4 * 32 + 4 * (i % 8) + m % 4;
}
inline uint8_t q4r_byte(const uint8_t* row, int64_t b, int m) {
  return row[b / 16 * kQ4RGroupBytes + q4r_byte_at(b % 16, m)];
}
// Q8_0R row access (see DType): block b's f16 scale and its code m (0-31), as BlockQ8_0 holds them.
inline uint16_t q8r_scale(const uint8_t* row, int64_t b) {
  return r_group_scale(row, b, kQ8RGroupBytes);
}
// Where code m (column m) of block i (0-15) of a group lies in that Q8_0R group: chunk m % 16 / 4, part m / 16,
// lane i % 8 of half i / 8.
inline int64_t q8r_code_at(int64_t i, int m) {
  return 32 + m % 16 / 4 * 128 + m / 16 * 64 + i / 8 * 32 + 4 * (i % 8) + m % 4;
}
inline int8_t q8r_code(const uint8_t* row, int64_t b, int m) {
  return static_cast<int8_t>(row[b / 16 * kQ8RGroupBytes + q8r_code_at(b % 16, m)] ^ 0x80);
}
// Repacks nb Q4_0 blocks (one row) into a Q4_0R row of padded_cols(Q4_0R, 32 nb) columns.
void repack_row_q4_0r(const BlockQ4_0* blocks, int64_t nb, uint8_t* dst);
// Repacks nb Q8_0 blocks (one row) into a Q8_0R row of padded_cols(Q8_0R, 32 nb) columns.
void repack_row_q8_0r(const BlockQ8_0* blocks, int64_t nb, uint8_t* dst);
// Repacks n Q4_K (Q6_K) super-blocks into Q4_KR (Q6_KR) ones, the same size.
void repack_q4_kr(const BlockQ4_K* blocks, int64_t n, BlockQ4_KR* dst);
void repack_q6_kr(const BlockQ6_K* blocks, int64_t n, BlockQ6_KR* dst);
// Each GGUF type and the layout the AVX-512 and AVX2 kernels read it in once the load repacks it.
inline constexpr std::pair<DType, DType> kRepackedTypes[] = {
    {DType::Q8_0, DType::Q8_0R}, {DType::Q4_0, DType::Q4_0R}, {DType::Q4_K, DType::Q4_KR}, {DType::Q6_K, DType::Q6_KR}};
// The layout a file's type is repacked in (Q8_0 -> Q8_0R, Q4_0 -> Q4_0R, Q4_K -> Q4_KR, Q6_K -> Q6_KR), or t itself.
inline DType repacked_type(DType t) {
  for (const auto& [file, repacked] : kRepackedTypes) {
    if (t == file) return repacked;
  }
  return t;
}
// The file's type a repacked one came from (the inverse of repacked_type), for messages about the source.
inline DType file_type(DType t) {
  for (const auto& [file, repacked] : kRepackedTypes) {
    if (t == repacked) return file;
  }
  return t;
}

// Converts n elements of type t at src into f32 at dst (n a whole number of blocks).
void dequantize_row(DType t, const void* src, float* dst, int64_t n);
// Converts n f32 elements into type t (F32, F16, BF16, Q8_0, Q4_0, and Q4_0R and Q8_0R: quantized then repacked);
// the quantizers follow GGUF's reference rounding so files we write decode the same in llama.cpp.
void quantize_row(DType t, const float* src, void* dst, int64_t n);
// Whether quantize_row writes type t: not I8/I4 (their scales are per row or group: tensor/quantize.h), not I32, not
// the K-quants (read, not written).
inline bool quantize_row_writes(DType t) {
  return !is_int_weight(t) && !is_kquant(t) && t != DType::I32;
}

}  // namespace ascent
