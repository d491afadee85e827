// Which instruction-set variant the CPU kernels run: picked once from cpuid, or forced with
// ASCENT_ISA=avx512|avx2|ref (an unknown name, or one this CPU lacks, is an error naming the variable).
#pragma once

namespace ascent::kernels {

enum class Isa { Ref, Avx2, Avx512 };

Isa active_isa();
const char* isa_name(Isa isa);

}  // namespace ascent::kernels
