// The repacked layouts of the CPU backend: GGUF's Q8_0, Q4_0, Q4_K and Q6_K with the same codes and scales,
// regrouped so that one 32-bit vpdpbusd lane sums columns of a single block. The per-block float work then leaves
// the inner loop. They exist only in memory, made at load (packed_weight.h) for the AVX-512 and AVX2 kernels; no
// file, DType or other backend sees them.
//
// Q4_KR and Q6_KR: the same bytes per super-block as Q4_K and Q6_K, codes regrouped so that a lane belongs to one
// 32-column (Q4_KR) or 16-column (Q6_KR) sub-block (BlockQ4_KR, BlockQ6_KR below).
#pragma once

#include <cstdint>
#include <cstring>

#include "ascent/kernels/cpu/weight_format.h"
#include "ascent/tensor/dtype.h"

namespace ascent::kernels {

// Q4_0R: per 16 blocks (512 columns, kQ4RGroup) 288 bytes: the 16 f16 scales, then per half (8 blocks) 4 chunks of
// 32 bytes. Chunk j's 4-byte lane i holds bytes 4j..4j+3 of block i's qs, so a block's scale is one lane of a vector.
// Rows are padded to whole groups (scale 0, codes 8).
// Q8_0R: Q4_0R's grouping, 544 bytes per 16 blocks: the 16 f16 scales, then the codes as unsigned bytes (code + 128,
// so vpdpbusd's unsigned side needs no fix-up). They lie in the order of GemmInput::q4r's activations: at
// 128 j + 64 p + 32 h, lane i holds columns 16 p + 4 j .. 16 p + 4 j + 3 of block 8 h + i. Rows are padded to whole
// groups (scale 0, codes 128).
constexpr int64_t kQ4RGroup = 512;       // columns per Q4_0R (Q8_0R) group
constexpr int64_t kQ4RGroupBytes = 288;  // bytes per Q4_0R group (16 blocks of 18)
constexpr int64_t kQ8RGroupBytes = 544;  // bytes per Q8_0R group (16 blocks of 34)

// Q4_KR's super-block: d and dmin as Q4_K's. The 16 six-bit scales and minimums are laid out for a vector
// unpacking. scales[i] (i < 8) holds scale i in its low 6 bits, with minimum i's top 2 bits above them. scales[8 + k]
// (k < 4) holds the low 4 bits of minimums k (low nibble) and k + 4 (high). Sub-block i's 32 codes are 16 bytes in
// Q4_0's pairing: byte m holds code m in the low nibble, code m + 16 in the high one. Byte m of sub-block i lies at
// qs[m / 4 * 32 + 4 * i + m % 4]: 4 chunks of 32 bytes, each a 4-byte lane per sub-block.
struct BlockQ4_KR {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kQKBlock / 2];
};
static_assert(sizeof(BlockQ4_KR) == 144);

// Q6_KR's super-block: scales and d as Q6_K's. The codes of sub-blocks 0-7 (columns 0-127) and 8-15 form two
// halves R, each 64 bytes of ql and 32 of qh whose 4-byte lane i belongs to sub-block 8R + i. Take code c (0-15) of
// a sub-block, with step k = c / 4 and byte m = c % 4 of its lane. Its low 4 bits lie in ql[64R + 32 (k % 2) + 4i
// + m]: the low nibble for k < 2, the high one for k >= 2. Its top 2 bits are bits 2k, 2k + 1 of qh[32R + 4i + m].
struct BlockQ6_KR {
  uint8_t ql[kQKBlock / 2];
  uint8_t qh[kQKBlock / 4];
  int8_t scales[kQKBlock / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_KR) == 210);

// Sub-block j's scale and minimum, and code e (0..255), of a Q4_KR super-block (dtype.h has Q4_K's).
inline void q4k_scale_min(const BlockQ4_KR& b, int j, int& sc, int& m) {
  sc = b.scales[j] & 63;
  m = (b.scales[j] >> 6) << 4 | (j < 4 ? b.scales[8 + j] & 0x0f : b.scales[4 + j] >> 4);
}
inline int q4k_code(const BlockQ4_KR& b, int e) {
  const int i = e / 32, m = e % 16;
  const uint8_t v = b.qs[m / 4 * 32 + 4 * i + m % 4];
  return e % 32 < 16 ? v & 0x0f : v >> 4;
}
// Signed 6-bit value e (0..255) of a Q6_KR super-block.
inline int q6k_value(const BlockQ6_KR& b, int e) {
  const int h = e / 128, i = e % 128 / 16, k = e % 16 / 4, m = e % 4;
  const uint8_t low = b.ql[64 * h + 32 * (k % 2) + 4 * i + m];
  const int nib = k < 2 ? low & 0x0f : low >> 4;
  return (nib | (((b.qh[32 * h + 4 * i + m] >> (2 * k)) & 3) << 4)) - 32;
}

// Block b's f16 scale in a Q4_0R or Q8_0R row (groups of 16 blocks of group_bytes, the scales first).
inline uint16_t r_group_scale(const uint8_t* row, int64_t b, int64_t group_bytes) {
  uint16_t d;
  std::memcpy(&d, row + b / 16 * group_bytes + 2 * (b % 16), 2);
  return d;
}
// Q4_0R row access: block b's f16 scale and byte m (0-15) of its qs, as BlockQ4_0 holds them.
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
// Q8_0R row access: block b's f16 scale and its code m (0-31), as BlockQ8_0 holds them.
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

// Repacks nb Q4_0 (Q8_0) blocks, one row, into a Q4_0R (Q8_0R) row of padded_cols(format, 32 nb) columns.
void repack_row_q4_0r(const BlockQ4_0* blocks, int64_t nb, uint8_t* dst);
void repack_row_q8_0r(const BlockQ8_0* blocks, int64_t nb, uint8_t* dst);
// Repacks n Q4_K (Q6_K) super-blocks into Q4_KR (Q6_KR) ones, the same size.
void repack_q4_kr(const BlockQ4_K* blocks, int64_t n, BlockQ4_KR* dst);
void repack_q6_kr(const BlockQ6_K* blocks, int64_t n, BlockQ6_KR* dst);
// Repacks src (q8_0, q4_0, q4_k or q6_k) into dst, a view of as many rows in repacked_format(src.format) whose bytes
// the caller provides; bit for bit the same codes and scales.
void repack(const MatrixView& src, const MatrixView& dst);

// Row r of any format's matrix as f32 (m.cols values): the values its codes and scales stand for.
void row_to_f32(const MatrixView& m, int64_t r, float* dst);

}  // namespace ascent::kernels
