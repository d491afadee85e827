#include "ascent/tensor/dtype.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <vector>

#include "ascent/base/error.h"

namespace ascent {
namespace {

float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ff;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

const std::array<float, 65536>& f16_table() {
  static const auto table = [] {
    std::array<float, 65536> t{};
    for (uint32_t i = 0; i < 65536; ++i) t[i] = f16_bits_to_f32(static_cast<uint16_t>(i));
    return t;
  }();
  return table;
}

}  // namespace

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "f32";
    case DType::F16:
      return "f16";
    case DType::BF16:
      return "bf16";
    case DType::Q8_0:
      return "q8_0";
    case DType::Q4_0:
      return "q4_0";
    case DType::Q4_0R:
      return "q4_0r";
    case DType::Q4_KR:
      return "q4_kr";
    case DType::Q6_KR:
      return "q6_kr";
    case DType::Q8_0R:
      return "q8_0r";
    case DType::I32:
      return "i32";
    case DType::I8:
      return "int8";
    case DType::I4:
      return "int4";
    case DType::Q4_K:
      return "q4_k";
    case DType::Q6_K:
      return "q6_k";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  std::string s(name);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
    if (s == dtype_name(t)) return t;
  }
  fail("unknown type '{}' (expected f32, f16, bf16, q8_0 or q4_0)", name);
}

int64_t block_elems(DType t) {
  return is_quantized(t) ? kQBlock : is_kquant(t) ? kQKBlock : t == DType::I4 ? 2 : 1;
}

int64_t block_bytes(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::F16:
      return 2;
    case DType::BF16:
      return 2;
    case DType::Q8_0:
    case DType::Q8_0R:  // whole rows are padded to groups (row_bytes); per block the same 34 bytes
      return sizeof(BlockQ8_0);
    case DType::Q4_0:
    case DType::Q4_0R:  // whole rows are padded to groups (row_bytes); per block the same 18 bytes
      return sizeof(BlockQ4_0);
    case DType::I32:
      return 4;
    case DType::I8:
    case DType::I4:
      return 1;
    case DType::Q4_K:
    case DType::Q4_KR:
      return sizeof(BlockQ4_K);
    case DType::Q6_K:
    case DType::Q6_KR:
      return sizeof(BlockQ6_K);
  }
  return 0;
}

bool is_quantized(DType t) {
  return t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_0R || t == DType::Q8_0R;
}

int64_t storage_bytes(DType t, int64_t n) {
  const int64_t be = block_elems(t);
  if (n % be != 0) fail("{} elements is not a whole number of {}-element {} blocks", n, be, dtype_name(t));
  int64_t bytes = 0;
  if (__builtin_mul_overflow(n / be, block_bytes(t), &bytes)) {
    fail("{} elements of {} are more bytes than an int64 holds", n, dtype_name(t));
  }
  return bytes;
}

int64_t row_bytes(DType t, int64_t cols) {
  return is_int_weight(t) || t == DType::Q4_0R || t == DType::Q8_0R ? storage_bytes(t, padded_cols(t, cols))
                                                                    : storage_bytes(t, cols);
}

