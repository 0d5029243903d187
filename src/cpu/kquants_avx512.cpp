// AVX-512 (F, BW, VL, DQ) + VNNI tile kernels of the 256-value formats against Q8_K: Q2_K, Q3_K,
// Q4_K, Q5_K, Q6_K, IQ4_XS (compiled with the matching -m flags; chosen at run time only on CPUs
// that have all of them). The driver is tile_avx512.h; this file decodes weight groups.
//
// Q4_K, Q5_K and IQ4_XS have 32-value sub-blocks: a group is two super-blocks, lane d holds
// sub-block j = 2 (d % 4) + (d / 4) % 2 of super-block d / 8 (ActOrder::Slices32). Q2_K, Q3_K and
// Q6_K have 16-value sub-blocks: a group is one super-block, lane d holds sub-block d (Slices16).
// The sub-block's integer scale goes into the lane's float scale (d * sc, exact in f32), the
// min into wm = -dmin * mn (the activations' sx is d_y * sum(q_y) of the sub-block), and the
// offsets of Q3_K (-4), Q6_K (-32) and IQ4_XS (table + 128) into the activations' corr. Slices are
// gathered with vpermi2d / vpermd from the quant bytes as they lie in the block, the high bits
// moved into place with a per-lane rotate (vprold) and merged by vpternlogd.
#define NITRO_SIMD_VNNI 1
// GCC 12's own AVX-512 headers build some intrinsics from an intentionally undefined vector, which
// -Wuninitialized reports at every inlining site (see vec_dot_avx512.cpp).
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning group (clang warns that it does not know it)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "cpu/tile_avx512.h"

