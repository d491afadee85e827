// decode_ceiling: how fast one core runs each format's single-token matmul (the decode kernels) when its weights
// already sit in the core's L2: the compute ceiling a decode kernel has before memory enters. Two cores must each
// stream half of a model's read bandwidth. A format whose one-core ceiling is not well above that cannot overlap its
// arithmetic with the stream (bench/RESULTS.md, decode ceiling table).
// The activations are prepared once (prepare_gemm_input). Then gemm_rows for the active ISA (ASCENT_ISA forces one)
// runs over the whole matrix again and again on the calling thread, with no thread pool. Beside each format come two
// more figures. One is a plain 256-bit read of the same bytes from L2 in the same run, the peer its GB/s is judged
// against. The other is the time one token's activations take to prepare for it (prepare_gemm_input over --cols
// values, in L1): a decode step runs that on the calling thread alone before each matmul, while the other threads
// wait.
//   decode_ceiling [--rows 512] [--cols 2048] [--passes 15] [--bytes-per-pass 40000000] [--cpu N] [format ...]
// --cpu N pins the thread to logical CPU N (as `taskset -c N` would), so that each core's ceiling can be read in
// turn. On a VM, one vCPU can run the instruction-heavy loops a third slower than its sibling for minutes, while its
// plain vector arithmetic runs as fast. An unpinned run then reports whichever core the scheduler picked
// (bench/RESULTS.md, decode ceiling table).
// Formats: f32 f16 bf16 int8 int4 q8_0 q4_0 q4_k q6_k q8_0r q4_0r q4_kr q6_kr (default: all). Weights are random
// (K-quant super-blocks with random codes, sub-block scales and a fixed d). Each format's matrix keeps the first of
// --rows rows that fit in 5/8 of the core's L2, so that it stays in L2 beside the activations. The L2 size comes from
// sysconf: 640 KiB of a 1 MiB L2, 320 KiB of a 512 KiB one. Prints the best and median pass of each in GB/s of weight
// bytes.
//   decode_ceiling --dram MIB [--rows 5632] [--cols 2048] [--passes 40] [--threads 0] [--fast-gbps 45]
//                  [--each] [format[:rows] ...]
// --dram runs the same kernels streaming from DRAM instead, as a model's decode does. Each format's matrix is copied
// onto huge pages until MIB are filled. A pass runs one matmul_forward per copy on the thread pool (all cores by
// default), between two plain reads of as many bytes on as many threads. A host's memory can move between a slow
// state (two threads read about what one does) and a fast one within seconds. So every pass is judged against the
// reads just before and after it, and counted as fast (both above --fast-gbps) or slow (both below 40 GB/s; others
// are dropped). Prints per format the median and quartiles of kernel / read (and kernel / same bytes, below) in each
// state; --each also prints every pass's GB/s. A kernel that keeps up with memory in the slow state but not in the
// fast one is bound by its instructions per byte (bench/RESULTS.md, decode ceiling table).
// A format given as FORMAT:ROWS streams matrices of ROWS rows instead of --rows, so one run can alternate the same
// format at several sizes. `--dram 200 int4:2048 int4:32000` shows what each matmul call costs beyond its bytes: a
// 2048-row int4 matrix streams at a lower share of the read than a 32000-row one.
// Beside each state's kernel / read comes kernel / same bytes: the kernel's own copies, read the same plain way right
// after it (one pool call per copy, as the kernel makes). Separately allocated buffers can read at rates that differ
// by up to ~20% for minutes. So kernel / read also carries where the two buffers
// landed, and kernel / same bytes does not.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <sched.h>
#include <unistd.h>