float f16_to_f32(uint16_t h) {
  return f16_table()[h];
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t absx = x & 0x7fffffff;
  if (absx >= 0x7f800000) return static_cast<uint16_t>(sign | 0x7c00 | (absx > 0x7f800000 ? 0x200 : 0));
  if (absx >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);  // rounds past the largest half
  if (absx < 0x38800000) {  // below the smallest normal half: produce a subnormal (or zero)
    if (absx < 0x33000000) return static_cast<uint16_t>(sign);
    const uint32_t e = absx >> 23;
    const uint32_t m = (absx & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - e;  // 113 - e + 13
    uint32_t h = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = ((absx >> 13) - (112u << 10));
  const uint32_t rem = absx & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

uint16_t f32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

namespace {

// n elements of Q4_0 blocks read through scale(i) (block i's f16 scale) and byte(i, m) (byte m of its qs): shared
// by Q4_0 and Q4_0R, which hold the same codes.
template <class Scale, class Byte>
void dequantize_q4_0(float* dst, int64_t n, Scale scale, Byte byte) {
  for (int64_t i = 0; i < n / kQBlock; ++i) {
    const float d = f16_to_f32(scale(i));
    for (int j = 0; j < kQBlock / 2; ++j) {
      const uint8_t q = byte(i, j);
      dst[i * kQBlock + j] = d * static_cast<float>((q & 0x0f) - 8);
      dst[i * kQBlock + j + 16] = d * static_cast<float>((q >> 4) - 8);
    }
  }
}

// n elements of Q4_K or Q4_KR super-blocks (the same values, read through q4k_scale_min and q4k_code).
template <class Block>
void dequantize_q4_k(const Block* b, float* dst, int64_t n) {
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

// n elements of Q6_K or Q6_KR super-blocks (the same values, read through q6k_value): d * (scale * value).
template <class Block>
void dequantize_q6_k(const Block* b, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQKBlock; ++i) {
    const float d = f16_to_f32(b[i].d);
    for (int e = 0; e < kQKBlock; ++e) {
      dst[i * kQKBlock + e] = d * static_cast<float>(b[i].scales[e / 16] * q6k_value(b[i], e));
    }
  }
}

}  // namespace

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case DType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::F16: {
      const auto* s = static_cast<const uint16_t*>(src);
      const auto& table = f16_table();
      for (int64_t i = 0; i < n; ++i) dst[i] = table[s[i]];
      return;
    }
    case DType::BF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::Q8_0: {
      const auto* b = static_cast<const BlockQ8_0*>(src);
      for (int64_t i = 0; i < n / kQBlock; ++i) {
        const float d = f16_to_f32(b[i].d);
        for (int j = 0; j < kQBlock; ++j) dst[i * kQBlock + j] = d * static_cast<float>(b[i].qs[j]);
      }
      return;
    }
    case DType::Q4_0: {
      const auto* b = static_cast<const BlockQ4_0*>(src);
      return dequantize_q4_0(
          dst, n, [&](int64_t i) { return b[i].d; }, [&](int64_t i, int m) { return b[i].qs[m]; });
    }
    case DType::Q8_0R: {
      const auto* row = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n / kQBlock; ++i) {
        const float d = f16_to_f32(q8r_scale(row, i));
        for (int j = 0; j < kQBlock; ++j) dst[i * kQBlock + j] = d * static_cast<float>(q8r_code(row, i, j));
      }
      return;
    }
    case DType::Q4_0R: {
      const auto* row = static_cast<const uint8_t*>(src);
      return dequantize_q4_0(
          dst, n, [&](int64_t i) { return q4r_scale(row, i); }, [&](int64_t i, int m) { return q4r_byte(row, i, m); });
    }
    case DType::Q4_K:
      return dequantize_q4_k(static_cast<const BlockQ4_K*>(src), dst, n);
    case DType::Q4_KR:
      return dequantize_q4_k(static_cast<const BlockQ4_KR*>(src), dst, n);
    case DType::Q6_K:
      return dequantize_q6_k(static_cast<const BlockQ6_K*>(src), dst, n);
    case DType::Q6_KR:
      return dequantize_q6_k(static_cast<const BlockQ6_KR*>(src), dst, n);
    case DType::I32:
    case DType::I8:
    case DType::I4:
      break;
  }
  fail("cannot convert {} to f32 row by row", dtype_name(t));
}

namespace {

// The group loop of the Q4_0R and Q8_0R repacks: per 512-column group of group_bytes, the 16 blocks' f16 scales
// first (0 past the row's nb blocks), then put(out, i, b) writes block b's codes as block i of the group at out
// (b >= nb: padding).
template <class Block, class Put>
void repack_groups(const Block* blocks, int64_t nb, int64_t group_bytes, uint8_t* dst, Put put) {
  const int64_t groups = (nb * kQBlock + kQ4RGroup - 1) / kQ4RGroup;
  for (int64_t g = 0; g < groups; ++g) {
    uint8_t* out = dst + g * group_bytes;
    for (int64_t i = 0; i < 16; ++i) {
      const int64_t b = 16 * g + i;
      const uint16_t d = b < nb ? blocks[b].d : uint16_t{0};
      std::memcpy(out + 2 * i, &d, 2);
      put(out, i, b);
    }
  }
}

}  // namespace

void repack_row_q4_0r(const BlockQ4_0* blocks, int64_t nb, uint8_t* dst) {
  repack_groups(blocks, nb, kQ4RGroupBytes, dst, [&](uint8_t* out, int64_t i, int64_t b) {
    for (int m = 0; m < 16; ++m) out[q4r_byte_at(i, m)] = b < nb ? blocks[b].qs[m] : uint8_t{0x88};
  });
}

void repack_row_q8_0r(const BlockQ8_0* blocks, int64_t nb, uint8_t* dst) {
  repack_groups(blocks, nb, kQ8RGroupBytes, dst, [&](uint8_t* out, int64_t i, int64_t b) {
    for (int m = 0; m < kQBlock; ++m) {  // unsigned: code + 128
      const uint8_t code = b < nb ? static_cast<uint8_t>(blocks[b].qs[m]) : uint8_t{0};
      out[q8r_code_at(i, m)] = code ^ 0x80;
    }
  });
}