namespace nitro::cpu::kernels {
namespace {

/// A zmm of 16 dword constants f(d) (compile time).
template <class F>
struct LaneInts {
    alignas(64) int32_t v[16];
    constexpr explicit LaneInts(F f) : v{} {
        for (int d = 0; d < 16; ++d) v[d] = f(d);
    }
    __m512i load() const { return _mm512_load_si512(v); }
};

/// Sub-block of lane d in a Slices32 group (kernels.h).
constexpr int sub32(int d) { return sub_of_lane(ActOrder::Slices32, d); }

/// vpternlogd: a | (b & c).
inline __m512i or_and(__m512i a, __m512i b, __m512i c) { return _mm512_ternarylogic_epi32(a, b, c, 0xF8); }

/// [v0 x 8 | v1 x 8].
inline __m512 halves(float v0, float v1) { return _mm512_insertf32x8(_mm512_set1_ps(v0), _mm256_set1_ps(v1), 1); }

/// Q4_K (144 bytes: d, dmin, scales[12], qs[128]) and Q5_K (176: d, dmin, scales[12], qh[32],
/// qs[128]): sub-block j of a super-block is the low (j even) or high nibble of chunk j / 2 (32 qs
/// bytes), Q5_K's fifth bit is bit j of qh[value]. Lane d = 4L + q holds sub-block 2q + L % 2 of
/// super-block L / 2: the chunks q of both super-blocks as [SB0 | SB1] zmm, a 4x4 dword transpose
/// inside the 128-bit lanes (V[m] lane 2k + l, position q = dword 4l + m of chunk q of SB k), the
/// nibbles split, and slice 4l + m = [low, high nibbles of lane l, of lane 2 + l] by vpermt2q.
template <bool kFive>
struct DecQ45K {
    static constexpr ActOrder kOrder = ActOrder::Slices32;
    static constexpr int kSlices = 8, kSub = 32, kUnitSubs = 8;
    static constexpr int64_t kUnitBytes = kFive ? 176 : 144, kGroupBytes = 2 * kUnitBytes;
    static constexpr bool kCorr = false, kMin = true, kScalef = false;
    static constexpr int kQs = kFive ? 48 : 16;
    __attribute__((always_inline)) static void decode(const uint8_t* x, W16<8>& t) {
        const uint8_t* b1 = x + kUnitBytes;
        __m512i Z[4];
        for (int q = 0; q < 4; ++q)
            Z[q] = _mm512_inserti64x4(_mm512_castsi256_si512(load256(x + kQs + 32 * q)), load256(b1 + kQs + 32 * q), 1);
        const __m512i t0 = _mm512_unpacklo_epi32(Z[0], Z[1]), t1 = _mm512_unpackhi_epi32(Z[0], Z[1]);
        const __m512i t2 = _mm512_unpacklo_epi32(Z[2], Z[3]), t3 = _mm512_unpackhi_epi32(Z[2], Z[3]);
        const __m512i V[4] = {_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2), _mm512_unpacklo_epi64(t1, t3),
                              _mm512_unpackhi_epi64(t1, t3)};
        const __m512i m4 = _mm512_set1_epi8(0x0F);
        // slice 4l + m: qwords [2l, 2l+1 of low | 2l, 2l+1 of high | 4+2l, 5+2l of low | 4+2l, 5+2l of high]
        const __m512i sel[2] = {_mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15)};
        __m512i qhl[2], rot;
        if constexpr (kFive) {
            // [qh dwords 4l..4l+3 of SB0 twice | of SB1 twice]
            const __m512i qh = _mm512_inserti64x4(_mm512_castsi256_si512(load256(x + 16)), load256(b1 + 16), 1);
            qhl[0] = _mm512_shuffle_i64x2(qh, qh, _MM_SHUFFLE(2, 2, 0, 0));
            qhl[1] = _mm512_shuffle_i64x2(qh, qh, _MM_SHUFFLE(3, 3, 1, 1));
            static constexpr auto rot_cnt = LaneInts([](int d) { return (4 - sub32(d) % 8) & 31; });
            rot = rot_cnt.load();
        }
        for (int m = 0; m < 4; ++m) {
            const __m512i lo = _mm512_and_si512(V[m], m4), hi = _mm512_and_si512(_mm512_srli_epi16(V[m], 4), m4);
            for (int l = 0; l < 2; ++l) {
                const int s = 4 * l + m;  // values 4s..4s+3 of every sub-block
                __m512i w = _mm512_permutex2var_epi64(lo, sel[l], hi);
                if constexpr (kFive) {
                    const __m512i h = m == 0 ? _mm512_shuffle_epi32(qhl[l], _MM_PERM_AAAA)
                                      : m == 1 ? _mm512_shuffle_epi32(qhl[l], _MM_PERM_BBBB)
                                      : m == 2 ? _mm512_shuffle_epi32(qhl[l], _MM_PERM_CCCC)
                                               : _mm512_shuffle_epi32(qhl[l], _MM_PERM_DDDD);
                    w = or_and(w, _mm512_rolv_epi32(h, rot), _mm512_set1_epi8(0x10));
                }
                t.w[s] = w;
            }
        }
        // Scales and mins of both super-blocks in lane order: per 128-bit lane (super-block) bytes
        // [sc of lanes 0-7 | mn of lanes 0-7], then [sc SB0 | sc SB1 | mn SB0 | mn SB1].
        alignas(32) static constexpr struct Ctl {
            uint8_t v[32];
            constexpr Ctl() : v{} {
                for (int i = 0; i < 32; ++i) v[i] = static_cast<uint8_t>((i % 16) / 8 * 8 + sub32(i % 8));
            }
        } ctl{};
        const __m256i sm = _mm256_permute4x64_epi64(
            _mm256_shuffle_epi8(scales_mins_k4_x2(x + 4, b1 + 4), _mm256_load_si256(reinterpret_cast<const __m256i*>(ctl.v))),
            _MM_SHUFFLE(3, 1, 2, 0));
        uint32_t dd0, dd1;
        std::memcpy(&dd0, x, 4);
        std::memcpy(&dd1, b1, 4);
        // [d0, dmin0, d1, dmin1]
        const __m512 dm = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_unpacklo_epi32(_mm_cvtsi32_si128(static_cast<int>(dd0)),
                                                                                 _mm_cvtsi32_si128(static_cast<int>(dd1)))));
        const __m512 d = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2), dm);
        const __m512 dmin = _mm512_permutexvar_ps(_mm512_setr_epi32(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3), dm);
        t.ws = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(sm))), d);
        t.wm = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(sm, 1))),
                             _mm512_xor_ps(dmin, _mm512_set1_ps(-0.f)));
    }
};

