// Legacy 32-value block formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1.
//
// Source of the math: ggml/src/ggml-quants.c (dequantize_row_q*, quantize_row_q*_ref). The
// quantizers are ggml's reference ones, which ggml_quantize_chunk uses when no importance matrix
// is given; the float expressions keep ggml's operand order so results match bit for bit.
// Layouts: quant/blocks.h.
#include "core/fp16.h"
#include "quant/quant_impl.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

namespace nitro::quant {

/// Q4_0 -> f32: x[j] = d * (nibble_j - 8); nibble j < 16 is qs[j] & 15, j >= 16 is qs[j-16] >> 4.
void dequantize_q4_0(const void* src, float* dst, int64_t n) {
    const int64_t nb = n / QK32;
    for (int64_t i = 0; i < nb; ++i) {
        const BlockQ4_0 b = load_block<BlockQ4_0>(src, i);
        const float d = fp16_to_f32(b.d);
        float* y = dst + i * QK32;
        for (int j = 0; j < QK32 / 2; ++j) {
            const int x0 = (b.qs[j] & 0x0F) - 8;
            const int x1 = (b.qs[j] >> 4) - 8;
            y[j] = x0 * d;
            y[j + QK32 / 2] = x1 * d;
        }
    }
}

/// f32 -> Q4_0 (quantize_row_q4_0_ref): d = (value of largest magnitude) / -8, q = round(x/d) + 8
/// clamped to 15.
void quantize_q4_0(const float* src, void* dst, int64_t n) {
    const int64_t nb = n / QK32;
    for (int64_t i = 0; i < nb; ++i) {
        const float* x = src + i * QK32;
        float amax = 0.0f;
        float max = 0.0f;
        for (int j = 0; j < QK32; ++j) {
            if (amax < std::fabs(x[j])) {
                amax = std::fabs(x[j]);
                max = x[j];
            }
        }
        const float d = max / -8;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        BlockQ4_0 b{};
        b.d = f32_to_fp16(d);
        for (int j = 0; j < QK32 / 2; ++j) {
            const float x0 = x[j] * id;
            const float x1 = x[QK32 / 2 + j] * id;
            const auto xi0 = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(x0 + 8.5f))));
            const auto xi1 = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(x1 + 8.5f))));
            b.qs[j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
        }
        store_block(dst, i, b);
    }
}

/// Q4_1 -> f32: x[j] = d * nibble_j + m.
void dequantize_q4_1(const void* src, float* dst, int64_t n) {
    const int64_t nb = n / QK32;
    for (int64_t i = 0; i < nb; ++i) {
        const BlockQ4_1 b = load_block<BlockQ4_1>(src, i);
        const float d = fp16_to_f32(b.d);
        const float m = fp16_to_f32(b.m);
        float* y = dst + i * QK32;
        for (int j = 0; j < QK32 / 2; ++j) {
            const int x0 = b.qs[j] & 0x0F;
            const int x1 = b.qs[j] >> 4;
            y[j] = x0 * d + m;
            y[j + QK32 / 2] = x1 * d + m;
        }
    }
}

/// f32 -> Q4_1 (quantize_row_q4_1_ref): m = min, d = (max - min) / 15, q = round((x - m) / d).
void quantize_q4_1(const float* src, void* dst, int64_t n) {
    const int64_t nb = n / QK32;
    for (int64_t i = 0; i < nb; ++i) {
        const float* x = src + i * QK32;
        float min = FLT_MAX;
        float max = -FLT_MAX;
        for (int j = 0; j < QK32; ++j) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / ((1 << 4) - 1);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        BlockQ4_1 b{};
        b.d = f32_to_fp16(d);
        b.m = f32_to_fp16(min);
        for (int j = 0; j < QK32 / 2; ++j) {
            const float x0 = (x[j] - min) * id;
            const float x1 = (x[QK32 / 2 + j] - min) * id;
            const auto xi0 = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(x0 + 0.5f))));
            const auto xi1 = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(x1 + 0.5f))));
            b.qs[j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
        }
        store_block(dst, i, b);
    }
}

