// AVX-512 (F, BW, VL, DQ) + VNNI dot-product kernels (compiled with the matching -m flags; chosen at
// run time by matmul.cpp only on CPUs that have all of them). Types: Q8_0, Q4_0, MXFP4, IQ4_NL
// (two 32-value blocks per zmm, vpdpbusd; an odd last block through simd_x86.h), IQ4_XS (the same
// on its 32-value sub-blocks, int32 sub-block scales), Q4_K and Q6_K
// (512-bit: 64 values per step, vpmaddubsw + vpdpwssd applies the sub-block scales), F16, BF16,
// F32 (512-bit FMA). Other types keep the scalar reference.
//
// Every kernel handles 1..4 tokens per weight row; per token the operations and their order are
// the same whatever the token count (kernels.h).
#define NITRO_SIMD_VNNI 1
// GCC 12's own AVX-512 headers build some intrinsics (_mm512_cvtepu16_epi32, _mm512_slli_epi32,
// the 512->256 extracts) from an intentionally undefined vector, which -Wuninitialized reports at
// every inlining site; the warning is about the header, not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
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

// ------------------------------------------------------------------------- 32-value blocks, two per zmm

/// Two consecutive blocks' 32-byte nibble fields as [b0 low nibbles | b0 high | b1 low | b1 high]
/// (128-bit lanes), i.e. both blocks' values in activation order.
inline __m512i nibbles64(const uint8_t* qs0, const uint8_t* qs1) {
    const __m256i x01 = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs0))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs1)), 1);
    const __m512i z = _mm512_shuffle_i64x2(_mm512_castsi256_si512(x01), _mm512_castsi256_si512(x01),
                                           _MM_SHUFFLE(1, 1, 0, 0));
    const __m512i shifts = _mm512_set_epi64(0x0004000400040004, 0x0004000400040004, 0, 0,
                                            0x0004000400040004, 0x0004000400040004, 0, 0);
    return _mm512_and_si512(_mm512_srlv_epi16(z, shifts), _mm512_set1_epi8(0x0F));
}

inline __m512i table16x4(const int8_t* t) {
    return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t)));
}

struct Dec2Q8_0 : DecQ8_0 {
    __m512i pair(const uint8_t* b0, const uint8_t* b1) const {
        return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2))),
                                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + 2)), 1);
    }
};
struct Dec2Q4_0 : DecQ4_0 {
    __m512i pair(const uint8_t* b0, const uint8_t* b1) const {
        return _mm512_sub_epi8(nibbles64(b0 + 2, b1 + 2), _mm512_set1_epi8(8));
    }
};
struct Dec2Mxfp4 : DecMxfp4 {
    __m512i tbl4 = table16x4(kValuesMxfp4);
    __m512i pair(const uint8_t* b0, const uint8_t* b1) const { return _mm512_shuffle_epi8(tbl4, nibbles64(b0 + 1, b1 + 1)); }
};
struct Dec2Iq4Nl : DecIq4Nl {
    __m512i tbl4 = table16x4(quant::kvalues_iq4nl);
    __m512i pair(const uint8_t* b0, const uint8_t* b1) const { return _mm512_shuffle_epi8(tbl4, nibbles64(b0 + 2, b1 + 2)); }
};

/// 32-value weight blocks x Q8_0, two blocks per zmm: |w| (vpabsb) times y negated where w < 0
/// (mask from vpmovb2m), vpdpbusd, int32 -> float, times [dw0*dy0 x8 | dw1*dy1 x8]. An odd last
/// block goes through the 256-bit path. Activations are in [-127, 127] (the Q8_0 quantizer), so
/// negating y never overflows. Per token and block pair: the two 32-byte quant fields (34 bytes
/// apart) in one plain and one masked load, the two f32 activation scales in one 8-byte load
/// spread by vpermps; the weight scales are spread once per pair for all tokens. The scale
/// product is the same f32 multiply dw * dy as in the scalar order, so values do not change.
template <class Dec, int NT>
struct Blocks32x2 {
    static void run(int64_t n, const uint8_t* w, const ActRow* a, float* out) {
        const Dec dec{};
        __m512 acc[NT];
        for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
        const __m512i spread = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
        constexpr __mmask64 kHigh = 0xFFFFFFFF00000000ull;
        const int64_t nb = n / 32;
        int64_t ib = 0;
        for (; ib + 2 <= nb; ib += 2) {
            const uint8_t* x0 = w + ib * Dec::kBytes;
            const uint8_t* x1 = x0 + Dec::kBytes;
            prefetch_w(x0);
            const __m512i wq = dec.pair(x0, x1);
            const __m512i wabs = _mm512_abs_epi8(wq);
            const __mmask64 neg = _mm512_movepi8_mask(wq);
            const __m512 wsc = _mm512_insertf32x8(_mm512_set1_ps(dec.scale(x0)), _mm256_set1_ps(dec.scale(x1)), 1);
            for (int t = 0; t < NT; ++t) {
                const uint8_t* y0 = a[t].q + ib * 34 + 2;
                // lanes 0-31: block ib's quants; lanes 32-63: block ib+1's (y0 + 34 = (y0 + 2) + 32).
                const __m512i y = _mm512_mask_loadu_epi8(
                    _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(y0))), kHigh, y0 + 2);
                const __m512i ys = _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y);
                const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wabs, ys);
                const __m512 ysc = _mm512_permutexvar_ps(
                    spread, _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(a[t].d + ib)))));
                acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(wsc, ysc), _mm512_cvtepi32_ps(p), acc[t]);
            }
        }
        float tail[NT] = {};
        if (ib < nb) {
            ActRow rest[NT];
            for (int t = 0; t < NT; ++t) rest[t] = {a[t].q + ib * 34, a[t].d + ib};
            dot_blocks32_nt<Dec, NT>(32, w + ib * Dec::kBytes, rest, tail);
        }
        for (int t = 0; t < NT; ++t) out[t] = hsum16(acc[t]) + tail[t];
    }
};

