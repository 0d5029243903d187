// AVX2 + FMA + F16C tile kernels of the 256-value formats against Q8_K: Q2_K, Q3_K, Q4_K, Q5_K,
// Q6_K, IQ4_XS (compiled with -mavx2 -mfma -mf16c; chosen at run time only on CPUs that have them;
// kquants_avxvnni.cpp compiles it again with -mavxvnni and NITRO_SIMD_VNNI 1 for the AVX-VNNI level).
// The driver is tile_avx2.h; this file decodes weight half-groups, in the lane order of the
// AVX-512 kernels (kquants_avx512.cpp): for Q4_K, Q5_K and IQ4_XS half h is super-block h of the
// group, ymm lane j = 4L + q holding its sub-block 2q + L; for Q2_K, Q3_K and Q6_K half h is
// sub-blocks 8h..8h+7 of the super-block, lane j holding sub-block 8h + j.
#ifndef NITRO_SIMD_VNNI
#define NITRO_SIMD_VNNI 0
#endif
#include "cpu/tile_avx2.h"

namespace nitro::cpu::kernels {
namespace {

/// Eight dword constants f(j) (compile time).
template <class F>
struct LaneInts8 {
    alignas(32) int32_t v[8];
    constexpr explicit LaneInts8(F f) : v{} {
        for (int j = 0; j < 8; ++j) v[j] = f(j);
    }
    __m256i load() const { return _mm256_load_si256(reinterpret_cast<const __m256i*>(v)); }
};

/// Unsigned bytes 0..7 of b (sub-blocks in natural order) -> f32 in the lane order of a Slices32 half.
inline __m256 bytes_to_lanes32(__m128i b) {
    alignas(16) static constexpr struct Ctl {
        uint8_t v[16];
        constexpr Ctl() : v{} {
            for (int j = 0; j < 16; ++j) v[j] = j < 8 ? static_cast<uint8_t>(sub32_half(j)) : 0x80;
        }
    } ctl{};
    const __m128i p = _mm_shuffle_epi8(b, _mm_load_si128(reinterpret_cast<const __m128i*>(ctl.v)));
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(p));
}

/// Q4_K (144 bytes) and Q5_K (176 bytes): sub-block 2q + L of the super-block is nibble L of chunk q
/// (32 qs bytes); Q5_K's fifth bit is bit 2q + L of qh[value].
template <bool kFive>
struct DecQ45K {
    static constexpr ActOrder kOrder = ActOrder::Slices32;
    static constexpr int kSlices = 8, kSub = 32, kUnitSubs = 8, kSum16 = kFive ? 4 : 8;
    static constexpr int64_t kUnitBytes = kFive ? 176 : 144, kGroupBytes = 2 * kUnitBytes;
    static constexpr bool kCorr = false, kMin = true, kSigned = false;
    static constexpr int kQs = kFive ? 48 : 16;
    __attribute__((always_inline)) static void decode(const uint8_t* x, int h, W8<8>& t) {
        const uint8_t* xb = x + h * kUnitBytes;
        __m256i Y[4], U[4];
        for (int q = 0; q < 4; ++q) Y[q] = load256(xb + kQs + 32 * q);
        transpose4(Y, U);  // U[m] lane l, position q = dword 4l + m of chunk q
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        // Q5_K: qh dwords 4l..4l+3 in both lanes; lane 4L + q tests bit 2q + L of every byte.
        __m256i qhl[2], bit;
        if constexpr (kFive) {
            const __m256i qh = load256(xb + 16);
            qhl[0] = _mm256_permute2x128_si256(qh, qh, 0x00);
            qhl[1] = _mm256_permute2x128_si256(qh, qh, 0x11);
            bit = _mm256_setr_epi32(0x01010101, 0x04040404, 0x10101010, 0x40404040, 0x02020202, 0x08080808, 0x20202020,
                                    static_cast<int>(0x80808080u));
        }
        for (int m = 0; m < 4; ++m) {
            const __m256i lo = _mm256_and_si256(U[m], m4), hi = _mm256_and_si256(_mm256_srli_epi16(U[m], 4), m4);
            const __m256i halves[2] = {_mm256_permute2x128_si256(lo, hi, 0x20), _mm256_permute2x128_si256(lo, hi, 0x31)};
            for (int l = 0; l < 2; ++l) {
                const int s = 4 * l + m;  // values 4s..4s+3: dword s of each chunk, low nibbles in lane 0
                __m256i w = halves[l];
                if constexpr (kFive) {
                    const __m256i hb = m == 0 ? _mm256_shuffle_epi32(qhl[l], 0x00)
                                       : m == 1 ? _mm256_shuffle_epi32(qhl[l], 0x55)
                                       : m == 2 ? _mm256_shuffle_epi32(qhl[l], 0xAA)
                                                : _mm256_shuffle_epi32(qhl[l], 0xFF);
                    w = _mm256_or_si256(w, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, bit), bit), _mm256_set1_epi8(0x10)));
                }
                t.w[s] = w;
            }
        }
        const __m128i sm = scales_mins_k4(xb + 4);
        t.ws = _mm256_mul_ps(bytes_to_lanes32(sm), _mm256_set1_ps(h2f(xb)));
        t.wm = _mm256_mul_ps(bytes_to_lanes32(_mm_srli_si128(sm, 8)), _mm256_set1_ps(-h2f(xb + 2)));
    }
};