#include "ascent/base/aligned.h"
#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/gemm.h"
#include "ascent/kernels/cpu/isa.h"
#include "ascent/kernels/cpu/ops.h"
#include "ascent/kernels/cpu/packed_weight.h"
#include "ascent/prof/roofline.h"
#include "ascent/tensor/quantize.h"
#include "ascent/tensor/tensor.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int64_t rows = 512, cols = 2048, passes = 15, bytes_per_pass = 40'000'000;
  bool rows_given = false, passes_given = false;
  bool each = false;                  // --dram --each: every pass's kernel and reads in GB/s
  int64_t dram_mib = 0, threads = 0;  // --dram mode
  int64_t cpu = -1;                   // --cpu: the logical CPU the one-thread mode runs on (-1: any)
  double fast_gbps = 45;
  std::vector<std::string> formats;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(
      stderr,
      "decode_ceiling: %s\nusage: decode_ceiling [--rows N] [--cols K] [--passes P] [--bytes-per-pass B] "
      "[--cpu N] [format ...]\n       decode_ceiling --dram MIB [--rows N] [--cols K] [--passes P] [--threads T] "
      "[--fast-gbps G] [--each] [format[:rows] ...]\n",
      why.c_str());
  std::exit(2);
}

// The integer `text` given for `flag`, at least `min`; `what` names what the flag wants in the error.
int64_t integer_at_least(const char* flag, const char* text, long long min, const char* what) {
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || v < min) usage(std::string(flag) + " wants " + what + ", got '" + text + "'");
  return v;
}

int64_t positive(const char* flag, const char* text) {
  return integer_at_least(flag, text, 1, "a positive integer");
}

// A weight as a model load leaves it: its tensor (a repacked format's with the backend copy) and the view of the bytes
// the kernels read.
struct Weight {
  ascent::Tensor t;
  ascent::kernels::MatrixView v;
};

Weight loaded(ascent::Tensor t, bool repacked) {
  using namespace ascent::kernels;
  if (repacked) t = with_packed_copy(t, repacked_format(format_of(t.dtype)));
  const MatrixView v = CpuMatrix(t).any_view();
  return {std::move(t), v};
}

// The weight of `format` for an (N, K) f32 matrix f, as a model load would leave it.
Weight make_weight(const std::string& format, const ascent::Tensor& f, std::mt19937& rng) {
  using ascent::DType;
  if (format == "f32") return loaded(f, false);
  if (format == "f16") return loaded(ascent::convert(f, DType::F16), false);
  if (format == "bf16") return loaded(ascent::convert(f, DType::BF16), false);
  if (format == "int8") return loaded(ascent::quantize_int8(f), false);
  if (format == "int4") return loaded(ascent::quantize_int4(f, 128), false);
  if (format == "q8_0" || format == "q8_0r") return loaded(ascent::convert(f, DType::Q8_0), format.back() == 'r');
  if (format == "q4_0" || format == "q4_0r") return loaded(ascent::convert(f, DType::Q4_0), format.back() == 'r');
  const bool q4k = format == "q4_k" || format == "q4_kr";  // else q6_k or q6_kr (main checked the name)
  // Random super-blocks: every code and sub-block scale drawn, d (and dmin) fixed so values stay finite.
  ascent::Tensor q = ascent::make_owned(q4k ? DType::Q4_K : DType::Q6_K, {f.shape[0], f.shape[1]});
  auto* bytes = static_cast<uint8_t*>(const_cast<void*>(q.data));
  for (int64_t i = 0; i < q.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(rng());
  const int64_t blocks = q.nbytes() / (q4k ? sizeof(ascent::BlockQ4_K) : sizeof(ascent::BlockQ6_K));
  for (int64_t i = 0; i < blocks; ++i) {
    if (q4k) {
      auto* b = reinterpret_cast<ascent::BlockQ4_K*>(bytes) + i;
      b->d = 0x1800;
      b->dmin = 0x1400;
    } else {
      reinterpret_cast<ascent::BlockQ6_K*>(bytes)[i].d = 0x1800;
    }
  }
  return loaded(q, format.back() == 'r');
}

struct Rate {
  double best = 0, median = 0;
};

// Seconds per call of fn in each of `passes` passes of `reps` calls, sorted.
template <class Fn>
std::vector<double> call_seconds(int64_t passes, int64_t reps, Fn&& fn) {
  std::vector<double> s;
  for (int64_t p = 0; p < passes; ++p) {
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < reps; ++i) fn();
    s.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / static_cast<double>(reps));
  }
  std::sort(s.begin(), s.end());
  return s;
}

