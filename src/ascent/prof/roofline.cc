#include "ascent/prof/roofline.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "ascent/base/aligned.h"
#include "ascent/base/cpu_features.h"
#include "ascent/base/error.h"
#include "ascent/base/thread_pool.h"

namespace ascent::prof {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kStreamAhead = 4096;  // as kernels::kStreamAhead

template <ReadPrefetch kPrefetch>
inline void prefetch_line(const uint8_t* p) {
  if constexpr (kPrefetch == ReadPrefetch::NonTemporal) _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_NTA);
  if constexpr (kPrefetch == ReadPrefetch::L1) _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
}

template <ReadPrefetch kPrefetch>
__attribute__((target("avx2"))) uint64_t sum_avx2(const uint8_t* p, int64_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 128 <= n; i += 128) {
    prefetch_line<kPrefetch>(p + i + kStreamAhead);
    prefetch_line<kPrefetch>(p + i + kStreamAhead + 64);
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), a0);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

// The plain loop (no software prefetch) on AVX-512 machines: one 64-byte load per line, each its own instruction.
// The loads are inline assembly so that GCC cannot fold each into its add (vpaddq zmm, zmm, [mem]). The folded
// form read less than the best 256-bit loop, the unfolded one more. With a
// software prefetch beside each line the 512-bit form read less than the 256-bit one, so the prefetching loops stay
// 256-bit.
__attribute__((target("avx512f"))) uint64_t sum_avx512(const uint8_t* p, int64_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0;
  for (int64_t i = 0; i + 128 <= n; i += 128) {
    __m512i v0, v1;
    asm volatile("vmovdqu64 %1, %0" : "=v"(v0) : "m"(*reinterpret_cast<const __m512i_u*>(p + i)));
    asm volatile("vmovdqu64 %1, %0" : "=v"(v1) : "m"(*reinterpret_cast<const __m512i_u*>(p + i + 64)));
    a0 = _mm512_add_epi64(a0, v0);
    a1 = _mm512_add_epi64(a1, v1);
  }
  alignas(64) uint64_t lanes[8];  // (not _mm512_reduce_add_epi64: GCC 12 warns inside it, bug 105593)
  _mm512_store_si512(lanes, _mm512_add_epi64(a0, a1));
  uint64_t total = 0;
  for (uint64_t v : lanes) total += v;
  return total;
}

template <ReadPrefetch kPrefetch>
uint64_t sum_scalar(const uint8_t* p, int64_t n) {
  const auto* q = reinterpret_cast<const uint64_t*>(p);
  uint64_t a = 0, b = 0, c = 0, d = 0;
  for (int64_t i = 0; i + 4 <= n / 8; i += 4) {
    if (i % 8 == 0) prefetch_line<kPrefetch>(reinterpret_cast<const uint8_t*>(q + i) + kStreamAhead);
    a += q[i];
    b += q[i + 1];
    c += q[i + 2];
    d += q[i + 3];
  }
  return a + b + c + d;
}

}  // namespace

uint64_t sum_bytes(const uint8_t* p, int64_t n, ReadPrefetch prefetch) {
  const bool avx2 = cpu_features().avx2;
  switch (prefetch) {
    case ReadPrefetch::NonTemporal:
      return avx2 ? sum_avx2<ReadPrefetch::NonTemporal>(p, n) : sum_scalar<ReadPrefetch::NonTemporal>(p, n);
    case ReadPrefetch::L1:
      return avx2 ? sum_avx2<ReadPrefetch::L1>(p, n) : sum_scalar<ReadPrefetch::L1>(p, n);
    case ReadPrefetch::None:
      break;
  }
  if (cpu_features().avx512f) return sum_avx512(p, n);
  return avx2 ? sum_avx2<ReadPrefetch::None>(p, n) : sum_scalar<ReadPrefetch::None>(p, n);
}

