// stream_patterns: how fast one thread reads memory in the access patterns of the decode (GEMV) kernels, with no
// arithmetic, so a kernel's GB/s can be judged against what its pattern allows rather than against a plain
// sequential read. The patterns run over a buffer of row-major rows of --row bytes:
//   - one row after another (the order of one-row decode tiles, i.e. a sequential read);
//   - R rows read side by side in bursts of B bytes per row.
// Each prefetches the next tile as the kernels do (gemm_tiles.h, prefetch_ahead); the sequential read also runs
// without that prefetch.
//   stream_patterns [--mib 1024] [--row 1024] [--passes 5]
// Prints the best pass of each pattern in GB/s. AVX-512 machines only; it refuses to run elsewhere.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

using Clock = std::chrono::steady_clock;

// Sums `rows` rows of `row` bytes side by side, `burst` bytes of each in turn, prefetching the next tile's bytes
// (kPrefetch).
template <int R, bool kPrefetch = true>
__attribute__((target("avx512f"))) uint64_t read_tiles(const uint8_t* p, int64_t bytes, int64_t row, int64_t burst) {
  __m512i acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_si512();
  const int64_t tile = R * row;
  for (int64_t t = 0; t + tile <= bytes; t += tile) {
    for (int64_t k0 = 0; k0 < row; k0 += burst) {
      for (int r = 0; r < R; ++r) {
        for (int64_t k = k0; k < std::min(row, k0 + burst); k += 64) {
          const uint8_t* q = p + t + r * row + k;
          if constexpr (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(q + tile), _MM_HINT_T0);
          acc[r] = _mm512_add_epi64(acc[r], _mm512_loadu_si512(q));
        }
      }
    }
  }
  __m512i s = acc[0];
  for (int r = 1; r < R; ++r) s = _mm512_add_epi64(s, acc[r]);
  alignas(64) uint64_t lanes[8];  // (not _mm512_reduce_add_epi64: GCC 12 warns inside it, bug 105593)
  _mm512_store_si512(lanes, s);
  uint64_t total = 0;
  for (uint64_t v : lanes) total += v;
  return total;
}

int64_t flag(int argc, char** argv, const std::string& name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == name) {
      char* end = nullptr;
      const long long v = std::strtoll(argv[i + 1], &end, 10);
      if (end == argv[i + 1] || *end != '\0' || v <= 0) {
        std::fprintf(stderr, "stream_patterns: %s: expected a positive integer, got '%s'\n", name.c_str(), argv[i + 1]);
        std::exit(2);
      }
      return v;
    }
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  if (!__builtin_cpu_supports("avx512f")) {
    std::fprintf(stderr, "stream_patterns: this CPU lacks AVX-512F\n");
    return 1;
  }
  const int64_t row = flag(argc, argv, "--row", 1024) / 64 * 64;
  const int64_t bytes = flag(argc, argv, "--mib", 1024) << 20;
  const int64_t passes = flag(argc, argv, "--passes", 5);
  if (row == 0) {
    std::fprintf(stderr, "stream_patterns: --row: must be at least 64 bytes\n");
    return 2;
  }
  auto* buf = static_cast<uint8_t*>(std::aligned_alloc(2 << 20, static_cast<size_t>(bytes)));
  if (buf == nullptr) {
    std::fprintf(stderr, "stream_patterns: cannot allocate %lld MiB\n", static_cast<long long>(bytes >> 20));
    return 1;
  }
  std::memset(buf, 1, static_cast<size_t>(bytes));
  uint64_t sink = 0;
  auto measure = [&](const char* name, auto fn) {
    double best = 0;
    for (int64_t i = 0; i < passes; ++i) {
      const auto t0 = Clock::now();
      sink += fn();
      best = std::max(best, static_cast<double>(bytes) / std::chrono::duration<double>(Clock::now() - t0).count());
    }
    std::printf("%-44s %6.1f GB/s\n", name, best / 1e9);
  };
  std::printf("one thread, %lld MiB, rows of %lld bytes, best of %lld passes\n", static_cast<long long>(bytes >> 20),
              static_cast<long long>(row), static_cast<long long>(passes));
  measure("1 row at a time (sequential)", [&] { return read_tiles<1>(buf, bytes, row, row); });
  measure("1 row at a time, no software prefetch",
          [&] { return read_tiles<1, /*kPrefetch=*/false>(buf, bytes, row, row); });
  for (int64_t burst : {int64_t{64}, int64_t{256}}) {
    const std::string name = "4 rows side by side, " + std::to_string(burst) + " B bursts";
    if (burst <= row) measure(name.c_str(), [&] { return read_tiles<4>(buf, bytes, row, burst); });
  }
  measure("2 rows side by side, 64 B bursts", [&] { return read_tiles<2>(buf, bytes, row, 64); });
  std::free(buf);
  return static_cast<int>(sink & 1);
}
