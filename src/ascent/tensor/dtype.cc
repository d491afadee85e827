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
      return sizeof(BlockQ8_0);
    case DType::Q4_0:
      return sizeof(BlockQ4_0);
    case DType::I32:
      return 4;
    case DType::I8:
    case DType::I4:
      return 1;
    case DType::Q4_K:
      return sizeof(BlockQ4_K);
    case DType::Q6_K:
      return sizeof(BlockQ6_K);
  }
  return 0;
}

bool is_quantized(DType t) {
  return t == DType::Q8_0 || t == DType::Q4_0;
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
  return storage_bytes(t, padded_cols(t, cols));
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
      return dequantize_q4_0_blocks(
          dst, n, [&](int64_t i) { return b[i].d; }, [&](int64_t i, int m) { return b[i].qs[m]; });
    }
    case DType::Q4_K:
      return dequantize_q4_k_blocks(static_cast<const BlockQ4_K*>(src), dst, n);
    case DType::Q6_K:
      return dequantize_q6_k_blocks(static_cast<const BlockQ6_K*>(src), dst, n);
    case DType::I32:
    case DType::I8:
    case DType::I4:
      break;
  }
  fail("cannot convert {} to f32 row by row", dtype_name(t));
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
    case DType::I32:
    case DType::I8:
    case DType::I4:
    case DType::Q4_K:
    case DType::Q6_K:
      break;
  }
  fail("cannot convert f32 to {} row by row (use tensor/quantize.h; K-quants are read, not written)", dtype_name(t));
}

}  // namespace ascent
