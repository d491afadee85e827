// Begins the AVX-512 code of a kernel file, included after its other headers: saves the compiler options, which the
// file then sets with its own `#pragma GCC target(...)`, and ends with simd_avx512_end.h. GCC 12's AVX-512
// intrinsics leave undefined pass-through operands that trip -Wuninitialized and -Wmaybe-uninitialized inside the
// system header (GCC bug 105593); the warnings are noise there and are silenced until the end header.
// No include guard: it opens a region, and each file opens one.
#pragma GCC push_options
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
