// k-quants, 256 values per super-block: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K.
//
// Source of the math: ggml/src/ggml-quants.c (dequantize_row_q*_K, quantize_row_q*_K_ref and
// their helpers make_qx_quants, make_q3_quants, make_qkx2_quants, get_scale_min_k4). The
// quantizers are the reference ones, which ggml_quantize_chunk uses without an importance
// matrix. Float expressions keep ggml's operand order so results match bit for bit.
// Layouts: quant/blocks.h.
#include "core/fp16.h"
#include "quant/quant_impl.h"

#include <algorithm>
#include <cmath>

namespace nitro::quant {
namespace {

/// Groups whose largest magnitude is below this quantize to all zeros (GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15f;

/// Symmetric fit of n values to integers in [-nmax, nmax-1] (make_qx_quants, rmse_type 1 and no
/// importance weights: weights are x^2). Writes L[i] = q + nmax, returns the scale.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
    float max = 0;
    float amax = 0;
    for (int i = 0; i < n; ++i) {
        const float ax = std::fabs(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < kGroupMaxEps) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0;
    float suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = std::max(-nmax, std::min(nmax - 1, l));
        L[i] = static_cast<int8_t>(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * x[i]);
            l = std::max(-nmax, std::min(nmax - 1, l));
            const float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) {
                const int l = nearest_int(iscale * x[i]);
                L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/// Symmetric 3-bit fit with iterative refinement (make_q3_quants with do_rmse). Writes
/// L[i] = q + nmax, returns the scale.
float make_q3_quants(int n, int nmax, const float* x, int8_t* L) {
    float max = 0;
    float amax = 0;
    for (int i = 0; i < n; ++i) {
        const float ax = std::fabs(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < kGroupMaxEps) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0;
    float suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = std::max(-nmax, std::min(nmax - 1, l));
        L[i] = static_cast<int8_t>(l);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                int new_l = nearest_int(x[i] * sl2 / slx);
                new_l = std::max(-nmax, std::min(nmax - 1, new_l));
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = static_cast<int8_t>(new_l);
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/// Affine fit x ~ scale * L + min with L in [0, nmax] (make_qkx2_quants): a grid search over
/// nstep+1 inverse scales, each refined by weighted least squares. Returns the scale and stores
/// -min (>= 0) in *the_min.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                       float* the_min, uint8_t* Laux, float rmin, float rdelta, int nstep,
                       bool use_mad) {
    float min = x[0];
    float max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        const float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * (x[i] - min));
        L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * (x[i] - min));
            l = std::max(0, std::min(nmax, l));
            Laux[i] = static_cast<uint8_t>(l);
            const float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? std::fabs(diff) : diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                for (int i = 0; i < n; ++i) L[i] = Laux[i];
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/// Unpacks the 6-bit scale and min of sub-block j (0..7) from Q4_K/Q5_K scales[12]:
/// j < 4: low 6 bits of q[j] and q[j+4]; j >= 4: nibbles of q[j+4] plus the top 2 bits of
/// q[j-4] and q[j] (get_scale_min_k4).
void get_scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
    }
}

/// Packs the 6-bit scale ls and min lm of sub-block j into Q4_K/Q5_K scales[12]; the inverse of
/// get_scale_min_k4. scales must start zeroed for j >= 4 to OR into.
void set_scale_min_k4(int j, uint8_t ls, uint8_t lm, uint8_t* scales) {
    if (j < 4) {
        scales[j] = ls;
        scales[j + 4] = lm;
    } else {
        scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
        scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
        scales[j - 0] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
}

/// Packs 256 2-bit values: byte l of each 32-byte run holds values l, l+32, l+64, l+96 of its
/// 128-value half, lowest bits first (Q2_K and Q3_K qs).
void pack_2bit(const uint8_t* L, uint8_t* qs) {
    for (int j = 0; j < QK_K; j += 128) {
        for (int l = 0; l < 32; ++l) {
            qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) |
                                                 (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
        }
    }
}

/// Decodes the sixteen 6-bit Q3_K scales (still offset by 32) from scales[12].
void unpack_q3_k_scales(const uint8_t* packed, int8_t* scales) {
    constexpr uint32_t kmask1 = 0x03030303;
    constexpr uint32_t kmask2 = 0x0f0f0f0f;
    uint32_t aux[4];
    std::memcpy(aux, packed, 12);
    const uint32_t tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
    aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
    aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
    aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
    std::memcpy(scales, aux, 16);
}

}  // namespace

// ---------------------------------------------------------------------------------------- Q2_K

/// Q2_K -> f32: per 16 values, x = d*(sc & 15) * q - dmin*(sc >> 4), q the 2-bit quant.
void dequantize_q2_k(const void* src, float* dst, int64_t n) {
    const int64_t nb = n / QK_K;
    float* y = dst;
    for (int64_t i = 0; i < nb; ++i) {
        const BlockQ2_K b = load_block<BlockQ2_K>(src, i);
        const float d = fp16_to_f32(b.d);
        const float min = fp16_to_f32(b.dmin);
        const uint8_t* q = b.qs;
        int is = 0;
        for (int half = 0; half < QK_K; half += 128) {
            int shift = 0;
            for (int j = 0; j < 4; ++j) {
                uint8_t sc = b.scales[is++];
                float dl = d * (sc & 0xF);
                float ml = min * (sc >> 4);
                for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<int8_t>((q[l] >> shift) & 3) - ml;
                sc = b.scales[is++];
                dl = d * (sc & 0xF);
                ml = min * (sc >> 4);
                for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<int8_t>((q[l + 16] >> shift) & 3) - ml;
                shift += 2;
            }
            q += 32;
        }
    }
}

/// f32 -> Q2_K (quantize_row_q2_K_ref): per 16 values an affine fit weighted by |x|, then 4-bit
/// scales and mins relative to the largest of each, then requantization with the stored scales.
void quantize_q2_k(const float* src, void* dst, int64_t n) {
    const int64_t nb = n / QK_K;
    uint8_t L[QK_K];
    uint8_t Laux[16];
    float weights[16];
    float mins[QK_K / 16];
    float scales[QK_K / 16];
    const float q4scale = 15.f;
    for (int64_t i = 0; i < nb; ++i) {
        const float* x = src + i * QK_K;
        BlockQ2_K y{};
        float max_scale = 0;
        float max_min = 0;
        for (int j = 0; j < QK_K / 16; ++j) {
            for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
            scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux,
                                         -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            const float iscale = q4scale / max_scale;
            for (int j = 0; j < QK_K / 16; ++j) y.scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
            y.d = f32_to_fp16(max_scale / q4scale);
        } else {
            for (int j = 0; j < QK_K / 16; ++j) y.scales[j] = 0;
            y.d = f32_to_fp16(0.f);
        }
        if (max_min > 0) {
            const float iscale = q4scale / max_min;
            for (int j = 0; j < QK_K / 16; ++j) {
                const int l = nearest_int(iscale * mins[j]);
                y.scales[j] = static_cast<uint8_t>(y.scales[j] | (l << 4));
            }
            y.dmin = f32_to_fp16(max_min / q4scale);
        } else {
            y.dmin = f32_to_fp16(0.f);
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = fp16_to_f32(y.d) * (y.scales[j] & 0xF);
            if (d == 0.0f) continue;
            const float dm = fp16_to_f32(y.dmin) * (y.scales[j] >> 4);
            for (int ii = 0; ii < 16; ++ii) {
                int l = nearest_int((x[16 * j + ii] + dm) / d);
                l = std::max(0, std::min(3, l));
                L[16 * j + ii] = static_cast<uint8_t>(l);
            }
        }
        pack_2bit(L, y.qs);
        store_block(dst, i, y);
    }
}

// ---------------------------------------------------------------------------------------- Q3_K

/// Q3_K -> f32: per 16 values, x = d*(sc - 32) * (q2 - (high bit set ? 0 : 4)).
void dequantize_q3_k(const void* src, float* dst, int64_t n) {
    const int64_t nb = n / QK_K;
    float* y = dst;
    for (int64_t i = 0; i < nb; ++i) {
        const BlockQ3_K b = load_block<BlockQ3_K>(src, i);
        const float d_all = fp16_to_f32(b.d);
        int8_t scales[16];
        unpack_q3_k_scales(b.scales, scales);
        const uint8_t* q = b.qs;
        const uint8_t* hm = b.hmask;
        uint8_t m = 1;
        int is = 0;
        for (int half = 0; half < QK_K; half += 128) {
            int shift = 0;
            for (int j = 0; j < 4; ++j) {
                float dl = d_all * (scales[is++] - 32);
                for (int l = 0; l < 16; ++l) {
                    *y++ = dl * (static_cast<int8_t>((q[l + 0] >> shift) & 3) - ((hm[l + 0] & m) ? 0 : 4));
                }
                dl = d_all * (scales[is++] - 32);
                for (int l = 0; l < 16; ++l) {
                    *y++ = dl * (static_cast<int8_t>((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
                }
                shift += 2;
                m = static_cast<uint8_t>(m << 1);
            }
            q += 32;
        }
    }
}

/// f32 -> Q3_K (quantize_row_q3_K_ref): per 16 values a symmetric 3-bit fit (make_q3_quants),
/// 6-bit scales relative to the largest-magnitude one, requantization with the stored scales.
void quantize_q3_k(const float* src, void* dst, int64_t n) {
    const int64_t nb = n / QK_K;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < nb; ++i) {
        const float* x = src + i * QK_K;
        BlockQ3_K y{};
        float max_scale = 0;
        float amax = 0;
        for (int j = 0; j < QK_K / 16; ++j) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            const float scale = std::fabs(scales[j]);
            if (scale > amax) {
                amax = scale;
                max_scale = scales[j];
            }
        }
        if (max_scale != 0.0f) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < QK_K / 16; ++j) {
                auto l = static_cast<int8_t>(nearest_int(iscale * scales[j]));
                l = static_cast<int8_t>(std::max(-32, std::min(31, static_cast<int>(l))) + 32);
                if (j < 8) {
                    y.scales[j] = static_cast<uint8_t>(l & 0xF);
                } else {
                    y.scales[j - 8] = static_cast<uint8_t>(y.scales[j - 8] | ((l & 0xF) << 4));
                }
                l = static_cast<int8_t>(l >> 4);
                y.scales[j % 4 + 8] = static_cast<uint8_t>(y.scales[j % 4 + 8] | (l << (2 * (j / 4))));
            }
            y.d = f32_to_fp16(1 / iscale);
        } else {
            y.d = f32_to_fp16(0.f);
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            auto sc = static_cast<int8_t>(j < 8 ? y.scales[j] & 0xF : y.scales[j - 8] >> 4);
            sc = static_cast<int8_t>((sc | (((y.scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32);
            const float d = fp16_to_f32(y.d) * sc;
            if (d == 0.0f) continue;
            for (int ii = 0; ii < 16; ++ii) {
                int l = nearest_int(x[16 * j + ii] / d);
                l = std::max(-4, std::min(3, l));
                L[16 * j + ii] = static_cast<int8_t>(l + 4);
            }
        }
        // High bit of quant j goes to bit (j / 32) of hmask[j % 32].
        int m = 0;
        uint8_t hm = 1;
        for (int j = 0; j < QK_K; ++j) {
            if (L[j] > 3) {
                y.hmask[m] |= hm;
                L[j] = static_cast<int8_t>(L[j] - 4);
            }
            if (++m == QK_K / 8) {
                m = 0;
                hm = static_cast<uint8_t>(hm << 1);
            }
        }
        pack_2bit(reinterpret_cast<const uint8_t*>(L), y.qs);
        store_block(dst, i, y);
    }
}

// ---------------------------------------------------------------------------------- Q4_K, Q5_K

namespace {

/// The shared first half of quantize_row_q{4,5}_K_ref: per 32 values an affine fit weighted by
/// sqrt(mean x^2) + |x|, then 6-bit scales and mins relative to the largest of each. Fills
/// d, dmin, scales[12] of the block and returns the requantized L[256] in [0, nmax].
void quantize_k_scales(const float* x, int nmax, float rmin, float rdelta, int nstep,
                       uint16_t* d_out, uint16_t* dmin_out, uint8_t* packed, uint8_t* L) {
    uint8_t Laux[32];
    float weights[32];
    float mins[QK_K / 32];
    float scales[QK_K / 32];
    float max_scale = 0;
    float max_min = 0;
    for (int j = 0; j < QK_K / 32; ++j) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = std::sqrt(sum_x2 / 32);
        for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux,
                                     rmin, rdelta, nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < QK_K / 32; ++j) {
        auto ls = static_cast<uint8_t>(nearest_int(inv_scale * scales[j]));
        auto lm = static_cast<uint8_t>(nearest_int(inv_min * mins[j]));
        ls = std::min<uint8_t>(63, ls);
        lm = std::min<uint8_t>(63, lm);
        set_scale_min_k4(j, ls, lm, packed);
    }
    *d_out = f32_to_fp16(max_scale / 63.f);
    *dmin_out = f32_to_fp16(max_min / 63.f);
    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t sc, m;
        get_scale_min_k4(j, packed, &sc, &m);
        const float d = fp16_to_f32(*d_out) * sc;
        if (d == 0.0f) continue;
        const float dm = fp16_to_f32(*dmin_out) * m;
        for (int ii = 0; ii < 32; ++ii) {
            int l = nearest_int((x[32 * j + ii] + dm) / d);
            l = std::max(0, std::min(nmax, l));
            L[32 * j + ii] = static_cast<uint8_t>(l);
        }
    }
}

}  // namespace

/// Q4_K -> f32: per 32 values, x = d*sc * q - dmin*m; qs byte l of each 32-byte run holds value
/// l (low nibble) and l+32 (high nibble) of its 64.
void dequantize_q4_k(const void* src, float* dst, int64_t n) {
    const int64_t nb = n / QK_K;
    float* y = dst;
    for (int64_t i = 0; i < nb; ++i) {
        const BlockQ4_K b = load_block<BlockQ4_K>(src, i);
        const float d = fp16_to_f32(b.d);
        const float min = fp16_to_f32(b.dmin);
        const uint8_t* q = b.qs;
        int is = 0;
        uint8_t sc, m;
        for (int j = 0; j < QK_K; j += 64) {
            get_scale_min_k4(is + 0, b.scales, &sc, &m);
            const float d1 = d * sc;
            const float m1 = min * m;
            get_scale_min_k4(is + 1, b.scales, &sc, &m);
            const float d2 = d * sc;
            const float m2 = min * m;
            for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
            q += 32;
            is += 2;
        }
    }
}

/// f32 -> Q4_K (quantize_row_q4_K_ref).
void quantize_q4_k(const float* src, void* dst, int64_t n) {
    const int64_t nb = n / QK_K;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < nb; ++i) {
        BlockQ4_K y{};
        quantize_k_scales(src + i * QK_K, 15, -1.f, 0.1f, 20, &y.d, &y.dmin, y.scales, L);
        uint8_t* q = y.qs;
        for (int j = 0; j < QK_K; j += 64) {
            for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
            q += 32;
        }
        store_block(dst, i, y);
    }
}

/// Q5_K -> f32: as Q4_K with a 5th bit per value from qh (bit 2k / 2k+1 for the k-th 64).
void dequantize_q5_k(const void* src, float* dst, int64_t n) {
    const int64_t nb = n / QK_K;
    float* y = dst;
    for (int64_t i = 0; i < nb; ++i) {
        const BlockQ5_K b = load_block<BlockQ5_K>(src, i);
        const float d = fp16_to_f32(b.d);
        const float min = fp16_to_f32(b.dmin);
        const uint8_t* ql = b.qs;
        const uint8_t* qh = b.qh;
        int is = 0;
        uint8_t sc, m;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < QK_K; j += 64) {
            get_scale_min_k4(is + 0, b.scales, &sc, &m);
            const float d1 = d * sc;
            const float m1 = min * m;
            get_scale_min_k4(is + 1, b.scales, &sc, &m);
            const float d2 = d * sc;
            const float m2 = min * m;
            for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
            ql += 32;
            is += 2;
            u1 = static_cast<uint8_t>(u1 << 2);
            u2 = static_cast<uint8_t>(u2 << 2);
        }
    }
}

