// Ends an AVX-512 matmul kernel file: undoes what gemm_avx512_common.h turned on.
#pragma GCC diagnostic pop
#pragma GCC pop_options
