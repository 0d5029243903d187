// AVX2 + FMA + F16C kernels of the 256-value formats against Q8_K: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
// IQ4_XS (compiled with -mavx2 -mfma -mf16c; chosen at run time only on CPUs that have them).
//
// Shape of every kernel: per super-block, the weights are decoded 32 values at a time into
// unsigned bytes (the value plus the format's offset), multiplied with the activations by
// vpmaddubsw (int16 pairs, no saturation for these ranges), and scaled per 16 or 32 values by
// vpmaddwd against the integer sub-block scales; the super-block sum is exact in int32 and goes
// into 8 float lanes once per super-block as d * dy * sum. Offsets and mins are applied once per
// super-block through the activations' block sums (Q8_K bsums). Activations come from the image
// of kernels.h (ActOrder K4 / K2 / Half16 / Natural), so every activation load is one aligned
// 32-byte load whatever the weights' value order.
//
// Every kernel handles 1..4 tokens per weight row; per token the operations and their order are
// the same whatever the token count (kernels.h).
#define NITRO_SIMD_VNNI 0
#include "cpu/simd_x86.h"

namespace nitro::cpu::kernels {
namespace {

constexpr int kQ8KBytes = 292;  // d f32, qs[256], bsums[16] i16

inline __m256i load_img(const ActRow& a, int64_t off) {
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(a.img + off));
}

/// Bit `b` of every byte moved to bit `to` (other bits cleared): 16-bit shifts never carry a bit
/// into another byte's bit `to` for these distances.
inline __m256i bit_to(__m256i v, int b, int to) {
    const __m256i x = b < to ? _mm256_slli_epi16(v, to - b) : _mm256_srli_epi16(v, b - to);
    return _mm256_and_si256(x, _mm256_set1_epi8(static_cast<char>(1 << to)));
}

/// Q4_K (144 bytes: d, dmin, scales[12], qs[128]) and Q5_K (176: d, dmin, scales[12], qh[32],
/// qs[128]). Per 64 values (32 qs bytes): low nibbles = sub-block 2c, high = 2c+1, plus the fifth
/// bit (qh bit 2c / 2c+1) for Q5_K; mins via bsums.
template <bool kFive>
struct Q45K {
    template <int NT>
    struct K {
        static void run(int64_t n, const uint8_t* w, const ActRow* a, float* out) {
            constexpr int64_t kBytes = kFive ? 176 : 144;
            constexpr int64_t kQs = kFive ? 48 : 16;
            __m256 acc[NT];
            for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
            const __m256i m4 = _mm256_set1_epi8(0x0F);
            const __m128i dup = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
            for (int64_t i = 0; i < n / 256; ++i) {
                const uint8_t* xb = w + i * kBytes;
                for (int64_t l = 0; l < kBytes; l += 64) prefetch_w(xb + l);
                const float d = h2f(xb), dmin = h2f(xb + 2);
                const __m128i sm = scales_mins_k4(xb + 4);
                const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, dup));  // each min twice (16 bsums)
                const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));   // 8 scale words, both lanes
                __m256i qh;
                if constexpr (kFive) qh = load256(xb + 16);
                __m256i sumi[NT];
                for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
                for (int c = 0; c < 4; ++c) {
                    const __m256i q = load256(xb + kQs + 32 * c);
                    __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                    if constexpr (kFive) {
                        lo = _mm256_or_si256(lo, bit_to(qh, 2 * c, 4));
                        hi = _mm256_or_si256(hi, bit_to(qh, 2 * c + 1, 4));
                    }
                    const __m256i s0 = _mm256_shuffle_epi8(sc, word_pick(2 * c, 2 * c));
                    const __m256i s1 = _mm256_shuffle_epi8(sc, word_pick(2 * c + 1, 2 * c + 1));
                    // K4 image: values 64c.. at 128 (c/2) + 32 (c%2), values 64c+32.. 64 bytes later.
                    const int64_t yo = i * 256 + 128 * (c / 2) + 32 * (c % 2);
                    for (int t = 0; t < NT; ++t) {
                        const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load_img(a[t], yo)), s0);
                        const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load_img(a[t], yo + 64)), s1);
                        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(p0, p1));
                    }
                }
                for (int t = 0; t < NT; ++t) {
                    const uint8_t* yb = a[t].q + i * kQ8KBytes;
                    const float yd = load_f32(yb);
                    const __m256i mprod = _mm256_madd_epi16(load256(yb + 260), mins16);
                    acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * yd), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
                    acc[t] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * yd), _mm256_cvtepi32_ps(mprod), acc[t]);
                }
            }
            for (int t = 0; t < NT; ++t) out[t] = hsum8(acc[t]);
        }
    };
};

