// AVX2 + FMA + F16C dot-product kernels (compiled with -mavx2 -mfma -mf16c; chosen at run time by
// matmul.cpp only on CPUs that have them). Types: Q8_0, Q4_0, MXFP4, IQ4_NL (simd_x86.h), Q4_K,
// Q6_K, F16, BF16, F32; the others keep the scalar reference.
//
// Every kernel handles 1..4 tokens per weight row; per token the operations and their order are
// the same whatever the token count (kernels.h).
#define NITRO_SIMD_VNNI 0
#include "cpu/simd_x86.h"

#include <cmath>

namespace nitro::cpu::kernels {
namespace {

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

// ------------------------------------------------------------------------- K-quants x Q8_K

constexpr int kQ8KBytes = 292;  // d f32, qs[256], bsums[16] i16

/// Q4_K: per 64 values (32 bytes of nibbles), low nibbles = sub-block 2c, high = 2c+1:
/// int16 pair products (|q| <= 15) times the 6-bit scale, int32 per super-block; mins through
/// the activation block sums.
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
            __m256i sumi[NT];
            for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
            for (int c = 0; c < 4; ++c) {
                const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 16 + 32 * c));
                const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                const __m256i s0 = _mm256_set1_epi16(sc[2 * c]), s1 = _mm256_set1_epi16(sc[2 * c + 1]);
                for (int t = 0; t < NT; ++t) {
                    const uint8_t* yq = a[t].q + i * kQ8KBytes + 4 + 64 * c;
                    const __m256i p0 = _mm256_maddubs_epi16(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yq)));
                    const __m256i p1 = _mm256_maddubs_epi16(hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yq + 32)));
                    sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(_mm256_madd_epi16(p0, s0), _mm256_madd_epi16(p1, s1)));
                }
            }
            for (int t = 0; t < NT; ++t) {
                const uint8_t* yb = a[t].q + i * kQ8KBytes;
                const float yd = load_f32(yb);
                const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb + 260));
                const __m256i mprod = _mm256_madd_epi16(bs, mins16);
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * yd), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
                acc[t] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * yd), _mm256_cvtepi32_ps(mprod), acc[t]);
            }
        }
        for (int t = 0; t < NT; ++t) out[t] = hsum8(acc[t]);
    }
};

/// Q6_K: unsigned 6-bit q (0..63) x y in int16 pairs times the int8 scale per 16 values; the -32
/// offset is applied once per super-block as 32 * sum_g scale_g * bsum_g.
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
            const int8_t* scales = reinterpret_cast<const int8_t*>(xb + 192);
            const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales)));
            __m256i sumi[NT];
            for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
            for (int h = 0; h < 2; ++h) {
                const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 64 * h));
                const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 64 * h + 32));
                const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 128 + 32 * h));
                for (int k = 0; k < 4; ++k) {
                    const __m256i l = (k & 1) ? ql1 : ql0;
                    const __m256i lo4 = k < 2 ? _mm256_and_si256(l, m4) : _mm256_and_si256(_mm256_srli_epi16(l, 4), m4);
                    const __m256i hi2 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), m2);
                    const __m256i q = _mm256_or_si256(lo4, _mm256_slli_epi16(hi2, 4));
                    const int g = 8 * h + 2 * k;
                    const __m256i s = _mm256_setr_m128i(_mm_set1_epi16(scales[g]), _mm_set1_epi16(scales[g + 1]));
                    for (int t = 0; t < NT; ++t) {
                        const uint8_t* yq = a[t].q + i * kQ8KBytes + 4 + 128 * h + 32 * k;
                        const __m256i p = _mm256_maddubs_epi16(q, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yq)));
                        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(p, s));
                    }
                }
            }
            for (int t = 0; t < NT; ++t) {
                const uint8_t* yb = a[t].q + i * kQ8KBytes;
                const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb + 260));
                const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5);
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * load_f32(yb)),
                                         _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[t], corr)), acc[t]);
            }
        }
        for (int t = 0; t < NT; ++t) out[t] = hsum8(acc[t]);
    }
};

template <template <int> class K>
void dot_nt(int64_t n, const uint8_t* w, const ActRow* a, int nt, float* out) {
    by_nt<K>(n, w, a, nt, out);
}

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

}  // namespace

void fill_avx2(Table& t) {
    t.axpy_f16 = axpy_f16_avx2;
    t.dot[static_cast<int>(GgmlType::Q8_0)] = Blocks32<DecQ8_0>::dot;
    t.dot[static_cast<int>(GgmlType::Q4_0)] = Blocks32<DecQ4_0>::dot;
    t.dot[static_cast<int>(GgmlType::MXFP4)] = Blocks32<DecMxfp4>::dot;
    t.dot[static_cast<int>(GgmlType::IQ4_NL)] = Blocks32<DecIq4Nl>::dot;
    t.dot[static_cast<int>(GgmlType::Q4_K)] = dot_nt<Q4K>;
    t.dot[static_cast<int>(GgmlType::Q6_K)] = dot_nt<Q6K>;
    t.dot[static_cast<int>(GgmlType::F32)] = FloatDot<LdF32>::dot;
    t.dot[static_cast<int>(GgmlType::F16)] = FloatDot<LdF16>::dot;
    t.dot[static_cast<int>(GgmlType::BF16)] = FloatDot<LdBF16>::dot;
}

}  // namespace nitro::cpu::kernels
