// The SIMD views of an activation row (kernels.h ActLayout / ActRow): the quants transposed into
// the slices the weight type's SIMD kernels decode their weights into, and per sub-block the
// activation scale, the offset correction and the min-term factor. Built once per activation row
// (quantize_acts), read by every weight row of the product, so all per-token rearranging is paid
// once instead of once per weight row. Plain x86-64 code: it runs before any kernel.
#include "core/error.h"
#include "core/fp16.h"
#include "cpu/kernels.h"
#include "cpu/matmul.h"

#include <cstring>

namespace nitro::cpu::kernels {
namespace {

constexpr size_t align64(size_t x) { return (x + 63) & ~size_t{63}; }

}  // namespace

ActLayout act_layout(GgmlType w, int64_t ne0) {
    ActLayout l;
    bool min_term = false;
    switch (w) {
        case GgmlType::Q8_0: l.order = ActOrder::Slices32, l.corr_offset = 128; break;
        case GgmlType::MXFP4: l.order = ActOrder::Slices32, l.corr_offset = 12; break;
        case GgmlType::IQ4_NL: l.order = ActOrder::Slices32, l.corr_offset = 128; break;
        case GgmlType::Q4_0: l.order = ActOrder::Slices32, l.corr_offset = 8; break;
        case GgmlType::Q5_0: l.order = ActOrder::Slices32, l.corr_offset = 16; break;
        case GgmlType::Q4_1:
        case GgmlType::Q5_1: l.order = ActOrder::Slices32, min_term = true; break;
        case GgmlType::IQ4_XS: l.order = ActOrder::Slices32, l.corr_offset = 128; break;
        case GgmlType::Q4_K:
        case GgmlType::Q5_K: l.order = ActOrder::Slices32, min_term = true; break;
        case GgmlType::Q2_K: l.order = ActOrder::Slices16, min_term = true; break;
        case GgmlType::Q3_K: l.order = ActOrder::Slices16, l.corr_offset = 4; break;
        case GgmlType::Q6_K: l.order = ActOrder::Slices16, l.corr_offset = 32; break;
        default:
            return l;  // float types: the kernels read the row itself
    }
    l.sub = l.order == ActOrder::Slices32 ? 32 : 16;
    l.n_sub = (ne0 / l.sub + 15) / 16 * 16;
    l.img_bytes = l.n_sub * l.sub;
    l.img = 0;
    size_t off = align64(static_cast<size_t>(l.img_bytes));
    const size_t lane_bytes = static_cast<size_t>(l.n_sub) * 4;
    l.dx = off;
    off = align64(off + lane_bytes);
    if (l.corr_offset != 0) {
        l.corr = off;
        off = align64(off + lane_bytes);
    }
    if (min_term) {
        l.sx = off;
        off = align64(off + lane_bytes);
    }
    l.stride = off;
    return l;
}

void fill_act_simd(const ActLayout& l, GgmlType w, int64_t ne0, const uint8_t* q, int64_t v0, int64_t nv, uint8_t* simd) {
    if (l.order == ActOrder::None) return;
    const GgmlType vt = vec_dot_type(w);
    const bool k8 = vt == GgmlType::Q8_K;
    const size_t bs = type_traits(vt).type_size;  // 34 (Q8_0), 36 (Q8_1), 292 (Q8_K)
    const int64_t qk = k8 ? 256 : 32;              // values per activation block
    const size_t qs_off = vt == GgmlType::Q8_K ? 4 : vt == GgmlType::Q8_0 ? 2 : 4;
    const int sub = l.sub, slices = sub / 4;
    const int64_t group_bytes = 16 * static_cast<int64_t>(sub);
    auto* img = reinterpret_cast<int8_t*>(simd + l.img);
    auto* dx = reinterpret_cast<float*>(simd + l.dx);
    auto* corr = l.corr ? reinterpret_cast<int32_t*>(simd + l.corr) : nullptr;
    auto* sx = l.sx ? reinterpret_cast<float*>(simd + l.sx) : nullptr;
    const int64_t k0 = v0 / sub;
    const int64_t k1 = v0 + nv >= ne0 ? l.n_sub : (v0 + nv) / sub;  // the piece that ends the row pads
    for (int64_t k = k0; k < k1; ++k) {
        const int64_t g = k / 16, lane = lane_of_sub(l.order, static_cast<int>(k % 16));
        int8_t* dst = img + g * group_bytes + 4 * lane;
        const size_t li = static_cast<size_t>(g * 16 + lane);
        if (k * sub >= ne0) {  // padding
            for (int s = 0; s < slices; ++s) std::memset(dst + 64 * s, 0, 4);
            dx[li] = 0.f;
            if (corr) corr[li] = 0;
            if (sx) sx[li] = 0.f;
            continue;
        }
        const int64_t v = k * sub, blk = v / qk;
        const uint8_t* b = q + static_cast<size_t>(blk) * bs;
        const auto* x = reinterpret_cast<const int8_t*>(b + qs_off) + (v % qk);
        for (int s = 0; s < slices; ++s) std::memcpy(dst + 64 * s, x + 4 * s, 4);
        int32_t qsum = 0;
        for (int j = 0; j < sub; ++j) qsum += x[j];
        const float d = k8 ? load_f32(b) : fp16_to_f32(load_u16(b));
        dx[li] = d;
        if (corr) corr[li] = -l.corr_offset * qsum;
        if (sx) sx[li] = k8 ? d * static_cast<float>(qsum) : fp16_to_f32(load_u16(b + 2));
    }
}

}  // namespace nitro::cpu::kernels
