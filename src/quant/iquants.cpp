// i-quants (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS) and the ternary
// TQ1_0 / TQ2_0 formats.
//
// Source of the math: ggml/src/ggml-quants.c (dequantize_row_iq*, dequantize_row_tq*,
// quantize_iq4_nl / quantize_iq4_xs via quantize_row_iq4_nl_impl, quantize_row_tq*_ref). Float
// expressions keep ggml's operand order so results match bit for bit. Lookup tables:
// quant/iq_grids.h. Layouts: quant/blocks.h.
//
// Quantizers exist for IQ4_NL, IQ4_XS, TQ1_0 and TQ2_0. The grid formats (IQ1/IQ2/IQ3) have none
// here: ggml's need neighbour searches over the grids and, for IQ1/IQ2_XXS/IQ2_XS, an importance
// matrix.
#include "core/fp16.h"
#include "quant/iq_grids.h"
#include "quant/quant_impl.h"

#include <algorithm>
#include <cmath>

namespace nitro::quant {
namespace {

/// Byte j (0..7) of a grid point.
inline uint8_t grid_byte(uint64_t point, int j) { return static_cast<uint8_t>(point >> (8 * j)); }

/// +1 or -1: element j of a group is negated when bit j of `signs` is set.
inline float sign_of(uint8_t signs, int j) { return (signs & kmask_iq2xs[j]) ? -1.f : 1.f; }

/// Reads a little-endian u32 at p.
inline uint32_t load_u32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}

}  // namespace

// ---------------------------------------------------------------------------------- IQ2 family

/// IQ2_XXS -> f32. Per 32 values (two u32 a, b): db = d * (0.5 + (b >> 28)) * 0.25; group l
/// (8 values) = db * iq2xxs_grid[byte l of a] with signs ksigns[(b >> 7l) & 127].
void dequantize_iq2_xxs(const void* src, float* dst, int64_t n) {
    const int64_t nb = n / QK_K;
    float* y = dst;
    for (int64_t i = 0; i < nb; ++i) {
        const BlockIQ2_XXS b = load_block<BlockIQ2_XXS>(src, i);
        const float d = fp16_to_f32(b.d);
        for (int ib32 = 0; ib32 < QK_K / 32; ++ib32) {
            uint32_t aux32[2];
            std::memcpy(aux32, b.qs + 4 * ib32, sizeof(aux32));
            const float db = d * (0.5f + (aux32[1] >> 28)) * 0.25f;
            for (int l = 0; l < 4; ++l) {
                const uint64_t grid = iq2xxs_grid[(aux32[0] >> (8 * l)) & 255];
                const uint8_t signs = ksigns_iq2xs[(aux32[1] >> (7 * l)) & 127];
                for (int j = 0; j < 8; ++j) y[j] = db * grid_byte(grid, j) * sign_of(signs, j);
                y += 8;
            }
        }
    }
}

/// IQ2_XS -> f32. Per 32 values two 4-bit scales (db = d * (0.5 + s) * 0.25, one per 16);
/// each u16 of qs: 9-bit iq2xs_grid index, 7-bit ksigns index.
void dequantize_iq2_xs(const void* src, float* dst, int64_t n) {
    const int64_t nb = n / QK_K;
    float* y = dst;
    for (int64_t i = 0; i < nb; ++i) {
        const BlockIQ2_XS b = load_block<BlockIQ2_XS>(src, i);
        const float d = fp16_to_f32(b.d);
        for (int ib32 = 0; ib32 < QK_K / 32; ++ib32) {
            const float db[2] = {d * (0.5f + (b.scales[ib32] & 0xf)) * 0.25f,
                                 d * (0.5f + (b.scales[ib32] >> 4)) * 0.25f};
            for (int l = 0; l < 4; ++l) {
                const uint16_t q = b.qs[4 * ib32 + l];
                const uint64_t grid = iq2xs_grid[q & 511];
                const uint8_t signs = ksigns_iq2xs[q >> 9];
                for (int j = 0; j < 8; ++j) y[j] = db[l / 2] * grid_byte(grid, j) * sign_of(signs, j);
                y += 8;
            }
        }
    }
}

