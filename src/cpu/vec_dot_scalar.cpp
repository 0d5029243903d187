// Scalar reference dot products, one per weight type, against the activation row in the type's
// vec-dot type (matmul.h). Each follows the arithmetic structure of ggml's scalar kernels
// (ggml/src/ggml-cpu/quants.c ggml_vec_dot_*_generic, ggml-cpu/vec.cpp ggml_vec_dot_f16/bf16/f32):
// exact integer sums inside a block, then one float multiply-add per block (K-quants: eight float
// lanes per super-block, as ggml's aux32/sums[8]), float accumulation across blocks; the plain
// float types accumulate in double. This file is compiled without FMA contraction differences
// mattering: every float operation is written out explicitly.
#include "core/error.h"
#include "core/fp16.h"
#include "cpu/kernels.h"
#include "quant/blocks.h"
#include "quant/iq_grids.h"

#include <cstring>

namespace nitro::cpu::kernels {
namespace {

using namespace nitro::quant;

template <typename B>
inline B blk(const uint8_t* p, int64_t i) {
    B b;
    std::memcpy(&b, p + i * static_cast<int64_t>(sizeof(B)), sizeof(B));
    return b;
}

// ------------------------------------------------------------------------- plain float types

float dot_f32(int64_t n, const uint8_t* w, const uint8_t* a) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        const float x = load_f32(w + 4 * i), y = load_f32(a + 4 * i);
        sum += static_cast<double>(x * y);
    }
    return static_cast<float>(sum);
}

float dot_f16(int64_t n, const uint8_t* w, const uint8_t* a) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        sum += static_cast<double>(fp16_to_f32(load_u16(w + 2 * i)) * fp16_to_f32(load_u16(a + 2 * i)));
    }
    return static_cast<float>(sum);
}

float dot_bf16(int64_t n, const uint8_t* w, const uint8_t* a) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        sum += static_cast<double>(bf16_to_f32(load_u16(w + 2 * i)) * bf16_to_f32(load_u16(a + 2 * i)));
    }
    return static_cast<float>(sum);
}

// ------------------------------------------------------------------------- 32-value blocks x Q8_0

float dot_q8_0(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sumf = 0.0f;
    for (int64_t ib = 0; ib < n / QK32; ++ib) {
        const auto x = blk<BlockQ8_0>(w, ib);
        const auto y = blk<BlockQ8_0>(a, ib);
        int sumi = 0;
        for (int j = 0; j < QK32; ++j) sumi += x.qs[j] * y.qs[j];
        sumf += static_cast<float>(sumi) * (fp16_to_f32(x.d) * fp16_to_f32(y.d));
    }
    return sumf;
}

float dot_q4_0(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sumf = 0.0f;
    for (int64_t ib = 0; ib < n / QK32; ++ib) {
        const auto x = blk<BlockQ4_0>(w, ib);
        const auto y = blk<BlockQ8_0>(a, ib);
        int s0 = 0, s1 = 0;
        for (int j = 0; j < QK32 / 2; ++j) {
            s0 += ((x.qs[j] & 0x0F) - 8) * y.qs[j];
            s1 += ((x.qs[j] >> 4) - 8) * y.qs[j + QK32 / 2];
        }
        sumf += static_cast<float>(s0 + s1) * fp16_to_f32(x.d) * fp16_to_f32(y.d);
    }
    return sumf;
}

float dot_q4_1(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sumf = 0.0f;
    for (int64_t ib = 0; ib < n / QK32; ++ib) {
        const auto x = blk<BlockQ4_1>(w, ib);
        const auto y = blk<BlockQ8_1>(a, ib);
        int s0 = 0, s1 = 0;
        for (int j = 0; j < QK32 / 2; ++j) {
            s0 += (x.qs[j] & 0x0F) * y.qs[j];
            s1 += (x.qs[j] >> 4) * y.qs[j + QK32 / 2];
        }
        sumf += (fp16_to_f32(x.d) * fp16_to_f32(y.d)) * static_cast<float>(s0 + s1) +
                fp16_to_f32(x.m) * fp16_to_f32(y.s);
    }
    return sumf;
}

float dot_q5_0(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sumf = 0.0f;
    for (int64_t ib = 0; ib < n / QK32; ++ib) {
        const auto x = blk<BlockQ5_0>(w, ib);
        const auto y = blk<BlockQ8_0>(a, ib);
        uint32_t qh;
        std::memcpy(&qh, x.qh, 4);
        int s0 = 0, s1 = 0;
        for (int j = 0; j < QK32 / 2; ++j) {
            const int h0 = static_cast<int>((qh >> j) & 1) << 4;
            const int h1 = static_cast<int>((qh >> (j + 16)) & 1) << 4;
            s0 += (((x.qs[j] & 0x0F) | h0) - 16) * y.qs[j];
            s1 += (((x.qs[j] >> 4) | h1) - 16) * y.qs[j + QK32 / 2];
        }
        sumf += (fp16_to_f32(x.d) * fp16_to_f32(y.d)) * static_cast<float>(s0 + s1);
    }
    return sumf;
}