/// Q5_0 -> f32: x[j] = d * (q_j - 16), q_j = nibble | (bit j of qh) << 4.
void dequantize_q5_0(const void* src, float* dst, int64_t n) {
    const int64_t nb = n / QK32;
    for (int64_t i = 0; i < nb; ++i) {
        const BlockQ5_0 b = load_block<BlockQ5_0>(src, i);
        const float d = fp16_to_f32(b.d);
        uint32_t qh;
        std::memcpy(&qh, b.qh, sizeof(qh));
        float* y = dst + i * QK32;
        for (int j = 0; j < QK32 / 2; ++j) {
            const uint8_t xh0 = static_cast<uint8_t>(((qh >> j) << 4) & 0x10);
            const uint8_t xh1 = static_cast<uint8_t>((qh >> (j + 12)) & 0x10);
            const int32_t x0 = ((b.qs[j] & 0x0F) | xh0) - 16;
            const int32_t x1 = ((b.qs[j] >> 4) | xh1) - 16;
            y[j] = x0 * d;
            y[j + QK32 / 2] = x1 * d;
        }
    }
}

/// f32 -> Q5_0 (quantize_row_q5_0_ref): d = (value of largest magnitude) / -16,
/// q = round(x/d) + 16 clamped to 31.
void quantize_q5_0(const float* src, void* dst, int64_t n) {
    const int64_t nb = n / QK32;
    for (int64_t i = 0; i < nb; ++i) {
        const float* x = src + i * QK32;
        float amax = 0.0f;
        float max = 0.0f;
        for (int j = 0; j < QK32; ++j) {
            if (amax < std::fabs(x[j])) {
                amax = std::fabs(x[j]);
                max = x[j];
            }
        }
        const float d = max / -16;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        BlockQ5_0 b{};
        b.d = f32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK32 / 2; ++j) {
            const float x0 = x[j] * id;
            const float x1 = x[QK32 / 2 + j] * id;
            const auto xi0 = static_cast<uint8_t>(std::min(31, static_cast<int>(static_cast<int8_t>(x0 + 16.5f))));
            const auto xi1 = static_cast<uint8_t>(std::min(31, static_cast<int>(static_cast<int8_t>(x1 + 16.5f))));
            b.qs[j] = static_cast<uint8_t>((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
            qh |= ((xi0 & 0x10u) >> 4) << j;
            qh |= ((xi1 & 0x10u) >> 4) << (j + QK32 / 2);
        }
        std::memcpy(b.qh, &qh, sizeof(qh));
        store_block(dst, i, b);
    }
}

/// Q5_1 -> f32: x[j] = d * q_j + m, q_j as in Q5_0.
void dequantize_q5_1(const void* src, float* dst, int64_t n) {
    const int64_t nb = n / QK32;
    for (int64_t i = 0; i < nb; ++i) {
        const BlockQ5_1 b = load_block<BlockQ5_1>(src, i);
        const float d = fp16_to_f32(b.d);
        const float m = fp16_to_f32(b.m);
        uint32_t qh;
        std::memcpy(&qh, b.qh, sizeof(qh));
        float* y = dst + i * QK32;
        for (int j = 0; j < QK32 / 2; ++j) {
            const uint8_t xh0 = static_cast<uint8_t>(((qh >> j) << 4) & 0x10);
            const uint8_t xh1 = static_cast<uint8_t>((qh >> (j + 12)) & 0x10);
            const int x0 = (b.qs[j] & 0x0F) | xh0;
            const int x1 = (b.qs[j] >> 4) | xh1;
            y[j] = x0 * d + m;
            y[j + QK32 / 2] = x1 * d + m;
        }
    }
}

/// f32 -> Q5_1 (quantize_row_q5_1_ref): m = min, d = (max - min) / 31, q = round((x - m) / d).
void quantize_q5_1(const float* src, void* dst, int64_t n) {
    const int64_t nb = n / QK32;
    for (int64_t i = 0; i < nb; ++i) {
        const float* x = src + i * QK32;
        float min = FLT_MAX;
        float max = -FLT_MAX;
        for (int j = 0; j < QK32; ++j) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / ((1 << 5) - 1);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        BlockQ5_1 b{};
        b.d = f32_to_fp16(d);
        b.m = f32_to_fp16(min);
        uint32_t qh = 0;
        for (int j = 0; j < QK32 / 2; ++j) {
            const float x0 = (x[j] - min) * id;
            const float x1 = (x[QK32 / 2 + j] - min) * id;
            const auto xi0 = static_cast<uint8_t>(x0 + 0.5f);
            const auto xi1 = static_cast<uint8_t>(x1 + 0.5f);
            b.qs[j] = static_cast<uint8_t>((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
            qh |= ((xi0 & 0x10u) >> 4) << j;
            qh |= ((xi1 & 0x10u) >> 4) << (j + QK32 / 2);
        }
        std::memcpy(b.qh, &qh, sizeof(qh));
        store_block(dst, i, b);
    }
}

/// Q8_0 -> f32: x[j] = d * qs[j].
void dequantize_q8_0(const void* src, float* dst, int64_t n) {
    const int64_t nb = n / QK32;
    for (int64_t i = 0; i < nb; ++i) {
        const BlockQ8_0 b = load_block<BlockQ8_0>(src, i);
        const float d = fp16_to_f32(b.d);
        for (int j = 0; j < QK32; ++j) dst[i * QK32 + j] = b.qs[j] * d;
    }
}

/// f32 -> Q8_0 (quantize_row_q8_0_ref): d = amax / 127, q = roundf(x / d) (ties away from zero).
void quantize_q8_0(const float* src, void* dst, int64_t n) {
    const int64_t nb = n / QK32;
    for (int64_t i = 0; i < nb; ++i) {
        const float* x = src + i * QK32;
        float amax = 0.0f;
        for (int j = 0; j < QK32; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / ((1 << 7) - 1);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        BlockQ8_0 b{};
        b.d = f32_to_fp16(d);
        for (int j = 0; j < QK32; ++j) b.qs[j] = static_cast<int8_t>(std::round(x[j] * id));
        store_block(dst, i, b);
    }
}

/// Q8_1 -> f32: x[j] = d * qs[j] (s is a cached sum for dot products, not needed here).
void dequantize_q8_1(const void* src, float* dst, int64_t n) {
    const int64_t nb = n / QK32;
    for (int64_t i = 0; i < nb; ++i) {
        const BlockQ8_1 b = load_block<BlockQ8_1>(src, i);
        const float d = fp16_to_f32(b.d);
        for (int j = 0; j < QK32; ++j) dst[i * QK32 + j] = b.qs[j] * d;
    }
}

/// f32 -> Q8_1 (quantize_row_q8_1_ref): as Q8_0, plus s = fp16(d * sum(q)).
void quantize_q8_1(const float* src, void* dst, int64_t n) {
    const int64_t nb = n / QK32;
    for (int64_t i = 0; i < nb; ++i) {
        const float* x = src + i * QK32;
        float amax = 0.0f;
        for (int j = 0; j < QK32; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / ((1 << 7) - 1);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        BlockQ8_1 b{};
        b.d = f32_to_fp16(d);
        int sum = 0;
        for (int j = 0; j < QK32 / 2; ++j) {
            b.qs[j] = static_cast<int8_t>(std::round(x[j] * id));
            b.qs[QK32 / 2 + j] = static_cast<int8_t>(std::round(x[QK32 / 2 + j] * id));
            sum += b.qs[j];
            sum += b.qs[QK32 / 2 + j];
        }
        b.s = f32_to_fp16(sum * d);
        store_block(dst, i, b);
    }
}

}  // namespace nitro::quant
