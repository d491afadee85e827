#include "ascent/base/cpu_features.h"

#include <cpuid.h>

#include <cstdint>
#include <cstring>
#include <thread>

namespace ascent {
namespace {

uint64_t xgetbv0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuFeatures detect() {
  CpuFeatures f;
  f.logical_cores = static_cast<int>(std::thread::hardware_concurrency());
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0x80000000, &a, &b, &c, &d) && a >= 0x80000004) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      __get_cpuid(0x80000002 + i, &a, &b, &c, &d);
      std::memcpy(brand + 16 * i, &a, 4);
      std::memcpy(brand + 16 * i + 4, &b, 4);
      std::memcpy(brand + 16 * i + 8, &c, 4);
      std::memcpy(brand + 16 * i + 12, &d, 4);
    }
    f.brand = brand;
    while (!f.brand.empty() && f.brand.back() == ' ') f.brand.pop_back();
  }
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    char vendor[13] = {};
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &c, 4);
    f.intel = std::strcmp(vendor, "GenuineIntel") == 0;
  }
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  f.sse42 = (c >> 20) & 1;
  const bool osxsave = (c >> 27) & 1;
  const bool avx_hw = (c >> 28) & 1;
  const bool fma_hw = (c >> 12) & 1;
  const bool f16c_hw = (c >> 29) & 1;
  // The OS must save the wider registers on context switch, or using them corrupts state.
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool os_avx = (xcr0 & 0x6) == 0x6;
  const bool os_avx512 = (xcr0 & 0xe6) == 0xe6;
  f.avx = avx_hw && os_avx;
  f.fma = fma_hw && os_avx;
  f.f16c = f16c_hw && os_avx;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = ((b >> 5) & 1) && os_avx;
    f.avx512f = ((b >> 16) & 1) && os_avx512;
    f.avx512bw = ((b >> 30) & 1) && os_avx512;
    f.avx512vl = ((b >> 31) & 1) && os_avx512;
    f.avx512_vnni = ((c >> 11) & 1) && os_avx512;
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) {
    f.avx_vnni = ((a >> 4) & 1) && os_avx;
    f.avx512_bf16 = ((a >> 5) & 1) && os_avx512;
  }
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

std::string feature_list(const CpuFeatures& f) {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(f.sse42, "sse4.2");
  add(f.avx, "avx");
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.f16c, "f16c");
  add(f.avx_vnni, "avx-vnni");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512vl, "avx512vl");
  add(f.avx512_vnni, "avx512-vnni");
  add(f.avx512_bf16, "avx512-bf16");
  return s;
}

}  // namespace ascent