float dot_q5_1(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sumf = 0.0f;
    for (int64_t ib = 0; ib < n / QK32; ++ib) {
        const auto x = blk<BlockQ5_1>(w, ib);
        const auto y = blk<BlockQ8_1>(a, ib);
        uint32_t qh;
        std::memcpy(&qh, x.qh, 4);
        int s0 = 0, s1 = 0;
        for (int j = 0; j < QK32 / 2; ++j) {
            const int h0 = static_cast<int>((qh >> j) & 1) << 4;
            const int h1 = static_cast<int>((qh >> (j + 16)) & 1) << 4;
            s0 += ((x.qs[j] & 0x0F) | h0) * y.qs[j];
            s1 += ((x.qs[j] >> 4) | h1) * y.qs[j + QK32 / 2];
        }
        sumf += (fp16_to_f32(x.d) * fp16_to_f32(y.d)) * static_cast<float>(s0 + s1) +
                fp16_to_f32(x.m) * fp16_to_f32(y.s);
    }
    return sumf;
}

float dot_mxfp4(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sumf = 0.0f;
    for (int64_t ib = 0; ib < n / QK32; ++ib) {
        const auto x = blk<BlockMXFP4>(w, ib);
        const auto y = blk<BlockQ8_0>(a, ib);
        const float d = fp16_to_f32(y.d) * e8m0_half(x.e);
        int s0 = 0, s1 = 0;
        for (int j = 0; j < QK32 / 2; ++j) {
            s0 += y.qs[j] * kValuesMxfp4[x.qs[j] & 0xF];
            s1 += y.qs[j + QK32 / 2] * kValuesMxfp4[x.qs[j] >> 4];
        }
        sumf += d * static_cast<float>(s0 + s1);
    }
    return sumf;
}

float dot_iq4_nl(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sumf = 0.0f;
    for (int64_t ib = 0; ib < n / QK32; ++ib) {
        const auto x = blk<BlockIQ4_NL>(w, ib);
        const auto y = blk<BlockQ8_0>(a, ib);
        const float d = fp16_to_f32(y.d) * fp16_to_f32(x.d);
        int s0 = 0, s1 = 0;
        for (int j = 0; j < QK32 / 2; ++j) {
            s0 += y.qs[j] * kvalues_iq4nl[x.qs[j] & 0xF];
            s1 += y.qs[j + QK32 / 2] * kvalues_iq4nl[x.qs[j] >> 4];
        }
        sumf += d * static_cast<float>(s0 + s1);
    }
    return sumf;
}

// ------------------------------------------------------------------------- K-quants x Q8_K

/// The shared tail of the K-quant kernels: 256 signed quants `q` (value order), one integer
/// scale per 16 values `sc16`, accumulated as ggml does: aux32[l] (8 lanes) += sc * q * y, then
/// sums[l] += d * aux32[l].
inline void accumulate_k(const int8_t* q, const int* sc16, const int8_t* y, float d, float sums[8]) {
    int32_t aux32[8] = {};
    for (int g = 0; g < QK_K / 16; ++g) {
        for (int h = 0; h < 2; ++h) {
            for (int l = 0; l < 8; ++l) aux32[l] += sc16[g] * (q[16 * g + 8 * h + l] * y[16 * g + 8 * h + l]);
        }
    }
    for (int l = 0; l < 8; ++l) sums[l] += d * static_cast<float>(aux32[l]);
}

float dot_q2_k(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const auto x = blk<BlockQ2_K>(w, i);
        const auto y = blk<BlockQ8_K>(a, i);
        int summs = 0;
        for (int j = 0; j < 16; ++j) summs += y.bsums[j] * (x.scales[j] >> 4);
        const float dall = y.d * fp16_to_f32(x.d);
        const float dmin = y.d * fp16_to_f32(x.dmin);
        int isum = 0, is = 0;
        const int8_t* q8 = y.qs;
        for (int k = 0; k < QK_K / 128; ++k) {
            const uint8_t* q2 = x.qs + 32 * k;
            for (int shift = 0; shift < 8; shift += 2) {
                int s = 0;
                for (int l = 0; l < 16; ++l) s += q8[l] * ((q2[l] >> shift) & 3);
                isum += (x.scales[is++] & 0xF) * s;
                s = 0;
                for (int l = 16; l < 32; ++l) s += q8[l] * ((q2[l] >> shift) & 3);
                isum += (x.scales[is++] & 0xF) * s;
                q8 += 32;
            }
        }
        sumf += dall * static_cast<float>(isum) - dmin * static_cast<float>(summs);
    }
    return sumf;
}

