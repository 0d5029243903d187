// What the x86-64 CPU this process runs on can execute, read once from CPUID and XGETBV.
//
// This is the one source of truth for kernel dispatch (src/cpu/matmul.cpp) and for what `nitro
// --version` and the startup lines print. A feature counts only when the OS also saves its
// register state (XCR0): AVX needs the YMM state, AVX-512 the opmask/ZMM states.
//
// The per-ISA kernel files (vec_dot_avx2.cpp, vec_dot_avx512.cpp) must never run code before
// dispatch has checked these flags: they have no static initialisers (tests/isa checks the object
// files) and are only entered through the kernel table of a level the CPU has.
#pragma once

#include <string>

namespace nitro::cpu {

/// CPU identification and the instruction-set extensions the kernels care about.
struct CpuFeatures {
    std::string vendor;      ///< CPUID vendor string, e.g. "GenuineIntel", "AuthenticAMD"
    std::string model_name;  ///< brand string, e.g. "AMD EPYC 9654 96-Core Processor" (may be empty)
    bool sse42 = false, avx = false, avx2 = false, fma = false, f16c = false, bmi2 = false;
    bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, avx512vnni = false;
    bool avx512bf16 = false, avx_vnni = false, amx_int8 = false;
};

/// The features of this CPU (CPUID + XGETBV, computed on first call; thread-safe).
const CpuFeatures& cpu_features();

/// Space-separated list of the features present, in a fixed order, e.g. "sse4.2 avx avx2 fma f16c".
std::string cpu_feature_list(const CpuFeatures& f);

/// Extensions this build was compiled to require everywhere (from the compiler's target macros,
/// e.g. CMAKE_CXX_FLAGS=-march=native), as a feature list; empty for the portable x86-64 baseline.
std::string build_baseline_features();

}  // namespace nitro::cpu
