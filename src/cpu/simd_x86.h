// Internal to the per-ISA kernel files (vec_dot_avx2.cpp, vec_dot_avx512.cpp): x86 helpers and
// the kernel template for the 32-value block formats (Q8_0, Q4_0, MXFP4, IQ4_NL against Q8_0).
// Everything here has internal linkage, so each ISA file gets its own copy compiled with its own
// -m flags. Define NITRO_SIMD_VNNI to 1 (AVX-512 VNNI, vpdpbusd) or 0 (AVX2 vpmaddubsw+vpmaddwd)
// before including.
#pragma once

#include "cpu/kernels.h"
#include "quant/iq_grids.h"

#include <immintrin.h>

#ifndef NITRO_SIMD_VNNI
#error "define NITRO_SIMD_VNNI before including cpu/simd_x86.h"
#endif

namespace nitro::cpu::kernels {
namespace {

/// ggml fp16 -> f32 (F16C; exact, same as core/fp16.h for every input).
inline float h2f(const uint8_t* p) { return _cvtsh_ss(load_u16(p)); }

/// Software prefetch distance in the weight stream, bytes. The kernels alternate compute and
/// loads, so the hardware prefetcher alone leaves DRAM latency exposed; rows of a chunk are
/// contiguous, so prefetching past the end of a row fetches the next one.
constexpr int64_t kPrefetchBytes = 1536;

/// Prefetches the weight line kPrefetchBytes ahead of p.
inline void prefetch_w(const uint8_t* p) { _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes), _MM_HINT_T0); }

/// Sum of the 8 lanes, in a fixed order ((0+4)+(2+6))+((1+5)+(3+7)).
inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/// Sum over 32 lanes of |w| * y (u8 x s8) in 8 int32 lanes; products of the AVX2 path are paired
/// in int16 first (|w| <= 128, |y| <= 127: no saturation).
inline __m256i dot_u8s8(__m256i wabs, __m256i y) {
#if NITRO_SIMD_VNNI
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), wabs, y);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, y), _mm256_set1_epi16(1));
#endif
}

/// The 32 quants of a block as signed int8 in activation order (value j < 16: low nibble of byte
/// j, value j >= 16: high nibble of byte j-16).
inline __m256i nibbles32(const uint8_t* qs) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m256i v = _mm256_set_m128i(_mm_srli_epi16(x, 4), x);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

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

inline __m256i table16(const int8_t* t) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t)));
}

struct DecQ8_0 {
    static constexpr size_t kBytes = 34;
    __m256i operator()(const uint8_t* b) const { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)); }
    float scale(const uint8_t* b) const { return h2f(b); }
};
struct DecQ4_0 {
    static constexpr size_t kBytes = 18;
    __m256i operator()(const uint8_t* b) const { return _mm256_sub_epi8(nibbles32(b + 2), _mm256_set1_epi8(8)); }
    float scale(const uint8_t* b) const { return h2f(b); }
};
struct DecMxfp4 {
    static constexpr size_t kBytes = 17;
    __m256i tbl = table16(kValuesMxfp4);
    __m256i operator()(const uint8_t* b) const { return _mm256_shuffle_epi8(tbl, nibbles32(b + 1)); }
    float scale(const uint8_t* b) const { return kE8m0Half.v[b[0]]; }
};
struct DecIq4Nl {
    static constexpr size_t kBytes = 18;
    __m256i tbl = table16(quant::kvalues_iq4nl);
    __m256i operator()(const uint8_t* b) const { return _mm256_shuffle_epi8(tbl, nibbles32(b + 2)); }
    float scale(const uint8_t* b) const { return h2f(b); }
};

/// 32-value weight blocks x Q8_0 activations, NT tokens: per block one decode, then per token
/// int8 dot (sign trick: |w| * sign(y, w)), int32 -> float, times dw * dy into 8 float lanes;
/// dy comes from the activations' precomputed f32 block scales (ActRow::d).
template <class Dec, int NT>
void dot_blocks32_nt(int64_t n, const uint8_t* w, const ActRow* a, float* out) {
    const Dec dec{};
    __m256 acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
    const int64_t nb = n / 32;
    for (int64_t ib = 0; ib < nb; ++ib) {
        const uint8_t* xb = w + ib * Dec::kBytes;
        if ((ib & 1) == 0) prefetch_w(xb);
        const __m256i wq = dec(xb);
        const __m256i wabs = _mm256_sign_epi8(wq, wq);
        const float dw = dec.scale(xb);
        for (int t = 0; t < NT; ++t) {
            const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t].q + ib * 34 + 2));
            const __m256i p = dot_u8s8(wabs, _mm256_sign_epi8(y, wq));
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dw * a[t].d[ib]), _mm256_cvtepi32_ps(p), acc[t]);
        }
    }
    for (int t = 0; t < NT; ++t) out[t] = hsum8(acc[t]);
}

/// Runtime nt -> template NT.
template <template <int> class K>
void by_nt(int64_t n, const uint8_t* w, const ActRow* a, int nt, float* out) {
    switch (nt) {
        case 1: K<1>::run(n, w, a, out); break;
        case 2: K<2>::run(n, w, a, out); break;
        case 3: K<3>::run(n, w, a, out); break;
        default: K<4>::run(n, w, a, out); break;
    }
}

template <class Dec>
struct Blocks32 {
    template <int NT>
    struct K {
        static void run(int64_t n, const uint8_t* w, const ActRow* a, float* out) {
            dot_blocks32_nt<Dec, NT>(n, w, a, out);
        }
    };
    static void dot(int64_t n, const uint8_t* w, const ActRow* a, int nt, float* out) { by_nt<K>(n, w, a, nt, out); }
};

}  // namespace
}  // namespace nitro::cpu::kernels
