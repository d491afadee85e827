// Ends the AVX-512 code of a kernel file: undoes what simd_avx512_begin.h and the file's target pragma turned on.
#pragma GCC diagnostic pop
#pragma GCC pop_options
