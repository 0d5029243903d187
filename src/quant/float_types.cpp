// Plain (non-block) ggml types: F32, F16, BF16, F64 and the integer types I8..I64.
//
// F16/BF16 conversions are core/fp16.h, bit-exact with ggml's scalar reference
// (ggml/src/ggml-impl.h; ggml_fp16_to_fp32_row / ggml_fp32_to_bf16_row_ref in ggml.c).
// Element j of the row is element j of the buffer, little-endian, no alignment required.
#include "core/fp16.h"
#include "quant/quant_impl.h"

#include <cstring>

namespace nitro::quant {
namespace {

/// Reads element i of type T from an unaligned buffer.
template <typename T>
T load_elem(const void* src, int64_t i) {
    T v;
    std::memcpy(&v, static_cast<const uint8_t*>(src) + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
    return v;
}

/// Writes element i of type T to an unaligned buffer.
template <typename T>
void store_elem(void* dst, int64_t i, T v) {
    std::memcpy(static_cast<uint8_t*>(dst) + i * static_cast<int64_t>(sizeof(T)), &v, sizeof(T));
}

/// Integer or double -> float with C++ conversion rules (round to nearest for wide values).
template <typename T>
void widen_to_f32(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(load_elem<T>(src, i));
}

}  // namespace

/// F32 -> f32: a copy of n * 4 bytes.
void dequantize_f32(const void* src, float* dst, int64_t n) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

/// f32 -> F32: a copy of n * 4 bytes.
void quantize_f32(const float* src, void* dst, int64_t n) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

/// F16 (IEEE half bits) -> f32, exact.
void dequantize_f16(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(load_elem<uint16_t>(src, i));
}

/// f32 -> F16, round to nearest even; overflow gives inf.
void quantize_f16(const float* src, void* dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) store_elem<uint16_t>(dst, i, f32_to_fp16(src[i]));
}

/// BF16 -> f32, exact.
void dequantize_bf16(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_elem<uint16_t>(src, i));
}

/// f32 -> BF16, round to nearest even, NaN kept quiet NaN (ggml_compute_fp32_to_bf16).
void quantize_bf16(const float* src, void* dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) store_elem<uint16_t>(dst, i, f32_to_bf16(src[i]));
}

/// F64 -> f32, round to nearest.
void dequantize_f64(const void* src, float* dst, int64_t n) { widen_to_f32<double>(src, dst, n); }

/// f32 -> F64, exact.
void quantize_f64(const float* src, void* dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) store_elem<double>(dst, i, static_cast<double>(src[i]));
}

/// I8 -> f32, exact.
void dequantize_i8(const void* src, float* dst, int64_t n) { widen_to_f32<int8_t>(src, dst, n); }
/// I16 -> f32, exact.
void dequantize_i16(const void* src, float* dst, int64_t n) { widen_to_f32<int16_t>(src, dst, n); }
/// I32 -> f32, round to nearest beyond 2^24.
void dequantize_i32(const void* src, float* dst, int64_t n) { widen_to_f32<int32_t>(src, dst, n); }
/// I64 -> f32, round to nearest beyond 2^24.
void dequantize_i64(const void* src, float* dst, int64_t n) { widen_to_f32<int64_t>(src, dst, n); }

}  // namespace nitro::quant
