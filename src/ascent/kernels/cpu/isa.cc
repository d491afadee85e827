#include "ascent/kernels/cpu/isa.h"

#include <cstdlib>
#include <string>

#include "ascent/base/cpu_features.h"
#include "ascent/base/error.h"

namespace ascent::kernels {
namespace {

Isa detect() {
  const auto& f = cpu_features();
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  const bool avx512 = avx2 && f.avx512f && f.avx512bw && f.avx512vl;
  const char* env = std::getenv("ASCENT_ISA");
  if (env == nullptr || *env == '\0') return avx512 ? Isa::Avx512 : avx2 ? Isa::Avx2 : Isa::Ref;
  const std::string want = env;
  if (want == "ref") return Isa::Ref;
  if (want == "avx2") {
    ASCENT_CHECK(avx2, "ASCENT_ISA=avx2: this CPU lacks AVX2/FMA/F16C");
    return Isa::Avx2;
  }
  if (want == "avx512") {
    ASCENT_CHECK(avx512, "ASCENT_ISA=avx512: this CPU lacks AVX-512 F/BW/VL");
    return Isa::Avx512;
  }
  fail("ASCENT_ISA={}: expected avx512, avx2 or ref", want);
}

}  // namespace

Isa active_isa() {
  static const Isa isa = detect();
  return isa;
}

bool avx512_matmul_supports(WeightFormat weight, const CpuFeatures& f) {
  switch (weight) {
    case WeightFormat::F32:
    case WeightFormat::F16:
      return true;
    case WeightFormat::BF16:
      return f.avx512_bf16;
    default:
      return f.avx512_vnni;
  }
}

Isa matmul_isa(WeightFormat weight) {
  const Isa isa = active_isa();
  return isa == Isa::Avx512 && !avx512_matmul_supports(weight, cpu_features()) ? Isa::Avx2 : isa;
}

bool avx512_kernel_runs(WeightFormat weight) {
  return matmul_isa(weight) == Isa::Avx512;
}

bool repacked_kernel_runs(WeightFormat repacked) {
  const bool avx2_kernel = repacked == WeightFormat::Q4_0R || repacked == WeightFormat::Q4_KR ||
                           repacked == WeightFormat::Q6_KR || repacked == WeightFormat::Q8_0R;
  return avx512_kernel_runs(repacked) || (avx2_kernel && active_isa() != Isa::Ref);
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Ref:
      return "ref";
    case Isa::Avx2:
      return "avx2";
    case Isa::Avx512:
      return "avx512";
  }
  return "?";
}

}  // namespace ascent::kernels