/// IQ2_S -> f32. Per 32 values two 4-bit scales as in IQ2_XS; group l: 10-bit iq2s_grid index
/// (qs byte | 2 bits of qh), explicit sign byte from the second half of qs.
void dequantize_iq2_s(const void* src, float* dst, int64_t n) {
    const int64_t nb = n / QK_K;
    float* y = dst;
    for (int64_t i = 0; i < nb; ++i) {
        const BlockIQ2_S b = load_block<BlockIQ2_S>(src, i);
        const float d = fp16_to_f32(b.d);
        const uint8_t* qs = b.qs;
        const uint8_t* signs = b.qs + QK_K / 8;
        for (int ib32 = 0; ib32 < QK_K / 32; ++ib32) {
            const float db[2] = {d * (0.5f + (b.scales[ib32] & 0xf)) * 0.25f,
                                 d * (0.5f + (b.scales[ib32] >> 4)) * 0.25f};
            for (int l = 0; l < 4; ++l) {
                const float dl = db[l / 2];
                const uint64_t grid = iq2s_grid[qs[l] | ((b.qh[ib32] << (8 - 2 * l)) & 0x300)];
                for (int j = 0; j < 8; ++j) y[j] = dl * grid_byte(grid, j) * sign_of(signs[l], j);
                y += 8;
            }
            qs += 4;
            signs += 4;
        }
    }
}

// ---------------------------------------------------------------------------------- IQ3 family

/// IQ3_XXS -> f32. Per 32 values: 8 iq3xxs_grid indices (4 values each) and one u32 s with four
/// 7-bit ksigns indices and the scale: db = d * (0.5 + (s >> 28)) * 0.5.
void dequantize_iq3_xxs(const void* src, float* dst, int64_t n) {
    const int64_t nb = n / QK_K;
    float* y = dst;
    for (int64_t i = 0; i < nb; ++i) {
        const BlockIQ3_XXS b = load_block<BlockIQ3_XXS>(src, i);
        const float d = fp16_to_f32(b.d);
        const uint8_t* qs = b.qs;
        const uint8_t* scales_and_signs = b.qs + QK_K / 4;
        for (int ib32 = 0; ib32 < QK_K / 32; ++ib32) {
            const uint32_t aux32 = load_u32(scales_and_signs + 4 * ib32);
            const float db = d * (0.5f + (aux32 >> 28)) * 0.5f;
            for (int l = 0; l < 4; ++l) {
                const uint8_t signs = ksigns_iq2xs[(aux32 >> (7 * l)) & 127];
                const uint32_t grid1 = iq3xxs_grid[qs[2 * l + 0]];
                const uint32_t grid2 = iq3xxs_grid[qs[2 * l + 1]];
                for (int j = 0; j < 4; ++j) {
                    y[j + 0] = db * grid_byte(grid1, j) * sign_of(signs, j + 0);
                    y[j + 4] = db * grid_byte(grid2, j) * sign_of(signs, j + 4);
                }
                y += 8;
            }
            qs += 8;
        }
    }
}

/// IQ3_S -> f32. Per 64 values two 4-bit scales (db = d * (1 + 2s), one per 32); each 4 values:
/// 9-bit iq3s_grid index (qs byte | a bit of qh); one explicit sign bit per value.
void dequantize_iq3_s(const void* src, float* dst, int64_t n) {
    const int64_t nb = n / QK_K;
    float* y = dst;
    for (int64_t i = 0; i < nb; ++i) {
        const BlockIQ3_S b = load_block<BlockIQ3_S>(src, i);
        const float d = fp16_to_f32(b.d);
        const uint8_t* qs = b.qs;
        const uint8_t* qh = b.qh;
        const uint8_t* signs = b.signs;
        for (int ib32 = 0; ib32 < QK_K / 32; ib32 += 2) {
            const float db[2] = {d * (1 + 2 * (b.scales[ib32 / 2] & 0xf)),
                                 d * (1 + 2 * (b.scales[ib32 / 2] >> 4))};
            for (int half = 0; half < 2; ++half) {
                const float dl = db[half];
                for (int l = 0; l < 4; ++l) {
                    const uint32_t grid1 = iq3s_grid[qs[2 * l + 0] | ((qh[half] << (8 - 2 * l)) & 256)];
                    const uint32_t grid2 = iq3s_grid[qs[2 * l + 1] | ((qh[half] << (7 - 2 * l)) & 256)];
                    for (int j = 0; j < 4; ++j) {
                        y[j + 0] = dl * grid_byte(grid1, j) * sign_of(signs[l], j + 0);
                        y[j + 4] = dl * grid_byte(grid2, j) * sign_of(signs[l], j + 4);
                    }
                    y += 8;
                }
                qs += 8;
                signs += 4;
            }
            qh += 2;
        }
    }
}