template <class Dec>
struct Pairs32 {
    template <int NT>
    struct K : Blocks32x2<Dec, NT> {};
    static void dot(int64_t n, const uint8_t* w, const ActRow* a, int nt, float* out) { by_nt<K>(n, w, a, nt, out); }
};

// ------------------------------------------------------------------------- K-quants x Q8_K

constexpr int kQ8KBytes = 292;  // d f32, qs[256], bsums[16] i16

/// 16 int32 lanes -> 8 (lane i + lane i+8).
inline __m256i fold16(__m512i v) {
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

/// Q4_K: per 64 values one zmm [low nibbles = sub-block 2c | high nibbles = 2c+1]; vpmaddubsw
/// pairs (|q| <= 15), vpdpwssd multiplies by the sub-block scale and accumulates in int32.
template <int NT>
struct Q4K {
    static void run(int64_t n, const uint8_t* w, const ActRow* a, float* out) {
        __m256 acc[NT];
        for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        const __m128i dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
        for (int64_t i = 0; i < n / 256; ++i) {
            const uint8_t* xb = w + i * 144;
            prefetch_w(xb);
            prefetch_w(xb + 64);
            prefetch_w(xb + 128);
            const float d = h2f(xb), dmin = h2f(xb + 2);
            uint8_t sc[8], mn[8];
            unpack_scales_k4(xb + 4, sc, mn);
            int64_t mn64;
            std::memcpy(&mn64, mn, 8);
            const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(_mm_cvtsi64_si128(mn64), dup));
            __m512i sumi[NT];
            for (int t = 0; t < NT; ++t) sumi[t] = _mm512_setzero_si512();
            for (int c = 0; c < 4; ++c) {
                const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 16 + 32 * c));
                const __m512i qz = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(q, m4)),
                                                      _mm256_and_si256(_mm256_srli_epi16(q, 4), m4), 1);
                const __m512i s = _mm512_inserti64x4(_mm512_set1_epi16(sc[2 * c]), _mm256_set1_epi16(sc[2 * c + 1]), 1);
                for (int t = 0; t < NT; ++t) {
                    const __m512i y = _mm512_loadu_si512(a[t].q + i * kQ8KBytes + 4 + 64 * c);
                    sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(qz, y), s);
                }
            }
            for (int t = 0; t < NT; ++t) {
                const uint8_t* yb = a[t].q + i * kQ8KBytes;
                const float yd = load_f32(yb);
                const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb + 260));
                const __m256i mprod = _mm256_madd_epi16(bs, mins16);
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * yd), _mm256_cvtepi32_ps(fold16(sumi[t])), acc[t]);
                acc[t] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * yd), _mm256_cvtepi32_ps(mprod), acc[t]);
            }
        }
        for (int t = 0; t < NT; ++t) out[t] = hsum8(acc[t]);
    }
};

