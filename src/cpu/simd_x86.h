// Internal to the per-ISA kernel files (*_avx2.cpp, *_avx512.cpp): x86 helpers and the 256-bit
// kernels both levels share: the 32-value block formats in pairs of blocks (MXFP4, IQ4_NL, Q4_0,
// Q4_1, Q5_0, Q5_1 against Q8_0/Q8_1) and Q8_0 per block. The AVX-512 file uses them for the last
// one to three blocks of a row, with VNNI.
//
// Everything here has internal linkage, so each ISA file gets its own copy compiled with its own
// -m flags. Define NITRO_SIMD_VNNI to 1 (AVX-512 VNNI: vpdpbusd, every weight unsigned with an
// offset) or 0 (AVX2: vpmaddubsw + vpmaddwd) before including.
//
// Activations come in the SIMD views of kernels.h (ActLayout): for these formats the Half16 image
// (the low-nibble values of four blocks, then their high-nibble values), per-lane scales `dx`
// ([d, d, d, d] per block), offset corrections `corr` ([-off * sum(q), 0, 0, 0]) and Q8_1 sums
// `sx` ([s, 0, 0, 0]). A pair of blocks b, b+1 then needs one 32-byte load of nibbles, and per
// token two aligned 32-byte loads of quants and one of scales: no shuffle per token.
#pragma once

#include "cpu/kernels.h"

#include <immintrin.h>

#ifndef NITRO_SIMD_VNNI
#error "define NITRO_SIMD_VNNI before including cpu/simd_x86.h"
#endif

namespace nitro::cpu::kernels {
/// The prefetch distance in bytes (matmul.cpp, set_prefetch_bytes); read by every kernel.
extern int64_t g_prefetch_bytes;
namespace {

/// ggml fp16 -> f32 (F16C; exact, same as core/fp16.h for every input).
inline float h2f(const uint8_t* p) { return _cvtsh_ss(load_u16(p)); }

/// Software prefetch: each kernel touches the weight line g_prefetch_bytes ahead of where it reads
/// (cpu::set_prefetch_bytes, default 1536). The kernels alternate compute and loads, so the
/// hardware prefetcher alone leaves DRAM latency exposed; a thread's rows are contiguous, so
/// prefetching past the end of a row fetches the next one. Always inlined: GCC sees a prefetch as
/// free of side effects, so a call to an out-of-line helper made only of one can be deleted as dead
/// (it was, inside the always-inline pair loop: no prefetch at all in the AVX2 pair kernels).
__attribute__((always_inline)) inline void prefetch_w(const uint8_t* p) {
    _mm_prefetch(reinterpret_cast<const char*>(p + g_prefetch_bytes), _MM_HINT_T0);
}

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

inline __m256i lut256(const Lut16& t) { return _mm256_broadcastsi128_si256(load128(t.v)); }

/// vpshufb controls, compile time: v[lo][hi] picks 16-bit word `lo` of the low 128-bit lane into
/// every word of it, and word `hi` of the high lane likewise (scales per 16 or 32 values).
struct WordPicks {
    alignas(32) uint8_t v[8][8][32];
    constexpr WordPicks() : v{} {
        for (int lo = 0; lo < 8; ++lo)
            for (int hi = 0; hi < 8; ++hi)
                for (int i = 0; i < 16; ++i) {
                    v[lo][hi][i] = static_cast<uint8_t>(2 * lo + (i & 1));
                    v[lo][hi][16 + i] = static_cast<uint8_t>(2 * hi + (i & 1));
                }
    }
};
constexpr WordPicks kWordPicks{};
inline __m256i word_pick(int lo, int hi) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(kWordPicks.v[lo][hi])); }

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

/// The 16 nibble bytes of two blocks (qs0, qs1) as [b0 values 0-15 | b1 values 0-15] (low
/// nibbles) and [b0 values 16-31 | b1 values 16-31] (high nibbles).
inline void nibbles_pair(const uint8_t* qs0, const uint8_t* qs1, __m256i& lo, __m256i& hi) {
    const __m256i v = _mm256_set_m128i(load128(qs1), load128(qs0));
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    lo = _mm256_and_si256(v, m4);
    hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
}

