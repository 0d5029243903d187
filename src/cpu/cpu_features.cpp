#include "cpu/cpu_features.h"

#include <cpuid.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

namespace nitro::cpu {
namespace {

struct Regs {
    unsigned a = 0, b = 0, c = 0, d = 0;
};

/// CPUID leaf/subleaf; all zero when the leaf is beyond the CPU's maximum.
Regs cpuid(unsigned leaf, unsigned sub = 0) {
    Regs r;
    if (!__get_cpuid_count(leaf, sub, &r.a, &r.b, &r.c, &r.d)) r = Regs{};
    return r;
}

/// XCR0 (the register states the OS saves), 0 when the OS has not enabled XSAVE.
uint64_t xcr0(const Regs& leaf1) {
    if (!((leaf1.c >> 27) & 1u)) return 0;  // OSXSAVE
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (static_cast<uint64_t>(hi) << 32) | lo;
}

bool bit(unsigned v, int b) { return (v >> b) & 1u; }

CpuFeatures detect() {
    CpuFeatures f;
    const Regs v = cpuid(0);
    char vendor[13] = {};
    std::memcpy(vendor, &v.b, 4);
    std::memcpy(vendor + 4, &v.d, 4);
    std::memcpy(vendor + 8, &v.c, 4);
    f.vendor = vendor;
    if (cpuid(0x80000000u).a >= 0x80000004u) {
        char brand[49] = {};
        for (unsigned i = 0; i < 3; ++i) {
            const Regs r = cpuid(0x80000002u + i);
            std::memcpy(brand + 16 * i, &r, 16);
        }
        std::string s = brand;
        const size_t b = s.find_first_not_of(' '), e = s.find_last_not_of(' ');
        f.model_name = b == std::string::npos ? "" : s.substr(b, e - b + 1);
    }
    const Regs l1 = cpuid(1), l7 = v.a >= 7 ? cpuid(7, 0) : Regs{}, l71 = v.a >= 7 ? cpuid(7, 1) : Regs{};
    const uint64_t x = xcr0(l1);
    const bool ymm = (x & 0x6) == 0x6;            // SSE + AVX state
    const bool zmm = ymm && (x & 0xE0) == 0xE0;   // opmask, ZMM_Hi256, Hi16_ZMM
    const bool tiles = (x & 0x60000) == 0x60000;  // XTILECFG, XTILEDATA
    f.sse42 = bit(l1.c, 20);
    f.avx = ymm && bit(l1.c, 28);
    f.fma = f.avx && bit(l1.c, 12);
    f.f16c = f.avx && bit(l1.c, 29);
    f.avx2 = f.avx && bit(l7.b, 5);
    f.bmi2 = bit(l7.b, 8);
    f.avx512f = zmm && bit(l7.b, 16);
    f.avx512dq = f.avx512f && bit(l7.b, 17);
    f.avx512bw = f.avx512f && bit(l7.b, 30);
    f.avx512vl = f.avx512f && bit(l7.b, 31);
    f.avx512vnni = f.avx512f && bit(l7.c, 11);
    f.avx512bf16 = f.avx512f && bit(l71.a, 5);
    f.avx_vnni = f.avx && bit(l71.a, 4);
    f.amx_int8 = tiles && bit(l7.d, 25);
    return f;
}

// ---- Baseline check: a build compiled for more than x86-64 (e.g. -march=native) refuses to start
// on a CPU that lacks what it was compiled for, with a message instead of SIGILL. It runs as the
// first constructor of the program and is compiled for plain x86-64 (target attribute). It calls
// nothing that the build flags compile: CPUID through cpuid.h's asm macro, bit tests as macros.

// (compiler macro, name, test on the CPUID words l1c, l7b, l7c, l71a and XCR0 x)
#define NITRO_BASELINE_NEEDS(X)                                                        \
    X(__SSE4_2__, "sse4.2", NITRO_BIT(l1c, 20))                                        \
    X(__AVX__, "avx", (x & 6) == 6 && NITRO_BIT(l1c, 28))                              \
    X(__AVX2__, "avx2", (x & 6) == 6 && NITRO_BIT(l7b, 5))                             \
    X(__FMA__, "fma", (x & 6) == 6 && NITRO_BIT(l1c, 12))                              \
    X(__F16C__, "f16c", (x & 6) == 6 && NITRO_BIT(l1c, 29))                            \
    X(__BMI2__, "bmi2", NITRO_BIT(l7b, 8))                                             \
    X(__AVX512F__, "avx512f", (x & 0xE6) == 0xE6 && NITRO_BIT(l7b, 16))                \
    X(__AVX512DQ__, "avx512dq", (x & 0xE6) == 0xE6 && NITRO_BIT(l7b, 17))              \
    X(__AVX512BW__, "avx512bw", (x & 0xE6) == 0xE6 && NITRO_BIT(l7b, 30))              \
    X(__AVX512VL__, "avx512vl", (x & 0xE6) == 0xE6 && NITRO_BIT(l7b, 31))              \
    X(__AVX512VNNI__, "avx512vnni", (x & 0xE6) == 0xE6 && NITRO_BIT(l7c, 11))          \
    X(__AVX512BF16__, "avx512bf16", (x & 0xE6) == 0xE6 && NITRO_BIT(l71a, 5))

#define NITRO_BIT(v, b) ((((v) >> (b)) & 1u) != 0)
#define NITRO_STR2(m) #m
#define NITRO_STR(m) NITRO_STR2(m)
// A target macro the compiler defines expands to 1; an undefined one stays its own name.
#define NITRO_DEFINED(m) (NITRO_STR(m)[0] == '1')
// Appends C string s to the char array buf (always NUL-terminated), with a plain loop.
#define NITRO_APPEND(buf, s)                                                 \
    do {                                                                     \
        size_t i_ = 0;                                                       \
        const char* s_ = (s);                                                \
        while (i_ + 1 < sizeof(buf) && (buf)[i_]) ++i_;                      \
        while (i_ + 1 < sizeof(buf) && *s_) (buf)[i_++] = *s_++;             \
        (buf)[i_] = 0;                                                       \
    } while (0)

__attribute__((constructor(101), target("arch=x86-64"))) void check_baseline() {
    unsigned a = 0, b = 0, c = 0, d = 0, max_leaf = 0;
    __cpuid(0, max_leaf, b, c, d);
    unsigned l1c = 0, l7b = 0, l7c = 0, l71a = 0;
    if (max_leaf >= 1) {
        __cpuid(1, a, b, c, d);
        l1c = c;
    }
    if (max_leaf >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        l7b = b;
        l7c = c;
        __cpuid_count(7, 1, a, b, c, d);
        l71a = a;
    }
    uint64_t x = 0;
    if (NITRO_BIT(l1c, 27)) {  // OSXSAVE
        unsigned lo = 0, hi = 0;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        x = (static_cast<uint64_t>(hi) << 32) | lo;
    }
    char missing[256] = {};
#define NITRO_CHECK_NEED(macro, name, cond) \
    if (NITRO_DEFINED(macro) && !(cond)) {  \
        NITRO_APPEND(missing, " ");         \
        NITRO_APPEND(missing, name);        \
    }
    NITRO_BASELINE_NEEDS(NITRO_CHECK_NEED)
#undef NITRO_CHECK_NEED
    if (!missing[0]) return;
    char msg[640] = {};
    NITRO_APPEND(msg, "nitro: this build was compiled for CPU features this CPU does not have:");
    NITRO_APPEND(msg, missing);
    NITRO_APPEND(msg, ".\nRebuild without -march=native (or the -m flags in CMAKE_CXX_FLAGS): the default build runs "
                      "on every x86-64 CPU and chooses its kernels at run time.\n");
    size_t len = 0;
    while (msg[len]) ++len;
    if (::write(2, msg, len) < 0) ::_exit(1);
    ::_exit(1);
}

}  // namespace

const CpuFeatures& cpu_features() {
    static const CpuFeatures f = detect();
    return f;
}

std::string cpu_feature_list(const CpuFeatures& f) {
    std::string s;
    auto add = [&](bool on, const char* name) {
        if (!on) return;
        if (!s.empty()) s += ' ';
        s += name;
    };
    add(f.sse42, "sse4.2");
    add(f.avx, "avx");
    add(f.avx2, "avx2");
    add(f.fma, "fma");
    add(f.f16c, "f16c");
    add(f.bmi2, "bmi2");
    add(f.avx512f, "avx512f");
    add(f.avx512dq, "avx512dq");
    add(f.avx512bw, "avx512bw");
    add(f.avx512vl, "avx512vl");
    add(f.avx512vnni, "avx512vnni");
    add(f.avx512bf16, "avx512bf16");
    add(f.avx_vnni, "avx-vnni");
    add(f.amx_int8, "amx-int8");
    return s;
}

std::string build_baseline_features() {
    std::string s;
#define NITRO_LIST_NEED(macro, name, cond) \
    if (NITRO_DEFINED(macro)) s += s.empty() ? name : " " name;
    NITRO_BASELINE_NEEDS(NITRO_LIST_NEED)
#undef NITRO_LIST_NEED
    return s;
}

}  // namespace nitro::cpu
