// Device-side decoding of ggml weight blocks, 32 values at a time ("sub-block" sb of a row).
//
// decode32<T>(row, sb, w) writes the 32 floats of values [32*sb, 32*sb + 32) of a row. Every
// value equals src/quant's dequantize() bit for bit (which equals ggml's): the products are
// written with __fmul_rn / __fsub_rn so nvcc cannot contract them into a fused multiply-add.
// One 32-value unit for every type lets one GEMV and one dequantize kernel serve all of them:
// for the 256-value super-blocks (K-quants, IQ4_XS) a unit is one of the 8 sub-blocks that
// carry their own scale, so a warp's lanes spread over a row even when it holds few super-blocks.
#pragma once

#include "cuda/common.cuh"
#include "quant/types.h"

#include <cstdint>
#include <cstring>

namespace nitro::cuda {

template <GgmlType T> struct TypeInfo;
template <> struct TypeInfo<GgmlType::F32>    { static constexpr int block = 32;  static constexpr int bytes = 128; };
template <> struct TypeInfo<GgmlType::F16>    { static constexpr int block = 32;  static constexpr int bytes = 64; };
template <> struct TypeInfo<GgmlType::BF16>   { static constexpr int block = 32;  static constexpr int bytes = 64; };
template <> struct TypeInfo<GgmlType::Q4_0>   { static constexpr int block = 32;  static constexpr int bytes = 18; };
template <> struct TypeInfo<GgmlType::Q8_0>   { static constexpr int block = 32;  static constexpr int bytes = 34; };
template <> struct TypeInfo<GgmlType::MXFP4>  { static constexpr int block = 32;  static constexpr int bytes = 17; };
template <> struct TypeInfo<GgmlType::Q4_K>   { static constexpr int block = 256; static constexpr int bytes = 144; };
template <> struct TypeInfo<GgmlType::Q5_K>   { static constexpr int block = 256; static constexpr int bytes = 176; };
template <> struct TypeInfo<GgmlType::Q6_K>   { static constexpr int block = 256; static constexpr int bytes = 210; };
template <> struct TypeInfo<GgmlType::IQ4_XS> { static constexpr int block = 256; static constexpr int bytes = 136; };

// d_fp16, e8m0_half and scale_min_k4 are also host functions: q8dot.cuh's decoders use them and are
// tested on the CPU.
__host__ __device__ __forceinline__ float d_fp16(const uint8_t* p) {
    const uint16_t h = static_cast<uint16_t>(p[0] | (p[1] << 8));
    return __half2float(__ushort_as_half(h));
}

// The 16-entry tables (kvalues_mxfp4, kvalues_iq4nl) as byte lanes of 64-bit immediates: a
// lookup is a shift, in registers. (A __constant__ table serialises when the lanes of a warp read
// different entries, which they do: that cost 90% of the MXFP4 GEMV's bandwidth.)
__device__ __forceinline__ float kv_mxfp4(int q) {
    const int mag = static_cast<int>((0x0C08060403020100ull >> (8 * (q & 7))) & 0xFF);
    return static_cast<float>((q & 8) ? -mag : mag);
}
__device__ __forceinline__ float kv_iq4nl(int q) {
    // -127 -104 -83 -65 -49 -35 -22 -10 | 1 13 25 38 53 69 89 113, as int8 bytes
    const unsigned long long lo = 0xF6EADDCFBFAD9881ull, hi = 0x7159453526190D01ull;
    const unsigned long long t = (q & 8) ? hi : lo;
    return static_cast<float>(static_cast<int8_t>((t >> (8 * (q & 7))) & 0xFF));
}

/// ggml_e8m0_to_fp32_half.
__host__ __device__ __forceinline__ float e8m0_half(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
#ifdef __CUDA_ARCH__
    return __uint_as_float(bits);
#else
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
#endif
}

/// get_scale_min_k4.
__host__ __device__ __forceinline__ void scale_min_k4(int j, const uint8_t* q, int& sc, int& m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

template <GgmlType T>
__device__ __forceinline__ void decode32(const uint8_t* __restrict__ row, int sb, float* __restrict__ w);

template <>
__device__ __forceinline__ void decode32<GgmlType::F32>(const uint8_t* __restrict__ row, int sb, float* __restrict__ w) {
    const float4* p = reinterpret_cast<const float4*>(row + sb * 128);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const float4 v = __ldg(p + i);
        w[4 * i] = v.x; w[4 * i + 1] = v.y; w[4 * i + 2] = v.z; w[4 * i + 3] = v.w;
    }
}
template <>
__device__ __forceinline__ void decode32<GgmlType::F16>(const uint8_t* __restrict__ row, int sb, float* __restrict__ w) {
    const uint4* p = reinterpret_cast<const uint4*>(row + sb * 64);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const uint4 v = __ldg(p + i);
        const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const float2 f = __half22float2(h[k]);
            w[8 * i + 2 * k] = f.x;
            w[8 * i + 2 * k + 1] = f.y;
        }
    }
}
template <>
__device__ __forceinline__ void decode32<GgmlType::BF16>(const uint8_t* __restrict__ row, int sb, float* __restrict__ w) {
    const uint4* p = reinterpret_cast<const uint4*>(row + sb * 64);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const uint4 v = __ldg(p + i);
        const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            w[8 * i + 2 * k] = __uint_as_float(u[k] << 16);
            w[8 * i + 2 * k + 1] = __uint_as_float(u[k] & 0xFFFF0000u);
        }
    }
}
template <>
__device__ __forceinline__ void decode32<GgmlType::Q8_0>(const uint8_t* __restrict__ row, int sb, float* __restrict__ w) {
    const uint8_t* b = row + sb * 34;
    const uint16_t* q16 = reinterpret_cast<const uint16_t*>(b);  // blocks are 2-byte aligned
    const float d = __half2float(__ushort_as_half(__ldg(q16)));
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        const uint16_t v = __ldg(q16 + 1 + i);
        w[2 * i] = __fmul_rn(static_cast<float>(static_cast<int8_t>(v & 0xFF)), d);
        w[2 * i + 1] = __fmul_rn(static_cast<float>(static_cast<int8_t>(v >> 8)), d);
    }
}
template <>
__device__ __forceinline__ void decode32<GgmlType::Q4_0>(const uint8_t* __restrict__ row, int sb, float* __restrict__ w) {
    const uint16_t* b = reinterpret_cast<const uint16_t*>(row + sb * 18);  // 2-byte aligned
    const float d = __half2float(__ushort_as_half(__ldg(b)));
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const uint16_t v = __ldg(b + 1 + i);
        const int q0 = v & 0xFF, q1 = v >> 8;
        w[2 * i] = __fmul_rn(static_cast<float>((q0 & 0xF) - 8), d);
        w[2 * i + 1] = __fmul_rn(static_cast<float>((q1 & 0xF) - 8), d);
        w[2 * i + 16] = __fmul_rn(static_cast<float>((q0 >> 4) - 8), d);
        w[2 * i + 17] = __fmul_rn(static_cast<float>((q1 >> 4) - 8), d);
    }
}
template <>
__device__ __forceinline__ void decode32<GgmlType::MXFP4>(const uint8_t* __restrict__ row, int sb, float* __restrict__ w) {
    const uint8_t* b = row + sb * 17;
    const float d = e8m0_half(__ldg(b));
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const uint8_t q = __ldg(b + 1 + j);
        w[j] = __fmul_rn(kv_mxfp4(q & 0xF), d);
        w[j + 16] = __fmul_rn(kv_mxfp4(q >> 4), d);
    }
}
template <>
__device__ __forceinline__ void decode32<GgmlType::Q4_K>(const uint8_t* __restrict__ row, int sb, float* __restrict__ w) {
    const uint8_t* b = row + (sb >> 3) * 144;
    const int s = sb & 7;
    const float d = d_fp16(b), dmin = d_fp16(b + 2);
    int sc, m;
    scale_min_k4(s, b + 4, sc, m);
    const float d1 = __fmul_rn(d, static_cast<float>(sc)), m1 = __fmul_rn(dmin, static_cast<float>(m));
    const uint8_t* q = b + 16 + 32 * (s >> 1);
    const int shift = (s & 1) * 4;
#pragma unroll
    for (int l = 0; l < 32; ++l) w[l] = __fsub_rn(__fmul_rn(d1, static_cast<float>((q[l] >> shift) & 0xF)), m1);
}
template <>
__device__ __forceinline__ void decode32<GgmlType::Q5_K>(const uint8_t* __restrict__ row, int sb, float* __restrict__ w) {
    const uint8_t* b = row + (sb >> 3) * 176;
    const int s = sb & 7;
    const float d = d_fp16(b), dmin = d_fp16(b + 2);
    int sc, m;
    scale_min_k4(s, b + 4, sc, m);
    const float d1 = __fmul_rn(d, static_cast<float>(sc)), m1 = __fmul_rn(dmin, static_cast<float>(m));
    const uint8_t* qh = b + 16;
    const uint8_t* q = b + 48 + 32 * (s >> 1);
    const int shift = (s & 1) * 4;
#pragma unroll
    for (int l = 0; l < 32; ++l) {
        const int v = ((q[l] >> shift) & 0xF) + (((qh[l] >> s) & 1) ? 16 : 0);
        w[l] = __fsub_rn(__fmul_rn(d1, static_cast<float>(v)), m1);
    }
}
template <>
__device__ __forceinline__ void decode32<GgmlType::Q6_K>(const uint8_t* __restrict__ row, int sb, float* __restrict__ w) {
    const uint8_t* b = row + (sb >> 3) * 210;
    const int s = sb & 7;
    const int half = s >> 2, g = s & 3;
    const uint8_t* ql = b + 64 * half + (g & 1) * 32;
    const uint8_t* qh = b + 128 + 32 * half;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * half + 2 * g;
    const float d = d_fp16(b + 208);
    const int nshift = (g >> 1) * 4, hshift = 2 * g;
    const float ds0 = __fmul_rn(d, static_cast<float>(sc[0])), ds1 = __fmul_rn(d, static_cast<float>(sc[1]));
#pragma unroll
    for (int l = 0; l < 32; ++l) {
        const int q = (((ql[l] >> nshift) & 0xF) | (((qh[l] >> hshift) & 3) << 4)) - 32;
        w[l] = __fmul_rn(l < 16 ? ds0 : ds1, static_cast<float>(q));
    }
}
template <>
__device__ __forceinline__ void decode32<GgmlType::IQ4_XS>(const uint8_t* __restrict__ row, int sb, float* __restrict__ w) {
    const uint8_t* b = row + (sb >> 3) * 136;
    const int s = sb & 7;
    const float d = d_fp16(b);
    const int scales_h = b[2] | (b[3] << 8);
    const int ls = ((b[4 + s / 2] >> (4 * (s % 2))) & 0xf) | (((scales_h >> (2 * s)) & 3) << 4);
    const float dl = __fmul_rn(d, static_cast<float>(ls - 32));
    const uint8_t* qs = b + 8 + 16 * s;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const uint8_t q = qs[j];
        w[j] = __fmul_rn(dl, kv_iq4nl(q & 0xf));
        w[j + 16] = __fmul_rn(dl, kv_iq4nl(q >> 4));
    }
}

/// Calls f.template operator()<T>() for the runtime type t; returns false for unsupported types.
template <typename F>
bool dispatch_type(GgmlType t, F&& f) {
    switch (t) {
        case GgmlType::F32: f.template operator()<GgmlType::F32>(); return true;
        case GgmlType::F16: f.template operator()<GgmlType::F16>(); return true;
        case GgmlType::BF16: f.template operator()<GgmlType::BF16>(); return true;
        case GgmlType::Q8_0: f.template operator()<GgmlType::Q8_0>(); return true;
        case GgmlType::Q4_0: f.template operator()<GgmlType::Q4_0>(); return true;
        case GgmlType::MXFP4: f.template operator()<GgmlType::MXFP4>(); return true;
        case GgmlType::Q4_K: f.template operator()<GgmlType::Q4_K>(); return true;
        case GgmlType::Q5_K: f.template operator()<GgmlType::Q5_K>(); return true;
        case GgmlType::Q6_K: f.template operator()<GgmlType::Q6_K>(); return true;
        case GgmlType::IQ4_XS: f.template operator()<GgmlType::IQ4_XS>(); return true;
        default: return false;
    }
}

}  // namespace nitro::cuda