/// [f16(p0) x4 | f16(p1) x4] as f32.
inline __m256 f16_pair(const uint8_t* p0, const uint8_t* p1) {
    const uint32_t v = static_cast<uint32_t>(load_u16(p0)) | static_cast<uint32_t>(load_u16(p1)) << 16;
    const __m128i spread = _mm_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3);
    return _mm256_cvtph_ps(_mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<int>(v)), spread));
}

/// Adds the fifth bit (bit j of the 32-bit qh = value j) of two Q5 blocks as 16 to the pair's
/// nibbles (layout of nibbles_pair).
inline void q5_high_pair(const uint8_t* qh0, const uint8_t* qh1, __m256i& lo, __m256i& hi) {
    uint32_t a, b;
    std::memcpy(&a, qh0, 4);
    std::memcpy(&b, qh1, 4);
    const __m256i v = _mm256_broadcastsi128_si256(_mm_unpacklo_epi32(_mm_cvtsi32_si128(static_cast<int>(a)),
                                                                     _mm_cvtsi32_si128(static_cast<int>(b))));
    const __m256i sel_lo = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                            4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5);
    const __m256i sel_hi = _mm256_setr_epi8(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,  //
                                            6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7);
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
    const __m256i b16 = _mm256_set1_epi8(0x10);
    const __m256i hl = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(v, sel_lo), bit), bit);
    const __m256i hh = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(v, sel_hi), bit), bit);
    lo = _mm256_or_si256(lo, _mm256_and_si256(hl, b16));
    hi = _mm256_or_si256(hi, _mm256_and_si256(hh, b16));
}

// ------------------------------------------------------------------ 32-value block decoders
// pair(x0, x1, lo, hi): the weights of blocks x0, x1 as bytes in the layout of nibbles_pair;
// unsigned (value + the layout's corr_offset) unless kSigned (then signed, AVX2 sign trick).
// scale(x0, x1): [d0 x4 | d1 x4]; min(x0, x1) (kMin): [m0 x4 | m1 x4].

struct DecMxfp4 {
    static constexpr size_t kBytes = 17;
    static constexpr bool kSigned = false, kCorr = true, kMin = false;
    __m256i tbl = lut256(kLutMxfp4U);
    void pair(const uint8_t* x0, const uint8_t* x1, __m256i& lo, __m256i& hi) const {
        nibbles_pair(x0 + 1, x1 + 1, lo, hi);
        lo = _mm256_shuffle_epi8(tbl, lo);
        hi = _mm256_shuffle_epi8(tbl, hi);
    }
    __m256 scale(const uint8_t* x0, const uint8_t* x1) const {
        return _mm256_set_m128(_mm_broadcast_ss(&kE8m0Half.v[x1[0]]), _mm_broadcast_ss(&kE8m0Half.v[x0[0]]));
    }
    __m256 min(const uint8_t*, const uint8_t*) const { return _mm256_setzero_ps(); }
};
struct DecIq4Nl {
    static constexpr size_t kBytes = 18;
    static constexpr bool kSigned = !NITRO_SIMD_VNNI, kCorr = NITRO_SIMD_VNNI, kMin = false;
    __m256i tbl = lut256(NITRO_SIMD_VNNI ? kLutIq4nlU : kLutIq4nlS);
    void pair(const uint8_t* x0, const uint8_t* x1, __m256i& lo, __m256i& hi) const {
        nibbles_pair(x0 + 2, x1 + 2, lo, hi);
        lo = _mm256_shuffle_epi8(tbl, lo);
        hi = _mm256_shuffle_epi8(tbl, hi);
    }
    __m256 scale(const uint8_t* x0, const uint8_t* x1) const { return f16_pair(x0, x1); }
    __m256 min(const uint8_t*, const uint8_t*) const { return _mm256_setzero_ps(); }
};
struct DecQ4_0 {
    static constexpr size_t kBytes = 18;
    static constexpr bool kSigned = false, kCorr = true, kMin = false;
    void pair(const uint8_t* x0, const uint8_t* x1, __m256i& lo, __m256i& hi) const { nibbles_pair(x0 + 2, x1 + 2, lo, hi); }
    __m256 scale(const uint8_t* x0, const uint8_t* x1) const { return f16_pair(x0, x1); }
    __m256 min(const uint8_t*, const uint8_t*) const { return _mm256_setzero_ps(); }
};
struct DecQ4_1 {
    static constexpr size_t kBytes = 20;
    static constexpr bool kSigned = false, kCorr = false, kMin = true;
    void pair(const uint8_t* x0, const uint8_t* x1, __m256i& lo, __m256i& hi) const { nibbles_pair(x0 + 4, x1 + 4, lo, hi); }
    __m256 scale(const uint8_t* x0, const uint8_t* x1) const { return f16_pair(x0, x1); }
    __m256 min(const uint8_t* x0, const uint8_t* x1) const { return f16_pair(x0 + 2, x1 + 2); }
};
struct DecQ5_0 {
    static constexpr size_t kBytes = 22;
    static constexpr bool kSigned = false, kCorr = true, kMin = false;
    void pair(const uint8_t* x0, const uint8_t* x1, __m256i& lo, __m256i& hi) const {
        nibbles_pair(x0 + 6, x1 + 6, lo, hi);
        q5_high_pair(x0 + 2, x1 + 2, lo, hi);
    }
    __m256 scale(const uint8_t* x0, const uint8_t* x1) const { return f16_pair(x0, x1); }
    __m256 min(const uint8_t*, const uint8_t*) const { return _mm256_setzero_ps(); }
};
struct DecQ5_1 {
    static constexpr size_t kBytes = 24;
    static constexpr bool kSigned = false, kCorr = false, kMin = true;
    void pair(const uint8_t* x0, const uint8_t* x1, __m256i& lo, __m256i& hi) const {
        nibbles_pair(x0 + 8, x1 + 8, lo, hi);
        q5_high_pair(x0 + 4, x1 + 4, lo, hi);
    }
    __m256 scale(const uint8_t* x0, const uint8_t* x1) const { return f16_pair(x0, x1); }
    __m256 min(const uint8_t* x0, const uint8_t* x1) const { return f16_pair(x0 + 2, x1 + 2); }
};