/// IQ4_XS (136 bytes): sub-blocks 2q, 2q + 1 are 32 contiguous quant bytes; kvalues_iq4nl signed
/// (sign trick; AVX-VNNI: + 128, unsigned).
struct DecIq4Xs {
    static constexpr ActOrder kOrder = ActOrder::Slices32;
    static constexpr int kSlices = 8, kSub = 32, kUnitSubs = 8;
    // kSum16 and kCorr are read only on the unsigned paths (the AVX-VNNI build): unused here in AVX2
    [[maybe_unused]] static constexpr int kSum16 = 1;
    static constexpr int64_t kUnitBytes = 136, kGroupBytes = 272;
    static constexpr bool kSigned = !NITRO_SIMD_VNNI, kMin = false;
    [[maybe_unused]] static constexpr bool kCorr = !kSigned;
    __attribute__((always_inline)) static void decode(const uint8_t* x, int h, W8<8>& t) {
        const uint8_t* xb = x + h * 136;
        __m256i Q[4], T[4];
        for (int q = 0; q < 4; ++q) Q[q] = load256(xb + 8 + 32 * q);
        transpose4(Q, T);
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        const __m256i tbl = _mm256_broadcastsi128_si256(load128(kSigned ? kLutIq4nlS.v : kLutIq4nlU.v));
        for (int m = 0; m < 4; ++m) {
            const __m256i lo = _mm256_shuffle_epi8(tbl, _mm256_and_si256(T[m], m4));
            const __m256i hi = _mm256_shuffle_epi8(tbl, _mm256_and_si256(_mm256_srli_epi16(T[m], 4), m4));
            if constexpr (kSigned) {
                t.sg[m] = lo;
                t.sg[4 + m] = hi;
                t.w[m] = _mm256_sign_epi8(lo, lo);
                t.w[4 + m] = _mm256_sign_epi8(hi, hi);
            } else {
                t.w[m] = lo;
                t.w[4 + m] = hi;
            }
        }
        static constexpr auto perm = LaneInts8([](int j) { return sub32_half(j); });
        t.ws = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_permutevar8x32_epi32(scales_iq4xs(xb + 2), perm.load())),
                             _mm256_set1_ps(h2f(xb)));
    }
};

/// Q6_K (210 bytes: ql[128], qh[64], scales[16], d): lane j of half h is sub-block 8h + j =
/// 8h + 2a + t: ql dword 8 (a % 2) + 4t + s of the half's 64 ql bytes, nibble a / 2; qh dword
/// 4t + s of its 32 qh bytes, bits 2a.
struct DecQ6K {
    static constexpr ActOrder kOrder = ActOrder::Slices16;
    static constexpr int kSlices = 4, kSub = 16, kUnitSubs = 16, kSum16 = 2;
    static constexpr int64_t kUnitBytes = 210, kGroupBytes = 210;
    static constexpr bool kCorr = true, kMin = false, kSigned = false;
    __attribute__((always_inline)) static void decode(const uint8_t* x, int h, W8<4>& t) {
        const __m256i qla = load256(x + 64 * h), qlb = load256(x + 64 * h + 32), qh = load256(x + 128 + 32 * h);
        const __m256i nshift = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4), hshift = _mm256_setr_epi32(0, 0, 2, 2, 4, 4, 6, 6);
        const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
        for (int s = 0; s < 4; ++s) {
            const __m256i idx = _mm256_add_epi32(_mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4), _mm256_set1_epi32(s));
            const __m256i v = _mm256_blend_epi32(_mm256_permutevar8x32_epi32(qla, idx), _mm256_permutevar8x32_epi32(qlb, idx), 0xCC);
            const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(v, nshift), m4);
            const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_permutevar8x32_epi32(qh, idx), hshift), m3);
            t.w[s] = _mm256_or_si256(lo, _mm256_slli_epi32(hi, 4));
        }
        t.ws = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x + 192 + 8 * h)))),
                             _mm256_set1_ps(h2f(x + 208)));
    }
};

