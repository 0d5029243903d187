// The SIMD views of an activation row (kernels.h ActLayout / ActRow): the quants permuted into the
// order the weight type's SIMD kernels decode their weights in, and for Q8_0/Q8_1 activations the
// per-lane block scales, offset corrections and Q8_1 block sums. Built once per activation row
// (quantize_acts), read by every weight row of the product, so all per-token shuffling is paid
// once instead of once per weight row. Plain x86-64 code: it runs before any kernel.
#include "core/error.h"
#include "core/fp16.h"
#include "cpu/kernels.h"
#include "cpu/matmul.h"

#include <cstring>

namespace nitro::cpu::kernels {
namespace {

constexpr size_t align64(size_t x) { return (x + 63) & ~size_t{63}; }

/// Image position of natural value k (within the row).
int64_t image_pos(ActOrder o, int64_t k) {
    switch (o) {
        case ActOrder::Natural: return k;
        case ActOrder::Half16: {
            const int64_t g = k / 128, r = k % 128, blk = r / 32, j = r % 32;
            return g * 128 + (j < 16 ? 0 : 64) + blk * 16 + j % 16;
        }
        case ActOrder::K4: {
            const int64_t g = k / 128, r = k % 128;
            return g * 128 + ((r / 32) % 2) * 64 + (r / 64) * 32 + r % 32;
        }
        case ActOrder::K2: {
            const int64_t g = k / 256, r = k % 256;
            return g * 256 + 32 * (2 * ((r / 32) % 4) + r / 128) + r % 32;
        }
        case ActOrder::None: break;
    }
    return -1;
}

}  // namespace

ActLayout act_layout(GgmlType w, int64_t ne0) {
    ActLayout l;
    const GgmlType vt = vec_dot_type(w);
    const bool q8 = vt == GgmlType::Q8_0 || vt == GgmlType::Q8_1;
    const int64_t nb = ne0 / 32;
    switch (w) {
        case GgmlType::Q8_0: l.order = ActOrder::Natural, l.lanes = 8, l.corr_offset = 128; break;
        case GgmlType::MXFP4: l.order = ActOrder::Half16, l.lanes = 4, l.corr_offset = 12; break;
        case GgmlType::IQ4_NL: l.order = ActOrder::Half16, l.lanes = 4, l.corr_offset = 128; break;
        case GgmlType::Q4_0: l.order = ActOrder::Half16, l.lanes = 4, l.corr_offset = 8; break;
        case GgmlType::Q5_0: l.order = ActOrder::Half16, l.lanes = 4, l.corr_offset = 16; break;
        case GgmlType::Q4_1:
        case GgmlType::Q5_1: l.order = ActOrder::Half16, l.lanes = 4; break;
        case GgmlType::IQ4_XS: l.order = ActOrder::Half16, l.lanes = 4, l.corr_offset = 128; break;
        case GgmlType::Q4_K:
        case GgmlType::Q5_K: l.order = ActOrder::K4; break;
        case GgmlType::Q2_K:
        case GgmlType::Q3_K: l.order = ActOrder::K2; break;
        case GgmlType::Q6_K: l.order = ActOrder::Natural; break;
        default: return l;  // float types: the kernels read the row itself
    }
    // Q8_0 weights go two blocks per zmm, the nibble formats four: pad to that.
    const int64_t pad = l.order == ActOrder::Natural ? 2 : 4;
    l.n_blocks = q8 ? (nb + pad - 1) / pad * pad : nb;
    l.img_bytes = q8 ? l.n_blocks * 32 : ne0;
    size_t off = align64(static_cast<size_t>(l.img_bytes));
    l.img = 0;
    const size_t lane_bytes = static_cast<size_t>(l.n_blocks * l.lanes) * 4;
    if (q8) {
        l.dx = off;
        off = align64(off + lane_bytes);
    }
    if (l.corr_offset != 0) {
        l.corr = off;
        off = align64(off + lane_bytes);
    }
    if (vt == GgmlType::Q8_1) {
        l.sx = off;
        off = align64(off + lane_bytes);
    }
    l.stride = off;
    return l;
}

void fill_act_simd(const ActLayout& l, GgmlType w, int64_t ne0, const uint8_t* q, int64_t v0, int64_t nv,
                   uint8_t* simd) {
    if (l.order == ActOrder::None) return;
    const GgmlType vt = vec_dot_type(w);
    const bool k8 = vt == GgmlType::Q8_K;
    const size_t bs = type_traits(vt).type_size;  // 34 (Q8_0), 36 (Q8_1), 292 (Q8_K)
    const size_t qs_off = vt == GgmlType::Q8_0 ? 2 : 4;
    // Address of the quant of natural value k (runs of 16 or 32 aligned values never cross a block).
    auto quant_at = [&](int64_t k) -> const uint8_t* {
        const int64_t blk = k8 ? k / 256 : k / 32, j = k8 ? k % 256 : k % 32;
        return q + static_cast<size_t>(blk) * bs + qs_off + static_cast<size_t>(j);
    };
    const int64_t v1 = v0 + nv;
    const bool ends_row = v1 >= ne0;
    const int64_t padded_end = ends_row ? (k8 ? ne0 : l.n_blocks * 32) : v1;
    // The image in runs: 16 values (Half16's half-blocks) or 32, each copied as one piece.
    const int64_t run = l.order == ActOrder::Half16 ? 16 : 32;
    auto* img = simd + l.img;
    for (int64_t k = v0; k < padded_end; k += run) {
        uint8_t* dst = img + image_pos(l.order, k);
        if (k < ne0) std::memcpy(dst, quant_at(k), static_cast<size_t>(run));
        else std::memset(dst, 0, static_cast<size_t>(run));
    }

    // Per-block lanes: Q8_0/Q8_1 blocks, or IQ4_XS's 32-value sub-blocks (corr only).
    if (!l.dx && !l.corr && !l.sx) return;
    const int64_t b0 = v0 / 32, b1 = padded_end / 32;
    for (int64_t b = b0; b < b1; ++b) {
        const bool real = b < ne0 / 32;
        int32_t qsum = 0;
        if (real && l.corr) {
            const auto* x = reinterpret_cast<const int8_t*>(quant_at(32 * b));
            for (int j = 0; j < 32; ++j) qsum += x[j];
        }
        const size_t lane0 = static_cast<size_t>(b * l.lanes);
        if (l.dx) {
            const float d = real ? fp16_to_f32(load_u16(q + static_cast<size_t>(b) * bs)) : 0.f;
            auto* dx = reinterpret_cast<float*>(simd + l.dx);
            for (int i = 0; i < l.lanes; ++i) dx[lane0 + static_cast<size_t>(i)] = d;
        }
        if (l.corr) {
            auto* corr = reinterpret_cast<int32_t*>(simd + l.corr);
            corr[lane0] = -l.corr_offset * qsum;
            for (int i = 1; i < l.lanes; ++i) corr[lane0 + static_cast<size_t>(i)] = 0;
        }
        if (l.sx) {
            auto* sx = reinterpret_cast<float*>(simd + l.sx);
            sx[lane0] = real ? fp16_to_f32(load_u16(q + static_cast<size_t>(b) * bs + 2)) : 0.f;
            for (int i = 1; i < l.lanes; ++i) sx[lane0 + static_cast<size_t>(i)] = 0.f;
        }
    }
}

}  // namespace nitro::cpu::kernels