/// Image byte offset of the low halves of blocks (ib, ib + 1), ib even (ActOrder::Half16).
constexpr int64_t half16_pair_offset(int64_t ib) { return (ib / 4) * 128 + ((ib / 2) % 2) * 32; }

/// One pair of blocks (ib, ib + 1) for NT tokens into 8 float lanes per token. `one`: only block
/// ib is real (x1 == x0), the upper lanes are cleared.
template <class Dec, int NT>
__attribute__((always_inline)) inline void pair_step(const Dec& dec, int64_t ib, int64_t yo, const uint8_t* x0,
                                                     const uint8_t* x1, bool one, const ActRow* a, __m256* acc) {
    __m256i lo, hi;
    dec.pair(x0, x1, lo, hi);
    __m256 ws = dec.scale(x0, x1);
    __m256 wm = Dec::kMin ? dec.min(x0, x1) : _mm256_setzero_ps();
    if (one) {
        const __m256i keep = _mm256_setr_epi32(-1, -1, -1, -1, 0, 0, 0, 0);
        lo = _mm256_and_si256(lo, keep);
        hi = _mm256_and_si256(hi, keep);
        ws = _mm256_and_ps(ws, _mm256_castsi256_ps(keep));
        wm = _mm256_and_ps(wm, _mm256_castsi256_ps(keep));
    }
#if !NITRO_SIMD_VNNI
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i lo_abs = lo, hi_abs = hi;
    if constexpr (Dec::kSigned) {
        lo_abs = _mm256_sign_epi8(lo, lo);
        hi_abs = _mm256_sign_epi8(hi, hi);
    }
#endif
    for (int t = 0; t < NT; ++t) {
        const __m256i ylo = _mm256_load_si256(reinterpret_cast<const __m256i*>(a[t].img + yo));
        const __m256i yhi = _mm256_load_si256(reinterpret_cast<const __m256i*>(a[t].img + yo + 64));
        __m256i p;
#if NITRO_SIMD_VNNI
        p = Dec::kCorr ? _mm256_load_si256(reinterpret_cast<const __m256i*>(a[t].corr + 4 * ib)) : _mm256_setzero_si256();
        p = _mm256_dpbusd_epi32(p, lo, ylo);
        p = _mm256_dpbusd_epi32(p, hi, yhi);
#else
        if constexpr (Dec::kSigned) {
            // |w| * sign(y, w), u8 x s8; a pair of products <= 2 * 127 * 127, the two halves added in int32.
            const __m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo_abs, _mm256_sign_epi8(ylo, lo)), ones);
            const __m256i ph = _mm256_madd_epi16(_mm256_maddubs_epi16(hi_abs, _mm256_sign_epi8(yhi, hi)), ones);
            p = _mm256_add_epi32(pl, ph);
        } else {
            // unsigned w <= 31: the int16 sums of both halves stay below 2 * 2 * 31 * 127 < 2^15.
            p = _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo, ylo), _mm256_maddubs_epi16(hi, yhi)), ones);
            if constexpr (Dec::kCorr)
                p = _mm256_add_epi32(p, _mm256_load_si256(reinterpret_cast<const __m256i*>(a[t].corr + 4 * ib)));
        }
