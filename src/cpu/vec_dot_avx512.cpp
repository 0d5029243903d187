// AVX-512 (F, BW, VL, DQ) + VNNI dot-product kernels (compiled with the matching -m flags; chosen at
// run time by matmul.cpp only on CPUs that have all of them): the 32-value block formats (MXFP4,
// IQ4_NL, Q4_0, Q4_1, Q5_0, Q5_1: four blocks per zmm; Q8_0: two), F16, BF16, F32 (512-bit FMA).
// The K-quants and IQ4_XS are in kquants_avx512.cpp.
//
// Every kernel handles 1..4 tokens per weight row; per token the operations and their order are
// the same whatever the token count (kernels.h).
#define NITRO_SIMD_VNNI 1
// GCC 12's own AVX-512 headers build some intrinsics (_mm512_cvtepu16_epi32, _mm512_slli_epi32,
// the 512->256 extracts) from an intentionally undefined vector, which -Wuninitialized reports at
// every inlining site; the warning is about the header, not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning group (clang warns that it does not know it)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "cpu/simd_x86.h"

namespace nitro::cpu::kernels {
namespace {

/// Sum of the 16 lanes in a fixed order.
inline float hsum16(__m512 v) {
    return hsum8(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

// ------------------------------------------------------------------------- float types

struct LdF32 {
    static __m512 load(const uint8_t* p) { return _mm512_loadu_ps(p); }
    static float one(const uint8_t* p) { return load_f32(p); }
    static constexpr int kSize = 4;
};
struct LdF16 {
    static __m512 load(const uint8_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
    static float one(const uint8_t* p) { return h2f(p); }
    static constexpr int kSize = 2;
};
struct LdBF16 {
    static __m512 load(const uint8_t* p) {
        const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
        return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    }
    static float one(const uint8_t* p) {
        const uint32_t u = static_cast<uint32_t>(load_u16(p)) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    }
    static constexpr int kSize = 2;
};

/// Two 16-lane accumulators per token (32 values per step), tail (n % 32) added in order.
template <class L>
struct FloatDot {
    template <int NT>
    struct K {
        static void run(int64_t n, const uint8_t* w, const ActRow* a, float* out) {
            __m512 acc0[NT], acc1[NT];
            for (int t = 0; t < NT; ++t) acc0[t] = acc1[t] = _mm512_setzero_ps();
            const int64_t n32 = n - n % 32;
            for (int64_t i = 0; i < n32; i += 32) {
                prefetch_w(w + i * L::kSize);
                if (L::kSize == 4) prefetch_w(w + i * L::kSize + 64);
                const __m512 w0 = L::load(w + i * L::kSize), w1 = L::load(w + (i + 16) * L::kSize);
                for (int t = 0; t < NT; ++t) {
                    acc0[t] = _mm512_fmadd_ps(w0, L::load(a[t].q + i * L::kSize), acc0[t]);
                    acc1[t] = _mm512_fmadd_ps(w1, L::load(a[t].q + (i + 16) * L::kSize), acc1[t]);
                }
            }
            for (int t = 0; t < NT; ++t) {
                float s = hsum16(_mm512_add_ps(acc0[t], acc1[t]));
                for (int64_t i = n32; i < n; ++i) s += L::one(w + i * L::kSize) * L::one(a[t].q + i * L::kSize);
                out[t] = s;
            }
        }
    };
    static void dot(int64_t n, const uint8_t* w, const ActRow* a, int nt, float* out) { by_nt<K>(n, w, a, nt, out); }
};

// ------------------------------------------------------------------------- 32-value blocks, four per zmm

/// 16 float lanes -> 8 (lane i + lane i+8).
inline __m256 fold8(__m512 v) { return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)); }

/// The 16 nibble bytes of four consecutive blocks (qs of block k at qs0 + k * stride) as
/// [b0 | b1 | b2 | b3] values 0-15 (low nibbles) and values 16-31 (high nibbles): the Half16 order.
inline void nibbles_quad(const uint8_t* qs0, size_t stride, __m512i& lo, __m512i& hi) {
    __m512i z = _mm512_castsi128_si512(load128(qs0));
    z = _mm512_inserti32x4(z, load128(qs0 + stride), 1);
    z = _mm512_inserti32x4(z, load128(qs0 + 2 * stride), 2);
    z = _mm512_inserti32x4(z, load128(qs0 + 3 * stride), 3);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    lo = _mm512_and_si512(z, m4);
    hi = _mm512_and_si512(_mm512_srli_epi16(z, 4), m4);
}

/// [f16(p) x4 | f16(p + stride) x4 | f16(p + 2 stride) x4 | f16(p + 3 stride) x4] as f32.
inline __m512 f16_quad(const uint8_t* p, size_t stride) {
    const uint64_t v = static_cast<uint64_t>(load_u16(p)) | static_cast<uint64_t>(load_u16(p + stride)) << 16 |
                       static_cast<uint64_t>(load_u16(p + 2 * stride)) << 32 |
                       static_cast<uint64_t>(load_u16(p + 3 * stride)) << 48;
    const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    return _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(v)))));
}

