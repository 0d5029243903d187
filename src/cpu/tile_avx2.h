// Internal to the AVX2 kernel files (vec_dot_avx2.cpp, kquants_avx2.cpp): the tile driver every
// quantized type shares, over a per-type decoder of weight half-groups.
//
// The layout is that of the AVX-512 kernels (kernels.h ActOrder, tile_avx512.h), read in halves:
// half h of a group is sub-blocks 8h..8h+7, in ymm dword lanes (bytes 32h..32h+31 of every slice of
// the activation image). A decoder D turns one half into kSlices ymm of weight bytes and per lane
// its float scale ws (and wm). Per token, the half costs per slice one vpmaddubsw (u8 x s8 into
// int16 pairs) whose int16 results are added for up to kSum16 slices (as many as cannot overflow
// int16: kSum16 * 2 * max(w) * 127 < 2^15), then vpmaddwd by ones into the int32 lane; each lane
// then holds the exact integer dot of its sub-block (with the activations' corr for the types
// stored with an offset). Types whose weights reach 127 in magnitude (Q8_0, IQ4_NL, IQ4_XS) keep
// them signed and use the sign trick (|w| x sign(y, w), one vpmaddwd per slice). With AVX-VNNI
// (NITRO_SIMD_VNNI 1: the *_avxvnni.cpp files compile the AVX2 files again with -mavxvnni) every
// type is unsigned, value + offset as on AVX-512, and a slice costs one vpdpbusd. The float part is
// acc += float(isum) * (ws * dy) (+ wm * sx) on 8 lanes; a row's result is hsum8(acc), lane j
// summing its sub-blocks half by half in row order.
//
// Decoder D provides: kOrder, kSlices, kSub, kGroupBytes, kUnitBytes, kUnitSubs, kCorr, kMin (as in
// tile_avx512.h), kSigned, kSum16, and static void decode(const uint8_t* group, int h, W8<kSlices>&).
#pragma once

#include "cpu/simd_x86.h"

namespace nitro::cpu::kernels {
namespace {

/// One decoded half-group: w (unsigned, or |w| for kSigned types), sg (kSigned: the signed values).
template <int S>
struct W8 {
    __m256i w[S];
    __m256i sg[S];
    __m256 ws, wm;
};

#if NITRO_SIMD_VNNI
#if NITRO_VNNI_EMULATE
/// vpdpbusd computed exactly with AVX2 (tests only: tests/isa/avxvnni_emulated_*.cpp build the
/// AVX-VNNI kernels with it, since neither the development machines nor qemu 7.2 run AVX-VNNI):
/// per dword, acc + the four products u8(a) x s8(b), no saturation. The even and odd bytes are
/// widened to 16 bits (a zero-extended, b sign-extended) and vpmaddwd adds each pair of products
/// into a dword exactly (|a b| <= 255 x 128).
__attribute__((always_inline)) inline __m256i dpbusd(__m256i acc, __m256i a, __m256i b) {
    const __m256i lo8 = _mm256_set1_epi16(0x00FF);
    const __m256i a_even = _mm256_and_si256(a, lo8), a_odd = _mm256_srli_epi16(a, 8);
    const __m256i b_even = _mm256_srai_epi16(_mm256_slli_epi16(b, 8), 8), b_odd = _mm256_srai_epi16(b, 8);
    return _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_madd_epi16(a_even, b_even), _mm256_madd_epi16(a_odd, b_odd)));
}
#else
/// vpdpbusd (AVX-VNNI, VEX-encoded): per dword, acc + the four products u8(a) x s8(b).
__attribute__((always_inline)) inline __m256i dpbusd(__m256i acc, __m256i a, __m256i b) {
    return _mm256_dpbusd_avx_epi32(acc, a, b);
}
#endif
#endif

/// acc + half h of group g of one token; with `mask` (a last group's real sub-blocks, all-ones
/// dwords) only those lanes change.
template <class D, bool kMasked = false>
__attribute__((always_inline)) inline __m256 consume(const W8<D::kSlices>& t, const ActRow& a, int64_t g, int h, __m256 acc,
                                                     __m256 mask = __m256{}) {
    const int8_t* y = a.img + g * (64 * D::kSlices) + 32 * h;
    const int64_t lane = 16 * g + 8 * h;
    auto img = [&](int s) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(y + 64 * s)); };
    __m256i p;