#endif
        const __m256 d = _mm256_mul_ps(ws, _mm256_load_ps(a[t].dx + 4 * ib));
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), d, acc[t]);
        if constexpr (Dec::kMin) acc[t] = _mm256_fmadd_ps(wm, _mm256_load_ps(a[t].sx + 4 * ib), acc[t]);
    }
}

/// Blocks [ib0, nb) of a row in pairs (the last one alone), into acc.
template <class Dec, int NT>
__attribute__((always_inline)) inline void pairs_from(const Dec& dec, int64_t ib0, int64_t nb, const uint8_t* w,
                                                      const ActRow* a, __m256* acc) {
    int64_t ib = ib0;
    // Whole quads first (two pairs at fixed image offsets, no index arithmetic), ib0 % 4 == 0.
    for (; ib + 4 <= nb; ib += 4) {
        const uint8_t* x0 = w + ib * Dec::kBytes;
        prefetch_w(x0);
        prefetch_w(x0 + 64);
        pair_step<Dec, NT>(dec, ib, ib * 32, x0, x0 + Dec::kBytes, false, a, acc);
        pair_step<Dec, NT>(dec, ib + 2, ib * 32 + 32, x0 + 2 * Dec::kBytes, x0 + 3 * Dec::kBytes, false, a, acc);
    }
    for (; ib + 2 <= nb; ib += 2) {
        const uint8_t* x0 = w + ib * Dec::kBytes;
        pair_step<Dec, NT>(dec, ib, half16_pair_offset(ib), x0, x0 + Dec::kBytes, false, a, acc);
    }
    if (ib < nb) {
        const uint8_t* x0 = w + ib * Dec::kBytes;
        pair_step<Dec, NT>(dec, ib, half16_pair_offset(ib), x0, x0, true, a, acc);
    }
}

/// Q8_0 weights, one block per step: int8 dot (sign trick, or vpdpbusd on w + 128 with the
/// activations' corr), times dw * dy (dx: 8 lanes per block).
template <int NT>
__attribute__((always_inline)) inline void q8_0_block(const uint8_t* x, int64_t ib, const ActRow* a, __m256* acc) {
    const __m256i wq = load256(x + 2);
    const __m256 dw = _mm256_set1_ps(h2f(x));
#if NITRO_SIMD_VNNI
    const __m256i wu = _mm256_xor_si256(wq, _mm256_set1_epi8(static_cast<char>(0x80)));
#else
    const __m256i wabs = _mm256_sign_epi8(wq, wq);
    const __m256i ones = _mm256_set1_epi16(1);
#endif
    for (int t = 0; t < NT; ++t) {
        const __m256i y = _mm256_load_si256(reinterpret_cast<const __m256i*>(a[t].img + 32 * ib));
#if NITRO_SIMD_VNNI
        const __m256i p =
            _mm256_dpbusd_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(a[t].corr + 8 * ib)), wu, y);
#else
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, _mm256_sign_epi8(y, wq)), ones);
#endif
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(dw, _mm256_load_ps(a[t].dx + 8 * ib)), acc[t]);
    }
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

template <template <int> class K>
void dot_nt(int64_t n, const uint8_t* w, const ActRow* a, int nt, float* out) {
    by_nt<K>(n, w, a, nt, out);
}

}  // namespace
}  // namespace nitro::cpu::kernels
