// The ggml type table and the public entry points of quant/types.h.
//
// Names, block sizes and type sizes are ggml's (ggml/src/ggml.c type_traits; sizes of the
// ggml-common.h block structs, mirrored in quant/blocks.h). The per-type functions live in one
// file per family: float_types.cpp, legacy.cpp, kquants.cpp, iquants.cpp, mxfp4.cpp.
#include "quant/types.h"

#include "core/error.h"
#include "quant/quant_impl.h"

#include <array>
#include <cctype>

namespace nitro {
namespace {

using namespace quant;

constexpr TypeTraits row(GgmlType t, std::string_view name, int64_t block_size, size_t type_size,
                         bool is_quantized, DequantizeFn dq, QuantizeFn q) {
    return TypeTraits{t, name, block_size, type_size, is_quantized, dq, q};
}

/// Every type this build knows, in id order.
constexpr TypeTraits kTypes[] = {
    row(GgmlType::F32, "f32", 1, 4, false, dequantize_f32, quantize_f32),
    row(GgmlType::F16, "f16", 1, 2, false, dequantize_f16, quantize_f16),
    row(GgmlType::Q4_0, "q4_0", QK32, sizeof(BlockQ4_0), true, dequantize_q4_0, quantize_q4_0),
    row(GgmlType::Q4_1, "q4_1", QK32, sizeof(BlockQ4_1), true, dequantize_q4_1, quantize_q4_1),
    row(GgmlType::Q5_0, "q5_0", QK32, sizeof(BlockQ5_0), true, dequantize_q5_0, quantize_q5_0),
    row(GgmlType::Q5_1, "q5_1", QK32, sizeof(BlockQ5_1), true, dequantize_q5_1, quantize_q5_1),
    row(GgmlType::Q8_0, "q8_0", QK32, sizeof(BlockQ8_0), true, dequantize_q8_0, quantize_q8_0),
    row(GgmlType::Q8_1, "q8_1", QK32, sizeof(BlockQ8_1), true, dequantize_q8_1, quantize_q8_1),
    row(GgmlType::Q2_K, "q2_K", QK_K, sizeof(BlockQ2_K), true, dequantize_q2_k, quantize_q2_k),
    row(GgmlType::Q3_K, "q3_K", QK_K, sizeof(BlockQ3_K), true, dequantize_q3_k, quantize_q3_k),
    row(GgmlType::Q4_K, "q4_K", QK_K, sizeof(BlockQ4_K), true, dequantize_q4_k, quantize_q4_k),
    row(GgmlType::Q5_K, "q5_K", QK_K, sizeof(BlockQ5_K), true, dequantize_q5_k, quantize_q5_k),
    row(GgmlType::Q6_K, "q6_K", QK_K, sizeof(BlockQ6_K), true, dequantize_q6_k, quantize_q6_k),
    row(GgmlType::Q8_K, "q8_K", QK_K, sizeof(BlockQ8_K), true, dequantize_q8_k, quantize_q8_k),
    row(GgmlType::IQ2_XXS, "iq2_xxs", QK_K, sizeof(BlockIQ2_XXS), true, dequantize_iq2_xxs, nullptr),
    row(GgmlType::IQ2_XS, "iq2_xs", QK_K, sizeof(BlockIQ2_XS), true, dequantize_iq2_xs, nullptr),
    row(GgmlType::IQ3_XXS, "iq3_xxs", QK_K, sizeof(BlockIQ3_XXS), true, dequantize_iq3_xxs, nullptr),
    row(GgmlType::IQ1_S, "iq1_s", QK_K, sizeof(BlockIQ1_S), true, dequantize_iq1_s, nullptr),
    row(GgmlType::IQ4_NL, "iq4_nl", QK32, sizeof(BlockIQ4_NL), true, dequantize_iq4_nl, quantize_iq4_nl),
    row(GgmlType::IQ3_S, "iq3_s", QK_K, sizeof(BlockIQ3_S), true, dequantize_iq3_s, nullptr),
    row(GgmlType::IQ2_S, "iq2_s", QK_K, sizeof(BlockIQ2_S), true, dequantize_iq2_s, nullptr),
    row(GgmlType::IQ4_XS, "iq4_xs", QK_K, sizeof(BlockIQ4_XS), true, dequantize_iq4_xs, quantize_iq4_xs),
    row(GgmlType::I8, "i8", 1, 1, false, dequantize_i8, nullptr),
    row(GgmlType::I16, "i16", 1, 2, false, dequantize_i16, nullptr),
    row(GgmlType::I32, "i32", 1, 4, false, dequantize_i32, nullptr),
    row(GgmlType::I64, "i64", 1, 8, false, dequantize_i64, nullptr),
    row(GgmlType::F64, "f64", 1, 8, false, dequantize_f64, quantize_f64),
    row(GgmlType::IQ1_M, "iq1_m", QK_K, sizeof(BlockIQ1_M), true, dequantize_iq1_m, nullptr),
    row(GgmlType::BF16, "bf16", 1, 2, false, dequantize_bf16, quantize_bf16),
    row(GgmlType::TQ1_0, "tq1_0", QK_K, sizeof(BlockTQ1_0), true, dequantize_tq1_0, quantize_tq1_0),
    row(GgmlType::TQ2_0, "tq2_0", QK_K, sizeof(BlockTQ2_0), true, dequantize_tq2_0, quantize_tq2_0),
    row(GgmlType::MXFP4, "mxfp4", QK32, sizeof(BlockMXFP4), true, dequantize_mxfp4, quantize_mxfp4),
};

/// One past the largest known id.
constexpr uint32_t kIdLimit = static_cast<uint32_t>(GgmlType::MXFP4) + 1;

/// id -> row of kTypes, nullptr for ids ggml retired or never had.
constexpr std::array<const TypeTraits*, kIdLimit> make_index() {
    std::array<const TypeTraits*, kIdLimit> index{};
    for (const TypeTraits& t : kTypes) index[static_cast<uint32_t>(t.type)] = &t;
    return index;
}
constexpr std::array<const TypeTraits*, kIdLimit> kIndex = make_index();

bool iequals(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
        if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) {
            return false;
        }
    }
    return true;
}

