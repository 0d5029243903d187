// Tests only: kquants_avx2.cpp as the AVX-VNNI level builds it, with vpdpbusd emulated (see
// avxvnni_emulated_vec_dot.cpp). Exports fill_kquants_avxvnni_emulated.
#define NITRO_SIMD_VNNI 1
#define NITRO_VNNI_EMULATE 1
#include "cpu/kquants_avx2.cpp"  // NOLINT(bugprone-suspicious-include)
