// AVX2 + FMA + F16C dot-product kernels (compiled with -mavx2 -mfma -mf16c; chosen at run time by
// matmul.cpp only on CPUs that have them): the 32-value block formats (MXFP4, IQ4_NL, Q4_0, Q4_1,
// Q5_0, Q5_1 in pairs of blocks, Q8_0 per block: simd_x86.h) and F16, BF16, F32. The K-quants and
// IQ4_XS are in kquants_avx2.cpp.
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

// ------------------------------------------------------------------------- 32-value blocks

/// MXFP4, IQ4_NL, Q4_0, Q4_1, Q5_0, Q5_1: pairs of blocks (simd_x86.h pair_step).
template <class Dec>
struct Pairs {
    template <int NT>
    struct K {
        static void run(int64_t n, const uint8_t* w, const ActRow* a, float* out) {
            const Dec dec{};
            __m256 acc[NT];
            for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
            pairs_from<Dec, NT>(dec, 0, n / 32, w, a, acc);
            for (int t = 0; t < NT; ++t) out[t] = hsum8(acc[t]);
        }
    };
    static void dot(int64_t n, const uint8_t* w, const ActRow* a, int nt, float* out) { by_nt<K>(n, w, a, nt, out); }
};

template <int NT>
struct Q8_0 {
    static void run(int64_t n, const uint8_t* w, const ActRow* a, float* out) {
        __m256 acc[NT];
        for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
        for (int64_t ib = 0; ib < n / 32; ++ib) {
            const uint8_t* x = w + ib * 34;
            if ((ib & 1) == 0) prefetch_w(x);
            q8_0_block<NT>(x, ib, a, acc);
        }
        for (int t = 0; t < NT; ++t) out[t] = hsum8(acc[t]);
    }
};

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
    t.dot[static_cast<int>(GgmlType::Q8_0)] = dot_nt<Q8_0>;
    t.dot[static_cast<int>(GgmlType::Q4_0)] = Pairs<DecQ4_0>::dot;
    t.dot[static_cast<int>(GgmlType::Q4_1)] = Pairs<DecQ4_1>::dot;
    t.dot[static_cast<int>(GgmlType::Q5_0)] = Pairs<DecQ5_0>::dot;
    t.dot[static_cast<int>(GgmlType::Q5_1)] = Pairs<DecQ5_1>::dot;
    t.dot[static_cast<int>(GgmlType::MXFP4)] = Pairs<DecMxfp4>::dot;
    t.dot[static_cast<int>(GgmlType::IQ4_NL)] = Pairs<DecIq4Nl>::dot;
    t.dot[static_cast<int>(GgmlType::F32)] = FloatDot<LdF32>::dot;
    t.dot[static_cast<int>(GgmlType::F16)] = FloatDot<LdF16>::dot;
    t.dot[static_cast<int>(GgmlType::BF16)] = FloatDot<LdBF16>::dot;
}

}  // namespace nitro::cpu::kernels