#if NITRO_SIMD_VNNI
    // AVX-VNNI: every type unsigned (value + offset), one vpdpbusd per slice, in two chains (even
    // and odd slices) so one row's slices are not one latency chain; integer sums, so the same value.
    static_assert(!D::kSigned, "AVX-VNNI decoders are unsigned");
    p = D::kCorr ? _mm256_load_si256(reinterpret_cast<const __m256i*>(a.corr + lane)) : _mm256_setzero_si256();
    __m256i p1 = _mm256_setzero_si256();
    for (int s = 0; s < D::kSlices; s += 2) {
        p = dpbusd(p, t.w[s], img(s));
        p1 = dpbusd(p1, t.w[s + 1], img(s + 1));
    }
    p = _mm256_add_epi32(p, p1);
#else
    const __m256i ones = _mm256_set1_epi16(1);
    if constexpr (D::kSigned) {
        p = _mm256_madd_epi16(_mm256_maddubs_epi16(t.w[0], _mm256_sign_epi8(img(0), t.sg[0])), ones);
        for (int s = 1; s < D::kSlices; ++s)
            p = _mm256_add_epi32(p, _mm256_madd_epi16(_mm256_maddubs_epi16(t.w[s], _mm256_sign_epi8(img(s), t.sg[s])), ones));
    } else {
        p = D::kCorr ? _mm256_load_si256(reinterpret_cast<const __m256i*>(a.corr + lane)) : _mm256_setzero_si256();
        for (int s0 = 0; s0 < D::kSlices; s0 += D::kSum16) {
            __m256i q = _mm256_maddubs_epi16(t.w[s0], img(s0));
            for (int s = s0 + 1; s < s0 + D::kSum16; ++s) q = _mm256_add_epi16(q, _mm256_maddubs_epi16(t.w[s], img(s)));
            p = _mm256_add_epi32(p, _mm256_madd_epi16(q, ones));
        }
    }
#endif
    const __m256 d = _mm256_mul_ps(t.ws, _mm256_load_ps(a.dx + lane));
    __m256 r = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), d, acc);
    if constexpr (D::kMin) r = _mm256_fmadd_ps(t.wm, _mm256_load_ps(a.sx + lane), r);
    if constexpr (kMasked) r = _mm256_blendv_ps(acc, r, mask);
    return r;
}

/// A row's geometry: `full` whole groups, then a last group of `rem` sub-blocks (0: none) with
/// halves(g) halves (2, or 1 when rem <= 8), whose real sub-blocks are the lanes of mask[h]: its
/// other lanes are decoded from whatever follows the row (or, at the end of the readable weights,
/// a zero-padded copy of its rem_bytes) and dropped.
template <class D>
struct Geometry {
    int64_t full, rem, rem_bytes, groups;
    alignas(32) int32_t mask[2][8] = {};
    explicit Geometry(int64_t n) {
        const int64_t nsub = n / D::kSub;
        full = nsub / 16;
        rem = nsub % 16;
        rem_bytes = rem / D::kUnitSubs * D::kUnitBytes;
        groups = full + (rem ? 1 : 0);
        for (int d = 0; d < 16; ++d) mask[d / 8][d % 8] = sub_of_lane(D::kOrder, d) < rem ? -1 : 0;
    }
    int halves(int64_t g) const { return g < full || rem > 8 ? 2 : 1; }
    __m256 lanes(int h) const { return _mm256_load_ps(reinterpret_cast<const float*>(mask[h])); }
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
struct Tile256 {
    static constexpr int kRowBlock = 8;

