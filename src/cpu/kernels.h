// Internal to src/cpu: the dot-product kernel table shared by the scalar reference and the
// per-ISA files (vec_dot_scalar.cpp, vec_dot_avx2.cpp, vec_dot_avx512.cpp), and small helpers.
//
// A kernel computes the dots of ONE weight row with up to kMaxTokens activation rows, so a SIMD
// kernel decodes each weight block once and reuses it for every token of the group. Per token
// it performs exactly the same operations in the same order whatever nt is, so a result never
// depends on how tokens were grouped (or on the thread that ran it).
#pragma once

#include "quant/types.h"

#include <bit>
#include <cstdint>
#include <cstring>

namespace nitro::cpu::kernels {

/// Tokens one kernel call handles at most.
inline constexpr int kMaxTokens = 4;
/// Table size: GgmlType ids are below this.
inline constexpr int kTypeSlots = 40;

/// One activation row as the kernels see it: the vec-dot-type bytes, and for Q8_0/Q8_1 rows the
/// f32 value of every block's fp16 scale (ActBuffer::block_scales), so a kernel does not convert
/// the same scale again for every weight row. d is nullptr for other types.
struct ActRow {
    const uint8_t* q;
    const float* d;
};

/// out[j] = dot(weight row w, activation row a[j]) for j in [0, nt), 1 <= nt <= kMaxTokens;
/// n values, a multiple of the weight type's block size; a[j] in vec_dot_type(weight type).
using DotFn = void (*)(int64_t n, const uint8_t* w, const ActRow* a, int nt, float* out);

/// acc[i] += w * v[i] for n F16 values v (attention's weighted V sum).
using AxpyF16Fn = void (*)(int64_t n, float w, const uint16_t* v, float* acc);

/// One kernel per weight type id (nullptr: no kernel for that type at this level).
struct Table {
    DotFn dot[kTypeSlots] = {};
    AxpyF16Fn axpy_f16 = nullptr;
};

/// Fills the scalar reference kernels (every supported type).
void fill_scalar(Table& t);
/// Overrides the entries with AVX2+FMA+F16C kernels (vec_dot_avx2.cpp).
void fill_avx2(Table& t);
/// Overrides the entries with AVX-512 F/BW/VL/VNNI kernels (vec_dot_avx512.cpp).
void fill_avx512(Table& t);

/// Scalar reference dot of one row pair (what vec_dot_reference returns); throws for types
/// without a kernel.
float dot_scalar(GgmlType w, int64_t n, const void* wrow, const void* arow);

/// Unpacks the 8 six-bit scales and 8 six-bit mins of a Q4_K/Q5_K super-block (ggml's
/// get_scale_min_k4 for j = 0..7).
inline void unpack_scales_k4(const uint8_t* q, uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 4; ++j) {
        sc[j] = q[j] & 63;
        mn[j] = q[j + 4] & 63;
    }
    for (int j = 4; j < 8; ++j) {
        sc[j] = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        mn[j] = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/// E8M0 byte -> 2^(e - 128), half the MX scale (ggml_e8m0_to_fp32_half). constexpr, so tables of
/// it are built at compile time (no code runs at load time, see simd_x86.h).
constexpr float e8m0_half(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
    return std::bit_cast<float>(bits);
}

/// E2M1 code -> value * 2 (ggml's kvalues_mxfp4).
inline constexpr int8_t kValuesMxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/// Reads a little-endian u16 / f32 at an unaligned address.
inline uint16_t load_u16(const uint8_t* p) { uint16_t v; std::memcpy(&v, p, 2); return v; }
inline float load_f32(const uint8_t* p) { float v; std::memcpy(&v, p, 4); return v; }

}  // namespace nitro::cpu::kernels