// Median microseconds of one call of fn over `passes` passes of `reps` calls.
template <class Fn>
double median_us(int64_t passes, int64_t reps, Fn&& fn) {
  const std::vector<double> s = call_seconds(passes, reps, fn);
  return 1e6 * s[s.size() / 2];
}

// Best and median GB/s over `passes` passes of `reps` calls of fn, each call covering `bytes`.
template <class Fn>
Rate measure(int64_t passes, int64_t reps, int64_t bytes, Fn&& fn) {
  std::vector<double> r;
  for (const double s : call_seconds(passes, reps, fn)) r.push_back(static_cast<double>(bytes) / s / 1e9);
  std::sort(r.begin(), r.end());
  return {r.back(), r[r.size() / 2]};
}

// Bytes of w's scales held outside its data (I8, I4), 0 for the formats that keep them inline.
int64_t outside_scale_bytes(const ascent::Tensor& w) {
  if (!ascent::is_int_weight(w.dtype)) return 0;
  return 4 * ascent::int_weight_scale_count(w.dtype, w.shape[0], w.shape[1], w.group);
}

// One state's kernel / read ratios: "n=.., median (p25-p75)".
std::string quartiles(std::vector<double> v) {
  if (v.empty()) return "-";
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return 100 * v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))]; };
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.0f%% (%.0f-%.0f%%), n=%zu", at(0.5), at(0.25), at(0.75), v.size());
  return buf;
}

// A (rows, cols) f32 matrix of N(0, 0.02) values, the weights every format quantizes.
ascent::Tensor random_weights(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 0.02f);
  ascent::Tensor f = ascent::make_owned(ascent::DType::F32, {rows, cols});
  auto* p = const_cast<float*>(f.f32());
  for (int64_t i = 0; i < rows * cols; ++i) p[i] = normal(rng);
  return f;
}

// A --dram format spec, FORMAT or FORMAT:ROWS: the format and its matrix's rows (0: --rows).
std::pair<std::string, int64_t> split_spec(const std::string& spec) {
  const size_t colon = spec.find(':');
  if (colon == std::string::npos) return {spec, 0};
  return {spec.substr(0, colon), positive("FORMAT:ROWS", spec.c_str() + colon + 1)};
}

