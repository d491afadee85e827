// Which formats the AVX-512 matmul kernels may run on a given CPU: every AVX-512 machine takes the f32/f16 kernels,
// only those with AVX512-VNNI the integer and GGUF block ones, only those with AVX512-BF16 the bf16 one.
#include <gtest/gtest.h>

#include "ascent/kernels/cpu/isa.h"

namespace ascent::kernels {
namespace {

CpuFeatures avx512_base() {
  CpuFeatures f;
  f.avx2 = f.fma = f.f16c = true;
  f.avx512f = f.avx512bw = f.avx512vl = true;
  return f;
}

TEST(Isa, Avx512WithoutVnniOrBf16KeepsOnlyTheFloatKernels) {  // Skylake-SP
  const CpuFeatures f = avx512_base();
  EXPECT_TRUE(avx512_matmul_supports(WeightFormat::F32, f));
  EXPECT_TRUE(avx512_matmul_supports(WeightFormat::F16, f));
  for (WeightFormat t : {WeightFormat::BF16, WeightFormat::I8, WeightFormat::I4, WeightFormat::Q8_0, WeightFormat::Q4_0,
                         WeightFormat::Q4_K, WeightFormat::Q6_K}) {
    EXPECT_FALSE(avx512_matmul_supports(t, f)) << format_name(t);
  }
}

TEST(Isa, VnniWithoutBf16RunsTheIntegerFormats) {  // Cascade Lake, Ice Lake
  CpuFeatures f = avx512_base();
  f.avx512_vnni = true;
  for (WeightFormat t : {WeightFormat::I8, WeightFormat::I4, WeightFormat::Q8_0, WeightFormat::Q4_0, WeightFormat::Q4_K,
                         WeightFormat::Q6_K}) {
    EXPECT_TRUE(avx512_matmul_supports(t, f)) << format_name(t);
  }
  EXPECT_FALSE(avx512_matmul_supports(WeightFormat::BF16, f));
  f.avx512_bf16 = true;  // Cooper Lake, Sapphire Rapids, Zen 4 and later
  EXPECT_TRUE(avx512_matmul_supports(WeightFormat::BF16, f));
}

}  // namespace
}  // namespace ascent::kernels
