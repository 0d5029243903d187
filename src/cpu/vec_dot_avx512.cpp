// AVX-512 (F, BW, VL, DQ) + VNNI kernels (compiled with the matching -m flags; chosen at run time by
// matmul.cpp only on CPUs that have all of them): the 32-value block formats (MXFP4, IQ4_NL, Q4_0,
// Q4_1, Q5_0, Q5_1, Q8_0) as tile kernels (tile_avx512.h), and F16, BF16, F32 (512-bit FMA, one
// row and 1..4 tokens per call). The K-quants and IQ4_XS are in kquants_avx512.cpp.
//
// A group is 16 blocks. Their quants are loaded as four zmm "quads" holding blocks [2q, 2q + 1,
// 8 + 2q, 9 + 2q] in their 128-bit lanes (q = 0..3), and a 4x4 dword transpose inside every
// 128-bit lane turns them into slices: dword lane d = 4L + q of slice m is dword m of the block
// in lane L of quad q, i.e. block 8 (L / 2) + 2q + L % 2 = sub_of_lane(Slices32, d). The per-block
// fields (scales, mins, Q5's fifth bits) come from 32-byte loads of block pairs [2q, 2q + 1] and
// [8 + 2q, 9 + 2q], whose fields vpshufb moves into dword q of the same lanes.
#define NITRO_SIMD_VNNI 1
// GCC 12's own AVX-512 headers build some intrinsics (_mm512_cvtepu16_epi32, _mm512_slli_epi32,
// the 512->256 extracts) from an intentionally undefined vector, which -Wuninitialized reports at
// every inlining site; the warning is about the header, not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning group (clang warns that it does not know it)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "cpu/tile_avx512.h"

namespace nitro::cpu::kernels {
namespace {

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

// ------------------------------------------------------------------------- 32-value blocks

/// T[m] lane L dword q = Q[q] lane L dword m (a 4x4 dword transpose inside every 128-bit lane).
__attribute__((always_inline)) inline void transpose4(const __m512i Q[4], __m512i T[4]) {
    const __m512i t0 = _mm512_unpacklo_epi32(Q[0], Q[1]), t1 = _mm512_unpackhi_epi32(Q[0], Q[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(Q[2], Q[3]), t3 = _mm512_unpackhi_epi32(Q[2], Q[3]);
    T[0] = _mm512_unpacklo_epi64(t0, t2);
    T[1] = _mm512_unpackhi_epi64(t0, t2);
    T[2] = _mm512_unpacklo_epi64(t1, t3);
    T[3] = _mm512_unpackhi_epi64(t1, t3);
}

/// 16 bytes at byte `o` of blocks 2q, 2q + 1, 8 + 2q, 9 + 2q (kB bytes each) in the four 128-bit lanes.
template <int kB>
__attribute__((always_inline)) inline __m512i quad16(const uint8_t* x, int o, int q) {
    __m512i z = _mm512_castsi128_si512(load128(x + (2 * q) * kB + o));
    z = _mm512_inserti32x4(z, load128(x + (2 * q + 1) * kB + o), 1);
    z = _mm512_inserti32x4(z, load128(x + (8 + 2 * q) * kB + o), 2);
    return _mm512_inserti32x4(z, load128(x + (9 + 2 * q) * kB + o), 3);
}

/// [32 bytes from block 2q | 32 bytes from block 8 + 2q]: the fields of blocks 2q, 2q + 1 (lanes
/// 0, 1) and 8 + 2q, 9 + 2q (lanes 2, 3), for PairFieldCtl.
template <int kB>
__attribute__((always_inline)) inline __m512i pair_fields(const uint8_t* x, int q) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(load256(x + (2 * q) * kB)), load256(x + (8 + 2 * q) * kB), 1);
}

/// The kLen-byte field at byte kOff of the group's 16 blocks as dwords in lane order.
template <int kB, int kOff, int kLen>
__attribute__((always_inline)) inline __m512i gather_fields(const __m512i Z[4]) {
    static constexpr BlockPairCtl<kB, kOff, kLen> ctl{};
    __m512i r = _mm512_setzero_si512();
    for (int q = 0; q < 4; ++q)
        r = _mm512_or_si512(r, _mm512_shuffle_epi8(Z[q], _mm512_broadcast_i64x4(_mm256_load_si256(
                                                             reinterpret_cast<const __m256i*>(ctl.v[q])))));
    return r;
}

/// fp16 values in the low half of each dword -> f32.
inline __m512 f16_dwords(__m512i v) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v)); }

