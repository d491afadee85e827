// Which instruction-set variant the CPU kernels run: picked once from cpuid, or forced with
// ASCENT_ISA=avx512|avx2|ref (an unknown name, or one this CPU lacks, is an error naming the variable).
#pragma once

#include "ascent/base/cpu_features.h"
#include "ascent/kernels/cpu/weight_format.h"

namespace ascent::kernels {

enum class Isa { Ref, Avx2, Avx512 };

Isa active_isa();
const char* isa_name(Isa isa);

// Whether the AVX-512 matmul kernels can run `weight` on a CPU with features f. The integer and GGUF block formats
// need AVX512-VNNI (vpdpbusd) and bf16 needs AVX512-BF16 (vdpbf16ps), which not every AVX-512 CPU has: Skylake-SP
// has neither, Cascade Lake and Ice Lake lack BF16. Where it cannot, the weight runs the AVX2 kernel instead of
// faulting on an illegal instruction.
bool avx512_matmul_supports(WeightFormat weight, const CpuFeatures& f);

// The variant whose kernel runs matmuls with `weight`: the active one, except that under AVX-512 a format whose
// AVX-512 kernel needs what this CPU lacks (avx512_matmul_supports) runs the AVX2 kernel. gemm_rows dispatches on
// it, so tests can check which kernel ran rather than which was asked for.
Isa matmul_isa(WeightFormat weight);

// Whether matmuls with `weight` run the AVX-512 kernel: matmul_isa(weight) is AVX-512. The Q4_0 layouts of GemmInput
// are built only for it, and the repacked types run through the reference kernel where neither it nor
// repacked_kernel_runs holds: correct everywhere, only not faster.
bool avx512_kernel_runs(WeightFormat weight);

// Whether a SIMD kernel runs matmuls with `repacked` (Q4_0R, Q4_KR, Q6_KR, Q8_0R): every one where the AVX-512
// kernel runs, and all but Q8_0R under the AVX2 kernels too. The AVX2 Q8_0R kernel runs faster than Q8_0's from
// cache but streams worse in decode (measured with bench/ab_decode.py). Model::load repacks a matrix only when this
// holds for the type it would become, and GemmInput builds the q4r activations only for such a weight.
bool repacked_kernel_runs(WeightFormat repacked);

}  // namespace ascent::kernels