namespace {

// The best of `passes` reads of `threads` x `share` bytes. Each thread reads its share of a window that moves along
// the buffer, so a window is cold again when it comes back; the passes take sum_bytes' prefetches in turn. The
// threads start once and meet at a barrier before each pass, and a pass lasts from the barrier to the last thread's
// end. Threads started for each pass begin up to ~0.1 ms apart, a skew such a pass would count as reading time. On a
// shared host two threads may read together or take turns, states that change within tens of milliseconds. Many
// short passes spread over the measurement catch the faster state, where a few whole-buffer passes can all fall in
// the slower one.
double read_bandwidth(const uint8_t* buf, int64_t bytes, int threads, int64_t share, int passes) {
  share = std::min(share, bytes / threads) / 128 * 128;
  ASCENT_CHECK(share > 0, "read_bandwidth: a {}-byte buffer is too small for {} threads", bytes, threads);
  const int64_t window = share * threads, windows = bytes / window;
  const int workers = threads - 1;
  std::atomic<int> arrived{0}, done{0};  // workers' arrivals at a pass, and passes finished, counted over all passes
  std::atomic<int> go{-1};               // the last pass the workers may start
  std::atomic<uint64_t> sink{0};
  std::vector<Clock::time_point> ends(static_cast<size_t>(threads));
  auto read = [&](int t, int pass) {
    sink += sum_bytes(buf + pass % windows * window + t * share, share, kReadPrefetches[pass % 3]);
    ends[static_cast<size_t>(t)] = Clock::now();
  };
  std::vector<std::thread> ts;
  for (int t = 1; t < threads; ++t) {
    ts.emplace_back([&, t] {
      for (int pass = 0; pass < passes; ++pass) {
        arrived.fetch_add(1);
        while (go.load() < pass) {
        }
        read(t, pass);
        done.fetch_add(1);
      }
    });
  }
  double best = 0;
  for (int pass = 0; pass < passes; ++pass) {
    while (arrived.load() < (pass + 1) * workers) {  // every worker at the barrier
    }
    const auto t0 = Clock::now();
    go.store(pass);
    read(0, pass);
    while (done.load() < (pass + 1) * workers) {
    }
    const auto end = *std::max_element(ends.begin(), ends.end());
    best = std::max(best, static_cast<double>(window) / std::chrono::duration<double>(end - t0).count() / 1e9);
  }
  for (auto& t : ts) t.join();
  return best;
}

constexpr int64_t kFmaIters = 8'000'000;  // a pass takes ~20 ms per loop

__attribute__((target("avx512f"))) float fma_avx512() {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < kFmaIters; ++it) {
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], m, a);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  return lanes[0] + lanes[15];
}

__attribute__((target("avx2,fma"))) float fma_avx2() {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  const __m256 m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < kFmaIters; ++it) {
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], m, a);
  }
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  return lanes[0] + lanes[7];
}

// 24 independent accumulators: enough to cover the instructions' latency at full throughput.
__attribute__((target("avx512f,avx512vnni"))) float vnni_loop() {
  __m512i acc[24];
  for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_epi32(i);
  const __m512i a = _mm512_set1_epi8(1), b = _mm512_set1_epi8(3);
  for (int64_t it = 0; it < kFmaIters / 2; ++it) {
    for (int i = 0; i < 24; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
  }
  __m512i s = acc[0];
  for (int i = 1; i < 24; ++i) s = _mm512_add_epi32(s, acc[i]);
  alignas(64) int32_t lanes[16];
  _mm512_store_si512(lanes, s);
  // The lanes wrap around in the instruction (defined); their sum in int64, where it cannot overflow.
  return static_cast<float>(int64_t{lanes[0]} + lanes[15]);
}

// AVX2's int8 products: vpmaddubsw (32 byte products, summed in pairs) in 8 dependent chains. With latency 3 and two
// per cycle (Zen 3), 6 chains cover the latency; with 12, GCC 12 spills the chains to the stack every iteration.
// The int16 lanes saturate (defined).
__attribute__((target("avx2"))) float maddubs_loop() {
  __m256i acc[8];
  for (int i = 0; i < 8; ++i) acc[i] = _mm256_set1_epi8(static_cast<char>(i + 1));
  const __m256i b = _mm256_set1_epi8(3);
  for (int64_t it = 0; it < kFmaIters / 2; ++it) {
    for (int i = 0; i < 8; ++i) acc[i] = _mm256_maddubs_epi16(acc[i], b);
  }
  __m256i s = acc[0];
  for (int i = 1; i < 8; ++i) s = _mm256_add_epi16(s, acc[i]);
  return static_cast<float>(_mm256_extract_epi16(s, 0));
}

__attribute__((target("avx512f,avx512bf16"))) float bf16_loop() {
  __m512 acc[24];
  for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380);
  for (int64_t it = 0; it < kFmaIters / 2; ++it) {
    for (int i = 0; i < 24; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 24; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  return lanes[0] + lanes[15];
}

// Operations per second of `loop` (ops_per_call each) on `threads` threads at once. Each thread times its own
// passes and keeps its best; the rates are summed. On a shared host a neighbour can halve one core for a moment.
// Per-thread best-of-five is robust to that and to threads starting at different times: noise only ever lowers a
// peak, so the best pass is the estimate.
template <class Fn>
double peak_rate(int threads, Fn loop, double ops_per_call) {
  constexpr int kPasses = 5;
  std::atomic<float> sink{0};
  std::vector<double> best(static_cast<size_t>(threads), 0.0);
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      for (int pass = 0; pass < kPasses; ++pass) {
        const auto t0 = Clock::now();
        sink = sink + loop();
        const double s = std::chrono::duration<double>(Clock::now() - t0).count();
        best[static_cast<size_t>(t)] = std::max(best[static_cast<size_t>(t)], ops_per_call / s / 1e9);
      }
    });
  }
  for (auto& t : ts) t.join();
  double total = 0;
  for (double b : best) total += b;
  return total;
}

