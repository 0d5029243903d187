// AVX-512 (F, BW, VL, DQ) + VNNI kernels of the 256-value formats against Q8_K: Q2_K, Q3_K, Q4_K,
// Q5_K, Q6_K, IQ4_XS (compiled with the matching -m flags; chosen at run time only on CPUs that
// have all of them).
//
// Per super-block the weights are decoded 64 values at a time (one zmm from one 64-byte load of
// quants, in the order they lie in the block), multiplied with the activations by vpmaddubsw
// (int16 pairs) and scaled per 16 or 32 values by vpdpwssd against the integer sub-block scales,
// or for IQ4_XS by vpdpbusd on the unsigned table value (+128, the activations' corr takes the
// offset off) and an int32 multiply by the sub-block scale. The super-block sum is exact in int32
// and goes into float lanes once per super-block; offsets and mins once per super-block through
// the Q8_K block sums. The activation image (kernels.h ActOrder) puts the values each zmm of
// weights meets in one aligned 64-byte run.
//
// Every kernel handles 1..4 tokens per weight row; per token the operations and their order are
// the same whatever the token count (kernels.h).
#define NITRO_SIMD_VNNI 1
// GCC 12's own AVX-512 headers build some intrinsics from an intentionally undefined vector, which
// -Wuninitialized reports at every inlining site (see vec_dot_avx512.cpp).
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning group (clang warns that it does not know it)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "cpu/simd_x86.h"

namespace nitro::cpu::kernels {
namespace {

constexpr int kQ8KBytes = 292;  // d f32, qs[256], bsums[16] i16

inline __m512i load_img(const ActRow& a, int64_t off) { return _mm512_load_si512(a.img + off); }

/// 16 int32 lanes -> 8 (lane i + lane i+8).
inline __m256i fold16(__m512i v) { return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)); }

/// vpshufb control picking word w0..w3 of its 128-bit lane everywhere in lane 0..3 (hoisted out of
/// the loops by the callers).
inline __m512i word_pick4(int w0, int w1, int w2, int w3) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(word_pick(w0, w1)), word_pick(w2, w3), 1);
}

/// Q4_K / Q5_K. Per 128 values (64 qs bytes = chunks 2h, 2h+1) one zmm of low nibbles (sub-blocks
/// 4h, 4h+2) and one of high nibbles (4h+1, 4h+3), plus Q5_K's fifth bits (qh bits 4h, 4h+2 /
/// 4h+1, 4h+3, moved to bit 4 by per-half variable shifts); K4 image.
template <bool kFive>
struct Q45K {
    template <int NT>
    struct K {
        static void run(int64_t n, const uint8_t* w, const ActRow* a, float* out) {
            constexpr int64_t kBytes = kFive ? 176 : 144;
            constexpr int64_t kQs = kFive ? 48 : 16;
            __m256 acc[NT];
            for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
            const __m512i m4 = _mm512_set1_epi8(0x0F), b4 = _mm512_set1_epi8(0x10);
            const __m128i dup = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
            // Q5_K: shift counts bringing qh bit (lo: 4h / 4h+2, hi: 4h+1 / 4h+3) to bit 4, per 256-bit half.
            const __m512i sh_lo0 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);  // left, h = 0
            const __m512i sh_hi0 = _mm512_inserti64x4(_mm512_set1_epi16(3), _mm256_set1_epi16(1), 1);  // left
            const __m512i sh_lo1 = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);  // right, h = 1
            const __m512i sh_hi1 = _mm512_inserti64x4(_mm512_set1_epi16(1), _mm256_set1_epi16(3), 1);  // right
            const __m512i picks[2][2] = {{word_pick4(0, 0, 2, 2), word_pick4(1, 1, 3, 3)},
                                         {word_pick4(4, 4, 6, 6), word_pick4(5, 5, 7, 7)}};
            for (int64_t i = 0; i < n / 256; ++i) {
                const uint8_t* xb = w + i * kBytes;
                for (int64_t l = 0; l < kBytes; l += 64) prefetch_w(xb + l);
                const float d = h2f(xb), dmin = h2f(xb + 2);
                const __m128i sm = scales_mins_k4(xb + 4);
                const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, dup));
                const __m512i sc = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(sm));  // 8 scale words in every lane
                __m512i qh;
                if constexpr (kFive) qh = _mm512_broadcast_i64x4(load256(xb + 16));
                __m512i sumi[NT];
                for (int t = 0; t < NT; ++t) sumi[t] = _mm512_setzero_si512();
                for (int h = 0; h < 2; ++h) {
                    const __m512i z = _mm512_loadu_si512(xb + kQs + 64 * h);
                    __m512i lo = _mm512_and_si512(z, m4), hi = _mm512_and_si512(_mm512_srli_epi16(z, 4), m4);
                    if constexpr (kFive) {
                        const __m512i hl = h ? _mm512_srlv_epi16(qh, sh_lo1) : _mm512_sllv_epi16(qh, sh_lo0);
                        const __m512i hh = h ? _mm512_srlv_epi16(qh, sh_hi1) : _mm512_sllv_epi16(qh, sh_hi0);
                        lo = _mm512_or_si512(lo, _mm512_and_si512(hl, b4));
                        hi = _mm512_or_si512(hi, _mm512_and_si512(hh, b4));
                    }
                    const __m512i slo = _mm512_shuffle_epi8(sc, picks[h][0]);
                    const __m512i shi = _mm512_shuffle_epi8(sc, picks[h][1]);
                    const int64_t yo = i * 256 + 128 * h;
                    for (int t = 0; t < NT; ++t) {
                        sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(lo, load_img(a[t], yo)), slo);
                        sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(hi, load_img(a[t], yo + 64)), shi);
                    }
                }
                for (int t = 0; t < NT; ++t) {
                    const uint8_t* yb = a[t].q + i * kQ8KBytes;
                    const float yd = load_f32(yb);
                    const __m256i mprod = _mm256_madd_epi16(load256(yb + 260), mins16);
                    acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * yd), _mm256_cvtepi32_ps(fold16(sumi[t])), acc[t]);
                    acc[t] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * yd), _mm256_cvtepi32_ps(mprod), acc[t]);
                }
            }
            for (int t = 0; t < NT; ++t) out[t] = hsum8(acc[t]);
        }
    };
};

