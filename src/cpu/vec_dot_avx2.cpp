// AVX2 + FMA + F16C kernels (compiled with -mavx2 -mfma -mf16c; chosen at run time by matmul.cpp
// only on CPUs that have them): the 32-value block formats (MXFP4, IQ4_NL, Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0) as tile kernels (tile_avx2.h), and F16, BF16, F32 (one row and 1..4 tokens per call). The
// K-quants and IQ4_XS are in kquants_avx2.cpp. vec_dot_avxvnni.cpp compiles this file again with
// -mavxvnni and NITRO_SIMD_VNNI 1: the tile kernels of the AVX-VNNI level (fill_avxvnni).
//
// Half h of a group is blocks 8h..8h+7. Their quants are loaded as four ymm holding blocks
// [8h + 2q, 8h + 2q + 1] in their 128-bit lanes (q = 0..3); a 4x4 dword transpose inside both
// lanes turns them into slices whose dword lane j = 4L + q is block 8h + 2q + L (the AVX-512 lane
// order, kernels.h). The per-block fields come from 32-byte loads of the same block pairs, whose
// fields vpshufb moves into dword q of each lane.
#ifndef NITRO_SIMD_VNNI
#define NITRO_SIMD_VNNI 0
#endif
#include "cpu/tile_avx2.h"

#include <cmath>