/// Q6_K (210 bytes: ql[128], qh[64], scales[16] int8, d): unsigned 6-bit q (0..63) x y in int16
/// pairs times the int8 scale per 16 values; the -32 offset once per super-block as
/// 32 * sum_g scale_g * bsum_g.
template <int NT>
struct Q6K {
    static void run(int64_t n, const uint8_t* w, const ActRow* a, float* out) {
        __m256 acc[NT];
        for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
        const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
        for (int64_t i = 0; i < n / 256; ++i) {
            const uint8_t* xb = w + i * 210;
            for (int l = 0; l < 210; l += 64) prefetch_w(xb + l);
            const float d = h2f(xb + 208);
            const __m128i sc8 = load128(xb + 192);
            const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
            const __m256i scl = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(sc16));       // scales 0-7
            const __m256i sch = _mm256_broadcastsi128_si256(_mm256_extracti128_si256(sc16, 1));  // scales 8-15
            __m256i sumi[NT];
            for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
            for (int h = 0; h < 2; ++h) {
                const __m256i ql0 = load256(xb + 64 * h);
                const __m256i ql1 = load256(xb + 64 * h + 32);
                const __m256i qh = load256(xb + 128 + 32 * h);
                const __m256i& sch_h = h ? sch : scl;
                for (int k = 0; k < 4; ++k) {
                    const __m256i l = (k & 1) ? ql1 : ql0;
                    const __m256i lo4 = k < 2 ? _mm256_and_si256(l, m4) : _mm256_and_si256(_mm256_srli_epi16(l, 4), m4);
                    const __m256i hi2 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), m2);
                    const __m256i q = _mm256_or_si256(lo4, _mm256_slli_epi16(hi2, 4));
                    const __m256i s = _mm256_shuffle_epi8(sch_h, word_pick(2 * k, 2 * k + 1));
                    const int64_t yo = i * 256 + 128 * h + 32 * k;
                    for (int t = 0; t < NT; ++t) {
                        const __m256i p = _mm256_maddubs_epi16(q, load_img(a[t], yo));
                        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(p, s));
                    }
                }
            }
            for (int t = 0; t < NT; ++t) {
                const uint8_t* yb = a[t].q + i * kQ8KBytes;
                const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(load256(yb + 260), sc16), 5);
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * load_f32(yb)),
                                         _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[t], corr)), acc[t]);
            }
        }
        for (int t = 0; t < NT; ++t) out[t] = hsum8(acc[t]);
    }
};

/// Q2_K (84 bytes: scales[16] (low nibble scale, high nibble min), qs[64], d, dmin): per 32 qs
/// bytes four 2-bit planes of 32 values; the scale per 16 values by vpmaddwd, mins via bsums.
template <int NT>
struct Q2K {
    static void run(int64_t n, const uint8_t* w, const ActRow* a, float* out) {
        __m256 acc[NT];
        for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
        const __m256i m3 = _mm256_set1_epi8(3);
        const __m128i m4 = _mm_set1_epi8(0x0F);
        for (int64_t i = 0; i < n / 256; ++i) {
            const uint8_t* xb = w + i * 84;
            prefetch_w(xb);
            prefetch_w(xb + 64);
            const float d = h2f(xb + 80), dmin = h2f(xb + 82);
            const __m128i sm = load128(xb);
            const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), m4));
            const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sm, m4));
            const __m256i scs[2] = {_mm256_broadcastsi128_si256(_mm256_castsi256_si128(sc16)),
                                    _mm256_broadcastsi128_si256(_mm256_extracti128_si256(sc16, 1))};
            __m256i sumi[NT];
            for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
            for (int k = 0; k < 2; ++k) {
                const __m256i q2 = load256(xb + 16 + 32 * k);
                for (int s = 0; s < 4; ++s) {
                    const __m256i u = _mm256_and_si256(_mm256_srli_epi16(q2, 2 * s), m3);  // values 128k + 32s ..
                    const __m256i sc = _mm256_shuffle_epi8(scs[k], word_pick(2 * s, 2 * s + 1));
                    const int64_t yo = i * 256 + 32 * (2 * s + k);  // K2 image
                    for (int t = 0; t < NT; ++t)
                        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(_mm256_maddubs_epi16(u, load_img(a[t], yo)), sc));
                }
            }
            for (int t = 0; t < NT; ++t) {
                const uint8_t* yb = a[t].q + i * kQ8KBytes;
                const float yd = load_f32(yb);
                const __m256i mprod = _mm256_madd_epi16(load256(yb + 260), mins16);
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * yd), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
                acc[t] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * yd), _mm256_cvtepi32_ps(mprod), acc[t]);
            }
        }
        for (int t = 0; t < NT; ++t) out[t] = hsum8(acc[t]);
    }
};

/// Q3_K: the 16 six-bit scales minus 32 (scales[12]) as signed bytes (llama.cpp's word trick).
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