    /// One token: each row with its accumulator in a register.
    static void rows1(const TileArgs& A) {
        const Geometry<D> geo(A.n);
        alignas(64) uint8_t buf[D::kGroupBytes + 64];
        const ActRow& a = A.a[0];
        W8<D::kSlices> t;
        for (int64_t r = 0; r < A.n_rows; ++r) {
            const uint8_t* x = A.w + r * static_cast<int64_t>(A.row_bytes);
            __m256 acc = _mm256_setzero_ps();
            for (int64_t g = 0; g < geo.full; ++g) {
                const uint8_t* gp = group_ptr<D, true>(geo, x, g, A.w_end, buf);
                for (int h = 0; h < 2; ++h) {
                    D::decode(gp, h, t);
                    acc = consume<D>(t, a, g, h, acc);
                }
            }
            if (geo.rem) {
                const uint8_t* gp = group_ptr(geo, x, geo.full, A.w_end, buf);
                for (int h = 0; h < geo.halves(geo.full); ++h) {
                    D::decode(gp, h, t);
                    acc = consume<D, true>(t, a, geo.full, h, acc, geo.lanes(h));
                }
            }
            A.out[r] = hsum8(acc);
        }
    }

    static void run(const TileArgs& A) {
        if (A.nt == 1) return rows1(A);
        const Geometry<D> geo(A.n);
        const int nt = A.nt;
        alignas(64) uint8_t buf[D::kGroupBytes + 64];
        alignas(64) float acc[kRowBlock][kMaxTokens][8];
        W8<D::kSlices> t;
        for (int64_t r0 = 0; r0 < A.n_rows; r0 += kRowBlock) {
            const int nr = static_cast<int>(min_of<int64_t>(kRowBlock, A.n_rows - r0));
            for (int r = 0; r < nr; ++r)
                for (int k = 0; k < nt; ++k) _mm256_store_ps(acc[r][k], _mm256_setzero_ps());
            const uint8_t* x = A.w + r0 * static_cast<int64_t>(A.row_bytes);
            BlockPrefetch pf{x + nr * static_cast<int64_t>(A.row_bytes), x + 2 * nr * static_cast<int64_t>(A.row_bytes)};
            for (int64_t g = 0; g < geo.groups; ++g) {
                const int nh = geo.halves(g);
                const bool last = g == geo.full;
                for (int r = 0; r < nr; ++r) {
                    pf.step<D::kGroupBytes>();
                    const uint8_t* gp = group_ptr(geo, A.w + (r0 + r) * static_cast<int64_t>(A.row_bytes), g, A.w_end, buf);
                    for (int h = 0; h < nh; ++h) {
                        D::decode(gp, h, t);
                        if (last) {
                            const __m256 lanes = geo.lanes(h);
                            for (int k = 0; k < nt; ++k)
                                _mm256_store_ps(acc[r][k], consume<D, true>(t, A.a[k], g, h, _mm256_load_ps(acc[r][k]), lanes));
                        } else {
                            for (int k = 0; k < nt; ++k)
                                _mm256_store_ps(acc[r][k], consume<D>(t, A.a[k], g, h, _mm256_load_ps(acc[r][k])));
                        }
                    }
                }
            }
            for (int r = 0; r < nr; ++r)
                for (int k = 0; k < nt; ++k) A.out[k * A.out_stride + r0 + r] = hsum8(_mm256_load_ps(acc[r][k]));
        }
    }
};

/// T[m] lane L dword q = Q[q] lane L dword m (a 4x4 dword transpose inside both 128-bit lanes).
__attribute__((always_inline)) inline void transpose4(const __m256i Q[4], __m256i T[4]) {
    const __m256i t0 = _mm256_unpacklo_epi32(Q[0], Q[1]), t1 = _mm256_unpackhi_epi32(Q[0], Q[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(Q[2], Q[3]), t3 = _mm256_unpackhi_epi32(Q[2], Q[3]);
    T[0] = _mm256_unpacklo_epi64(t0, t2);
    T[1] = _mm256_unpackhi_epi64(t0, t2);
    T[2] = _mm256_unpacklo_epi64(t1, t3);
    T[3] = _mm256_unpackhi_epi64(t1, t3);
}

/// Eight fp16 values in the low halves of the dwords -> f32.
inline __m256 f16_dwords(__m256i v) {
    const __m256i w = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), _MM_SHUFFLE(3, 1, 2, 0));
    return _mm256_cvtph_ps(_mm256_castsi256_si128(w));
}

/// Sub-block of ymm lane j of a Slices32 half (8 * h is added by the caller's pointer).
constexpr int sub32_half(int j) { return 2 * (j % 4) + j / 4; }

}  // namespace
}  // namespace nitro::cpu::kernels