/// IQ4_XS (136 bytes: d, scales_h, scales_l[4], qs[128]): 16 quant bytes per sub-block as in the
/// 32-value formats; sub-blocks 2q, 2q + 1 of each super-block are 32 contiguous bytes, so the
/// quads [2q, 2q + 1 | 8 + 2q, 9 + 2q] are two 32-byte loads; kvalues_iq4nl + 128 by vpshufb.
struct DecIq4Xs {
    static constexpr ActOrder kOrder = ActOrder::Slices32;
    static constexpr int kSlices = 8, kSub = 32, kUnitSubs = 8;
    static constexpr int64_t kUnitBytes = 136, kGroupBytes = 272;
    static constexpr bool kCorr = true, kMin = false, kScalef = false;
    __attribute__((always_inline)) static void decode(const uint8_t* x, W16<8>& t) {
        const uint8_t* b1 = x + 136;
        __m512i Q[4];
        for (int q = 0; q < 4; ++q)
            Q[q] = _mm512_inserti64x4(_mm512_castsi256_si512(load256(x + 8 + 32 * q)), load256(b1 + 8 + 32 * q), 1);
        const __m512i t0 = _mm512_unpacklo_epi32(Q[0], Q[1]), t1 = _mm512_unpackhi_epi32(Q[0], Q[1]);
        const __m512i t2 = _mm512_unpacklo_epi32(Q[2], Q[3]), t3 = _mm512_unpackhi_epi32(Q[2], Q[3]);
        const __m512i T[4] = {_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2), _mm512_unpacklo_epi64(t1, t3),
                              _mm512_unpackhi_epi64(t1, t3)};
        const __m512i m4 = _mm512_set1_epi8(0x0F), tbl = _mm512_broadcast_i32x4(load128(kLutIq4nlU.v));
        for (int m = 0; m < 4; ++m) {
            t.w[m] = _mm512_shuffle_epi8(tbl, _mm512_and_si512(T[m], m4));
            t.w[4 + m] = _mm512_shuffle_epi8(tbl, _mm512_and_si512(_mm512_srli_epi16(T[m], 4), m4));
        }
        // ls - 32 of sub-block j (scales_l nibble j, scales_h bits 2j) straight into lane order: the
        // shift counts follow the lanes' sub-blocks.
        static constexpr auto lo_cnt = LaneInts([](int d) { return 4 * (sub32(d) % 8); });
        static constexpr auto hi_cnt = LaneInts([](int d) { return 2 * (sub32(d) % 8); });
        uint32_t sl0, sl1;
        std::memcpy(&sl0, x + 4, 4);
        std::memcpy(&sl1, b1 + 4, 4);
        const __m512i sl = _mm512_mask_set1_epi32(_mm512_set1_epi32(static_cast<int>(sl0)), 0xFF00, static_cast<int>(sl1));
        const __m512i sh = _mm512_mask_set1_epi32(_mm512_set1_epi32(load_u16(x + 2)), 0xFF00, load_u16(b1 + 2));
        const __m512i ls = or_and(_mm512_and_si512(_mm512_srlv_epi32(sl, lo_cnt.load()), _mm512_set1_epi32(0xF)),
                                  _mm512_slli_epi32(_mm512_srlv_epi32(sh, hi_cnt.load()), 4), _mm512_set1_epi32(0x30));
        t.ws = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(ls, _mm512_set1_epi32(32))), halves(h2f(x), h2f(b1)));
    }
};

/// Q6_K (210 bytes: ql[128], qh[64], scales[16] int8, d): value 128 n + 32 a + l has its low four
/// bits in nibble a / 2 of ql[64 n + 32 (a % 2) + l] and bits 4-5 in bits 2a of qh[32 n + l];
/// sub-block (lane) 8 n + 2 a + l / 16. Unsigned 0..63, the -32 in corr.
struct DecQ6K {
    static constexpr ActOrder kOrder = ActOrder::Slices16;
    static constexpr int kSlices = 4, kSub = 16, kUnitSubs = 16;
    static constexpr int64_t kUnitBytes = 210, kGroupBytes = 210;
    static constexpr bool kCorr = true, kMin = false, kScalef = false;
    __attribute__((always_inline)) static void decode(const uint8_t* x, W16<4>& t) {
        const __m512i ql0 = _mm512_loadu_si512(x), ql1 = _mm512_loadu_si512(x + 64), qh = _mm512_loadu_si512(x + 128);
        static constexpr auto lbase = LaneInts([](int d) { return 16 * (d / 8) + 8 * ((d / 2) % 4 % 2) + 4 * (d % 2); });
        static constexpr auto hbase = LaneInts([](int d) { return 8 * (d / 8) + 4 * (d % 2); });
        static constexpr auto nshift = LaneInts([](int d) { return 4 * ((d / 2) % 4 / 2); });
        static constexpr auto hrot = LaneInts([](int d) { return (4 - 2 * ((d / 2) % 4)) & 31; });
        const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
        for (int s = 0; s < 4; ++s) {
            const __m512i sv = _mm512_set1_epi32(s);
            const __m512i lo = _mm512_and_si512(
                _mm512_srlv_epi32(_mm512_permutex2var_epi32(ql0, _mm512_add_epi32(lbase.load(), sv), ql1), nshift.load()), m4);
            const __m512i hi = _mm512_rolv_epi32(_mm512_permutexvar_epi32(_mm512_add_epi32(hbase.load(), sv), qh), hrot.load());
            t.w[s] = or_and(lo, hi, m30);
        }
        t.ws = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load128(x + 192))), _mm512_set1_ps(h2f(x + 208)));
    }
};

