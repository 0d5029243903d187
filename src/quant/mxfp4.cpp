// MXFP4 (OCP Microscaling, FP4 E2M1 elements with a shared E8M0 scale), ggml's layout.
//
// Source of the math: ggml/src/ggml-quants.c (dequantize_row_mxfp4, quantize_row_mxfp4_ref),
// ggml/src/ggml-impl.h (ggml_e8m0_to_fp32_half), ggml/src/ggml-common.h (kvalues_mxfp4).
// ggml keeps the E2M1 values doubled as small integers {0, 1, 2, 3, 4, 6, 8, 12} and halves the
// scale instead, so x = kvalues[q] * 2^(e - 128), which equals E2M1(q) * 2^(e - 127) exactly.
// Layout: quant/blocks.h (BlockMXFP4).
#include "quant/quant_impl.h"

#include <cmath>

namespace nitro::quant {
namespace {

/// E2M1 code -> value * 2 (sign in bit 3): ggml's kvalues_mxfp4 (ggml-common.h).
constexpr int8_t kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/// E8M0 exponent byte -> 2^(e - 128), i.e. half the MX scale (ggml_e8m0_to_fp32_half).
/// e = 0 and 1 give the subnormals 2^-128 and 2^-127; e = 255 (NaN in MX) gives 2^127.
float e8m0_to_fp32_half(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
}

/// Index of the kvalues_mxfp4 entry whose value times `d` is nearest to x; the first wins ties
/// (best_index_mxfp4).
uint8_t best_index_mxfp4(float x, float d) {
    int best_index = 0;
    float best_err = std::fabs(kvalues_mxfp4[0] * d - x);
    for (int i = 1; i < 16; ++i) {
        const float err = std::fabs(kvalues_mxfp4[i] * d - x);
        if (err < best_err) {
            best_index = i;
            best_err = err;
        }
    }
    return static_cast<uint8_t>(best_index);
}

}  // namespace

/// MXFP4 -> f32: x[j] = kvalues_mxfp4[nibble_j] * 2^(e - 128); nibble j < 16 is qs[j] & 15,
/// j >= 16 is qs[j-16] >> 4.
void dequantize_mxfp4(const void* src, float* dst, int64_t n) {
    const int64_t nb = n / QK32;
    for (int64_t i = 0; i < nb; ++i) {
        const BlockMXFP4 b = load_block<BlockMXFP4>(src, i);
        const float d = e8m0_to_fp32_half(b.e);
        float* y = dst + i * QK32;
        for (int j = 0; j < QK32 / 2; ++j) {
            const int8_t x0 = kvalues_mxfp4[b.qs[j] & 0x0F];
            const int8_t x1 = kvalues_mxfp4[b.qs[j] >> 4];
            y[j] = x0 * d;
            y[j + QK32 / 2] = x1 * d;
        }
    }
}

/// f32 -> MXFP4 (quantize_row_mxfp4_ref): e = floor(log2(amax)) - 2 + 127 (so the largest value
/// maps near E2M1 4..6), then each value takes the nearest representable code. All-zero blocks
/// get e = 0; blocks holding an infinity get e = 254.
void quantize_mxfp4(const float* src, void* dst, int64_t n) {
    const int64_t nb = n / QK32;
    for (int64_t i = 0; i < nb; ++i) {
        const float* x = src + i * QK32;
        float amax = 0.0f;
        for (int j = 0; j < QK32; ++j) {
            if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
        }
        // ggml casts the float straight to uint8_t; outside [0, 254] that cast is undefined, so
        // tiny blocks (amax < 2^-125) clamp to e = 0 and infinite ones to e = 254. (NaNs never
        // become amax: the comparison above is false for them.)
        float ef = amax > 0.0f ? std::floor(std::log2(amax)) - 2 + 127 : 0.0f;
        if (ef < 0.0f) ef = 0.0f;
        if (ef > 254.0f) ef = 254.0f;
        const auto e = static_cast<uint8_t>(ef);
        const float d = e8m0_to_fp32_half(e);
        BlockMXFP4 b{};
        b.e = e;
        for (int j = 0; j < QK32 / 2; ++j) {
            const uint8_t x0 = best_index_mxfp4(x[j], d);
            const uint8_t x1 = best_index_mxfp4(x[QK32 / 2 + j], d);
            b.qs[j] = static_cast<uint8_t>(x0 | (x1 << 4));
        }
        store_block(dst, i, b);
    }
}

}  // namespace nitro::quant
