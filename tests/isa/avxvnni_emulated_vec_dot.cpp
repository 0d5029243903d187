// Tests only: the AVX-VNNI level's tile kernels of the 32-value formats (vec_dot_avx2.cpp compiled
// as vec_dot_avxvnni.cpp compiles it) with vpdpbusd emulated exactly by AVX2 arithmetic
// (tile_avx2.h dpbusd), compiled with the AVX2 flags only: so the AVX-VNNI decoders and their
// offsets run on every AVX2 machine, where neither the hardware nor qemu 7.2 has AVX-VNNI.
// Exports fill_avxvnni_emulated (tests/unit/test_cpu_avxvnni.cpp).
#define NITRO_SIMD_VNNI 1
#define NITRO_VNNI_EMULATE 1
#include "cpu/vec_dot_avx2.cpp"  // NOLINT(bugprone-suspicious-include)
