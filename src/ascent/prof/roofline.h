// Measures this machine's roofline: memory read bandwidth (one thread and all threads) and peak FP32 FMA
// throughput, and the int8/bf16 dot-product peaks. Every benchmark reports its figures as a fraction of these.
#pragma once

#include <cstdint>
#include <string>

namespace ascent::prof {

struct Roofline {
  double read_gbps_1t = 0, read_gbps_all = 0;  // GB/s (1e9 bytes per second), best of several passes
  double fp32_gflops_1t = 0, fp32_gflops_all = 0;
  // Peak of the dot-product instructions the quantized kernels use (all threads; 0 when the CPU lacks them):
  // int8 in GOP/s, vpdpbusd with AVX-512 VNNI, else AVX2's vpmaddubsw (what the AVX2 integer and GGUF kernels use),
  // named by int8_isa; bf16 vdpbf16ps in GFLOP/s.
  double int8_gops_all = 0, bf16_gflops_all = 0;
  std::string int8_isa;
  int threads = 1;
  std::string fma_isa;  // which instruction set the FLOP/s loop used
};

// The read loops every bandwidth figure here comes from, on the calling thread: sums n bytes at p as 64-bit words (AVX2
// where the CPU has it), n a multiple of 128, each line prefetched 4 KiB ahead as `prefetch` says: not at all, with the
// non-temporal hint (as the decode kernels stream their weights: kernels/cpu/gemm_tiles.h, PrefetchTo::Stream), or into
// L1. Where the CPU has AVX-512 the loop without prefetch uses 512-bit loads, which on the Zen 5 host read up to 16%
// more than the best 256-bit loop in the fast memory state (bench/RESULTS.md, session 29), while either prefetch read
// up to 1.4x the 256-bit plain loop (session 19; 1.10-1.16x the 512-bit one in a slow minute, session 29). Which of the
// three is fastest changes from minute to minute, so every bandwidth measured here is the best pass of all three: the
// roofline is the best read this machine does, not the plainest. For a benchmark that compares a kernel with a read of
// the same bytes (bench/decode_ceiling.cc).
enum class ReadPrefetch { None, NonTemporal, L1 };
inline constexpr ReadPrefetch kReadPrefetches[] = {ReadPrefetch::None, ReadPrefetch::NonTemporal, ReadPrefetch::L1};
uint64_t sum_bytes(const uint8_t* p, int64_t n, ReadPrefetch prefetch = ReadPrefetch::None);

// buffer_bytes: size of the buffer streamed for bandwidth (large enough to defeat the caches).
Roofline measure_roofline(int threads, int64_t buffer_bytes = int64_t{512} << 20);

// measure_roofline's read loop alone, on a buffer kept for repeated short measurements between the steps of a
// benchmark, so that each step is compared with the memory rate of the same moment (bench's decode tokens).
class ReadProbe {
 public:
  explicit ReadProbe(int64_t buffer_bytes = int64_t{256} << 20);
  ReadProbe(const ReadProbe&) = delete;
  ReadProbe& operator=(const ReadProbe&) = delete;
  ~ReadProbe();
  // The next 3 x `bytes` of the buffer (windows taken in turn, so a window is cold again by the time it comes back
  // around) read as six halves of `bytes`, two with each of sum_bytes' prefetches, the fastest kept, split over
  // the global ThreadPool's threads rather than fresh ones: a reading of about three milliseconds between two
  // decode steps. On the Zen 4 host, single 8-32 MiB windows read the
  // same as whole 256 MiB passes alternated with them (median ratio 1.00-1.04); on the Zen 5 host a 16 MiB window
  // read ~10% less than a 64 or 128 MiB one in the fast memory state (bench uses 64).
  double window_gbps(int64_t bytes);

 private:
  uint8_t* buf_ = nullptr;
  int64_t bytes_ = 0;
  int64_t next_ = 0;  // where the next window starts
};

}  // namespace ascent::prof