/// Q3_K (110 bytes: hmask[32], qs[64], scales[12], d): q = low 2 bits + 4 * high bit - 4; the
/// unsigned part (0..7) goes through vpmaddubsw, the -4 once per super-block as
/// 4 * sum_g scale_g * bsum_g.
template <int NT>
struct Q3K {
    static void run(int64_t n, const uint8_t* w, const ActRow* a, float* out) {
        __m256 acc[NT];
        for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
        const __m256i m3 = _mm256_set1_epi8(3);
        for (int64_t i = 0; i < n / 256; ++i) {
            const uint8_t* xb = w + i * 110;
            prefetch_w(xb);
            prefetch_w(xb + 64);
            const float d = h2f(xb + 108);
            const __m256i sc16 = _mm256_cvtepi8_epi16(scales_q3k(xb + 96));
            const __m256i scs[2] = {_mm256_broadcastsi128_si256(_mm256_castsi256_si128(sc16)),
                                    _mm256_broadcastsi128_si256(_mm256_extracti128_si256(sc16, 1))};
            const __m256i hm = load256(xb);
            __m256i sumi[NT];
            for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
            for (int k = 0; k < 2; ++k) {
                const __m256i q3 = load256(xb + 32 + 32 * k);
                for (int s = 0; s < 4; ++s) {
                    const __m256i u = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q3, 2 * s), m3), bit_to(hm, 4 * k + s, 2));
                    const __m256i sc = _mm256_shuffle_epi8(scs[k], word_pick(2 * s, 2 * s + 1));
                    const int64_t yo = i * 256 + 32 * (2 * s + k);  // K2 image
                    for (int t = 0; t < NT; ++t)
                        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(_mm256_maddubs_epi16(u, load_img(a[t], yo)), sc));
                }
            }
            for (int t = 0; t < NT; ++t) {
                const uint8_t* yb = a[t].q + i * kQ8KBytes;
                const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(load256(yb + 260), sc16), 2);
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * load_f32(yb)),
                                         _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[t], corr)), acc[t]);
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

/// IQ4_XS (136 bytes: d, scales_h, scales_l[4], qs[128]): per pair of 32-value sub-blocks (32
/// qs bytes) kvalues_iq4nl by vpshufb, sign trick (|w| <= 127), the sub-block scale by vpmaddwd.
template <int NT>
struct Iq4Xs {
    static void run(int64_t n, const uint8_t* w, const ActRow* a, float* out) {
        __m256 acc[NT];
        for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
        const __m256i tbl = lut256(kLutIq4nlS);
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        for (int64_t i = 0; i < n / 256; ++i) {
            const uint8_t* xb = w + i * 136;
            for (int l = 0; l < 136; l += 64) prefetch_w(xb + l);
            const float d = h2f(xb);
            const __m256i ls32 = scales_iq4xs(xb + 2);
            const __m128i ls16 = _mm_packs_epi32(_mm256_castsi256_si128(ls32), _mm256_extracti128_si256(ls32, 1));
            const __m256i ls = _mm256_broadcastsi128_si256(ls16);
            __m256i sumi[NT];
            for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
            for (int p = 0; p < 4; ++p) {
                const __m256i v = load256(xb + 8 + 32 * p);
                const __m256i lo = _mm256_shuffle_epi8(tbl, _mm256_and_si256(v, m4));
                const __m256i hi = _mm256_shuffle_epi8(tbl, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
                const __m256i lo_abs = _mm256_sign_epi8(lo, lo), hi_abs = _mm256_sign_epi8(hi, hi);
                const __m256i sc = _mm256_shuffle_epi8(ls, word_pick(2 * p, 2 * p + 1));
                const int64_t yo = i * 256 + half16_pair_offset(2 * p);
                for (int t = 0; t < NT; ++t) {
                    const __m256i pl = _mm256_maddubs_epi16(lo_abs, _mm256_sign_epi8(load_img(a[t], yo), lo));
                    const __m256i ph = _mm256_maddubs_epi16(hi_abs, _mm256_sign_epi8(load_img(a[t], yo + 64), hi));
                    sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(_mm256_madd_epi16(pl, sc), _mm256_madd_epi16(ph, sc)));
                }
            }
            for (int t = 0; t < NT; ++t) {
                const float yd = load_f32(a[t].q + i * kQ8KBytes);
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * yd), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
            }
        }
        for (int t = 0; t < NT; ++t) out[t] = hsum8(acc[t]);
    }
};

}  // namespace

void fill_kquants_avx2(Table& t) {
    t.dot[static_cast<int>(GgmlType::Q2_K)] = dot_nt<Q2K>;
    t.dot[static_cast<int>(GgmlType::Q3_K)] = dot_nt<Q3K>;
    t.dot[static_cast<int>(GgmlType::Q4_K)] = dot_nt<Q45K<false>::K>;
    t.dot[static_cast<int>(GgmlType::Q5_K)] = dot_nt<Q45K<true>::K>;
    t.dot[static_cast<int>(GgmlType::Q6_K)] = dot_nt<Q6K>;
    t.dot[static_cast<int>(GgmlType::IQ4_XS)] = dot_nt<Iq4Xs>;
}

}  // namespace nitro::cpu::kernels