/// Q6_K: per 64 values one zmm of unsigned 6-bit q; each 128-bit lane is one 16-value scale
/// group (scales picked by vpshufb), vpdpwssd. The -32 offset once per super-block as
/// 32 * sum_g scale_g * bsum_g. Natural image.
template <int NT>
struct Q6K {
    static void run(int64_t n, const uint8_t* w, const ActRow* a, float* out) {
        __m256 acc[NT];
        for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
        const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(3);
        const __m512i pick0 = word_pick4(0, 1, 2, 3), pick1 = word_pick4(4, 5, 6, 7);
        for (int64_t i = 0; i < n / 256; ++i) {
            const uint8_t* xb = w + i * 210;
            for (int l = 0; l < 210; l += 64) prefetch_w(xb + l);
            const float d = h2f(xb + 208);
            const __m256i sc16 = _mm256_cvtepi8_epi16(load128(xb + 192));
            const __m512i scz[2] = {_mm512_broadcast_i32x4(_mm256_castsi256_si128(sc16)),       // groups 0-7
                                    _mm512_broadcast_i32x4(_mm256_extracti128_si256(sc16, 1))};  // groups 8-15
            __m512i sumi[NT];
            for (int t = 0; t < NT; ++t) sumi[t] = _mm512_setzero_si512();
            for (int h = 0; h < 2; ++h) {
                const __m512i ql = _mm512_loadu_si512(xb + 64 * h);
                const __m256i qh = load256(xb + 128 + 32 * h);
                const __m512i qhz = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
                // q0: values 128h + 0..63 (groups 8h + 0..3 by lane), q1: 128h + 64..127 (8h + 4..7).
                const __m512i q0 = _mm512_or_si512(_mm512_and_si512(ql, m4),
                                                   _mm512_slli_epi16(_mm512_and_si512(qhz, m2), 4));
                const __m512i q1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                                   _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qhz, 4), m2), 4));
                const __m512i s0 = _mm512_shuffle_epi8(scz[h], pick0), s1 = _mm512_shuffle_epi8(scz[h], pick1);
                const int64_t yo = i * 256 + 128 * h;
                for (int t = 0; t < NT; ++t) {
                    sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(q0, load_img(a[t], yo)), s0);
                    sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(q1, load_img(a[t], yo + 64)), s1);
                }
            }
            for (int t = 0; t < NT; ++t) {
                const uint8_t* yb = a[t].q + i * kQ8KBytes;
                const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(load256(yb + 260), sc16), 5);
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * load_f32(yb)),
                                         _mm256_cvtepi32_ps(_mm256_sub_epi32(fold16(sumi[t]), corr)), acc[t]);
            }
        }
        for (int t = 0; t < NT; ++t) out[t] = hsum8(acc[t]);
    }
};