// --dram: the decode kernels streaming from huge pages on the thread pool against plain reads around each pass.
int run_dram(const Options& o, const ascent::Tensor& f, std::mt19937& rng) {
  const int threads =
      o.threads > 0 ? static_cast<int>(o.threads) : static_cast<int>(std::thread::hardware_concurrency());
  ascent::ThreadPool::set_global_threads(std::max(1, threads));
  ascent::ThreadPool& pool = ascent::ThreadPool::global();
  const int64_t budget = o.dram_mib << 20;
  struct Stream {
    std::string format;
    ascent::AlignedPtr buf;
    std::vector<ascent::Tensor> copies;
    std::vector<const uint8_t*> copy_data;     // each copy's bytes
    int64_t copy_bytes = 0;                    // one copy's codes and scales, contiguous
    std::vector<double> fast, slow;            // kernel / read, by state
    std::vector<double> fast_same, slow_same;  // kernel / same bytes, by state
    int64_t bytes() const { return copy_bytes * static_cast<int64_t>(copies.size()); }
  };
  std::vector<Stream> streams;
  int64_t max_rows = o.rows;
  for (const std::string& spec : o.formats) {
    const auto [format, spec_rows] = split_spec(spec);
    // The f32 matrix this format quantizes: f, or a random one of the spec's rows.
    const ascent::Tensor fr = spec_rows > 0 && spec_rows != o.rows ? random_weights(spec_rows, o.cols, rng) : f;
    max_rows = std::max(max_rows, fr.shape[0]);
    const Weight w = make_weight(format, fr, rng);
    const int64_t data = w.v.nbytes(), scales = outside_scale_bytes(w.t);
    const int64_t per = (data + scales + 4095) / 4096 * 4096;
    const int64_t n = std::max<int64_t>(1, budget / per);
    Stream st;
    st.format = spec;
    st.buf = ascent::huge_alloc_bytes(static_cast<size_t>(n * per));
    st.copy_bytes = data + scales;
    for (int64_t i = 0; i < n; ++i) {
      uint8_t* p = st.buf.get() + i * per;
      std::memcpy(p, w.v.data, static_cast<size_t>(data));
      if (scales > 0) std::memcpy(p + data, w.v.scales, static_cast<size_t>(scales));
      ascent::kernels::MatrixView v = w.v;
      v.data = p;
      if (scales > 0) v.scales = reinterpret_cast<const float*>(p + data);
      auto packed = std::make_shared<ascent::kernels::PackedWeight>();  // the copy as the kernels' own bytes
      packed->format = v.format;
      packed->rows = v.rows;
      packed->cols = v.cols;
      packed->input_scale = v.input_scale;
      packed->group = v.group;
      packed->parts.push_back({0, v, {}});
      ascent::Tensor c = w.t;
      c.packed = std::move(packed);
      st.copies.push_back(c);
      st.copy_data.push_back(p);
    }
    streams.push_back(std::move(st));
  }
  const int64_t read_bytes = budget / 4096 * 4096;
  ascent::AlignedPtr rbuf = ascent::huge_alloc_bytes(static_cast<size_t>(read_bytes));
  for (int64_t i = 0; i < read_bytes; i += 64) rbuf[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
  std::atomic<uint64_t> sink{0};
  auto gbps = [](int64_t bytes, Clock::time_point t0) {
    return static_cast<double>(bytes) / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9;
  };
  const int64_t parts = pool.size();
  // One pool call reading `parts` consecutive chunks of `chunk` bytes from base, a chunk per thread.
  auto read_split = [&](const uint8_t* base, int64_t chunk, ascent::prof::ReadPrefetch mode) {
    pool.parallel_for(parts, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) sink += ascent::prof::sum_bytes(base + i * chunk, chunk, mode);
    });
  };
  // The buffer in three thirds, each read with one of prof::sum_bytes' prefetches, the fastest kept: the read the
  // roofline takes.
  auto read_pass = [&] {
    const int64_t chunk = read_bytes / 3 / parts / 128 * 128;
    double best = 0;
    for (int third = 0; third < 3; ++third) {
      const auto t0 = Clock::now();
      read_split(rbuf.get() + third * chunk * parts, chunk, ascent::prof::kReadPrefetches[third]);
      best = std::max(best, gbps(chunk * parts, t0));
    }
    return best;
  };
  // The stream's own copies read plainly, one pool call per copy, each copy split over the threads. The copies are
  // read in three thirds (all of them, each way, when there are fewer than three), each with one of sum_bytes'
  // prefetches, and the fastest kept, as read_pass does.
  auto same_pass = [&](const Stream& st) {
    const int64_t chunk = st.copy_bytes / parts / 128 * 128;
    const size_t n = st.copies.size();
    double best = 0;
    for (size_t third = 0; third < 3; ++third) {
      const size_t c0 = n >= 3 ? n * third / 3 : 0, c1 = n >= 3 ? n * (third + 1) / 3 : n;
      const auto t0 = Clock::now();
      for (size_t c = c0; c < c1; ++c) {
        read_split(st.copy_data[c], chunk, ascent::prof::kReadPrefetches[third]);
      }
      best = std::max(best, gbps(static_cast<int64_t>(c1 - c0) * chunk * parts, t0));
    }
    return best;
  };
  std::vector<float> x(static_cast<size_t>(o.cols)), y(static_cast<size_t>(max_rows));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng);
  std::printf(
      "decode_ceiling --dram: %d threads, ISA %s, %lld x %lld (FORMAT:ROWS: ROWS x %lld), %lld MiB per format, %lld "
      "passes\n",
      pool.size(), ascent::kernels::isa_name(ascent::kernels::active_isa()), static_cast<long long>(o.rows),
      static_cast<long long>(o.cols), static_cast<long long>(o.cols), static_cast<long long>(o.dram_mib),
      static_cast<long long>(o.passes));
  for (int64_t pass = 0; pass < o.passes; ++pass) {
    for (Stream& st : streams) {
      const double before = read_pass();
      const auto t0 = Clock::now();
      for (const ascent::Tensor& c : st.copies) ascent::kernels::matmul_forward(x.data(), 1, c, nullptr, y.data());
      const double kernel = gbps(st.bytes(), t0);
      const double same = same_pass(st);
      const double after = read_pass();
      if (o.each)
        std::printf("pass %lld %s: kernel %.1f GB/s, same bytes %.1f, reads %.1f / %.1f\n",
                    static_cast<long long>(pass), st.format.c_str(), kernel, same, before, after);
      if (std::min(before, after) > o.fast_gbps) {
        st.fast.push_back(kernel / std::max(before, after));
        st.fast_same.push_back(kernel / same);
      } else if (std::max(before, after) < 40) {
        st.slow.push_back(kernel / std::max(before, after));
        st.slow_same.push_back(kernel / same);
      }
    }
  }
  std::printf(
      "| format | fast state: kernel / read | kernel / same bytes | slow state: kernel / read | kernel / same bytes "
      "|\n|---|---|---|---|---|\n");
  for (const Stream& st : streams) {
    std::printf("| %s | %s | %s | %s | %s |\n", st.format.c_str(), quartiles(st.fast).c_str(),
                quartiles(st.fast_same).c_str(), quartiles(st.slow).c_str(), quartiles(st.slow_same).c_str());
  }
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto arg = [&](const char* flag) {
      if (i + 1 >= argc) usage(std::string(flag) + " needs a value");
      return argv[++i];
    };
    auto value = [&](const char* flag) { return positive(flag, arg(flag)); };
    if (a == "--rows") {
      o.rows = value("--rows");
      o.rows_given = true;
    } else if (a == "--dram") {
      o.dram_mib = value("--dram");
    } else if (a == "--threads") {
      o.threads = value("--threads");
    } else if (a == "--fast-gbps") {
      o.fast_gbps = static_cast<double>(value("--fast-gbps"));
    } else if (a == "--cpu") {
      o.cpu = integer_at_least("--cpu", arg("--cpu"), 0, "a CPU number (0 or more)");
    } else if (a == "--each") {
      o.each = true;
    } else if (a == "--cols") {
      o.cols = value("--cols");
    } else if (a == "--passes") {
      o.passes = value("--passes");
      o.passes_given = true;
    } else if (a == "--bytes-per-pass") {
      o.bytes_per_pass = value("--bytes-per-pass");
    } else if (a.rfind("--", 0) == 0) {
      usage("unknown flag '" + a + "'");
    } else {
      o.formats.push_back(a);
    }
  }
  if (o.cols % 256 != 0)
    usage("--cols must be a multiple of 256 (the K-quant super-block), got " + std::to_string(o.cols));
  const std::vector<std::string> all = {"f32",  "f16",  "bf16",  "int8",  "int4",  "q8_0", "q4_0",
                                        "q4_k", "q6_k", "q8_0r", "q4_0r", "q4_kr", "q6_kr"};
  for (const std::string& spec : o.formats) {
    const auto [f, spec_rows] = split_spec(spec);  // exits naming a ROWS that is not a positive integer
    if (std::find(all.begin(), all.end(), f) == all.end()) usage("unknown format '" + f + "'");
    if (spec_rows > 0 && o.dram_mib == 0) usage("FORMAT:ROWS ('" + spec + "') is for --dram");
  }
  if (o.formats.empty()) o.formats = all;
  if (o.cpu >= 0 && o.dram_mib > 0) usage("--cpu is for the one-thread mode; --dram runs on the thread pool");
  if (o.cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (o.cpu >= CPU_SETSIZE) usage("--cpu " + std::to_string(o.cpu) + " is not a CPU of this machine");
    CPU_SET(static_cast<int>(o.cpu), &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
      usage("--cpu " + std::to_string(o.cpu) + ": cannot run on that CPU (" + std::strerror(errno) + ")");
  }
  if (o.dram_mib > 0) {
    if (!o.rows_given) o.rows = 5632;
    if (!o.passes_given) o.passes = 40;
  }
  std::mt19937 rng(1);
  const ascent::Tensor f = random_weights(o.rows, o.cols, rng);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> x(static_cast<size_t>(o.cols)), y(static_cast<size_t>(o.rows));
  if (o.dram_mib > 0) return run_dram(o, f, rng);
  std::printf("decode_ceiling: one thread on %s, ISA %s, %lld x %lld, best / median of %lld passes (GB/s of weights)\n",
              o.cpu >= 0 ? ("CPU " + std::to_string(o.cpu)).c_str() : "any CPU",
              ascent::kernels::isa_name(ascent::kernels::active_isa()), static_cast<long long>(o.rows),
              static_cast<long long>(o.cols), static_cast<long long>(o.passes));
  for (float& v : x) v = normal(rng) * 50;
  // 5/8 of L2 for the weights; 1 MiB assumed where the system does not say.
  const long l2 = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
  const int64_t budget = (l2 > 0 ? static_cast<int64_t>(l2) : int64_t{1} << 20) / 8 * 5;
  std::printf("matrices of at most %lld KiB (5/8 of a %lld KiB L2)\n", static_cast<long long>(budget >> 10),
              static_cast<long long>(budget / 5 * 8 >> 10));
  std::printf(
      "| format | rows | bytes | kernel best | kernel median | plain read best | kernel / read | prepare us "
      "|\n|---|---|---|---|---|---|---|---|\n");
  volatile uint64_t sink = 0;  // keeps the plain reads
  for (const std::string& format : o.formats) {
    const Weight weight = make_weight(format, f, rng);
    ascent::kernels::MatrixView w = weight.v;
    const int64_t row = w.nbytes() / o.rows;
    w.rows = std::max<int64_t>(1, std::min<int64_t>(o.rows, budget / row));
    const int64_t bytes = w.rows * row;
    ascent::kernels::GemmInput in;
    ascent::kernels::prepare_gemm_input(x.data(), 1, w, in);
    const ascent::kernels::GemmOut out{y.data(), o.rows, nullptr, nullptr, 0};
    const int64_t reps = std::max<int64_t>(1, o.bytes_per_pass / bytes);
    const Rate k = measure(o.passes, reps, bytes, [&] { ascent::kernels::gemm_rows(in, w, 0, w.rows, out); });
    const Rate r = measure(o.passes, reps, bytes, [&] { sink = sink + ascent::prof::sum_bytes(w.data, bytes); });
    const double prepare_us =
        median_us(o.passes, 100, [&] { ascent::kernels::prepare_gemm_input(x.data(), 1, w, in); });
    std::printf("| %s | %lld | %lld | %.1f | %.1f | %.1f | %.2f | %.2f |\n", format.c_str(),
                static_cast<long long>(w.rows), static_cast<long long>(bytes), k.best, k.median, r.best,
                k.best / r.best, prepare_us);
  }
  return 0;
}