float dot_q3_k(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sums[8] = {};
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const auto x = blk<BlockQ3_K>(w, i);
        const auto y = blk<BlockQ8_K>(a, i);
        int8_t q[QK_K];
        for (int half = 0; half < 2; ++half) {
            const uint8_t* q3 = x.qs + 32 * half;
            for (int s = 0; s < 4; ++s) {
                const uint8_t m = static_cast<uint8_t>(1u << (4 * half + s));
                for (int l = 0; l < 32; ++l) {
                    q[128 * half + 32 * s + l] =
                        static_cast<int8_t>(((q3[l] >> (2 * s)) & 3) - ((x.hmask[l] & m) ? 0 : 4));
                }
            }
        }
        // 16 six-bit scales: low 4 bits from scales[0..7] nibbles, high 2 bits from scales[8..11].
        int sc[16];
        for (int j = 0; j < 16; ++j) {
            const int lo = j < 8 ? (x.scales[j] & 0xF) : (x.scales[j - 8] >> 4);
            const int hi = (x.scales[8 + (j % 4)] >> (2 * (j / 4))) & 3;
            sc[j] = (lo | (hi << 4)) - 32;
        }
        accumulate_k(q, sc, y.qs, fp16_to_f32(x.d) * y.d, sums);
    }
    float sumf = 0.0f;
    for (int l = 0; l < 8; ++l) sumf += sums[l];
    return sumf;
}

/// Q4_K and Q5_K: 4/5-bit unsigned quants, 8 scales and 8 mins per super-block.
template <bool kFive>
float dot_q45_k(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sums[8] = {};
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        uint16_t xd, xdmin;
        const uint8_t *scales, *qs, *qh = nullptr;
        BlockQ4_K b4;
        BlockQ5_K b5;
        if constexpr (kFive) {
            b5 = blk<BlockQ5_K>(w, i);
            xd = b5.d, xdmin = b5.dmin, scales = b5.scales, qs = b5.qs, qh = b5.qh;
        } else {
            b4 = blk<BlockQ4_K>(w, i);
            xd = b4.d, xdmin = b4.dmin, scales = b4.scales, qs = b4.qs;
        }
        const auto y = blk<BlockQ8_K>(a, i);
        int8_t q[QK_K];
        for (int j = 0; j < QK_K / 64; ++j) {
            for (int l = 0; l < 32; ++l) {
                q[64 * j + l] = static_cast<int8_t>(qs[32 * j + l] & 0xF);
                q[64 * j + 32 + l] = static_cast<int8_t>(qs[32 * j + l] >> 4);
                if constexpr (kFive) {
                    q[64 * j + l] = static_cast<int8_t>(q[64 * j + l] + ((qh[l] >> (2 * j)) & 1) * 16);
                    q[64 * j + 32 + l] = static_cast<int8_t>(q[64 * j + 32 + l] + ((qh[l] >> (2 * j + 1)) & 1) * 16);
                }
            }
        }
        uint8_t sc[8], mn[8];
        unpack_scales_k4(scales, sc, mn);
        int sumi = 0;
        for (int j = 0; j < QK_K / 16; ++j) sumi += y.bsums[j] * mn[j / 2];
        int sc16[16];
        for (int j = 0; j < 16; ++j) sc16[j] = sc[j / 2];
        accumulate_k(q, sc16, y.qs, fp16_to_f32(xd) * y.d, sums);
        const float dmin = fp16_to_f32(xdmin) * y.d;
        sumf -= dmin * static_cast<float>(sumi);
    }
    for (int l = 0; l < 8; ++l) sumf += sums[l];
    return sumf;
}