/// The fp16 field at byte `kOff` of four consecutive kBytes-byte blocks from x0, as
/// [f0 x4 | f1 x4 | f2 x4 | f3 x4] f32: one 64-byte load, vpshufb takes block k's two bytes
/// from 128-bit lane k into every dword of it, vpmovdw packs, vcvtph2ps (for blocks of 18 and
/// 20 bytes, whose fields fall into lane k: checked at compile time).
template <size_t kBytes, size_t kOff>
inline __m512 f16_quad_lanes(const uint8_t* x0) {
    static_assert(3 * kBytes + kOff + 2 <= 64);
    static_assert((kBytes + kOff) / 16 == 1 && (2 * kBytes + kOff) / 16 == 2 && (3 * kBytes + kOff) / 16 == 3);
    static_assert(kOff % 16 <= 14 && (kBytes + kOff) % 16 <= 14 && (2 * kBytes + kOff) % 16 <= 14 && (3 * kBytes + kOff) % 16 <= 14);
    alignas(64) static constexpr struct Ctl {
        uint8_t v[64];
        constexpr Ctl() : v{} {
            for (int k = 0; k < 4; ++k)
                for (int j = 0; j < 16; ++j) {
                    const int b = static_cast<int>((k * kBytes + kOff) % 16);
                    v[16 * k + j] = static_cast<uint8_t>(j % 4 == 0 ? b : j % 4 == 1 ? b + 1 : 0x80);
                }
        }
    } ctl{};
    const __m512i d = _mm512_shuffle_epi8(_mm512_loadu_si512(x0), _mm512_load_si512(ctl.v));
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d));
}

/// MXFP4: the E8M0 bytes of four blocks (byte 17k: lane k, byte k) minus 128 as f32 exponents
/// [e0 - 128 x4 | ...], for vscalefps: dy * 2^(e - 128) is the same single rounding as
/// dy * e8m0_half(e), since the power of two is exact.
inline __m512 e8m0_quad_exponents(const uint8_t* x0) {
    alignas(64) static constexpr struct Ctl {
        uint8_t v[64];
        constexpr Ctl() : v{} {
            for (int k = 0; k < 4; ++k)
                for (int j = 0; j < 16; ++j) v[16 * k + j] = static_cast<uint8_t>(j % 4 == 0 ? k : 0x80);
        }
    } ctl{};
    const __m512i e = _mm512_shuffle_epi8(_mm512_loadu_si512(x0), _mm512_load_si512(ctl.v));
    return _mm512_sub_ps(_mm512_cvtepi32_ps(e), _mm512_set1_ps(128.f));
}