namespace nitro::cpu::kernels {
namespace {

#if !NITRO_SIMD_VNNI  // the float kernels: AVX2 only (the AVX-VNNI table keeps them)
// ------------------------------------------------------------------------- float types

/// Loads 8 weights/activations of a float type as f32.
struct LdF32 {
    static __m256 load(const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
    static float one(const uint8_t* p) { return load_f32(p); }
    static constexpr int kSize = 4;
};
struct LdF16 {
    static __m256 load(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
    static float one(const uint8_t* p) { return h2f(p); }
    static constexpr int kSize = 2;
};
struct LdBF16 {
    static __m256 load(const uint8_t* p) {
        const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    }
    static float one(const uint8_t* p) { return bf16_to_f32_bits(load_u16(p)); }
    static constexpr int kSize = 2;
    static float bf16_to_f32_bits(uint16_t h) {
        const uint32_t u = static_cast<uint32_t>(h) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    }
};

/// Two 8-lane accumulators per token (16 values per step), tail (n % 16) added in order at the end.
/// Tried and removed (docs/cpu-kernels.md, 2026-12-04): the activations kept as f32 (half the
/// conversions, twice the activation bytes through L1: F16 projections 1.3x slower on the 2-core
/// AVX2 VM) and four accumulators (3-4 tokens in two passes: the weights converted twice).
template <class L>
struct FloatDot {
    template <int NT>
    struct K {
        static void run(int64_t n, const uint8_t* w, const ActRow* a, float* out) {
            __m256 acc0[NT], acc1[NT];
            for (int t = 0; t < NT; ++t) acc0[t] = acc1[t] = _mm256_setzero_ps();
            const int64_t n16 = n - n % 16;
            for (int64_t i = 0; i < n16; i += 16) {
                if (L::kSize == 4 || (i & 16) == 0) prefetch_w(w + i * L::kSize);
                const __m256 w0 = L::load(w + i * L::kSize), w1 = L::load(w + (i + 8) * L::kSize);
                for (int t = 0; t < NT; ++t) {
                    acc0[t] = _mm256_fmadd_ps(w0, L::load(a[t].q + i * L::kSize), acc0[t]);
                    acc1[t] = _mm256_fmadd_ps(w1, L::load(a[t].q + (i + 8) * L::kSize), acc1[t]);
                }
            }
            for (int t = 0; t < NT; ++t) {
                float s = hsum8(_mm256_add_ps(acc0[t], acc1[t]));
                for (int64_t i = n16; i < n; ++i) s += L::one(w + i * L::kSize) * L::one(a[t].q + i * L::kSize);
                out[t] = s;
            }
        }
    };
    static void dot(int64_t n, const uint8_t* w, const ActRow* a, int nt, float* out) { by_nt<K>(n, w, a, nt, out); }
};

#endif

// ------------------------------------------------------------------------- 32-value blocks

/// Bytes [o, o + 16) of blocks b and b + 1 (kB bytes each) in the two 128-bit lanes.
template <int kB>
__attribute__((always_inline)) inline __m256i pair16(const uint8_t* x, int64_t b, int o) {
    return _mm256_set_m128i(load128(x + (b + 1) * kB + o), load128(x + b * kB + o));
}

/// The field described by the controls `ctl` of four block pairs Z[q], as dwords in lane order.
template <class Ctl>
__attribute__((always_inline)) inline __m256i gather_fields(const __m256i Z[4]) {
    static constexpr Ctl ctl{};
    __m256i r = _mm256_setzero_si256();
    for (int q = 0; q < 4; ++q)
        r = _mm256_or_si256(r, _mm256_shuffle_epi8(Z[q], _mm256_load_si256(reinterpret_cast<const __m256i*>(ctl.v[q]))));
    return r;
}

/// Q5's fifth bits: qh (32 bits per block, bit j = value j) per lane; adds 16 to value 4s + k of
/// slice s where bit 4s + k is set.
__attribute__((always_inline)) inline void add_fifth_bits(__m256i qh, __m256i* w) {
    const __m256i b16 = _mm256_set1_epi8(0x10);
    const __m256i spread = _mm256_set_epi32(0x0C0C0C0C, 0x08080808, 0x04040404, 0, 0x0C0C0C0C, 0x08080808, 0x04040404, 0);
    for (int s = 0; s < 8; ++s) {
        // byte s / 2 of every dword into its four bytes, then bit 4 (s % 2) + k of byte k
        const __m256i h = _mm256_shuffle_epi8(qh, _mm256_add_epi8(spread, _mm256_set1_epi8(static_cast<char>(s / 2))));
        const __m256i bits = _mm256_set1_epi32(static_cast<int>(0x08040201u << (4 * (s % 2))));
        w[s] = _mm256_or_si256(w[s], _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, bits), bits), b16));
    }
}

/// The nibble formats (see vec_dot_avx512.cpp Nib32): 16 quant bytes per block at kQs, an fp16
/// scale d at byte 0 (MXFP4: E8M0), an fp16 min at byte 2 (Q4_1, Q5_1), Q5's qh at kQh.
/// kLut: 0 none, 1 MXFP4 (+ 12, unsigned), 2 IQ4_NL (signed: the sign trick; AVX-VNNI: + 128, unsigned).
template <int kB_, int kQs, int kQh, bool kMin_, bool kCorr_, int kLut, int kSum16_>
struct Nib32 {
    static constexpr ActOrder kOrder = ActOrder::Slices32;
    static constexpr int kSlices = 8, kSub = 32, kUnitSubs = 1, kSum16 = kSum16_;
    static constexpr int64_t kGroupBytes = 16 * kB_, kUnitBytes = kB_;
    static constexpr bool kSigned = kLut == 2 && !NITRO_SIMD_VNNI;
    static constexpr bool kCorr = kCorr_ || (kLut == 2 && NITRO_SIMD_VNNI), kMin = kMin_;
    __attribute__((always_inline)) static void decode(const uint8_t* x, int h, W8<8>& t) {
        const uint8_t* xb = x + 8 * h * kB_;
        __m256i Q[4], T[4];
        for (int q = 0; q < 4; ++q) Q[q] = pair16<kB_>(xb, 2 * q, kQs);
        transpose4(Q, T);
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        for (int m = 0; m < 4; ++m) {
            __m256i lo = _mm256_and_si256(T[m], m4), hi = _mm256_and_si256(_mm256_srli_epi16(T[m], 4), m4);
            if constexpr (kLut != 0) {
                const __m256i tbl = _mm256_broadcastsi128_si256(load128(kLut == 1 ? kLutMxfp4U.v
                                                                        : kSigned ? kLutIq4nlS.v
                                                                                  : kLutIq4nlU.v));
                lo = _mm256_shuffle_epi8(tbl, lo);
                hi = _mm256_shuffle_epi8(tbl, hi);
            }
            if constexpr (kSigned) {
                t.sg[m] = lo;
                t.sg[4 + m] = hi;
                lo = _mm256_sign_epi8(lo, lo);
                hi = _mm256_sign_epi8(hi, hi);
            }
            t.w[m] = lo;
            t.w[4 + m] = hi;
        }
        __m256i Z[4];
        for (int q = 0; q < 4; ++q) Z[q] = load256(xb + 2 * q * kB_);
        if constexpr (kQh != 0) add_fifth_bits(gather_fields<BlockPairCtl<kB_, kQh, 4>>(Z), t.w);
        if constexpr (kLut == 1) {
            // e8m0_half of the eight E8M0 bytes, by table (fewer vector operations than collecting
            // the bytes with vpshufb and building the floats): lane j = 4L + q is block 2q + L.
            const float* e = kE8m0Half.v;
            t.ws = _mm256_setr_ps(e[xb[0]], e[xb[2 * kB_]], e[xb[4 * kB_]], e[xb[6 * kB_]], e[xb[kB_]], e[xb[3 * kB_]],
                                  e[xb[5 * kB_]], e[xb[7 * kB_]]);
        } else {
            t.ws = f16_dwords(gather_fields<BlockPairCtl<kB_, 0, 2>>(Z));
        }
        if constexpr (kMin_) t.wm = f16_dwords(gather_fields<BlockPairCtl<kB_, 2, 2>>(Z));
    }
};
// kSum16: int16 sums of kSum16 slices stay below 2^15 (MXFP4 + 12 <= 24: 4; nibbles <= 15: 8; Q5 <= 31: 4).
using DecMxfp4 = Nib32<17, 1, 0, false, true, 1, 4>;
using DecIq4Nl = Nib32<18, 2, 0, false, false, 2, 1>;
using DecQ4_0 = Nib32<18, 2, 0, false, true, 0, 8>;
using DecQ4_1 = Nib32<20, 4, 0, true, false, 0, 8>;
using DecQ5_0 = Nib32<22, 6, 2, false, true, 0, 4>;
using DecQ5_1 = Nib32<24, 8, 4, true, false, 0, 4>;

/// Q8_0 (34 bytes: d, qs[32]): slices of each 16-byte half of the quants (signed, sign trick;
/// AVX-VNNI: + 128, unsigned); d from [16 bytes of block b | of block b + 1].
struct DecQ8_0 {
    static constexpr ActOrder kOrder = ActOrder::Slices32;
    static constexpr int kSlices = 8, kSub = 32, kUnitSubs = 1;
    // kSum16 and kCorr are read only on the unsigned paths (the AVX-VNNI build): unused here in AVX2
    [[maybe_unused]] static constexpr int kSum16 = 1;
    static constexpr int64_t kGroupBytes = 16 * 34, kUnitBytes = 34;
    static constexpr bool kSigned = !NITRO_SIMD_VNNI, kMin = false;
    [[maybe_unused]] static constexpr bool kCorr = !kSigned;
    __attribute__((always_inline)) static void decode(const uint8_t* x, int h, W8<8>& t) {
        const uint8_t* xb = x + 8 * h * 34;
        const __m256i b128 = _mm256_set1_epi8(static_cast<char>(0x80));
        for (int u = 0; u < 2; ++u) {
            __m256i Q[4], T[4];
            for (int q = 0; q < 4; ++q) Q[q] = pair16<34>(xb, 2 * q, 2 + 16 * u);
            transpose4(Q, T);
            for (int m = 0; m < 4; ++m) {
                if constexpr (kSigned) {
                    t.sg[4 * u + m] = T[m];
                    t.w[4 * u + m] = _mm256_sign_epi8(T[m], T[m]);
                } else {
                    t.w[4 * u + m] = _mm256_xor_si256(T[m], b128);  // value + 128
                }
            }
        }
        __m256i Z[4];
        for (int q = 0; q < 4; ++q) Z[q] = pair16<34>(xb, 2 * q, 0);
        t.ws = f16_dwords(gather_fields<PairFieldCtl<0, 0, 2>>(Z));
    }
};

template <class D>
void tile_kernel(const TileArgs& a) { Tile256<D>::run(a); }

#if !NITRO_SIMD_VNNI
/// acc += w * v, 8 F16 values per step (F16C + FMA), tail one by one.
void axpy_f16_avx2(int64_t n, float w, const uint16_t* v, float* acc) {
    const __m256 wv = _mm256_set1_ps(w);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + i)));
        _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(wv, x, _mm256_loadu_ps(acc + i)));
    }
    for (; i < n; ++i) acc[i] = std::fma(w, h2f(reinterpret_cast<const uint8_t*>(v + i)), acc[i]);
}
#endif

}  // namespace

