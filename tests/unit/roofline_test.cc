// The read-bandwidth measurements: the sum the read loops compute, the best a ReadProbe keeps, and measure_roofline's
// threads meeting at each pass (any count, more threads than cores included) and agreeing on a figure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ascent/base/aligned.h"
#include "ascent/prof/roofline.h"

namespace ascent::prof {
namespace {

TEST(Roofline, EveryReadLoopSumsTheBytesAs64BitWords) {
  AlignedPtr buf = aligned_alloc_bytes(4096);
  auto* w = reinterpret_cast<uint64_t*>(buf.get());
  uint64_t want = 0;
  for (int i = 0; i < 512; ++i) want += w[i] = 0x0101010101010101ull * static_cast<uint64_t>(i) + 7;
  for (ReadPrefetch p : kReadPrefetches) EXPECT_EQ(sum_bytes(buf.get(), 4096, p), want);
}

TEST(Roofline, ProbeKeepsTheBestWindowUntilReset) {
  ReadProbe probe(int64_t{32} << 20);
  EXPECT_EQ(probe.best_gbps(), 0.0);
  std::vector<double> reads;
  for (int i = 0; i < 4; ++i) reads.push_back(probe.window_gbps(int64_t{8} << 20));
  EXPECT_GT(*std::min_element(reads.begin(), reads.end()), 0.0);
  EXPECT_EQ(probe.best_gbps(), *std::max_element(reads.begin(), reads.end()));
  probe.reset_best();
  EXPECT_EQ(probe.best_gbps(), 0.0);
  const double next = probe.window_gbps(int64_t{8} << 20);
  EXPECT_EQ(probe.best_gbps(), next);
}

TEST(Roofline, ReadBandwidthOnTwoAndThreeThreads) {
  for (int threads : {2, 3}) {  // three: more threads than this project's 2-core hosts have
    const Roofline r = measure_roofline(threads, int64_t{96} << 20);
    EXPECT_GT(r.read_gbps_1t, 0.0) << threads;
    EXPECT_GT(r.read_gbps_all, 0.0) << threads;
    EXPECT_EQ(r.threads, threads);
  }
}

}  // namespace
}  // namespace ascent::prof