// ---------------------------------------------------------------------------------- IQ1 family

/// IQ1_S -> f32. Per 32 values (u16 h = qh[ib]): dl = d * (2 * ((h >> 12) & 7) + 1),
/// delta = +-0.125 (sign: bit 15); group l = dl * (iq1s_grid[qs | 3 bits of h << 8] + delta).
void dequantize_iq1_s(const void* src, float* dst, int64_t n) {
    const int64_t nb = n / QK_K;
    float* y = dst;
    for (int64_t i = 0; i < nb; ++i) {
        const BlockIQ1_S b = load_block<BlockIQ1_S>(src, i);
        const float d = fp16_to_f32(b.d);
        const uint8_t* qs = b.qs;
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const uint16_t h = b.qh[ib];
            const float dl = d * (2 * ((h >> 12) & 7) + 1);
            const float delta = (h & 0x8000) ? -kIq1sDelta : kIq1sDelta;
            for (int l = 0; l < 4; ++l) {
                const uint64_t grid = iq1s_grid[qs[l] | (((h >> (3 * l)) & 7) << 8)];
                for (int j = 0; j < 8; ++j) y[j] = dl * (static_cast<int8_t>(grid_byte(grid, j)) + delta);
                y += 8;
            }
            qs += 4;
        }
    }
}

/// IQ1_M -> f32. The fp16 super-scale is the top nibbles of the four u16 scale words; per 16
/// values a 3-bit scale dl = d * (2s + 1); per 8 values an 11-bit iq1s_grid index and a delta
/// sign bit (qh bits 3 / 7).
void dequantize_iq1_m(const void* src, float* dst, int64_t n) {
    const int64_t nb = n / QK_K;
    float* y = dst;
    for (int64_t i = 0; i < nb; ++i) {
        const BlockIQ1_M b = load_block<BlockIQ1_M>(src, i);
        uint16_t sc[4];
        std::memcpy(sc, b.scales, sizeof(sc));
        const auto scale_bits = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) |
                                                      ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
        const float d = fp16_to_f32(scale_bits);
        const uint8_t* qs = b.qs;
        const uint8_t* qh = b.qh;
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const float dl1 = d * (2 * ((sc[ib / 2] >> (6 * (ib % 2) + 0)) & 0x7) + 1);
            const float dl2 = d * (2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 0x7) + 1);
            const uint16_t idx[4] = {static_cast<uint16_t>(qs[0] | ((qh[0] << 8) & 0x700)),
                                     static_cast<uint16_t>(qs[1] | ((qh[0] << 4) & 0x700)),
                                     static_cast<uint16_t>(qs[2] | ((qh[1] << 8) & 0x700)),
                                     static_cast<uint16_t>(qs[3] | ((qh[1] << 4) & 0x700))};
            const float delta[4] = {(qh[0] & 0x08) ? -kIq1sDelta : kIq1sDelta,
                                    (qh[0] & 0x80) ? -kIq1sDelta : kIq1sDelta,
                                    (qh[1] & 0x08) ? -kIq1sDelta : kIq1sDelta,
                                    (qh[1] & 0x80) ? -kIq1sDelta : kIq1sDelta};
            for (int l = 0; l < 4; ++l) {
                const float dl = l < 2 ? dl1 : dl2;
                const uint64_t grid = iq1s_grid[idx[l]];
                for (int j = 0; j < 8; ++j) y[j] = dl * (static_cast<int8_t>(grid_byte(grid, j)) + delta[l]);
                y += 8;
            }
            qs += 4;
            qh += 2;
        }
    }
}

// ---------------------------------------------------------------------------------- IQ4 family

/// IQ4_NL -> f32: x[j] = d * kvalues_iq4nl[nibble_j], nibbles as in Q4_0.
void dequantize_iq4_nl(const void* src, float* dst, int64_t n) {
    const int64_t nb = n / QK32;
    for (int64_t i = 0; i < nb; ++i) {
        const BlockIQ4_NL b = load_block<BlockIQ4_NL>(src, i);
        const float d = fp16_to_f32(b.d);
        float* y = dst + i * QK32;
        for (int j = 0; j < QK32 / 2; ++j) {
            y[j] = d * kvalues_iq4nl[b.qs[j] & 0xf];
            y[j + QK32 / 2] = d * kvalues_iq4nl[b.qs[j] >> 4];
        }
    }
}

