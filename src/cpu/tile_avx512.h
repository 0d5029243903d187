// Internal to the AVX-512 kernel files (vec_dot_avx512.cpp, kquants_avx512.cpp): the tile driver
// every quantized type shares, over a per-type decoder of weight groups.
//
// A weight row is cut into groups of 16 sub-blocks (kernels.h ActOrder). A decoder D turns one
// group into `kSlices` zmm of unsigned bytes (value + the type's offset) in the slice layout of the
// activation image, and per lane (sub-block) its float scale `ws` (and `wm`, the min term). Per
// token, the group then costs kSlices vpdpbusd (starting from the activations' offset
// correction), so each int32 lane holds the exact integer dot of one sub-block, and three float
// operations for all 16 sub-blocks: acc += float(isum) * (ws * dy) (+ wm * sx). The float
// accumulator has one lane per sub-block position; lane d sums its sub-blocks group by group in
// row order, and a row's result is hsum16(acc). A last partial group updates only the lanes of its
// real sub-blocks (256-bit operations when they are <= 8); its other lanes are decoded from the
// bytes after the row (or a zero-padded copy at the end of the readable weights) and dropped.
//
// Decoder D provides: kOrder (the ActOrder), kSlices (8 or 4), kSub (32 or 16 values per sub-block), kGroupBytes (weight
// bytes of 16 sub-blocks), kUnitBytes / kUnitSubs (the smallest whole unit of the row: a block or
// a super-block, and its sub-blocks), kCorr (activations carry corr), kMin, kScalef (ws holds
// exponents for vscalefps: MXFP4), and static void decode(const uint8_t* group, W16<kSlices>&),
// which reads only the group's bytes.
//
// The tile kernel runs rows in blocks of kRowBlock with an L1 buffer of accumulators [row][token],
// groups outer, two rows decoded at a time: the block's activations for a group stay in L1 and each
// activation slice loaded serves both rows. One token alone takes the row kernel (accumulator in a
// register). Both do, per token and lane, the same operations in the same order.
#pragma once

#include "cpu/simd_x86.h"

namespace nitro::cpu::kernels {
namespace {

/// One decoded weight group.
template <int S>
struct W16 {
    __m512i w[S];
    __m512 ws, wm;
};

/// Sum of the 16 lanes in a fixed order.
inline float hsum16(__m512 v) { return hsum8(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1))); }

/// acc + group g of one token; only the lanes of mask k change (a last group's real sub-blocks).
template <class D>
__attribute__((always_inline)) inline __m512 consume(const W16<D::kSlices>& t, const ActRow& a, int64_t g, __m512 acc,
                                                     __mmask16 k = 0xFFFF) {
    __m512i p = D::kCorr ? _mm512_load_si512(a.corr + 16 * g) : _mm512_setzero_si512();
    const int8_t* y = a.img + g * (64 * D::kSlices);
    for (int s = 0; s < D::kSlices; ++s) p = _mm512_dpbusd_epi32(p, t.w[s], _mm512_load_si512(y + 64 * s));
    const __m512 dy = _mm512_load_ps(a.dx + 16 * g);
    const __m512 d = D::kScalef ? _mm512_scalef_ps(dy, t.ws) : _mm512_mul_ps(t.ws, dy);
    __m512 r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), d, acc);
    if constexpr (D::kMin) r = _mm512_fmadd_ps(t.wm, _mm512_load_ps(a.sx + 16 * g), r);
    return k == 0xFFFF ? r : _mm512_mask_blend_ps(k, acc, r);
}

/// The same for two rows and one token: each activation slice loaded once for both.
template <class D>
__attribute__((always_inline)) inline void consume2(const W16<D::kSlices>& t0, const W16<D::kSlices>& t1, const ActRow& a,
                                                    int64_t g, __m512& acc0, __m512& acc1) {
    __m512i p0 = D::kCorr ? _mm512_load_si512(a.corr + 16 * g) : _mm512_setzero_si512(), p1 = p0;
    const int8_t* y = a.img + g * (64 * D::kSlices);
    for (int s = 0; s < D::kSlices; ++s) {
        const __m512i ys = _mm512_load_si512(y + 64 * s);
        p0 = _mm512_dpbusd_epi32(p0, t0.w[s], ys);
        p1 = _mm512_dpbusd_epi32(p1, t1.w[s], ys);
    }
    const __m512 dy = _mm512_load_ps(a.dx + 16 * g);
    const __m512 d0 = D::kScalef ? _mm512_scalef_ps(dy, t0.ws) : _mm512_mul_ps(t0.ws, dy);
    const __m512 d1 = D::kScalef ? _mm512_scalef_ps(dy, t1.ws) : _mm512_mul_ps(t1.ws, dy);
    acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p0), d0, acc0);
    acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p1), d1, acc1);
    if constexpr (D::kMin) {
        const __m512 sx = _mm512_load_ps(a.sx + 16 * g);
        acc0 = _mm512_fmadd_ps(t0.wm, sx, acc0);
        acc1 = _mm512_fmadd_ps(t1.wm, sx, acc1);
    }
}