/// Scales per 16 values of Q2_K / Q3_K for plane s of a 64-byte quant zmm: lanes hold groups
/// 2s, 2s+1 (first 32 qs bytes, values 32s..) and 8+2s, 9+2s (second 32 bytes, values 128+32s..).
/// `sc16`: the 16 group scales as words; returns [groups 0-7 | 0-7 | 8-15 | 8-15] by lane.
inline __m512i scales_by_half(__m256i sc16) {
    const __m512i z = _mm512_castsi256_si512(sc16);
    return _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(1, 1, 0, 0));
}

/// Q2_K (84 bytes: scales[16], qs[64], d, dmin): the 64 qs bytes in one zmm, four 2-bit planes
/// (K2 image: plane s meets one 64-byte run), scale per 16 values by vpdpwssd, mins via bsums.
template <int NT>
struct Q2K {
    static void run(int64_t n, const uint8_t* w, const ActRow* a, float* out) {
        __m256 acc[NT];
        for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
        const __m512i m3 = _mm512_set1_epi8(3);
        const __m128i m4 = _mm_set1_epi8(0x0F);
        const __m512i picks[4] = {word_pick4(0, 1, 0, 1), word_pick4(2, 3, 2, 3), word_pick4(4, 5, 4, 5), word_pick4(6, 7, 6, 7)};
        for (int64_t i = 0; i < n / 256; ++i) {
            const uint8_t* xb = w + i * 84;
            prefetch_w(xb);
            prefetch_w(xb + 64);
            const float d = h2f(xb + 80), dmin = h2f(xb + 82);
            const __m128i sm = load128(xb);
            const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), m4));
            const __m512i scz = scales_by_half(_mm256_cvtepu8_epi16(_mm_and_si128(sm, m4)));
            const __m512i z = _mm512_loadu_si512(xb + 16);
            __m512i sumi[NT];
            for (int t = 0; t < NT; ++t) sumi[t] = _mm512_setzero_si512();
            for (int s = 0; s < 4; ++s) {
                const __m512i u = _mm512_and_si512(_mm512_srli_epi16(z, 2 * s), m3);
                const __m512i sc = _mm512_shuffle_epi8(scz, picks[s]);
                const int64_t yo = i * 256 + 64 * s;
                for (int t = 0; t < NT; ++t)
                    sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(u, load_img(a[t], yo)), sc);
            }
            for (int t = 0; t < NT; ++t) {
                const uint8_t* yb = a[t].q + i * kQ8KBytes;
                const float yd = load_f32(yb);
                const __m256i mprod = _mm256_madd_epi16(load256(yb + 260), mins16);
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * yd), _mm256_cvtepi32_ps(fold16(sumi[t])), acc[t]);
                acc[t] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * yd), _mm256_cvtepi32_ps(mprod), acc[t]);
            }
        }
        for (int t = 0; t < NT; ++t) out[t] = hsum8(acc[t]);
    }
};

/// Q3_K: the 16 six-bit scales minus 32 as signed bytes (kquants_avx2.cpp).
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

/// Q3_K (110 bytes: hmask[32], qs[64], scales[12], d): as Q2_K with u = low 2 bits + 4 * high
/// bit (hmask bit s for the first 32 qs bytes, 4 + s for the second), the -4 once per super-block
/// as 4 * sum_g scale_g * bsum_g.
template <int NT>
struct Q3K {
    static void run(int64_t n, const uint8_t* w, const ActRow* a, float* out) {
        __m256 acc[NT];
        for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
        const __m512i m3 = _mm512_set1_epi8(3), one = _mm512_set1_epi8(1);
        const __m512i picks[4] = {word_pick4(0, 1, 0, 1), word_pick4(2, 3, 2, 3), word_pick4(4, 5, 4, 5), word_pick4(6, 7, 6, 7)};
        for (int64_t i = 0; i < n / 256; ++i) {
            const uint8_t* xb = w + i * 110;
            prefetch_w(xb);
            prefetch_w(xb + 64);
            const float d = h2f(xb + 108);
            const __m256i sc16 = _mm256_cvtepi8_epi16(scales_q3k(xb + 96));
            const __m512i scz = scales_by_half(sc16);
            const __m512i hm = _mm512_broadcast_i64x4(load256(xb));
            const __m512i z = _mm512_loadu_si512(xb + 32);
            __m512i sumi[NT];
            for (int t = 0; t < NT; ++t) sumi[t] = _mm512_setzero_si512();
            for (int s = 0; s < 4; ++s) {
                const __m512i cnt = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(s)),
                                                       _mm256_set1_epi16(static_cast<short>(4 + s)), 1);
                const __m512i hb = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hm, cnt), one), 2);
                const __m512i u = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(z, 2 * s), m3), hb);
                const __m512i sc = _mm512_shuffle_epi8(scz, picks[s]);
                const int64_t yo = i * 256 + 64 * s;
                for (int t = 0; t < NT; ++t)
                    sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(u, load_img(a[t], yo)), sc);
            }
            for (int t = 0; t < NT; ++t) {
                const uint8_t* yb = a[t].q + i * kQ8KBytes;
                const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(load256(yb + 260), sc16), 2);
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * load_f32(yb)),
                                         _mm256_cvtepi32_ps(_mm256_sub_epi32(fold16(sumi[t]), corr)), acc[t]);
            }
        }
        for (int t = 0; t < NT; ++t) out[t] = hsum8(acc[t]);
    }
};