/// Q2_K (84 bytes: scales[16] (low nibble scale, high nibble min), qs[64], d, dmin): value
/// 128 n + 32 j + l is bits 2j of qs[32 n + l]; sub-block (lane) 8 n + 2 j + l / 16.
struct DecQ2K {
    static constexpr ActOrder kOrder = ActOrder::Slices16;
    static constexpr int kSlices = 4, kSub = 16, kUnitSubs = 16;
    static constexpr int64_t kUnitBytes = 84, kGroupBytes = 84;
    static constexpr bool kCorr = false, kMin = true, kScalef = false;
    __attribute__((always_inline)) static void decode(const uint8_t* x, W16<4>& t) {
        const __m512i qs = _mm512_loadu_si512(x + 16);
        static constexpr auto base = LaneInts([](int d) { return 8 * (d / 8) + 4 * (d % 2); });
        static constexpr auto shift = LaneInts([](int d) { return 2 * ((d / 2) % 4); });
        const __m512i m3 = _mm512_set1_epi8(3);
        for (int s = 0; s < 4; ++s)
            t.w[s] = _mm512_and_si512(
                _mm512_srlv_epi32(_mm512_permutexvar_epi32(_mm512_add_epi32(base.load(), _mm512_set1_epi32(s)), qs), shift.load()), m3);
        const __m128i sm = load128(x);
        const __m128i m4 = _mm_set1_epi8(0x0F);
        t.ws = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(sm, m4))), _mm512_set1_ps(h2f(x + 80)));
        t.wm = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(sm, 4), m4))),
                             _mm512_set1_ps(-h2f(x + 82)));
    }
};

/// Q3_K (110 bytes: hmask[32], qs[64], scales[12], d): as Q2_K, plus the high bit of value
/// 128 n + 32 j + l in bit 4 n + j of hmask[l] (unsigned 0..7, the -4 in corr).
struct DecQ3K {
    static constexpr ActOrder kOrder = ActOrder::Slices16;
    static constexpr int kSlices = 4, kSub = 16, kUnitSubs = 16;
    static constexpr int64_t kUnitBytes = 110, kGroupBytes = 110;
    static constexpr bool kCorr = true, kMin = false, kScalef = false;
    __attribute__((always_inline)) static void decode(const uint8_t* x, W16<4>& t) {
        const __m512i qs = _mm512_loadu_si512(x + 32);
        const __m512i hm = _mm512_castsi256_si512(load256(x));
        static constexpr auto base = LaneInts([](int d) { return 8 * (d / 8) + 4 * (d % 2); });
        static constexpr auto hbase = LaneInts([](int d) { return 4 * (d % 2); });
        static constexpr auto shift = LaneInts([](int d) { return 2 * ((d / 2) % 4); });
        static constexpr auto hrot = LaneInts([](int d) { return (2 - (4 * (d / 8) + (d / 2) % 4)) & 31; });
        const __m512i m3 = _mm512_set1_epi8(3), b2 = _mm512_set1_epi8(4);
        for (int s = 0; s < 4; ++s) {
            const __m512i sv = _mm512_set1_epi32(s);
            const __m512i lo = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(_mm512_add_epi32(base.load(), sv), qs), shift.load()), m3);
            const __m512i hi = _mm512_rolv_epi32(_mm512_permutexvar_epi32(_mm512_add_epi32(hbase.load(), sv), hm), hrot.load());
            t.w[s] = or_and(lo, hi, b2);
        }
        t.ws = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(scales_q3k(x + 96))), _mm512_set1_ps(h2f(x + 108)));
    }
};

template <class D>
void tile_kernel(const TileArgs& a) { Tile512<D>::run(a); }

}  // namespace

void fill_kquants_avx512(Table& t) {
    t.tile[static_cast<int>(GgmlType::Q2_K)] = tile_kernel<DecQ2K>;
    t.tile[static_cast<int>(GgmlType::Q3_K)] = tile_kernel<DecQ3K>;
    t.tile[static_cast<int>(GgmlType::Q4_K)] = tile_kernel<DecQ45K<false>>;
    t.tile[static_cast<int>(GgmlType::Q5_K)] = tile_kernel<DecQ45K<true>>;
    t.tile[static_cast<int>(GgmlType::Q6_K)] = tile_kernel<DecQ6K>;
    t.tile[static_cast<int>(GgmlType::IQ4_XS)] = tile_kernel<DecIq4Xs>;
}

}  // namespace nitro::cpu::kernels