/// Throws unless n is a non-negative multiple of the block size of `tt`.
void check_count(const TypeTraits& tt, int64_t n, const char* what) {
    if (n < 0 || n % tt.block_size != 0) {
        fail("cannot {} {} values of type {}: the count must be a non-negative multiple of its "
             "block size {}",
             what, n, type_display_name(tt.type), tt.block_size);
    }
}

}  // namespace

const TypeTraits* type_traits(uint32_t id) { return id < kIdLimit ? kIndex[id] : nullptr; }

const TypeTraits& type_traits(GgmlType t) {
    const TypeTraits* tt = type_traits(static_cast<uint32_t>(t));
    NITRO_CHECK(tt != nullptr);  // every enumerator has a row
    return *tt;
}

std::optional<GgmlType> type_from_name(std::string_view name) {
    for (const TypeTraits& t : kTypes) {
        if (iequals(t.name, name)) return t.type;
    }
    return std::nullopt;
}

std::string type_display_name(GgmlType t) {
    std::string s(type_traits(t).name);
    for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return s;
}

size_t row_size(GgmlType t, int64_t ne0) {
    const TypeTraits& tt = type_traits(t);
    if (ne0 < 0 || ne0 % tt.block_size != 0) {
        fail("a row of {} values cannot be stored as {}: {} is not a multiple of its block size {}",
             ne0, type_display_name(t), ne0, tt.block_size);
    }
    return static_cast<size_t>(ne0 / tt.block_size) * tt.type_size;
}

void dequantize(GgmlType t, const void* src, float* dst, int64_t n) {
    const TypeTraits& tt = type_traits(t);
    if (tt.dequantize == nullptr) fail("type {} cannot be dequantized by this build", type_display_name(t));
    check_count(tt, n, "dequantize");
    tt.dequantize(src, dst, n);
}

void quantize(GgmlType t, const float* src, void* dst, int64_t n) {
    const TypeTraits& tt = type_traits(t);
    if (tt.quantize == nullptr) {
        fail("type {} has no reference quantizer in this build (it can only be read)", type_display_name(t));
    }
    check_count(tt, n, "quantize");
    tt.quantize(src, dst, n);
}

}  // namespace nitro