#if NITRO_VNNI_EMULATE
void fill_avxvnni_emulated(Table& t) {  // tests/isa/avxvnni_emulated_vec_dot.cpp: vpdpbusd emulated
#elif NITRO_SIMD_VNNI
void fill_avxvnni(Table& t) {  // vec_dot_avxvnni.cpp: the tile kernels with vpdpbusd
#else
void fill_avx2(Table& t) {
    t.axpy_f16 = axpy_f16_avx2;
    t.dot[static_cast<int>(GgmlType::F32)] = FloatDot<LdF32>::dot;
    t.dot[static_cast<int>(GgmlType::F16)] = FloatDot<LdF16>::dot;
    t.dot[static_cast<int>(GgmlType::BF16)] = FloatDot<LdBF16>::dot;
#endif
    t.tile[static_cast<int>(GgmlType::Q8_0)] = tile_kernel<DecQ8_0>;
    t.tile[static_cast<int>(GgmlType::Q4_0)] = tile_kernel<DecQ4_0>;
    t.tile[static_cast<int>(GgmlType::Q4_1)] = tile_kernel<DecQ4_1>;
    t.tile[static_cast<int>(GgmlType::Q5_0)] = tile_kernel<DecQ5_0>;
    t.tile[static_cast<int>(GgmlType::Q5_1)] = tile_kernel<DecQ5_1>;
    t.tile[static_cast<int>(GgmlType::MXFP4)] = tile_kernel<DecMxfp4>;
    t.tile[static_cast<int>(GgmlType::IQ4_NL)] = tile_kernel<DecIq4Nl>;
}

}  // namespace nitro::cpu::kernels