/// Q5's fifth bits: qh (32 bits per block, bit j = value j) per lane; adds 16 to value 4s + k of
/// slice s where bit 4s + k is set.
__attribute__((always_inline)) inline void add_fifth_bits(__m512i qh, __m512i* w) {
    const __m512i b16 = _mm512_set1_epi8(0x10);
    for (int s = 0; s < 8; ++s) {
        // byte s / 2 of every dword into its four bytes, then bit 4 (s % 2) + k of byte k
        const __m512i ctl = _mm512_add_epi8(_mm512_set1_epi8(static_cast<char>(s / 2)),
                                            _mm512_set_epi32(0x0C0C0C0C, 0x08080808, 0x04040404, 0x00000000, 0x0C0C0C0C, 0x08080808,
                                                             0x04040404, 0x00000000, 0x0C0C0C0C, 0x08080808, 0x04040404, 0x00000000,
                                                             0x0C0C0C0C, 0x08080808, 0x04040404, 0x00000000));
        const __m512i h = _mm512_shuffle_epi8(qh, ctl);
        const __m512i bits = _mm512_set1_epi32(static_cast<int>(0x08040201u << (4 * (s % 2))));
        w[s] = _mm512_mask_add_epi8(w[s], _mm512_test_epi8_mask(h, bits), w[s], b16);
    }
}

/// The nibble formats: 16 quant bytes per block at kQs (value j in the low nibble of byte j, value
/// j + 16 in the high one), optional vpshufb table (value + offset), an fp16 scale d at byte 0 (or
/// MXFP4's E8M0 byte), an fp16 min at byte 2 (Q4_1, Q5_1), Q5's 32-bit qh at kQh.
template <int kB_, int kQs, int kQh, bool kMin_, bool kCorr_, int kLut /* 0 none, 1 MXFP4, 2 IQ4_NL */>
struct Nib32 {
    static constexpr ActOrder kOrder = ActOrder::Slices32;
    static constexpr int kSlices = 8, kSub = 32, kUnitSubs = 1;
    static constexpr int64_t kGroupBytes = 16 * kB_, kUnitBytes = kB_;
    static constexpr bool kCorr = kCorr_, kMin = kMin_, kScalef = kLut == 1;
    __attribute__((always_inline)) static void decode(const uint8_t* x, W16<8>& t) {
        __m512i Q[4], T[4];
        for (int q = 0; q < 4; ++q) Q[q] = quad16<kB_>(x, kQs, q);
        transpose4(Q, T);
        const __m512i m4 = _mm512_set1_epi8(0x0F);
        for (int m = 0; m < 4; ++m) {
            __m512i lo = _mm512_and_si512(T[m], m4), hi = _mm512_and_si512(_mm512_srli_epi16(T[m], 4), m4);
            if constexpr (kLut != 0) {
                const __m512i tbl = _mm512_broadcast_i32x4(load128(kLut == 1 ? kLutMxfp4U.v : kLutIq4nlU.v));
                lo = _mm512_shuffle_epi8(tbl, lo);
                hi = _mm512_shuffle_epi8(tbl, hi);
            }
            t.w[m] = lo;
            t.w[4 + m] = hi;
        }
        __m512i Z[4];
        for (int q = 0; q < 4; ++q) Z[q] = pair_fields<kB_>(x, q);
        if constexpr (kQh != 0) add_fifth_bits(gather_fields<kB_, kQh, 4>(Z), t.w);
        if constexpr (kLut == 1) {
            t.ws = _mm512_sub_ps(_mm512_cvtepi32_ps(gather_fields<kB_, 0, 1>(Z)), _mm512_set1_ps(128.f));
        } else {
            t.ws = f16_dwords(gather_fields<kB_, 0, 2>(Z));
        }
        if constexpr (kMin_) t.wm = f16_dwords(gather_fields<kB_, 2, 2>(Z));
    }
};
using DecMxfp4 = Nib32<17, 1, 0, false, true, 1>;
using DecIq4Nl = Nib32<18, 2, 0, false, true, 2>;
using DecQ4_0 = Nib32<18, 2, 0, false, true, 0>;
using DecQ4_1 = Nib32<20, 4, 0, true, false, 0>;
using DecQ5_0 = Nib32<22, 6, 2, false, true, 0>;
using DecQ5_1 = Nib32<24, 8, 4, true, false, 0>;

