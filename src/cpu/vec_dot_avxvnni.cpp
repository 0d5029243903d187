// The AVX-VNNI level (AVX2 + FMA + F16C + AVX-VNNI: Intel Alder Lake and later client CPUs, whose
// AVX-512 is off, Sierra Forest, Zen 5): vec_dot_avx2.cpp's tile kernels of the 32-value formats
// compiled again with -mavxvnni, where a slice costs one vpdpbusd (tile_avx2.h) and the formats
// AVX2 keeps signed (Q8_0, IQ4_NL) run unsigned with offset 128. Exports fill_avxvnni only.
#define NITRO_SIMD_VNNI 1
#include "cpu/vec_dot_avx2.cpp"  // NOLINT(bugprone-suspicious-include): one source, two ISA builds
