// rope_forward keeps the last call's angles per thread (a decode step's 32 calls share one position): a call with
// other positions, other frequencies or another row count must not reuse them. Each call is checked against the
// rotation computed here in double from the f32 angle (the numerics themselves are checked against PyTorch in
// tests/e2e/test_ops.py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "ascent/kernels/cpu/ops.h"

namespace ascent::kernels {
namespace {

std::vector<float> frequencies(int64_t D, float theta) {
  std::vector<float> inv(static_cast<size_t>(D / 2));
  for (int64_t i = 0; i < D / 2; ++i) {
    inv[static_cast<size_t>(i)] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(D));
  }
  return inv;
}

// Rotates an (T, H*D) input in rotate-half pairs with rope_forward and compares it with the rotation computed in
// double.
void check(int64_t H, int64_t D, const std::vector<int32_t>& pos, const std::vector<float>& inv) {
  const auto T = static_cast<int64_t>(pos.size());
  std::vector<float> x(static_cast<size_t>(T * H * D));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i) + 1.0f);
  const std::vector<float> x0 = x;
  rope_forward(x.data(), T, H, D, pos, inv, RopeStyle::Half);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < D / 2; ++i) {
        const float angle = static_cast<float>(pos[static_cast<size_t>(t)]) * inv[static_cast<size_t>(i)];
        const double c = std::cos(static_cast<double>(angle)), s = std::sin(static_cast<double>(angle));
        const size_t a = static_cast<size_t>(t * H * D + h * D + i), b = a + static_cast<size_t>(D / 2);
        EXPECT_NEAR(x[a], x0[a] * c - x0[b] * s, 1e-5) << "t " << t << " h " << h << " i " << i;
        EXPECT_NEAR(x[b], x0[b] * c + x0[a] * s, 1e-5) << "t " << t << " h " << h << " i " << i;
      }
    }
  }
}

TEST(Rope, ACallAfterAnotherWithOtherPositionsFrequenciesOrRowsUsesItsOwnAngles) {
  const std::vector<float> base = frequencies(16, 10000.0f), other = frequencies(16, 500000.0f);
  check(3, 16, {7}, base);
  check(2, 16, {7}, base);  // the same angles, another head count
  check(3, 16, {8}, base);  // the next decode position
  check(3, 16, {8}, other);
  check(3, 16, {8, 9, 10}, other);
  check(3, 16, {8, 9}, other);  // a prefix of the last call's positions
  check(1, 8, {8}, frequencies(8, 10000.0f));
  check(3, 16, {4000, 1, 0}, base);
}

}  // namespace
}  // namespace ascent::kernels