/// Q5's fifth bits of four blocks (qh at qh0 + k * stride) added as 16 to the quad's nibbles.
inline void q5_high_quad(const uint8_t* qh0, size_t stride, __m512i& lo, __m512i& hi) {
    uint32_t h[4];
    for (int k = 0; k < 4; ++k) std::memcpy(&h[k], qh0 + k * stride, 4);
    const __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
    // lane k: bytes 4k, 4k+1 of qh (values 0-15) for lo, bytes 4k+2, 4k+3 (values 16-31) for hi
    const __m512i sel_lo = _mm512_set_epi64(0x0d0d0d0d0d0d0d0d, 0x0c0c0c0c0c0c0c0c, 0x0909090909090909, 0x0808080808080808,
                                            0x0505050505050505, 0x0404040404040404, 0x0101010101010101, 0x0000000000000000);
    const __m512i sel_hi = _mm512_set_epi64(0x0f0f0f0f0f0f0f0f, 0x0e0e0e0e0e0e0e0e, 0x0b0b0b0b0b0b0b0b, 0x0a0a0a0a0a0a0a0a,
                                            0x0707070707070707, 0x0606060606060606, 0x0303030303030303, 0x0202020202020202);
    const __m512i bit = _mm512_set1_epi64(static_cast<long long>(0x8040201008040201ull));
    const __m512i b16 = _mm512_set1_epi8(0x10);
    lo = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(_mm512_shuffle_epi8(v, sel_lo), bit), lo, b16);
    hi = _mm512_mask_add_epi8(hi, _mm512_test_epi8_mask(_mm512_shuffle_epi8(v, sel_hi), bit), hi, b16);
}

inline __m512i lut512(const Lut16& t) { return _mm512_broadcast_i32x4(load128(t.v)); }

/// quad(x0, lo, hi): four blocks from x0 (kBytes apart) as unsigned bytes (value + offset) in the
/// Half16 order; scale4(x0): [d0 x4 | d1 x4 | d2 x4 | d3 x4] (kScalef: their exponents, see
/// e8m0_quad_exponents); min4(x0) (kMin): the same for m.
struct Quad4Mxfp4 : DecMxfp4 {
    __m512i tbl4 = lut512(kLutMxfp4U);
    void quad(const uint8_t* x0, __m512i& lo, __m512i& hi) const {
        nibbles_quad(x0 + 1, kBytes, lo, hi);
        lo = _mm512_shuffle_epi8(tbl4, lo);
        hi = _mm512_shuffle_epi8(tbl4, hi);
    }
    static constexpr bool kScalef = true;  // scale4: exponents (vscalefps), not factors
    __m512 scale4(const uint8_t* x0) const { return e8m0_quad_exponents(x0); }
    __m512 min4(const uint8_t*) const { return _mm512_setzero_ps(); }
};
struct Quad4Iq4Nl : DecIq4Nl {
    static constexpr bool kScalef = false;
    __m512i tbl4 = lut512(kLutIq4nlU);
    void quad(const uint8_t* x0, __m512i& lo, __m512i& hi) const {
        nibbles_quad(x0 + 2, kBytes, lo, hi);
        lo = _mm512_shuffle_epi8(tbl4, lo);
        hi = _mm512_shuffle_epi8(tbl4, hi);
    }
    __m512 scale4(const uint8_t* x0) const { return f16_quad_lanes<kBytes, 0>(x0); }
    __m512 min4(const uint8_t*) const { return _mm512_setzero_ps(); }
};
struct Quad4Q4_0 : DecQ4_0 {
    static constexpr bool kScalef = false;
    void quad(const uint8_t* x0, __m512i& lo, __m512i& hi) const { nibbles_quad(x0 + 2, kBytes, lo, hi); }
    __m512 scale4(const uint8_t* x0) const { return f16_quad_lanes<kBytes, 0>(x0); }
    __m512 min4(const uint8_t*) const { return _mm512_setzero_ps(); }
};
struct Quad4Q4_1 : DecQ4_1 {
    static constexpr bool kScalef = false;
    void quad(const uint8_t* x0, __m512i& lo, __m512i& hi) const { nibbles_quad(x0 + 4, kBytes, lo, hi); }
    __m512 scale4(const uint8_t* x0) const { return f16_quad_lanes<kBytes, 0>(x0); }
    __m512 min4(const uint8_t* x0) const { return f16_quad_lanes<kBytes, 2>(x0); }
};
struct Quad4Q5_0 : DecQ5_0 {
    static constexpr bool kScalef = false;
    void quad(const uint8_t* x0, __m512i& lo, __m512i& hi) const {
        nibbles_quad(x0 + 6, kBytes, lo, hi);
        q5_high_quad(x0 + 2, kBytes, lo, hi);
    }
    __m512 scale4(const uint8_t* x0) const { return f16_quad(x0, kBytes); }
    __m512 min4(const uint8_t*) const { return _mm512_setzero_ps(); }
};
struct Quad4Q5_1 : DecQ5_1 {
    static constexpr bool kScalef = false;
    void quad(const uint8_t* x0, __m512i& lo, __m512i& hi) const {
        nibbles_quad(x0 + 8, kBytes, lo, hi);
        q5_high_quad(x0 + 4, kBytes, lo, hi);
    }
    __m512 scale4(const uint8_t* x0) const { return f16_quad(x0, kBytes); }
    __m512 min4(const uint8_t* x0) const { return f16_quad(x0 + 2, kBytes); }
};

