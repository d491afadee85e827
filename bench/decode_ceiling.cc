// decode_ceiling: how fast one core runs each format's single-token matmul (the decode kernels) when its weights
// already sit in the core's L2, i.e. the compute ceiling a decode kernel has before memory enters. Two cores must
// each stream half of a model's read bandwidth; a format whose one-core ceiling is not well above that cannot
// overlap its arithmetic with the stream (bench/RESULTS.md, sessions 12-13). The activations are prepared once
// (prepare_gemm_input), then gemm_rows for the active ISA (ASCENT_ISA to force one) runs over the whole matrix
// again and again on the calling thread, no thread pool. Beside each format, a plain 256-bit read of the same
// bytes from L2 in the same run, the peer its GB/s is judged against.
//   decode_ceiling [--rows 512] [--cols 2048] [--passes 15] [--bytes-per-pass 40000000] [format ...]
// Formats: f32 f16 bf16 int8 int4 q8_0 q4_0 q4_k q6_k q8_0r q4_0r q4_kr q6_kr (default: all). Random weights
// (K-quant super-blocks with random codes, sub-block scales and a fixed d). Each format's matrix keeps the first
// of --rows rows that fit in 640 KiB, so that it stays in a 1 MiB L2 beside the activations. Prints the best and
// median pass of each in GB/s of weight bytes.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ascent/kernels/cpu/gemm.h"
#include "ascent/kernels/cpu/isa.h"
#include "ascent/prof/roofline.h"
#include "ascent/tensor/quantize.h"
#include "ascent/tensor/tensor.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int64_t rows = 512, cols = 2048, passes = 15, bytes_per_pass = 40'000'000;
  std::vector<std::string> formats;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "decode_ceiling: %s\nusage: decode_ceiling [--rows N] [--cols K] [--passes P] [--bytes-per-pass B] "
               "[format ...]\n",
               why.c_str());
  std::exit(2);
}

int64_t positive(const char* flag, const char* text) {
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || v <= 0) usage(std::string(flag) + " wants a positive integer, got '" + text + "'");
  return v;
}

// The weight of `format` for an (N, K) f32 matrix f, as a model load would leave it (the repacked formats repacked).
ascent::Tensor make_weight(const std::string& format, const ascent::Tensor& f, std::mt19937& rng) {
  using ascent::DType;
  if (format == "f32") return f;
  if (format == "f16") return ascent::convert(f, DType::F16);
  if (format == "bf16") return ascent::convert(f, DType::BF16);
  if (format == "int8") return ascent::quantize_int8(f);
  if (format == "int4") return ascent::quantize_int4(f, 128);
  if (format == "q8_0") return ascent::convert(f, DType::Q8_0);
  if (format == "q4_0") return ascent::convert(f, DType::Q4_0);
  if (format == "q8_0r") return ascent::repack(ascent::convert(f, DType::Q8_0));
  if (format == "q4_0r") return ascent::repack(ascent::convert(f, DType::Q4_0));
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
  return format.back() == 'r' ? ascent::repack(q) : q;
}

struct Rate {
  double best = 0, median = 0;
};

// Best and median GB/s over `passes` passes of `reps` calls of fn, each call covering `bytes`.
template <class Fn>
Rate measure(int64_t passes, int64_t reps, int64_t bytes, Fn&& fn) {
  std::vector<double> r;
  for (int64_t p = 0; p < passes; ++p) {
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < reps; ++i) fn();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    r.push_back(static_cast<double>(bytes) * static_cast<double>(reps) / s / 1e9);
  }
  std::sort(r.begin(), r.end());
  return {r.back(), r[r.size() / 2]};
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) {
      if (i + 1 >= argc) usage(std::string(flag) + " needs a value");
      return positive(flag, argv[++i]);
    };
    if (a == "--rows") {
      o.rows = value("--rows");
    } else if (a == "--cols") {
      o.cols = value("--cols");
    } else if (a == "--passes") {
      o.passes = value("--passes");
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
  for (const std::string& f : o.formats) {
    if (std::find(all.begin(), all.end(), f) == all.end()) usage("unknown format '" + f + "'");
  }
  if (o.formats.empty()) o.formats = all;
  std::printf("decode_ceiling: one thread, ISA %s, %lld x %lld, best / median of %lld passes (GB/s of weights)\n",
              ascent::kernels::isa_name(ascent::kernels::active_isa()), static_cast<long long>(o.rows),
              static_cast<long long>(o.cols), static_cast<long long>(o.passes));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  ascent::Tensor f = ascent::make_owned(ascent::DType::F32, {o.rows, o.cols});
  auto* fp = const_cast<float*>(f.f32());
  for (int64_t i = 0; i < o.rows * o.cols; ++i) fp[i] = normal(rng);
  std::vector<float> x(static_cast<size_t>(o.cols)), y(static_cast<size_t>(o.rows));
  for (float& v : x) v = normal(rng) * 50;
  std::printf(
      "| format | rows | bytes | kernel best | kernel median | plain read best | kernel / read "
      "|\n|---|---|---|---|---|---|---|\n");
  volatile uint64_t sink = 0;  // keeps the plain reads
  for (const std::string& format : o.formats) {
    ascent::Tensor w = make_weight(format, f, rng);
    const int64_t row = w.nbytes() / o.rows;
    w.shape[0] = std::max<int64_t>(1, std::min<int64_t>(o.rows, (640 << 10) / row));
    const int64_t bytes = w.shape[0] * row;
    ascent::kernels::GemmInput in;
    ascent::kernels::prepare_gemm_input(x.data(), 1, w, in);
    const ascent::kernels::GemmOut out{y.data(), o.rows, nullptr, nullptr, 0};
    const int64_t reps = std::max<int64_t>(1, o.bytes_per_pass / bytes);
    const Rate k = measure(o.passes, reps, bytes, [&] { ascent::kernels::gemm_rows(in, w, 0, w.shape[0], out); });
    const Rate r = measure(o.passes, reps, bytes,
                           [&] { sink = sink + ascent::prof::sum_bytes(static_cast<const uint8_t*>(w.data), bytes); });
    std::printf("| %s | %lld | %lld | %.1f | %.1f | %.1f | %.2f |\n", format.c_str(),
                static_cast<long long>(w.shape[0]), static_cast<long long>(bytes), k.best, k.median, r.best,
                k.best / r.best);
  }
  return 0;
}
