// ascent doctor: what this CPU can do and its measured roofline (read bandwidth, FP32 FMA peak).
#include <cstdio>
#include <thread>

#include "ascent/base/cpu_features.h"
#include "ascent/cli/commands.h"
#include "ascent/kernels/cpu/isa.h"
#include "ascent/prof/roofline.h"

namespace ascent::cli {
namespace {

void run(int threads) {
  // Before any line is printed: a negative -t would read as all cores, and a bad ASCENT_ISA would fail halfway down.
  set_threads(threads);
  kernels::active_isa();
  const auto& f = cpu_features();
  const int n = threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency());
  std::printf("cpu               %s\n", f.brand.c_str());
  std::printf("logical cores     %d\n", f.logical_cores);
  std::printf("features          %s\n", feature_list(f).c_str());
  std::printf("kernel variant    %s (ASCENT_ISA=avx512|avx2|ref forces one)\n",
              kernels::isa_name(kernels::active_isa()));
  if (kernels::active_isa() == kernels::Isa::Avx512) {
    if (!kernels::avx512_matmul_supports(kernels::WeightFormat::Q8_0, f)) {
      std::printf("                  int8, int4 and GGUF block matmuls run the AVX2 kernels (no AVX512-VNNI)\n");
    }
    if (!kernels::avx512_matmul_supports(kernels::WeightFormat::BF16, f)) {
      std::printf("                  bf16 matmuls run the AVX2 kernel (no AVX512-BF16)\n");
    }
  }
  std::fflush(stdout);
  const auto r = prof::measure_roofline(n);
  std::printf("read bandwidth    %.1f GB/s (1 thread), %.1f GB/s (%d threads)\n", r.read_gbps_1t, r.read_gbps_all,
              r.threads);
  std::printf("fp32 peak         %.1f GFLOP/s (1 thread), %.1f GFLOP/s (%d threads), %s FMA\n", r.fp32_gflops_1t,
              r.fp32_gflops_all, r.threads, r.fma_isa.c_str());
  if (r.int8_gops_all > 0)
    std::printf("int8 dot peak     %.1f GOP/s (%d threads), %s\n", r.int8_gops_all, r.threads, r.int8_isa.c_str());
  if (r.bf16_gflops_all > 0)
    std::printf("bf16 dot peak     %.1f GFLOP/s (%d threads), AVX-512 BF16 vdpbf16ps\n", r.bf16_gflops_all, r.threads);
}

}  // namespace

void add_doctor(CLI::App& app) {
  auto threads = std::make_shared<int>(0);
  auto* c = app.add_subcommand("doctor", "CPU features and this machine's measured roofline");
  c->add_option("-t,--threads", *threads, "threads (0: all cores)");
  c->callback([threads] { run(*threads); });
}

}  // namespace ascent::cli
