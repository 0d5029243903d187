// Internal to src/quant: the per-type dequantize/quantize functions the type table points at, and
// helpers shared by their implementations. Not for use outside src/quant (use quant/types.h).
//
// Every function has the DequantizeFn / QuantizeFn shape of types.h: `n` values, a multiple of
// the type's block size (checked by the public dequantize()/quantize() before the call); block
// bytes need no alignment.
#pragma once

#include "quant/blocks.h"

#include <cstdint>
#include <cstring>

namespace nitro::quant {

/// Copies block `i` of type B out of an unaligned byte buffer.
template <typename B>
inline B load_block(const void* src, int64_t i) {
    B b;
    std::memcpy(&b, static_cast<const uint8_t*>(src) + i * static_cast<int64_t>(sizeof(B)), sizeof(B));
    return b;
}

/// Stores block `i` of type B into an unaligned byte buffer.
template <typename B>
inline void store_block(void* dst, int64_t i, const B& b) {
    std::memcpy(static_cast<uint8_t*>(dst) + i * static_cast<int64_t>(sizeof(B)), &b, sizeof(B));
}

/// Round to nearest, ties to even, for |f| <= 4194303 — ggml's nearest_int (ggml-quants.c),
/// which adds 1.5 * 2^23 and reads the mantissa. Quantizers must use it (not lrintf) to be
/// bit-exact: it is what ggml does, whatever the FPU rounding mode.
inline int nearest_int(float f) {
    const float val = f + 12582912.f;
    int32_t i;
    std::memcpy(&i, &val, sizeof(i));
    return (i & 0x007fffff) - 0x00400000;
}

// float_types.cpp ------------------------------------------------------------------------------
void dequantize_f32(const void* src, float* dst, int64_t n);
void quantize_f32(const float* src, void* dst, int64_t n);
void dequantize_f16(const void* src, float* dst, int64_t n);
void quantize_f16(const float* src, void* dst, int64_t n);
void dequantize_bf16(const void* src, float* dst, int64_t n);
void quantize_bf16(const float* src, void* dst, int64_t n);
void dequantize_f64(const void* src, float* dst, int64_t n);
void quantize_f64(const float* src, void* dst, int64_t n);
void dequantize_i8(const void* src, float* dst, int64_t n);
void dequantize_i16(const void* src, float* dst, int64_t n);
void dequantize_i32(const void* src, float* dst, int64_t n);
void dequantize_i64(const void* src, float* dst, int64_t n);

// legacy.cpp -----------------------------------------------------------------------------------
void dequantize_q4_0(const void* src, float* dst, int64_t n);
void quantize_q4_0(const float* src, void* dst, int64_t n);
void dequantize_q4_1(const void* src, float* dst, int64_t n);
void quantize_q4_1(const float* src, void* dst, int64_t n);
void dequantize_q5_0(const void* src, float* dst, int64_t n);
void quantize_q5_0(const float* src, void* dst, int64_t n);
void dequantize_q5_1(const void* src, float* dst, int64_t n);
void quantize_q5_1(const float* src, void* dst, int64_t n);
void dequantize_q8_0(const void* src, float* dst, int64_t n);
void quantize_q8_0(const float* src, void* dst, int64_t n);
void dequantize_q8_1(const void* src, float* dst, int64_t n);
void quantize_q8_1(const float* src, void* dst, int64_t n);

// kquants.cpp ----------------------------------------------------------------------------------
void dequantize_q2_k(const void* src, float* dst, int64_t n);
void quantize_q2_k(const float* src, void* dst, int64_t n);
void dequantize_q3_k(const void* src, float* dst, int64_t n);
void quantize_q3_k(const float* src, void* dst, int64_t n);
void dequantize_q4_k(const void* src, float* dst, int64_t n);
void quantize_q4_k(const float* src, void* dst, int64_t n);
void dequantize_q5_k(const void* src, float* dst, int64_t n);
void quantize_q5_k(const float* src, void* dst, int64_t n);
void dequantize_q6_k(const void* src, float* dst, int64_t n);
void quantize_q6_k(const float* src, void* dst, int64_t n);
void dequantize_q8_k(const void* src, float* dst, int64_t n);
void quantize_q8_k(const float* src, void* dst, int64_t n);

// iquants.cpp ----------------------------------------------------------------------------------
void dequantize_iq2_xxs(const void* src, float* dst, int64_t n);
void dequantize_iq2_xs(const void* src, float* dst, int64_t n);
void dequantize_iq2_s(const void* src, float* dst, int64_t n);
void dequantize_iq3_xxs(const void* src, float* dst, int64_t n);
void dequantize_iq3_s(const void* src, float* dst, int64_t n);
void dequantize_iq1_s(const void* src, float* dst, int64_t n);
void dequantize_iq1_m(const void* src, float* dst, int64_t n);
void dequantize_iq4_nl(const void* src, float* dst, int64_t n);
void quantize_iq4_nl(const float* src, void* dst, int64_t n);
void dequantize_iq4_xs(const void* src, float* dst, int64_t n);
void quantize_iq4_xs(const float* src, void* dst, int64_t n);
void dequantize_tq1_0(const void* src, float* dst, int64_t n);
void quantize_tq1_0(const float* src, void* dst, int64_t n);
void dequantize_tq2_0(const void* src, float* dst, int64_t n);
void quantize_tq2_0(const float* src, void* dst, int64_t n);

// mxfp4.cpp ------------------------------------------------------------------------------------
void dequantize_mxfp4(const void* src, float* dst, int64_t n);
void quantize_mxfp4(const float* src, void* dst, int64_t n);

}  // namespace nitro::quant