/// acc + a last group of <= 8 sub-blocks (lanes 0-7 of mask k; lanes 8-15 unchanged).
template <class D>
__attribute__((always_inline)) inline __m512 consume_half(const W16<D::kSlices>& t, const ActRow& a, int64_t g, __m512 acc,
                                                          __mmask16 k) {
    __m256i p = D::kCorr ? _mm256_load_si256(reinterpret_cast<const __m256i*>(a.corr + 16 * g)) : _mm256_setzero_si256();
    const int8_t* y = a.img + g * (64 * D::kSlices);
    for (int s = 0; s < D::kSlices; ++s)
        p = _mm256_dpbusd_epi32(p, _mm512_castsi512_si256(t.w[s]), _mm256_load_si256(reinterpret_cast<const __m256i*>(y + 64 * s)));
    const __m256 dy = _mm256_load_ps(a.dx + 16 * g), ws = _mm512_castps512_ps256(t.ws);
    const __m256 d = D::kScalef ? _mm256_scalef_ps(dy, ws) : _mm256_mul_ps(ws, dy);
    const __m256 old = _mm512_castps512_ps256(acc);
    __m256 lo = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), d, old);
    if constexpr (D::kMin) lo = _mm256_fmadd_ps(_mm512_castps512_ps256(t.wm), _mm256_load_ps(a.sx + 16 * g), lo);
    return _mm512_insertf32x8(acc, _mm256_mask_blend_ps(static_cast<__mmask8>(k), old, lo), 0);
}

/// A row's geometry: `full` whole groups, then a last group of `rem` sub-blocks (0: none), whose
/// lanes `mask` hold real sub-blocks: the rest of that group is decoded from whatever follows the
/// row (the next row, where the weights continue) or, at the end of the readable weights, from a
/// zero-padded copy of its `rem_bytes`; either way those lanes are left out of the accumulator.
template <class D>
struct Geometry {
    int64_t full, rem, rem_bytes, groups;
    __mmask16 mask = 0;
    explicit Geometry(int64_t n) {
        const int64_t nsub = n / D::kSub;
        full = nsub / 16;
        rem = nsub % 16;
        rem_bytes = rem / D::kUnitSubs * D::kUnitBytes;
        groups = full + (rem ? 1 : 0);
        for (int d = 0; d < 16; ++d)
            if (sub_of_lane(D::kOrder, d) < rem) mask = static_cast<__mmask16>(mask | (1u << d));
    }
};

/// Group g of the row at x: its bytes, or for a last group that would read past `end` a
/// zero-padded copy in `buf`. kAhead: prefetch g_prefetch_bytes ahead in the row (one row at a time).
template <class D, bool kAhead = false>
__attribute__((always_inline)) inline const uint8_t* group_ptr(const Geometry<D>& geo, const uint8_t* x, int64_t g,
                                                               const uint8_t* end, uint8_t* buf) {
    const uint8_t* p = x + g * D::kGroupBytes;
    if (g < geo.full) {
        if constexpr (kAhead) prefetch_group<D::kGroupBytes>(p);
        return p;
    }
    if (end - p >= D::kGroupBytes) return p;
    std::memcpy(buf, p, static_cast<size_t>(geo.rem_bytes));
    std::memset(buf + geo.rem_bytes, 0, static_cast<size_t>(D::kGroupBytes - geo.rem_bytes));
    return buf;
}

template <class D>
struct Tile512 {
    static constexpr int kRowBlock = 8;