/// Q2_K (84 bytes: scales[16], qs[64], d, dmin): lane j of half h is sub-block 8h + 2a + t, bits 2a
/// of qs dword 8h + 4t + s.
struct DecQ2K {
    static constexpr ActOrder kOrder = ActOrder::Slices16;
    static constexpr int kSlices = 4, kSub = 16, kUnitSubs = 16, kSum16 = 4;
    static constexpr int64_t kUnitBytes = 84, kGroupBytes = 84;
    static constexpr bool kCorr = false, kMin = true, kSigned = false;
    __attribute__((always_inline)) static void decode(const uint8_t* x, int h, W8<4>& t) {
        const __m256i qs = load256(x + 16 + 32 * h);
        const __m256i shift = _mm256_setr_epi32(0, 0, 2, 2, 4, 4, 6, 6), m3 = _mm256_set1_epi8(3);
        for (int s = 0; s < 4; ++s) {
            const __m256i idx = _mm256_add_epi32(_mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4), _mm256_set1_epi32(s));
            t.w[s] = _mm256_and_si256(_mm256_srlv_epi32(_mm256_permutevar8x32_epi32(qs, idx), shift), m3);
        }
        const __m128i sm = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x + 8 * h)), m4 = _mm_set1_epi8(0x0F);
        t.ws = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_and_si128(sm, m4))), _mm256_set1_ps(h2f(x + 80)));
        t.wm = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(sm, 4), m4))),
                             _mm256_set1_ps(-h2f(x + 82)));
    }
};

/// Q3_K (110 bytes: hmask[32], qs[64], scales[12], d): as Q2_K plus the high bit, bit 4h + a of
/// hmask dword 4t + s.
struct DecQ3K {
    static constexpr ActOrder kOrder = ActOrder::Slices16;
    static constexpr int kSlices = 4, kSub = 16, kUnitSubs = 16, kSum16 = 4;
    static constexpr int64_t kUnitBytes = 110, kGroupBytes = 110;
    static constexpr bool kCorr = true, kMin = false, kSigned = false;
    __attribute__((always_inline)) static void decode(const uint8_t* x, int h, W8<4>& t) {
        const __m256i qs = load256(x + 32 + 32 * h), hm = load256(x);
        const __m256i shift = _mm256_setr_epi32(0, 0, 2, 2, 4, 4, 6, 6);
        const __m256i hshift = _mm256_add_epi32(_mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3), _mm256_set1_epi32(4 * h));
        const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
        for (int s = 0; s < 4; ++s) {
            const __m256i idx = _mm256_add_epi32(_mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4), _mm256_set1_epi32(s));
            const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(_mm256_permutevar8x32_epi32(qs, idx), shift), m3);
            const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_permutevar8x32_epi32(hm, idx), hshift), one);
            t.w[s] = _mm256_or_si256(lo, _mm256_slli_epi32(hi, 2));
        }
        const __m128i sc = scales_q3k(x + 96);
        const __m128i half = h ? _mm_srli_si128(sc, 8) : sc;
        t.ws = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(half)), _mm256_set1_ps(h2f(x + 108)));
    }
};

template <class D>
void tile_kernel(const TileArgs& a) { Tile256<D>::run(a); }

}  // namespace

#if NITRO_VNNI_EMULATE
void fill_kquants_avxvnni_emulated(Table& t) {  // tests/isa/avxvnni_emulated_kquants.cpp
#elif NITRO_SIMD_VNNI
void fill_kquants_avxvnni(Table& t) {  // kquants_avxvnni.cpp: the same decoders with vpdpbusd
#else
void fill_kquants_avx2(Table& t) {
#endif
    t.tile[static_cast<int>(GgmlType::Q2_K)] = tile_kernel<DecQ2K>;
    t.tile[static_cast<int>(GgmlType::Q3_K)] = tile_kernel<DecQ3K>;
    t.tile[static_cast<int>(GgmlType::Q4_K)] = tile_kernel<DecQ45K<false>>;
    t.tile[static_cast<int>(GgmlType::Q5_K)] = tile_kernel<DecQ45K<true>>;
    t.tile[static_cast<int>(GgmlType::Q6_K)] = tile_kernel<DecQ6K>;
    t.tile[static_cast<int>(GgmlType::IQ4_XS)] = tile_kernel<DecIq4Xs>;
}

}  // namespace nitro::cpu::kernels