/// f32 -> Q5_K (quantize_row_q5_K_ref).
void quantize_q5_k(const float* src, void* dst, int64_t n) {
    const int64_t nb = n / QK_K;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < nb; ++i) {
        BlockQ5_K y{};
        quantize_k_scales(src + i * QK_K, 31, -0.5f, 0.1f, 15, &y.d, &y.dmin, y.scales, L);
        uint8_t* ql = y.qs;
        uint8_t m1 = 1, m2 = 2;
        for (int base = 0; base < QK_K; base += 64) {
            for (int j = 0; j < 32; ++j) {
                int l1 = L[base + j];
                if (l1 > 15) {
                    l1 -= 16;
                    y.qh[j] |= m1;
                }
                int l2 = L[base + j + 32];
                if (l2 > 15) {
                    l2 -= 16;
                    y.qh[j] |= m2;
                }
                ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
            }
            m1 = static_cast<uint8_t>(m1 << 2);
            m2 = static_cast<uint8_t>(m2 << 2);
            ql += 32;
        }
        store_block(dst, i, y);
    }
}

// ---------------------------------------------------------------------------------------- Q6_K

/// Q6_K -> f32: per 16 values, x = d * sc * (q - 32), q = 4 bits of ql | 2 bits of qh << 4.
void dequantize_q6_k(const void* src, float* dst, int64_t n) {
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; ++i) {
        const BlockQ6_K b = load_block<BlockQ6_K>(src, i);
        const float d = fp16_to_f32(b.d);
        const uint8_t* ql = b.ql;
        const uint8_t* qh = b.qh;
        const int8_t* sc = b.scales;
        float* y = dst + i * QK_K;
        for (int half = 0; half < QK_K; half += 128) {
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                const int8_t q1 = static_cast<int8_t>(((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
                const int8_t q2 = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
                const int8_t q3 = static_cast<int8_t>(((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                const int8_t q4 = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
                y[l + 0] = d * sc[is + 0] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

/// f32 -> Q6_K (quantize_row_q6_K_ref): per 16 values a symmetric 6-bit fit weighted by x^2,
/// int8 scales relative to the largest-magnitude one, requantization with the stored scales.
void quantize_q6_k(const float* src, void* dst, int64_t n) {
    const int64_t nb = n / QK_K;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < nb; ++i) {
        const float* x = src + i * QK_K;
        BlockQ6_K y{};
        float max_scale = 0;
        float max_abs_scale = 0;
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
            scales[ib] = scale;
            const float abs_scale = std::fabs(scale);
            if (abs_scale > max_abs_scale) {
                max_abs_scale = abs_scale;
                max_scale = scale;
            }
        }
        if (max_abs_scale < kGroupMaxEps) {
            y.d = f32_to_fp16(0.f);  // all-zero block
            store_block(dst, i, y);
            continue;
        }
        const float iscale = -128.f / max_scale;
        y.d = f32_to_fp16(1 / iscale);
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            y.scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = fp16_to_f32(y.d) * y.scales[j];
            if (d == 0.0f) continue;
            for (int ii = 0; ii < 16; ++ii) {
                int l = nearest_int(x[16 * j + ii] / d);
                l = std::max(-32, std::min(31, l));
                L[16 * j + ii] = static_cast<int8_t>(l + 32);
            }
        }
        uint8_t* ql = y.ql;
        uint8_t* qh = y.qh;
        for (int j = 0; j < QK_K; j += 128) {
            for (int l = 0; l < 32; ++l) {
                const uint8_t q1 = L[j + l + 0] & 0xF;
                const uint8_t q2 = L[j + l + 32] & 0xF;
                const uint8_t q3 = L[j + l + 64] & 0xF;
                const uint8_t q4 = L[j + l + 96] & 0xF;
                ql[l + 0] = static_cast<uint8_t>(q1 | (q3 << 4));
                ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
                qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                             ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
            }
            ql += 64;
            qh += 32;
        }
        store_block(dst, i, y);
    }
}

// ---------------------------------------------------------------------------------------- Q8_K

/// Q8_K -> f32: x = d * q (d is a plain f32).
void dequantize_q8_k(const void* src, float* dst, int64_t n) {
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; ++i) {
        const BlockQ8_K b = load_block<BlockQ8_K>(src, i);
        for (int j = 0; j < QK_K; ++j) dst[i * QK_K + j] = b.d * b.qs[j];
    }
}

/// f32 -> Q8_K (quantize_row_q8_K_ref): d = max / -127 (value of largest magnitude),
/// q = nearest_int(x / d) clamped to 127, bsums = sums of 16 quants.
void quantize_q8_k(const float* src, void* dst, int64_t n) {
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; ++i) {
        const float* x = src + i * QK_K;
        BlockQ8_K y{};
        float max = 0;
        float amax = 0;
        for (int j = 0; j < QK_K; ++j) {
            const float ax = std::fabs(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            y.d = 0;
            store_block(dst, i, y);
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; ++j) {
            const int v = nearest_int(iscale * x[j]);
            y.qs[j] = static_cast<int8_t>(std::min(127, v));
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            int sum = 0;
            for (int ii = 0; ii < 16; ++ii) sum += y.qs[j * 16 + ii];
            y.bsums[j] = static_cast<int16_t>(sum);
        }
        y.d = 1 / iscale;
        store_block(dst, i, y);
    }
}

}  // namespace nitro::quant