/// IQ4_XS: the 8 sub-block scales (ls - 32) of a super-block as int32 (scales_h at q, scales_l at q + 2).
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

/// IQ4_XS (136 bytes: d, scales_h, scales_l[4], qs[128]): per four 32-value sub-blocks (64 qs
/// bytes) one zmm of low and one of high nibbles (Half16 order), kvalues_iq4nl + 128 by vpshufb,
/// vpdpbusd from the activations' corr (-128 * sum(q) per sub-block), times the sub-block scale in
/// int32 (vpmulld), the super-block in float.
template <int NT>
struct Iq4Xs {
    static void run(int64_t n, const uint8_t* w, const ActRow* a, float* out) {
        __m512 acc[NT];
        for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
        const __m512i tbl = _mm512_broadcast_i32x4(load128(kLutIq4nlU.v));
        const __m512i m4 = _mm512_set1_epi8(0x0F);
        const __m512i spread0 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
        const __m512i spread1 = _mm512_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7);
        for (int64_t i = 0; i < n / 256; ++i) {
            const uint8_t* xb = w + i * 136;
            for (int l = 0; l < 136; l += 64) prefetch_w(xb + l);
            const float d = h2f(xb);
            const __m512i ls8 = _mm512_castsi256_si512(scales_iq4xs(xb + 2));
            const __m512i ls[2] = {_mm512_permutexvar_epi32(spread0, ls8), _mm512_permutexvar_epi32(spread1, ls8)};
            __m512i sumi[NT];
            for (int t = 0; t < NT; ++t) sumi[t] = _mm512_setzero_si512();
            for (int q = 0; q < 2; ++q) {
                const __m512i z = _mm512_loadu_si512(xb + 8 + 64 * q);
                const __m512i lo = _mm512_shuffle_epi8(tbl, _mm512_and_si512(z, m4));
                const __m512i hi = _mm512_shuffle_epi8(tbl, _mm512_and_si512(_mm512_srli_epi16(z, 4), m4));
                const int64_t yo = i * 256 + 128 * q;
                for (int t = 0; t < NT; ++t) {
                    __m512i p = _mm512_load_si512(a[t].corr + 4 * (8 * i + 4 * q));
                    p = _mm512_dpbusd_epi32(p, lo, load_img(a[t], yo));
                    p = _mm512_dpbusd_epi32(p, hi, load_img(a[t], yo + 64));
                    sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(p, ls[q]));
                }
            }
            for (int t = 0; t < NT; ++t) {
                const float yd = load_f32(a[t].q + i * kQ8KBytes);
                acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(d * yd), _mm512_cvtepi32_ps(sumi[t]), acc[t]);
            }
        }
        for (int t = 0; t < NT; ++t) {
            const __m256 f = _mm256_add_ps(_mm512_castps512_ps256(acc[t]), _mm512_extractf32x8_ps(acc[t], 1));
            out[t] = hsum8(f);
        }
    }
};

}  // namespace

void fill_kquants_avx512(Table& t) {
    t.dot[static_cast<int>(GgmlType::Q2_K)] = dot_nt<Q2K>;
    t.dot[static_cast<int>(GgmlType::Q3_K)] = dot_nt<Q3K>;
    t.dot[static_cast<int>(GgmlType::Q4_K)] = dot_nt<Q45K<false>::K>;
    t.dot[static_cast<int>(GgmlType::Q5_K)] = dot_nt<Q45K<true>::K>;
    t.dot[static_cast<int>(GgmlType::Q6_K)] = dot_nt<Q6K>;
    t.dot[static_cast<int>(GgmlType::IQ4_XS)] = dot_nt<Iq4Xs>;
}

}  // namespace nitro::cpu::kernels