/// Q6_K: per 64 values one zmm of unsigned 6-bit q; each 128-bit lane is one 16-value scale
/// group, so vpdpwssd takes the scales from a vpermw of the 16 int16 scales. The -32 offset is
/// applied once per super-block as 32 * sum_g scale_g * bsum_g.
template <int NT>
struct Q6K {
    static void run(int64_t n, const uint8_t* w, const ActRow* a, float* out) {
        __m256 acc[NT];
        for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
        const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(3);
        // vpermw index: 128-bit lane i of step p takes scale 4p + i.
        __m512i idx[4];
        for (int p = 0; p < 4; ++p) {
            alignas(64) int16_t v[32];
            for (int j = 0; j < 32; ++j) v[j] = static_cast<int16_t>(4 * p + j / 8);
            idx[p] = _mm512_load_si512(v);
        }
        for (int64_t i = 0; i < n / 256; ++i) {
            const uint8_t* xb = w + i * 210;
            for (int l = 0; l < 210; l += 64) prefetch_w(xb + l);
            const float d = h2f(xb + 208);
            const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb + 192)));
            const __m512i sc16z = _mm512_castsi256_si512(sc16);
            __m512i sumi[NT];
            for (int t = 0; t < NT; ++t) sumi[t] = _mm512_setzero_si512();
            for (int h = 0; h < 2; ++h) {
                const __m512i ql = _mm512_loadu_si512(xb + 64 * h);
                const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 128 + 32 * h));
                const __m512i qhz = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
                const __m512i q0 = _mm512_or_si512(_mm512_and_si512(ql, m4),
                                                   _mm512_slli_epi16(_mm512_and_si512(qhz, m2), 4));
                const __m512i q1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                                   _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qhz, 4), m2), 4));
                const __m512i s0 = _mm512_permutexvar_epi16(idx[2 * h], sc16z);
                const __m512i s1 = _mm512_permutexvar_epi16(idx[2 * h + 1], sc16z);
                for (int t = 0; t < NT; ++t) {
                    const uint8_t* yq = a[t].q + i * kQ8KBytes + 4 + 128 * h;
                    sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(q0, _mm512_loadu_si512(yq)), s0);
                    sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(q1, _mm512_loadu_si512(yq + 64)), s1);
                }
            }
            for (int t = 0; t < NT; ++t) {
                const uint8_t* yb = a[t].q + i * kQ8KBytes;
                const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb + 260));
                const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5);
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * load_f32(yb)),
                                         _mm256_cvtepi32_ps(_mm256_sub_epi32(fold16(sumi[t]), corr)), acc[t]);
            }
        }
        for (int t = 0; t < NT; ++t) out[t] = hsum8(acc[t]);
    }
};

/// IQ4_XS: per 64 values (two 32-value sub-blocks, 16 nibble bytes each, as IQ4_NL) one zmm of
/// kvalues_iq4nl via vpshufb, sign trick, vpdpbusd; the 6-bit sub-block scales (ls - 32) are
/// applied in int32 (vpmulld) and the super-block in float (d * dy).
template <int NT>
struct Iq4Xs {
    static void run(int64_t n, const uint8_t* w, const ActRow* a, float* out) {
        __m256 acc[NT];
        for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
        const __m512i tbl = table16x4(quant::kvalues_iq4nl);
        for (int64_t i = 0; i < n / 256; ++i) {
            const uint8_t* xb = w + i * 136;
            for (int l = 0; l < 136; l += 64) prefetch_w(xb + l);
            const float d = h2f(xb);
            const uint16_t sh = load_u16(xb + 2);
            int32_t ls[8];
            for (int ib = 0; ib < 8; ++ib)
                ls[ib] = (((xb[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4)) - 32;
            __m512i sumi[NT];
            for (int t = 0; t < NT; ++t) sumi[t] = _mm512_setzero_si512();
            for (int p = 0; p < 4; ++p) {
                const uint8_t* qs = xb + 8 + 32 * p;
                const __m512i wq = _mm512_shuffle_epi8(tbl, nibbles64(qs, qs + 16));
                const __m512i wabs = _mm512_abs_epi8(wq);
                const __mmask64 neg = _mm512_movepi8_mask(wq);
                const __m512i sc = _mm512_inserti64x4(_mm512_set1_epi32(ls[2 * p]), _mm256_set1_epi32(ls[2 * p + 1]), 1);
                for (int t = 0; t < NT; ++t) {
                    const __m512i y = _mm512_loadu_si512(a[t].q + i * kQ8KBytes + 4 + 64 * p);
                    const __m512i ys = _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y);
                    const __m512i dp = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wabs, ys);
                    sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(dp, sc));
                }
            }
            for (int t = 0; t < NT; ++t) {
                const float yd = load_f32(a[t].q + i * kQ8KBytes);
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * yd), _mm256_cvtepi32_ps(fold16(sumi[t])), acc[t]);
            }
        }
        for (int t = 0; t < NT; ++t) out[t] = hsum8(acc[t]);
    }
};

template <template <int> class K>
void dot_nt(int64_t n, const uint8_t* w, const ActRow* a, int nt, float* out) {
    by_nt<K>(n, w, a, nt, out);
}

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
    t.dot[static_cast<int>(GgmlType::Q8_0)] = Pairs32<Dec2Q8_0>::dot;
    t.dot[static_cast<int>(GgmlType::Q4_0)] = Pairs32<Dec2Q4_0>::dot;
    t.dot[static_cast<int>(GgmlType::MXFP4)] = Pairs32<Dec2Mxfp4>::dot;
    t.dot[static_cast<int>(GgmlType::IQ4_NL)] = Pairs32<Dec2Iq4Nl>::dot;
    t.dot[static_cast<int>(GgmlType::Q4_K)] = dot_nt<Q4K>;
    t.dot[static_cast<int>(GgmlType::Q6_K)] = dot_nt<Q6K>;
    t.dot[static_cast<int>(GgmlType::IQ4_XS)] = dot_nt<Iq4Xs>;
    t.dot[static_cast<int>(GgmlType::F32)] = FloatDot<LdF32>::dot;
    t.dot[static_cast<int>(GgmlType::F16)] = FloatDot<LdF16>::dot;
    t.dot[static_cast<int>(GgmlType::BF16)] = FloatDot<LdBF16>::dot;
}

}  // namespace nitro::cpu::kernels