/// IQ4_XS -> f32: per 32 values ls = 4 bits of scales_l | 2 bits of scales_h << 4,
/// x = d * (ls - 32) * kvalues_iq4nl[nibble].
void dequantize_iq4_xs(const void* src, float* dst, int64_t n) {
    const int64_t nb = n / QK_K;
    float* y = dst;
    for (int64_t i = 0; i < nb; ++i) {
        const BlockIQ4_XS b = load_block<BlockIQ4_XS>(src, i);
        const float d = fp16_to_f32(b.d);
        const uint8_t* qs = b.qs;
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const int ls = ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf) | (((b.scales_h >> (2 * ib)) & 3) << 4);
            const float dl = d * (ls - 32);
            for (int j = 0; j < 16; ++j) {
                y[j + 0] = dl * kvalues_iq4nl[qs[j] & 0xf];
                y[j + 16] = dl * kvalues_iq4nl[qs[j] >> 4];
            }
            y += 32;
            qs += 16;
        }
    }
}

namespace {

/// Index of the level of the sorted, 16-entry `val` nearest to x; the upper level wins exact
/// midpoints (best_index_int8: compares 2x with the sum of neighbours, both exact).
int best_index_int8(const int8_t* val, float x) {
    const float x2 = x + x;
    int idx = 0;
    for (int step = 8; step > 0; step >>= 1) {
        const int j = idx + step;
        idx = (x2 >= static_cast<float>(val[j - 1] + val[j])) ? j : idx;
    }
    return idx;
}

/// Fits one block of 32 values to d * kvalues_iq4nl[L] with weights x^2 (the
/// quantize_row_iq4_nl_impl inner loop with ntry = 7 and no importance matrix): a first guess
/// d = max / -127 refined by weighted least squares, then 15 trial inverse scales. Fills L[32] for
/// the first guess and returns the best d (signed).
float fit_iq4_block(const float* xb, uint8_t* Lb) {
    constexpr int kNtry = 7;
    const int8_t* values = kvalues_iq4nl;
    float weight[32];
    for (int j = 0; j < 32; ++j) weight[j] = xb[j] * xb[j];
    float amax = 0, max = 0;
    for (int j = 0; j < 32; ++j) {
        const float ax = std::fabs(xb[j]);
        if (ax > amax) {
            amax = ax;
            max = xb[j];
        }
    }
    if (amax < 1e-15f) {  // GROUP_MAX_EPS
        std::memset(Lb, 0, 32);
        return 0.0f;
    }
    float d = -max / values[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
        const float al = id * xb[j];
        const int l = best_index_int8(values, al);
        Lb[j] = static_cast<uint8_t>(l);
        const float q = values[l];
        const float w = weight[j];
        sumqx += w * q * xb[j];
        sumq2 += w * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int itry = -kNtry; itry <= kNtry; ++itry) {
        id = (itry + values[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; ++j) {
            const float al = id * xb[j];
            const int l = best_index_int8(values, al);
            const float q = values[l];
            const float w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

/// Packs 32 4-bit indices: byte j holds index j (low nibble) and j+16 (high nibble).
void pack_nibbles32(const uint8_t* L, uint8_t* qs) {
    for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(L[j] | (L[16 + j] << 4));
}

}  // namespace

/// f32 -> IQ4_NL as ggml_quantize_chunk does it without an importance matrix (quantize_iq4_nl:
/// quantize_row_iq4_nl_impl with ntry = 7), then every value takes the level nearest to x / d.
void quantize_iq4_nl(const float* src, void* dst, int64_t n) {
    const int64_t nb = n / QK32;
    uint8_t L[32];
    for (int64_t i = 0; i < nb; ++i) {
        const float* x = src + i * QK32;
        const float d = fit_iq4_block(x, L);
        BlockIQ4_NL b{};
        b.d = f32_to_fp16(d);
        const float id = d != 0.0f ? 1 / d : 0;
        for (int j = 0; j < 32; ++j) L[j] = static_cast<uint8_t>(best_index_int8(kvalues_iq4nl, id * x[j]));
        pack_nibbles32(L, b.qs);
        store_block(dst, i, b);
    }
}

/// f32 -> IQ4_XS as ggml_quantize_chunk does it without an importance matrix (quantize_iq4_xs):
/// per 32 values the IQ4_NL fit, then 6-bit scales l in [-32, 31] of d = -(largest-magnitude
/// scale) / 32 and every value requantized against d * l.
void quantize_iq4_xs(const float* src, void* dst, int64_t n) {
    const int64_t nb = n / QK_K;
    uint8_t L[QK_K];
    float scales[QK_K / 32];
    for (int64_t i = 0; i < nb; ++i) {
        const float* x = src + i * QK_K;
        BlockIQ4_XS b{};
        float max_scale = 0, amax_scale = 0;
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            scales[ib] = fit_iq4_block(x + 32 * ib, L + 32 * ib);
            const float abs_d = std::fabs(scales[ib]);
            if (abs_d > amax_scale) {
                amax_scale = abs_d;
                max_scale = scales[ib];
            }
        }
        const float d = -max_scale / 32;
        b.d = f32_to_fp16(d);
        const float id = d != 0.0f ? 1 / d : 0.f;
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            int l = nearest_int(id * scales[ib]);
            l = std::max(-32, std::min(31, l));
            const float dl = d * l;
            const float idl = dl != 0.0f ? 1 / dl : 0.f;
            uint8_t* Lb = L + 32 * ib;
            const float* xb = x + 32 * ib;
            for (int j = 0; j < 32; ++j) Lb[j] = static_cast<uint8_t>(best_index_int8(kvalues_iq4nl, idl * xb[j]));
            l += 32;
            const auto l_l = static_cast<uint8_t>(l & 0xf);
            const auto l_h = static_cast<uint8_t>(l >> 4);
            if (ib % 2 == 0) {
                b.scales_l[ib / 2] = l_l;
            } else {
                b.scales_l[ib / 2] = static_cast<uint8_t>(b.scales_l[ib / 2] | (l_l << 4));
            }
            b.scales_h = static_cast<uint16_t>(b.scales_h | (l_h << (2 * (ib % 8))));
        }
        for (int ib = 0; ib < QK_K / 32; ++ib) pack_nibbles32(L + 32 * ib, b.qs + 16 * ib);
        store_block(dst, i, b);
    }
}

// ------------------------------------------------------------------------------------- ternary

/// TQ1_0 -> f32. qs bytes hold 5 trits as a base-3 fixed-point fraction (trit n of byte q is
/// ((q * 3^n) mod 256) * 3 >> 8); the first 32 bytes cover values 0..159 (32 per trit), the next
/// 16 values 160..239, qh the last 16 (4 trits each). x = d * (t - 1).
void dequantize_tq1_0(const void* src, float* dst, int64_t n) {
    const int64_t nb = n / QK_K;
    constexpr uint8_t pow3[6] = {1, 3, 9, 27, 81, 243};
    float* y = dst;
    for (int64_t i = 0; i < nb; ++i) {
        const BlockTQ1_0 b = load_block<BlockTQ1_0>(src, i);
        const float d = fp16_to_f32(b.d);
        constexpr size_t kQs = sizeof(b.qs);
        for (size_t j = 0; j < kQs - kQs % 32; j += 32) {
            for (size_t t = 0; t < 5; ++t) {
                for (size_t m = 0; m < 32; ++m) {
                    const auto q = static_cast<uint8_t>(b.qs[j + m] * pow3[t]);
                    const auto xi = static_cast<int16_t>((static_cast<uint16_t>(q) * 3) >> 8);
                    *y++ = static_cast<float>(xi - 1) * d;
                }
            }
        }
        for (size_t j = kQs - kQs % 32; j < kQs; j += 16) {
            for (size_t t = 0; t < 5; ++t) {
                for (size_t m = 0; m < 16; ++m) {
                    const auto q = static_cast<uint8_t>(b.qs[j + m] * pow3[t]);
                    const auto xi = static_cast<int16_t>((static_cast<uint16_t>(q) * 3) >> 8);
                    *y++ = static_cast<float>(xi - 1) * d;
                }
            }
        }
        for (size_t t = 0; t < 4; ++t) {
            for (size_t j = 0; j < sizeof(b.qh); ++j) {
                const auto q = static_cast<uint8_t>(b.qh[j] * pow3[t]);
                const auto xi = static_cast<int16_t>((static_cast<uint16_t>(q) * 3) >> 8);
                *y++ = static_cast<float>(xi - 1) * d;
            }
        }
    }
}

/// f32 -> TQ1_0 (quantize_row_tq1_0_ref): d = amax, trits = round(x / d) + 1, packed 5 (or 4)
/// per byte as a base-3 number scaled to 256 with ceiling division.
void quantize_tq1_0(const float* src, void* dst, int64_t n) {
    const int64_t nb = n / QK_K;
    const float* x = src;
    for (int64_t i = 0; i < nb; ++i) {
        float amax = 0.0f;
        for (int j = 0; j < QK_K; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        BlockTQ1_0 y{};
        y.d = f32_to_fp16(d);
        constexpr size_t kQs = sizeof(y.qs);
        auto pack = [&](const float* xs, size_t stride, size_t count) {
            int q = 0;
            for (size_t t = 0; t < count; ++t) {
                const int xi = static_cast<int>(std::lround(xs[t * stride] * id)) + 1;
                q = static_cast<uint8_t>(q * 3 + xi);
            }
            return q;
        };
        for (size_t j = 0; j < kQs - kQs % 32; j += 32) {
            for (size_t m = 0; m < 32; ++m) {
                const int q = pack(x + m, 32, 5);
                y.qs[j + m] = static_cast<uint8_t>((q * 256 + (243 - 1)) / 243);
            }
            x += 5 * 32;
        }
        for (size_t j = kQs - kQs % 32; j < kQs; j += 16) {
            for (size_t m = 0; m < 16; ++m) {
                const int q = pack(x + m, 16, 5);
                y.qs[j + m] = static_cast<uint8_t>((q * 256 + (243 - 1)) / 243);
            }
            x += 5 * 16;
        }
        for (size_t j = 0; j < sizeof(y.qh); ++j) {
            int q = pack(x + j, sizeof(y.qh), 4);
            q = static_cast<uint8_t>(q * 3);  // shift the first trit to the most significant place
            y.qh[j] = static_cast<uint8_t>((q * 256 + (243 - 1)) / 243);
        }
        x += 4 * sizeof(y.qh);
        store_block(dst, i, y);
    }
}

/// TQ2_0 -> f32: 2 bits per value, byte m of each 32-byte run holds values m, m+32, m+64, m+96 of
/// its 128; x = d * (q - 1).
void dequantize_tq2_0(const void* src, float* dst, int64_t n) {
    const int64_t nb = n / QK_K;
    float* y = dst;
    for (int64_t i = 0; i < nb; ++i) {
        const BlockTQ2_0 b = load_block<BlockTQ2_0>(src, i);
        const float d = fp16_to_f32(b.d);
        for (size_t j = 0; j < sizeof(b.qs); j += 32) {
            for (size_t l = 0; l < 4; ++l) {
                for (size_t m = 0; m < 32; ++m) {
                    const auto q = static_cast<int8_t>((b.qs[j + m] >> (l * 2)) & 3);
                    *y++ = static_cast<float>(q - 1) * d;
                }
            }
        }
    }
}

/// f32 -> TQ2_0 (quantize_row_tq2_0_ref): d = amax, q = round(x / d) + 1.
void quantize_tq2_0(const float* src, void* dst, int64_t n) {
    const int64_t nb = n / QK_K;
    const float* x = src;
    for (int64_t i = 0; i < nb; ++i) {
        float amax = 0.0f;
        for (int j = 0; j < QK_K; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        BlockTQ2_0 y{};
        y.d = f32_to_fp16(d);
        for (size_t j = 0; j < sizeof(y.qs); j += 32) {
            for (size_t m = 0; m < 32; ++m) {
                uint8_t q = 0;
                for (size_t t = 0; t < 4; ++t) {
                    const int xi = static_cast<int>(std::lround(x[m + t * 32] * id)) + 1;
                    q = static_cast<uint8_t>(q + ((xi & 3) << (2 * t)));
                }
                y.qs[j + m] = q;
            }
            x += 4 * 32;
        }
        store_block(dst, i, y);
    }
}

}  // namespace nitro::quant
