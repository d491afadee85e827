// What this x86 CPU and OS can run, read once from cpuid/xgetbv. Kernels pick their ISA variant from this.
#pragma once

#include <string>

namespace ascent {

struct CpuFeatures {
  std::string brand;
  bool intel = false;  // cpuid's vendor is GenuineIntel
  bool sse42 = false, avx = false, avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512_vnni = false, avx512_bf16 = false;
  bool avx_vnni = false;
  int logical_cores = 1;
};

const CpuFeatures& cpu_features();

// "avx2 fma f16c avx512f ..." — the features that are present, for `ascent doctor` and logs.
std::string feature_list(const CpuFeatures& f);

}  // namespace ascent
