// The AVX-VNNI level's K-quant and IQ4_XS tile kernels: kquants_avx2.cpp compiled again with
// -mavxvnni (see vec_dot_avxvnni.cpp); IQ4_XS runs unsigned with offset 128. Exports
// fill_kquants_avxvnni only.
#define NITRO_SIMD_VNNI 1
#include "cpu/kquants_avx2.cpp"  // NOLINT(bugprone-suspicious-include): one source, two ISA builds