/// Q8_0 (34 bytes: d, qs[32]): slices of the quads of each 16-byte half, + 128 (vpxor) for
/// vpdpbusd; d from 64-byte loads of block pairs, whose lanes 0 and 2 hold the two fields.
struct DecQ8_0 {
    static constexpr ActOrder kOrder = ActOrder::Slices32;
    static constexpr int kSlices = 8, kSub = 32, kUnitSubs = 1;
    static constexpr int64_t kGroupBytes = 16 * 34, kUnitBytes = 34;
    static constexpr bool kCorr = true, kMin = false, kScalef = false;
    __attribute__((always_inline)) static void decode(const uint8_t* x, W16<8>& t) {
        const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
        for (int u = 0; u < 2; ++u) {
            __m512i Q[4], T[4];
            for (int q = 0; q < 4; ++q) Q[q] = quad16<34>(x, 2 + 16 * u, q);
            transpose4(Q, T);
            for (int m = 0; m < 4; ++m) t.w[4 * u + m] = _mm512_xor_si512(T[m], flip);
        }
        // lane L of [block 2q (lane 0: d at byte 0), 2q + 1 (lane 2 of that load: d at byte 2),
        // 8 + 2q, 9 + 2q]; dword q <- bytes 0-1 (even L) or 2-3 (odd L)
        alignas(64) static constexpr struct Ctl {
            uint8_t v[4][64];
            constexpr Ctl() : v{} {
                for (int q = 0; q < 4; ++q)
                    for (int i = 0; i < 64; ++i) {
                        const int lane = i / 16, pos = i % 16, first = (lane % 2) * 2;
                        v[q][i] = pos / 4 == q && pos % 4 < 2 ? static_cast<uint8_t>(first + pos % 4) : 0x80;
                    }
            }
        } ctl{};
        __m512i d = _mm512_setzero_si512();
        for (int q = 0; q < 4; ++q) {
            const __m512i lo = _mm512_loadu_si512(x + (2 * q) * 34), hi = _mm512_loadu_si512(x + (8 + 2 * q) * 34);
            const __m512i z = _mm512_shuffle_i32x4(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
            d = _mm512_or_si512(d, _mm512_shuffle_epi8(z, _mm512_load_si512(ctl.v[q])));
        }
        t.ws = f16_dwords(d);
    }
};

template <class D>
void tile_kernel(const TileArgs& a) { Tile512<D>::run(a); }

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
    t.tile[static_cast<int>(GgmlType::Q8_0)] = tile_kernel<DecQ8_0>;
    t.tile[static_cast<int>(GgmlType::Q4_0)] = tile_kernel<DecQ4_0>;
    t.tile[static_cast<int>(GgmlType::Q4_1)] = tile_kernel<DecQ4_1>;
    t.tile[static_cast<int>(GgmlType::Q5_0)] = tile_kernel<DecQ5_0>;
    t.tile[static_cast<int>(GgmlType::Q5_1)] = tile_kernel<DecQ5_1>;
    t.tile[static_cast<int>(GgmlType::MXFP4)] = tile_kernel<DecMxfp4>;
    t.tile[static_cast<int>(GgmlType::IQ4_NL)] = tile_kernel<DecIq4Nl>;
    t.dot[static_cast<int>(GgmlType::F32)] = FloatDot<LdF32>::dot;
    t.dot[static_cast<int>(GgmlType::F16)] = FloatDot<LdF16>::dot;
    t.dot[static_cast<int>(GgmlType::BF16)] = FloatDot<LdBF16>::dot;
}

}  // namespace nitro::cpu::kernels
