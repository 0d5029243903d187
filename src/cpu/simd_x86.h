// Internal to the per-ISA kernel files (*_avx2.cpp, *_avx512.cpp): x86 helpers both SIMD levels
// share. Everything here has internal linkage (anonymous namespace, constexpr tables), so each ISA
// file gets its own copy compiled with its own -m flags, and no code runs at load time (see
// docs/cpu-kernels.md, "ISA levels: nothing runs before dispatch").
#pragma once

#include "cpu/kernels.h"

#include <immintrin.h>

namespace nitro::cpu::kernels {
/// The prefetch distance in bytes and the hint (0 T0, 1 T1, 2 T2, 3 NTA) (matmul.cpp,
/// set_prefetch_bytes, set_prefetch_hint); read by every kernel.
extern int64_t g_prefetch_bytes;
extern int g_prefetch_hint;
namespace {

/// ggml fp16 -> f32 (F16C; exact, same as core/fp16.h for every input).
inline float h2f(const uint8_t* p) { return _cvtsh_ss(load_u16(p)); }

/// Software prefetch: each kernel touches the weight line g_prefetch_bytes ahead of where it reads
/// (cpu::set_prefetch_bytes, default 3072; into L1 unless set_prefetch_hint says otherwise). The kernels alternate compute and loads, so the
/// hardware prefetcher alone leaves DRAM latency exposed; a thread's rows are contiguous, so
/// prefetching past the end of a row fetches the next one. Always inlined: GCC sees a prefetch as
/// free of side effects, so a call to an out-of-line helper made only of one can be deleted as dead
/// (it was, inside an always-inline loop: no prefetch at all in the former AVX2 pair kernels).
__attribute__((always_inline)) inline void prefetch_w(const uint8_t* p) {
    const char* a = reinterpret_cast<const char*>(p + g_prefetch_bytes);
    switch (g_prefetch_hint) {  // one predictable branch; the hint must be a compile-time constant
        case 1: _mm_prefetch(a, _MM_HINT_T1); break;
        case 2: _mm_prefetch(a, _MM_HINT_T2); break;
        case 3: _mm_prefetch(a, _MM_HINT_NTA); break;
        default: _mm_prefetch(a, _MM_HINT_T0); break;
    }
}

/// Prefetches the lines of `bytes` weight bytes from p, one per 64 bytes.
template <int64_t kBytes>
__attribute__((always_inline)) inline void prefetch_group(const uint8_t* p) {
    for (int64_t l = 0; l < kBytes; l += 64) prefetch_w(p + l);
}

/// The tile kernels' prefetch: while one block of rows is computed (groups outer, its rows
/// inner: several row streams at once, which a fixed distance ahead in each row does not cover),
/// the next block's bytes are fetched into L2 in order, kBytes per decoded group, so they are
/// there when the block starts (the next block of this call, or of the caller's next call on the
/// following rows).
struct BlockPrefetch {
    const uint8_t* p;
    const uint8_t* end;
    template <int64_t kBytes>
    __attribute__((always_inline)) void step() {
        for (int64_t l = 0; l < kBytes && p < end; l += 64, p += 64) _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
    }
};

/// Sum of the 8 lanes, in a fixed order ((0+4)+(2+6))+((1+5)+(3+7)).
inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

/// e8m0_half for every byte: one load instead of a branch and shifts per block. Built at compile
/// time: this header is compiled with AVX2/AVX-512 flags, and a table filled by a constructor would
/// run those instructions at load time on every CPU, before dispatch (SIGILL on CPUs without them).
struct E8m0Table {
    float v[256];
    constexpr E8m0Table() : v{} {
        for (int e = 0; e < 256; ++e) v[e] = e8m0_half(static_cast<uint8_t>(e));
    }
};
constexpr E8m0Table kE8m0Half{};

/// A 16-entry byte table for vpshufb, every entry plus `off` (compile time).
struct Lut16 {
    alignas(16) uint8_t v[16];
    constexpr Lut16(const int8_t* src, int off) : v{} {
        for (int i = 0; i < 16; ++i) v[i] = static_cast<uint8_t>(src[i] + off);
    }
};
/// MXFP4 as unsigned: kValuesMxfp4 + 12 (0..24); the activations' corr takes 12 * sum(q) off.
constexpr Lut16 kLutMxfp4U(kValuesMxfp4, 12);
/// IQ4_NL signed (sign trick on AVX2), and + 128 (1..241) for vpdpbusd.
constexpr Lut16 kLutIq4nlS(kValuesIq4nl, 0);
constexpr Lut16 kLutIq4nlU(kValuesIq4nl, 128);

/// Q4_K/Q5_K: the 8 six-bit scales and 8 mins of a super-block (scales[12] at q; 16 bytes are
/// read, all inside the block) as bytes [sc0..sc7, mn0..mn7]: ggml's get_scale_min_k4 on the
/// three 32-bit words, as llama.cpp's utmp code, in SSE registers.
inline __m128i scales_mins_k4(const uint8_t* q) {
    const __m128i v = load128(q);
    const __m128i p = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0));  // [u0, u2, u1, u2]
    const __m128i r = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0));  // [u0, u0, u1, u1]
    const __m128i lo = _mm_and_si128(_mm_srlv_epi32(p, _mm_setr_epi32(0, 0, 0, 4)),
                                     _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    const __m128i hi = _mm_and_si128(_mm_srli_epi32(r, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    return _mm_or_si128(lo, hi);
}

/// scales_mins_k4 of two super-blocks at once: [sc, mn of q0 | sc, mn of q1].
inline __m256i scales_mins_k4_x2(const uint8_t* q0, const uint8_t* q1) {
    const __m256i v = _mm256_set_m128i(load128(q1), load128(q0));
    const __m256i p = _mm256_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0));
    const __m256i r = _mm256_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0));
    const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(p, _mm256_setr_epi32(0, 0, 0, 4, 0, 0, 0, 4)),
                                        _mm256_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f,
                                                          0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi32(r, 2), _mm256_setr_epi32(0, 0x30303030, 0, 0x30303030, 0,
                                                                                  0x30303030, 0, 0x30303030));
    return _mm256_or_si256(lo, hi);
}

