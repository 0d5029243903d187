// The table of ggml weight types: ids, block layouts, dequantize and reference quantize.
//
// Ids, block sizes and bytes per block are exactly ggml's (ggml/include/ggml.h enum ggml_type,
// ggml/src/ggml-common.h block_* structs), so GGUF files written by llama.cpp read here and the
// other way round. Kernels, the GGUF reader, `nitro inspect` and `nitro synth` share this table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nitro {

/// ggml_type ids as stored in GGUF tensor infos. Gaps are ids ggml retired.
enum class GgmlType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ2_XXS = 16,
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    IQ1_M = 29,
    BF16 = 30,
    TQ1_0 = 34,
    TQ2_0 = 35,
    MXFP4 = 39,
};

/// Dequantizes `n` values (a multiple of the block size) from `src` blocks into `dst` floats.
using DequantizeFn = void (*)(const void* src, float* dst, int64_t n);
/// Quantizes `n` floats (a multiple of the block size) into blocks at `dst`.
using QuantizeFn = void (*)(const float* src, void* dst, int64_t n);

/// One row of the type table.
struct TypeTraits {
    GgmlType type;
    std::string_view name;     ///< ggml's lower-case name ("q4_K", "mxfp4", "f16")
    int64_t block_size;        ///< values per block (1 for plain float/int types)
    size_t type_size;          ///< bytes per block
    bool is_quantized;         ///< block-quantized (not plain float/int)
    DequantizeFn dequantize;   ///< nullptr where this build cannot dequantize the type
    QuantizeFn quantize;       ///< reference quantizer; nullptr where none is provided
};

/// Traits for a raw type id from a file, or nullptr if the id is not a ggml type this build knows.
const TypeTraits* type_traits(uint32_t id);
/// Traits for a known type. Never null.
const TypeTraits& type_traits(GgmlType t);
/// Looks a type up by ggml name (case-insensitive: "Q4_K", "q4_k", "mxfp4").
std::optional<GgmlType> type_from_name(std::string_view name);
/// Upper-case display name ("Q4_K", "MXFP4", "F16").
std::string type_display_name(GgmlType t);

/// Bytes of a row of `ne0` values. Throws nitro::Error if ne0 is not a multiple of the block size.
size_t row_size(GgmlType t, int64_t ne0);

/// Dequantizes `n` values of type `t`. Throws nitro::Error if the type cannot be dequantized or
/// `n` is not a multiple of the block size.
void dequantize(GgmlType t, const void* src, float* dst, int64_t n);
/// Quantizes `n` floats into row_size(t, n) bytes at `dst` with the reference quantizer: ggml's
/// (what ggml_quantize_chunk does without an importance matrix), reproducing its bytes. Throws
/// nitro::Error if the type has none (the grid i-quants, integer types) or `n` is not a multiple
/// of the block size.
void quantize(GgmlType t, const float* src, void* dst, int64_t n);

}  // namespace nitro
