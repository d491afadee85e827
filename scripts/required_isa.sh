#!/bin/sh
# The kernel variants this CPU must run, as ASCENT_REQUIRE_ISA wants them (tests/e2e/common.py), read from
# /proc/cpuinfo apart from the kernels' own cpuid detection: avx2 with AVX2, FMA and F16C; avx512 with AVX-512
# F/BW/VL and the VNNI and BF16 instructions every format's AVX-512 kernel needs (kernels/cpu/isa.h).
flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
has() {
  for f in "$@"; do
    case "$flags" in *" $f "*) ;; *) return 1 ;; esac
  done
}
out=""
if has avx2 fma f16c; then
  out="avx2"
  if has avx512f avx512bw avx512vl avx512_vnni avx512_bf16; then out="avx2,avx512"; fi
fi
echo "$out"