/// 32-value weight blocks x Q8_0/Q8_1, four blocks per zmm: unsigned weights (value + offset) by
/// vpdpbusd into int32 lanes that start from the activations' offset correction, int32 -> float,
/// times [dw_k * dy_k] per block (dy from the per-lane dx), plus m_k * s_k for Q4_1/Q5_1. The
/// last one to three blocks go through the 256-bit pair code (simd_x86.h, VNNI).
template <class Dec, int NT>
struct Quads32 {
    static void run(int64_t n, const uint8_t* w, const ActRow* a, float* out) {
        const Dec dec{};
        __m512 acc[NT];
        __m256 acc2[NT];
        for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps(), acc2[t] = _mm256_setzero_ps();
        const int64_t nb = n / 32;
        int64_t ib = 0;
        for (; ib + 4 <= nb; ib += 4) {
            const uint8_t* x0 = w + ib * Dec::kBytes;
            prefetch_w(x0);
            prefetch_w(x0 + 64);
            __m512i lo, hi;
            dec.quad(x0, lo, hi);
            const __m512 ws = dec.scale4(x0);
            const __m512 wm = Dec::kMin ? dec.min4(x0) : _mm512_setzero_ps();
            for (int t = 0; t < NT; ++t) {
                const int8_t* y = a[t].img + ib * 32;  // the quad's 128 image bytes
                __m512i p = Dec::kCorr ? _mm512_load_si512(a[t].corr + 4 * ib) : _mm512_setzero_si512();
                p = _mm512_dpbusd_epi32(p, lo, _mm512_load_si512(y));
                p = _mm512_dpbusd_epi32(p, hi, _mm512_load_si512(y + 64));
                const __m512 dy = _mm512_load_ps(a[t].dx + 4 * ib);
                const __m512 d = Dec::kScalef ? _mm512_scalef_ps(dy, ws) : _mm512_mul_ps(ws, dy);
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), d, acc[t]);
                if constexpr (Dec::kMin) acc[t] = _mm512_fmadd_ps(wm, _mm512_load_ps(a[t].sx + 4 * ib), acc[t]);
            }
        }
        if (ib < nb) pairs_from<Dec, NT>(dec, ib, nb, w, a, acc2);
        for (int t = 0; t < NT; ++t) out[t] = hsum8(_mm256_add_ps(fold8(acc[t]), acc2[t]));
    }
};