    /// One token: each row with its accumulator in a register.
    static void rows1(const TileArgs& A) {
        const Geometry<D> geo(A.n);
        alignas(64) uint8_t buf[D::kGroupBytes + 64];
        const ActRow& a = A.a[0];
        W16<D::kSlices> t;
        for (int64_t r = 0; r < A.n_rows; ++r) {
            const uint8_t* x = A.w + r * static_cast<int64_t>(A.row_bytes);
            __m512 acc = _mm512_setzero_ps();
            for (int64_t g = 0; g < geo.full; ++g) {
                D::decode(group_ptr<D, true>(geo, x, g, A.w_end, buf), t);
                acc = consume<D>(t, a, g, acc);
            }
            if (geo.rem) {
                D::decode(group_ptr(geo, x, geo.full, A.w_end, buf), t);
                acc = geo.rem <= 8 ? consume_half<D>(t, a, geo.full, acc, geo.mask)
                                   : consume<D>(t, a, geo.full, acc, geo.mask);
            }
            A.out[r] = hsum16(acc);
        }
    }

    static void run(const TileArgs& A) {
        if (A.nt == 1) return rows1(A);
        const Geometry<D> geo(A.n);
        const int nt = A.nt;
        alignas(64) uint8_t buf[2][D::kGroupBytes + 64];
        alignas(64) float acc[kRowBlock][kMaxTokens][16];
        W16<D::kSlices> t0, t1;
        const bool half = geo.rem != 0 && geo.rem <= 8;
        for (int64_t r0 = 0; r0 < A.n_rows; r0 += kRowBlock) {
            const int nr = static_cast<int>(min_of<int64_t>(kRowBlock, A.n_rows - r0));
            for (int r = 0; r < nr; ++r)
                for (int k = 0; k < nt; ++k) _mm512_store_ps(acc[r][k], _mm512_setzero_ps());
            const uint8_t* x = A.w + r0 * static_cast<int64_t>(A.row_bytes);
            BlockPrefetch pf{x + nr * static_cast<int64_t>(A.row_bytes), x + 2 * nr * static_cast<int64_t>(A.row_bytes)};
            for (int64_t g = 0; g < geo.groups; ++g) {
                const bool last = g == geo.full, last_half = half && last;
                int r = 0;
                for (; r + 2 <= nr; r += 2) {
                    pf.step<2 * D::kGroupBytes>();
                    D::decode(group_ptr(geo, x + r * static_cast<int64_t>(A.row_bytes), g, A.w_end, buf[0]), t0);
                    D::decode(group_ptr(geo, x + (r + 1) * static_cast<int64_t>(A.row_bytes), g, A.w_end, buf[1]), t1);
                    for (int k = 0; k < nt; ++k) {
                        if (last_half) {
                            _mm512_store_ps(acc[r][k], consume_half<D>(t0, A.a[k], g, _mm512_load_ps(acc[r][k]), geo.mask));
                            _mm512_store_ps(acc[r + 1][k], consume_half<D>(t1, A.a[k], g, _mm512_load_ps(acc[r + 1][k]), geo.mask));
                        } else if (last) {
                            _mm512_store_ps(acc[r][k], consume<D>(t0, A.a[k], g, _mm512_load_ps(acc[r][k]), geo.mask));
                            _mm512_store_ps(acc[r + 1][k], consume<D>(t1, A.a[k], g, _mm512_load_ps(acc[r + 1][k]), geo.mask));
                        } else {
                            __m512 a0 = _mm512_load_ps(acc[r][k]), a1 = _mm512_load_ps(acc[r + 1][k]);
                            consume2<D>(t0, t1, A.a[k], g, a0, a1);
                            _mm512_store_ps(acc[r][k], a0);
                            _mm512_store_ps(acc[r + 1][k], a1);
                        }
                    }
                }
                if (r < nr) {
                    pf.step<D::kGroupBytes>();
                    D::decode(group_ptr(geo, x + r * static_cast<int64_t>(A.row_bytes), g, A.w_end, buf[0]), t0);
                    for (int k = 0; k < nt; ++k) {
                        const __m512 a0 = _mm512_load_ps(acc[r][k]);
                        _mm512_store_ps(acc[r][k], last_half ? consume_half<D>(t0, A.a[k], g, a0, geo.mask)
                                                             : consume<D>(t0, A.a[k], g, a0, last ? geo.mask : 0xFFFF));
                    }
                }
            }
            for (int r = 0; r < nr; ++r)
                for (int k = 0; k < nt; ++k) A.out[k * A.out_stride + r0 + r] = hsum16(_mm512_load_ps(acc[r][k]));
        }
    }
};

}  // namespace
}  // namespace nitro::cpu::kernels