double fma_gflops(int threads, std::string& isa) {
  const auto& f = cpu_features();
  const int lanes = f.avx512f ? 16 : (f.avx2 && f.fma ? 8 : 0);
  isa = f.avx512f ? "avx512f" : (lanes ? "avx2+fma" : "none");
  if (lanes == 0) return 0;
  const double flops = 2.0 * lanes * 12 * static_cast<double>(kFmaIters);
  return f.avx512f ? peak_rate(threads, fma_avx512, flops) : peak_rate(threads, fma_avx2, flops);
}

// Huge pages, as the weights get with --no-mmap. On 4 KiB pages the same loop reads slower, and a decode on huge pages
// would then read "faster than the roofline". Every page is touched, so none is the zero page.
AlignedPtr read_buffer(int64_t bytes) {
  AlignedPtr buf = huge_alloc_bytes(static_cast<size_t>(bytes));
  for (int64_t i = 0; i < bytes; i += 64) buf[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
  return buf;
}

}  // namespace

ReadProbe::ReadProbe(int64_t buffer_bytes) : bytes_(buffer_bytes / 4096 * 4096) {
  buf_ = read_buffer(bytes_).release();
}

ReadProbe::~ReadProbe() {
  AlignedDeleter{}(buf_);
}

double ReadProbe::window_gbps(int64_t bytes) {
  ThreadPool& pool = ThreadPool::global();
  const int64_t parts = pool.size();
  const int64_t chunk = std::min(bytes, bytes_ / 2) / 2 / parts / 128 * 128;
  ASCENT_CHECK(chunk > 0, "ReadProbe: a window of {} bytes is too small for {} threads", bytes, parts);
  // An empty loop first wakes workers that went to sleep since the last one (tens of microseconds in a VM, which
  // the timed loop would otherwise count as ~10% of a 16 MiB read).
  pool.parallel_for(parts, [](int64_t, int64_t) {});
  std::atomic<uint64_t> sink{0};
  double best = 0;
  // Two halves of the window with each of sum_bytes' prefetches, the fastest kept: a probe this short is otherwise
  // at the mercy of one descheduled thread (a busy neighbour only ever lowers a measured peak).
  for (int pass = 0; pass < 6; ++pass) {
    if (next_ + chunk * parts > bytes_) next_ = 0;
    const uint8_t* start = buf_ + next_;
    next_ += chunk * parts;
    const auto t0 = Clock::now();
    pool.parallel_for(parts, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) sink += sum_bytes(start + i * chunk, chunk, kReadPrefetches[pass % 3]);
    });
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, static_cast<double>(chunk * parts) / s / 1e9);
  }
  best_ = std::max(best_, best);
  return best;
}

Roofline measure_roofline(int threads, int64_t buffer_bytes) {
  Roofline r;
  r.threads = std::max(1, threads);
  const int64_t bytes = buffer_bytes / 4096 * 4096;
  AlignedPtr buf = read_buffer(bytes);
  // 16 MiB per thread and pass (~1 ms at 16 GB/s a thread), 60 passes.
  constexpr int64_t kShare = int64_t{16} << 20;
  r.read_gbps_1t = read_bandwidth(buf.get(), bytes, 1, kShare, 60);
  r.read_gbps_all = read_bandwidth(buf.get(), bytes, r.threads, kShare, 60);
  r.fp32_gflops_1t = fma_gflops(1, r.fma_isa);
  r.fp32_gflops_all = fma_gflops(r.threads, r.fma_isa);
  const auto& f = cpu_features();
  // Per instruction: 64 int8 multiply-adds (16 lanes x 4), 32 bf16 multiply-adds (16 lanes x 2); 2 ops each.
  const double calls = 24.0 * static_cast<double>(kFmaIters / 2);
  if (f.avx512f && f.avx512_vnni) {
    r.int8_gops_all = peak_rate(r.threads, vnni_loop, calls * 64 * 2);
    r.int8_isa = "AVX-512 VNNI vpdpbusd";
  } else if (f.avx2) {  // 32 byte products per instruction, 8 chains
    r.int8_gops_all = peak_rate(r.threads, maddubs_loop, 8.0 * static_cast<double>(kFmaIters / 2) * 32 * 2);
    r.int8_isa = "AVX2 vpmaddubsw";
  }
  if (f.avx512f && f.avx512_bf16) r.bf16_gflops_all = peak_rate(r.threads, bf16_loop, calls * 32 * 2);
  return r;
}

}  // namespace ascent::prof