void repack_q4_kr(const BlockQ4_K* blocks, int64_t n, BlockQ4_KR* dst) {
  for (int64_t s = 0; s < n; ++s) {
    BlockQ4_KR& o = dst[s];
    o.d = blocks[s].d;
    o.dmin = blocks[s].dmin;
    std::memset(o.scales, 0, sizeof o.scales);
    for (int i = 0; i < kQKBlock / kQBlock; ++i) {
      int sc, m;
      q4k_scale_min(blocks[s], i, sc, m);
      o.scales[i] = static_cast<uint8_t>(sc | (m >> 4) << 6);
      o.scales[8 + i % 4] |= static_cast<uint8_t>((m & 0x0f) << (i < 4 ? 0 : 4));
    }
    for (int i = 0; i < kQKBlock / kQBlock; ++i) {
      for (int m = 0; m < 16; ++m) {
        const int lo = q4k_code(blocks[s], kQBlock * i + m), hi = q4k_code(blocks[s], kQBlock * i + m + 16);
        o.qs[m / 4 * 32 + 4 * i + m % 4] = static_cast<uint8_t>(lo | hi << 4);
      }
    }
  }
}

void repack_q6_kr(const BlockQ6_K* blocks, int64_t n, BlockQ6_KR* dst) {
  for (int64_t s = 0; s < n; ++s) {
    BlockQ6_KR& o = dst[s];
    std::memset(&o, 0, sizeof o);
    std::memcpy(o.scales, blocks[s].scales, sizeof o.scales);
    o.d = blocks[s].d;
    for (int e = 0; e < kQKBlock; ++e) {
      const int q = q6k_value(blocks[s], e) + 32;
      const int h = e / 128, i = e % 128 / 16, k = e % 16 / 4, m = e % 4;
      o.ql[64 * h + 32 * (k % 2) + 4 * i + m] |= static_cast<uint8_t>((q & 0x0f) << (k < 2 ? 0 : 4));
      o.qh[32 * h + 4 * i + m] |= static_cast<uint8_t>((q >> 4) << (2 * k));
    }
  }
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  switch (t) {
    case DType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::F16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::BF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::Q8_0: {
      storage_bytes(t, n);
      auto* b = static_cast<BlockQ8_0*>(dst);
      for (int64_t i = 0; i < n / kQBlock; ++i) {
        const float* x = src + i * kQBlock;
        float amax = 0.0f;
        for (int j = 0; j < kQBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127.0f;
        const float id = inverse_scale(d);
        b[i].d = f32_to_f16(d);
        for (int j = 0; j < kQBlock; ++j) b[i].qs[j] = static_cast<int8_t>(std::lround(x[j] * id));
      }
      return;
    }
    case DType::Q4_0: {
      storage_bytes(t, n);
      auto* b = static_cast<BlockQ4_0*>(dst);
      for (int64_t i = 0; i < n / kQBlock; ++i) {
        const float* x = src + i * kQBlock;
        // The signed value of largest magnitude maps to -8, so the full 4-bit range is used on that side.
        float amax = 0.0f, vmax = 0.0f;
        for (int j = 0; j < kQBlock; ++j) {
          if (std::fabs(x[j]) > amax) {
            amax = std::fabs(x[j]);
            vmax = x[j];
          }
        }
        const float d = vmax / -8.0f;
        const float id = inverse_scale(d);
        b[i].d = f32_to_f16(d);
        for (int j = 0; j < kQBlock / 2; ++j) {
          const int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
          const int q1 = std::min(15, static_cast<int>(x[j + 16] * id + 8.5f));
          b[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
      }
      return;
    }
    case DType::Q8_0R: {
      std::vector<BlockQ8_0> blocks(static_cast<size_t>(n / kQBlock));
      quantize_row(DType::Q8_0, src, blocks.data(), n);
      repack_row_q8_0r(blocks.data(), n / kQBlock, static_cast<uint8_t*>(dst));
      return;
    }
    case DType::Q4_0R: {
      std::vector<BlockQ4_0> blocks(static_cast<size_t>(n / kQBlock));
      quantize_row(DType::Q4_0, src, blocks.data(), n);
      repack_row_q4_0r(blocks.data(), n / kQBlock, static_cast<uint8_t*>(dst));
      return;
    }
    case DType::I32:
    case DType::I8:
    case DType::I4:
    case DType::Q4_K:
    case DType::Q6_K:
    case DType::Q4_KR:
    case DType::Q6_KR:
      break;
  }
  fail("cannot convert f32 to {} row by row (use tensor/quantize.h; K-quants are read, not written)", dtype_name(t));
}

}  // namespace ascent