template <class Dec>
struct Quads {
    template <int NT>
    struct K : Quads32<Dec, NT> {};
    static void dot(int64_t n, const uint8_t* w, const ActRow* a, int nt, float* out) { by_nt<K>(n, w, a, nt, out); }
};

/// Q8_0 weights, two blocks per zmm: w + 128 (vpxor) by vpdpbusd from the activations' corr, times
/// [dw0 * dy0 x8 | dw1 * dy1 x8]; an odd last block through the 256-bit step.
template <int NT>
struct Q8_0x2 {
    static void run(int64_t n, const uint8_t* w, const ActRow* a, float* out) {
        __m512 acc[NT];
        __m256 acc2[NT];
        for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps(), acc2[t] = _mm256_setzero_ps();
        const int64_t nb = n / 32;
        const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
        int64_t ib = 0;
        for (; ib + 2 <= nb; ib += 2) {
            const uint8_t* x0 = w + ib * 34;
            prefetch_w(x0);
            const __m512i wq = _mm512_inserti64x4(_mm512_castsi256_si512(load256(x0 + 2)), load256(x0 + 36), 1);
            const __m512i wu = _mm512_xor_si512(wq, flip);
            const __m512 ws = _mm512_insertf32x8(_mm512_set1_ps(h2f(x0)), _mm256_set1_ps(h2f(x0 + 34)), 1);
            for (int t = 0; t < NT; ++t) {
                const __m512i p = _mm512_dpbusd_epi32(_mm512_load_si512(a[t].corr + 8 * ib), wu,
                                                      _mm512_load_si512(a[t].img + 32 * ib));
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(ws, _mm512_load_ps(a[t].dx + 8 * ib)), acc[t]);
            }
        }
        if (ib < nb) q8_0_block<NT>(w + ib * 34, ib, a, acc2);
        for (int t = 0; t < NT; ++t) out[t] = hsum8(_mm256_add_ps(fold8(acc[t]), acc2[t]));
    }
};

/// acc += w * v, 16 F16 values per step, the rest through a masked step.
void axpy_f16_avx512(int64_t n, float w, const uint16_t* v, float* acc) {
    const __m512 wv = _mm512_set1_ps(w);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i)));
        _mm512_storeu_ps(acc + i, _mm512_fmadd_ps(wv, x, _mm512_loadu_ps(acc + i)));
    }
    if (i < n) {
        const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
        const __m512 x = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, v + i));
        _mm512_mask_storeu_ps(acc + i, m, _mm512_fmadd_ps(wv, x, _mm512_maskz_loadu_ps(m, acc + i)));
    }
}

}  // namespace

void fill_avx512(Table& t) {
    t.axpy_f16 = axpy_f16_avx512;
    t.dot[static_cast<int>(GgmlType::Q8_0)] = dot_nt<Q8_0x2>;
    t.dot[static_cast<int>(GgmlType::Q4_0)] = Quads<Quad4Q4_0>::dot;
    t.dot[static_cast<int>(GgmlType::Q4_1)] = Quads<Quad4Q4_1>::dot;
    t.dot[static_cast<int>(GgmlType::Q5_0)] = Quads<Quad4Q5_0>::dot;
    t.dot[static_cast<int>(GgmlType::Q5_1)] = Quads<Quad4Q5_1>::dot;
    t.dot[static_cast<int>(GgmlType::MXFP4)] = Quads<Quad4Mxfp4>::dot;
    t.dot[static_cast<int>(GgmlType::IQ4_NL)] = Quads<Quad4Iq4Nl>::dot;
    t.dot[static_cast<int>(GgmlType::F32)] = FloatDot<LdF32>::dot;
    t.dot[static_cast<int>(GgmlType::F16)] = FloatDot<LdF16>::dot;
    t.dot[static_cast<int>(GgmlType::BF16)] = FloatDot<LdBF16>::dot;
}

}  // namespace nitro::cpu::kernels