/// Q3_K: the 16 six-bit scales minus 32 (scales[12] at q) as signed bytes (llama.cpp's word trick).
inline __m128i scales_q3k(const uint8_t* q) {
    constexpr uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
    uint32_t aux[3];
    std::memcpy(aux, q, 12);
    const __m128i s = _mm_set_epi32(static_cast<int>(((aux[1] >> 4) & kmask2) | (((aux[2] >> 6) & kmask1) << 4)),
                                    static_cast<int>(((aux[0] >> 4) & kmask2) | (((aux[2] >> 4) & kmask1) << 4)),
                                    static_cast<int>((aux[1] & kmask2) | (((aux[2] >> 2) & kmask1) << 4)),
                                    static_cast<int>((aux[0] & kmask2) | (((aux[2] >> 0) & kmask1) << 4)));
    return _mm_sub_epi8(s, _mm_set1_epi8(32));
}

/// IQ4_XS: the 8 sub-block scales (ls - 32) of a super-block as int32, in sub-block order
/// (scales_h at q, scales_l at q + 2).
inline __m256i scales_iq4xs(const uint8_t* q) {
    uint32_t sl;
    std::memcpy(&sl, q + 2, 4);
    const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(sl)),
                                                          _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                                        _mm256_set1_epi32(0xF));
    const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(load_u16(q)),
                                                          _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                                        _mm256_set1_epi32(3));
    return _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
}

/// vpshufb controls for the fields of two 32-value blocks in the two 128-bit lanes of a ymm (the
/// first block's field at byte kFirst of the lower lane, the second's at byte kSecond of the upper
/// one): v[q] moves each kLen-byte field into dword q of its lane (zero-extended) and zeroes
/// everything else, so the OR over q = 0..3 of four block pairs collects eight fields as dwords.
template <int kFirst, int kSecond, int kLen>
struct PairFieldCtl {
    static_assert(kFirst + kLen <= 16 && kSecond + kLen <= 16);
    alignas(32) uint8_t v[4][32];
    constexpr PairFieldCtl() : v{} {
        for (int q = 0; q < 4; ++q)
            for (int i = 0; i < 32; ++i) {
                const int lane = i / 16, pos = i % 16, first = lane ? kSecond : kFirst;
                v[q][i] = pos / 4 == q && pos % 4 < kLen ? static_cast<uint8_t>(first + pos % 4) : 0x80;
            }
    }
};
/// The controls for a 32-byte load from the first of two kB-byte blocks (17 <= kB; the second
/// block's field kB + kOff - 16 bytes into the upper lane).
template <int kB, int kOff, int kLen>
using BlockPairCtl = PairFieldCtl<kOff, kB + kOff - 16, kLen>;

/// Runtime nt -> template NT, for the float types' DotFn kernels (1..kDotMaxTokens tokens).
template <template <int> class K>
void by_nt(int64_t n, const uint8_t* w, const ActRow* a, int nt, float* out) {
    switch (nt) {
        case 1: K<1>::run(n, w, a, out); break;
        case 2: K<2>::run(n, w, a, out); break;
        case 3: K<3>::run(n, w, a, out); break;
        default: K<4>::run(n, w, a, out); break;
    }
}

/// Smaller of two values (no std:: templates in ISA files: their COMDAT copies may be shared with
/// baseline code).
template <class T>
constexpr T min_of(T a, T b) { return a < b ? a : b; }

}  // namespace
}  // namespace nitro::cpu::kernels
