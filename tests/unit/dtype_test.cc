// f16/bf16 conversions against IEEE bit patterns, and the GGUF block quantizers against their defining formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ascent/tensor/dtype.h"

namespace ascent {
namespace {

TEST(DType, F16KnownBitPatterns) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);                      // largest finite half
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);                      // rounds to infinity
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);         // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -26)), 0x0000);         // underflows to zero
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie rounds to even
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_FLOAT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_FLOAT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
}

TEST(DType, F16RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), h) << "half 0x" << std::hex << h;
  }
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_FLOAT_EQ(bf16_to_f32(0xc040), -3.0f);
}

TEST(DType, Q8_0FollowsItsDefinition) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(64);
  for (auto& v : x) v = dist(rng);
  std::vector<BlockQ8_0> q(2);
  quantize_row(DType::Q8_0, x.data(), q.data(), 64);
  std::vector<float> y(64);
  dequantize_row(DType::Q8_0, q.data(), y.data(), 64);
  for (int b = 0; b < 2; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const float d = f16_to_f32(q[b].d);
    EXPECT_NEAR(d, amax / 127.0f, amax / 127.0f * 1e-3f);
    // Half a step, plus what rounding the scale to f16 (relative 2^-11) costs at |q| <= 127.
    const float bound = d * (0.5f + 127.0f / 2048.0f);
    for (int j = 0; j < 32; ++j) EXPECT_LE(std::fabs(y[b * 32 + j] - x[b * 32 + j]), bound);
  }
}

TEST(DType, Q4_0UsesSignedMaxAsMinusEight) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 10) / 4.0f;  // max magnitude is +5.25 at j = 31
  BlockQ4_0 q;
  quantize_row(DType::Q4_0, x.data(), &q, 32);
  EXPECT_FLOAT_EQ(f16_to_f32(q.d), f16_to_f32(f32_to_f16(5.25f / -8.0f)));
  EXPECT_EQ(q.qs[15] >> 4, 0);  // element 31 (the max) maps to nibble 0, i.e. -8 * d = +5.25
  std::vector<float> y(32);
  dequantize_row(DType::Q4_0, &q, y.data(), 32);
  const float bound = std::fabs(f16_to_f32(q.d)) * (0.5f + 8.0f / 2048.0f);
  for (int j = 0; j < 32; ++j) EXPECT_LE(std::fabs(y[j] - x[j]), bound);
}

TEST(DType, StorageBytesRejectsPartialBlocks) {
  EXPECT_EQ(storage_bytes(DType::Q8_0, 64), 68);
  EXPECT_EQ(storage_bytes(DType::Q4_0, 32), 18);
  EXPECT_EQ(storage_bytes(DType::BF16, 3), 6);
  EXPECT_THROW(storage_bytes(DType::Q4_0, 33), std::exception);
  EXPECT_THROW(parse_dtype("int3"), std::exception);
  EXPECT_EQ(parse_dtype("Q8_0"), DType::Q8_0);
}

}  // namespace
}  // namespace ascent
