// Which instruction-set variant the CPU kernels run: picked once from cpuid, or forced with
// ASCENT_ISA=avx512|avx2|ref (an unknown name, or one this CPU lacks, is an error naming the variable).
#pragma once

#include "ascent/base/cpu_features.h"
#include "ascent/tensor/dtype.h"

namespace ascent::kernels {

enum class Isa { Ref, Avx2, Avx512 };

Isa active_isa();
const char* isa_name(Isa isa);

// Whether the AVX-512 matmul kernels can run `weight` on a CPU with features f: the integer and GGUF block formats
// need AVX512-VNNI (vpdpbusd) and bf16 needs AVX512-BF16 (vdpbf16ps), which not every AVX-512 CPU has (Skylake-SP
// has neither, Cascade Lake and Ice Lake lack BF16). Where it cannot, the weight runs the AVX2 kernel instead of
// faulting on an illegal instruction.
bool avx512_matmul_supports(DType weight, const CpuFeatures& f);

// Whether Q4_0 matmul weights should be repacked as Q4_0R (dtype.h) when a model loads: when the AVX-512 kernel,
// whose layout it is, runs them. Other variants read Q4_0R through the reference kernel, so a repacked weight stays
// correct everywhere, only not faster.
bool prefer_q4_0r();

}  // namespace ascent::kernels
