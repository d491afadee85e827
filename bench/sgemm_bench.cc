// sgemm_bench: GFLOP/s of kernels::sgemm (and sgemm_bf16) on the products of training a GPT-2-124M-shaped model
// (768 wide, 3072 MLP, vocab 50257) at 256 rows a step, the LM head in chunks of 128 rows (lm_head_cross_entropy's
// default). Each shape runs once to warm up, then --reps times; prints the median and best. The active ISA runs
// (ASCENT_ISA forces one).
//   sgemm_bench [--threads 0] [--reps 5] [--bf16] [--cpu-time] [--filter TEXT]
// --threads 0 means all cores; --filter runs only the shapes whose name contains TEXT. --cpu-time divides by the
// CPU time the process used instead of the wall time, so on a host shared with other jobs a one-thread run reads
// the kernel's own speed (with more threads it counts the pool's spinning too).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/isa.h"
#include "ascent/kernels/cpu/sgemm.h"
#include "bench_args.h"

namespace {

struct Shape {
  const char* name;
  int64_t M, N, K;
  bool ta, tb;
  float beta;
};

// A linear layer (T x in -> out) in training: forward, input gradient, weight gradient (sgemm.h's three calls).
constexpr int64_t T = 256;
const Shape kShapes[] = {
    {"fwd qkv", T, 2304, 768, false, true, 0},
    {"fwd attn.proj", T, 768, 768, false, true, 0},
    {"fwd mlp.fc", T, 3072, 768, false, true, 0},
    {"fwd mlp.proj", T, 768, 3072, false, true, 0},
    {"dx qkv", T, 768, 2304, false, false, 0},
    {"dx attn.proj", T, 768, 768, false, false, 0},
    {"dx mlp.fc", T, 768, 3072, false, false, 0},
    {"dx mlp.proj", T, 3072, 768, false, false, 0},
    {"dW qkv", 2304, 768, T, true, false, 1},
    {"dW attn.proj", 768, 768, T, true, false, 1},
    {"dW mlp.fc", 3072, 768, T, true, false, 1},
    {"dW mlp.proj", 768, 3072, T, true, false, 1},
    {"lm_head fwd (128 rows)", 128, 50257, 768, false, true, 0},
    {"lm_head dx (128 rows)", 128, 768, 50257, false, false, 0},
    {"lm_head dW (128 rows)", 50257, 768, 128, true, false, 1},
};

double now(bool cpu) {
  if (!cpu) return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

int usage() {
  std::fprintf(stderr, "usage: sgemm_bench [--threads N] [--reps N] [--bf16] [--cpu-time] [--filter TEXT]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 0, reps = 5;
  bool bf16 = false, cpu_time = false;
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--bf16") {
      bf16 = true;
    } else if (a == "--cpu-time") {
      cpu_time = true;
    } else if ((a == "--threads" || a == "--reps" || a == "--filter") && i + 1 < argc) {
      const char* v = argv[++i];
      if (a == "--filter") {
        filter = v;
        continue;
      }
      if (!parse_count("sgemm_bench", a, v, /*allow_zero=*/a == "--threads", a == "--threads" ? threads : reps)) {
        return 2;
      }
    } else {
      return usage();
    }
  }
  threads = start_threads(threads);
  std::printf("sgemm%s, ISA %s, %d threads, median (best) of %d runs%s\n", bf16 ? "_bf16" : "",
              ascent::kernels::isa_name(ascent::kernels::active_isa()), threads, reps,
              cpu_time ? ", per CPU second" : "");
  std::printf("| shape | M | N | K | GFLOP/s |\n|---|---|---|---|---|\n");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const Shape& s : kShapes) {
    if (!filter.empty() && std::strstr(s.name, filter.c_str()) == nullptr) continue;
    std::vector<float> a(static_cast<size_t>(s.M * s.K)), b(static_cast<size_t>(s.K * s.N)),
        c(static_cast<size_t>(s.M * s.N), 0.0f);
    for (float& x : a) x = dist(rng);
    for (float& x : b) x = dist(rng);
    const ascent::kernels::GemmOperand ao{a.data(), s.ta ? s.M : s.K, s.ta}, bo{b.data(), s.tb ? s.K : s.N, s.tb};
    std::vector<double> gflops;
    for (int r = 0; r <= reps; ++r) {
      const double t0 = now(cpu_time);
      (bf16 ? ascent::kernels::sgemm_bf16 : ascent::kernels::sgemm)(s.M, s.N, s.K, ao, bo, s.beta, c.data(), s.N);
      const double sec = now(cpu_time) - t0;
      if (r > 0) gflops.push_back(2.0 * static_cast<double>(s.M * s.N * s.K) / sec * 1e-9);
    }
    std::sort(gflops.begin(), gflops.end());
    std::printf("| %s | %lld | %lld | %lld | %.0f (%.0f) |\n", s.name, static_cast<long long>(s.M),
                static_cast<long long>(s.N), static_cast<long long>(s.K), gflops[gflops.size() / 2], gflops.back());
    std::fflush(stdout);
  }
  return 0;
}
