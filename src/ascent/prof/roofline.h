// Measures this machine's roofline: memory read bandwidth (one thread and all threads) and peak FP32 FMA
// throughput, and the int8/bf16 dot-product peaks. Every benchmark reports its figures as a fraction of these.
#pragma once

#include <cstdint>
#include <string>

namespace ascent::prof {

struct Roofline {
  double read_gbps_1t = 0, read_gbps_all = 0;  // GB/s (1e9 bytes per second), best of several passes
  double fp32_gflops_1t = 0, fp32_gflops_all = 0;
  // Peak of the dot-product instructions the quantized kernels use (all threads; 0 when the CPU lacks them).
  // int8 in GOP/s: vpdpbusd with AVX-512 VNNI, else AVX2's vpmaddubsw (what the AVX2 integer and GGUF kernels use),
  // named by int8_isa. bf16: vdpbf16ps in GFLOP/s.
  double int8_gops_all = 0, bf16_gflops_all = 0;
  std::string int8_isa;
  int threads = 1;
  std::string fma_isa;  // which instruction set the FLOP/s loop used
};

// The read loops every bandwidth figure here comes from, on the calling thread. Sums n bytes at p as 64-bit words
// (AVX2 where the CPU has it); n is a multiple of 128. Each line is prefetched 4 KiB ahead as `prefetch` says: not at
// all, with the non-temporal hint (as the decode kernels stream their weights: kernels/cpu/gemm_tiles.h,
// PrefetchTo::Stream), or into L1. Where the CPU has AVX-512, the loop without prefetch uses 512-bit loads, which
// read more than 256-bit ones. Which of the three loops reads fastest changes from minute to minute. So every bandwidth
// measured here is the best pass of all three: the roofline is the best read this machine does, not the plainest.
// Benchmarks that compare a kernel with a read of the same bytes call it too (bench/decode_ceiling.cc).
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
  // Reads the next 3 x `bytes` of the buffer as six halves of `bytes`, two with each of sum_bytes' prefetches, and
  // keeps the fastest. Windows are taken in turn, so a window is cold again by the time it comes back around. The
  // reads run on the global ThreadPool's threads rather than fresh ones: about three milliseconds between two decode
  // steps. bench uses 64 MiB windows, which read what whole passes read; a smaller window ramps up for more of
  // its time and reads less.
  double window_gbps(int64_t bytes);
  // The best window_gbps since reset_best (0 before any). One window catches one moment's memory state, slow or
  // fast. A decode that streamed through the seconds around several windows is judged against their best: the
  // fastest a plain read was served in that time.
  double best_gbps() const { return best_; }
  void reset_best() { best_ = 0; }

 private:
  uint8_t* buf_ = nullptr;
  int64_t bytes_ = 0;
  int64_t next_ = 0;  // where the next window starts
  double best_ = 0;
};

}  // namespace ascent::prof