float dot_q6_k(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sums[8] = {};
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const auto x = blk<BlockQ6_K>(w, i);
        const auto y = blk<BlockQ8_K>(a, i);
        int8_t q[QK_K];
        for (int half = 0; half < 2; ++half) {
            const uint8_t* ql = x.ql + 64 * half;
            const uint8_t* qh = x.qh + 32 * half;
            int8_t* o = q + 128 * half;
            for (int l = 0; l < 32; ++l) {
                o[l + 0] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
                o[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
                o[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                o[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
            }
        }
        int sc16[16];
        for (int j = 0; j < 16; ++j) sc16[j] = x.scales[j];
        accumulate_k(q, sc16, y.qs, fp16_to_f32(x.d) * y.d, sums);
    }
    float sumf = 0.0f;
    for (int l = 0; l < 8; ++l) sumf += sums[l];
    return sumf;
}

float dot_iq4_xs(int64_t n, const uint8_t* w, const uint8_t* a) {
    float sumf = 0.0f;
    for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
        const auto x = blk<BlockIQ4_XS>(w, ibl);
        const auto y = blk<BlockQ8_K>(a, ibl);
        const float d4d8 = fp16_to_f32(x.d) * y.d;
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const int ls = ((x.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((x.scales_h >> (2 * ib)) & 3) << 4);
            const float dl = d4d8 * static_cast<float>(ls - 32);
            const uint8_t* qs = x.qs + 16 * ib;
            const int8_t* q8 = y.qs + 32 * ib;
            int s0 = 0, s1 = 0;
            for (int j = 0; j < 16; ++j) {
                s0 += q8[j] * kvalues_iq4nl[qs[j] & 0xF];
                s1 += q8[j + 16] * kvalues_iq4nl[qs[j] >> 4];
            }
            sumf += dl * static_cast<float>(s0 + s1);
        }
    }
    return sumf;
}

using RowDot = float (*)(int64_t, const uint8_t*, const uint8_t*);

template <RowDot F>
void multi(int64_t n, const uint8_t* w, const ActRow* a, int nt, float* out) {
    for (int j = 0; j < nt; ++j) out[j] = F(n, w, a[j].q);
}

RowDot row_dot(GgmlType t) {
    switch (t) {
        case GgmlType::F32: return dot_f32;
        case GgmlType::F16: return dot_f16;
        case GgmlType::BF16: return dot_bf16;
        case GgmlType::Q8_0: return dot_q8_0;
        case GgmlType::Q4_0: return dot_q4_0;
        case GgmlType::Q4_1: return dot_q4_1;
        case GgmlType::Q5_0: return dot_q5_0;
        case GgmlType::Q5_1: return dot_q5_1;
        case GgmlType::MXFP4: return dot_mxfp4;
        case GgmlType::IQ4_NL: return dot_iq4_nl;
        case GgmlType::Q2_K: return dot_q2_k;
        case GgmlType::Q3_K: return dot_q3_k;
        case GgmlType::Q4_K: return dot_q45_k<false>;
        case GgmlType::Q5_K: return dot_q45_k<true>;
        case GgmlType::Q6_K: return dot_q6_k;
        case GgmlType::IQ4_XS: return dot_iq4_xs;
        default: return nullptr;
    }
}

}  // namespace

namespace {
void axpy_f16_scalar(int64_t n, float w, const uint16_t* v, float* acc) {
    for (int64_t i = 0; i < n; ++i) acc[i] += w * fp16_to_f32(v[i]);
}
}  // namespace

void fill_scalar(Table& t) {
    t.axpy_f16 = axpy_f16_scalar;
    t.dot[static_cast<int>(GgmlType::F32)] = multi<dot_f32>;
    t.dot[static_cast<int>(GgmlType::F16)] = multi<dot_f16>;
    t.dot[static_cast<int>(GgmlType::BF16)] = multi<dot_bf16>;
    t.dot[static_cast<int>(GgmlType::Q8_0)] = multi<dot_q8_0>;
    t.dot[static_cast<int>(GgmlType::Q4_0)] = multi<dot_q4_0>;
    t.dot[static_cast<int>(GgmlType::Q4_1)] = multi<dot_q4_1>;
    t.dot[static_cast<int>(GgmlType::Q5_0)] = multi<dot_q5_0>;
    t.dot[static_cast<int>(GgmlType::Q5_1)] = multi<dot_q5_1>;
    t.dot[static_cast<int>(GgmlType::MXFP4)] = multi<dot_mxfp4>;
    t.dot[static_cast<int>(GgmlType::IQ4_NL)] = multi<dot_iq4_nl>;
    t.dot[static_cast<int>(GgmlType::Q2_K)] = multi<dot_q2_k>;
    t.dot[static_cast<int>(GgmlType::Q3_K)] = multi<dot_q3_k>;
    t.dot[static_cast<int>(GgmlType::Q4_K)] = multi<dot_q45_k<false>>;
    t.dot[static_cast<int>(GgmlType::Q5_K)] = multi<dot_q45_k<true>>;
    t.dot[static_cast<int>(GgmlType::Q6_K)] = multi<dot_q6_k>;
    t.dot[static_cast<int>(GgmlType::IQ4_XS)] = multi<dot_iq4_xs>;
}

float dot_scalar(GgmlType t, int64_t n, const void* wrow, const void* arow) {
    const RowDot f = row_dot(t);
    if (!f) fail("no CPU dot-product kernel for weight type {}", type_display_name(t));
    return f(n, static_cast<const uint8_t*>(wrow), static_cast<const uint8_t*>(arow));
}

}  // namespace nitro::cpu::kernels
