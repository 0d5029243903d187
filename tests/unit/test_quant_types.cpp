// Unit tests of the ggml type table (quant/types.h): ids, names, sizes, row_size and the error
// paths of dequantize/quantize, and hand-built blocks of the formats the golden set lacks.
#include "core/error.h"
#include "core/fp16.h"
#include "quant/types.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

namespace {

using nitro::GgmlType;

struct Expected {
    uint32_t id;
    const char* name;
    int64_t block_size;
    size_t type_size;
    bool quantized;
};

/// ggml's type table (ggml.c type_traits), written out independently of src/quant.
const Expected kExpected[] = {
    {0, "f32", 1, 4, false},        {1, "f16", 1, 2, false},          {2, "q4_0", 32, 18, true},
    {3, "q4_1", 32, 20, true},      {6, "q5_0", 32, 22, true},        {7, "q5_1", 32, 24, true},
    {8, "q8_0", 32, 34, true},      {9, "q8_1", 32, 36, true},        {10, "q2_K", 256, 84, true},
    {11, "q3_K", 256, 110, true},   {12, "q4_K", 256, 144, true},     {13, "q5_K", 256, 176, true},
    {14, "q6_K", 256, 210, true},   {15, "q8_K", 256, 292, true},     {16, "iq2_xxs", 256, 66, true},
    {17, "iq2_xs", 256, 74, true},  {18, "iq3_xxs", 256, 98, true},   {19, "iq1_s", 256, 50, true},
    {20, "iq4_nl", 32, 18, true},   {21, "iq3_s", 256, 110, true},    {22, "iq2_s", 256, 82, true},
    {23, "iq4_xs", 256, 136, true}, {24, "i8", 1, 1, false},          {25, "i16", 1, 2, false},
    {26, "i32", 1, 4, false},       {27, "i64", 1, 8, false},         {28, "f64", 1, 8, false},
    {29, "iq1_m", 256, 56, true},   {30, "bf16", 1, 2, false},        {34, "tq1_0", 256, 54, true},
    {35, "tq2_0", 256, 66, true},   {39, "mxfp4", 32, 17, true},
};

TEST(QuantTypes, TableMatchesGgmlForEveryType) {
    int known = 0;
    for (uint32_t id = 0; id < 64; ++id) known += nitro::type_traits(id) != nullptr;
    EXPECT_EQ(known, static_cast<int>(std::size(kExpected)));
    for (const Expected& e : kExpected) {
        const nitro::TypeTraits* tt = nitro::type_traits(e.id);
        ASSERT_NE(tt, nullptr) << e.name;
        EXPECT_EQ(static_cast<uint32_t>(tt->type), e.id) << e.name;
        EXPECT_EQ(tt->name, e.name);
        EXPECT_EQ(tt->block_size, e.block_size) << e.name;
        EXPECT_EQ(tt->type_size, e.type_size) << e.name;
        EXPECT_EQ(tt->is_quantized, e.quantized) << e.name;
        EXPECT_NE(tt->dequantize, nullptr) << e.name;
        EXPECT_EQ(&nitro::type_traits(tt->type), tt) << e.name;
    }
}

TEST(QuantTypes, SizesMatchGoldenJson) {
    const std::string path = std::string(NITRO_SHARED_DIR) + "/golden/quant/quant-golden.json";
    std::ifstream f(path);
    ASSERT_TRUE(f.good()) << "cannot open " << path;
    const nlohmann::json j = nlohmann::json::parse(f);
    ASSERT_GE(j.at("types").size(), 19u);
    for (const auto& t : j.at("types")) {
        const std::string name = t.at("ggml_type_name");
        const nitro::TypeTraits* tt = nitro::type_traits(t.at("ggml_type_id").get<uint32_t>());
        ASSERT_NE(tt, nullptr) << name;
        EXPECT_EQ(tt->name, name);
        EXPECT_EQ(nitro::type_display_name(tt->type), t.at("name").get<std::string>());
        EXPECT_EQ(tt->block_size, t.at("block_size").get<int64_t>()) << name;
        EXPECT_EQ(tt->type_size, t.at("bytes_per_block").get<size_t>()) << name;
        EXPECT_EQ(nitro::row_size(tt->type, t.at("n_per_row").get<int64_t>()), t.at("row_bytes").get<size_t>()) << name;
    }
    for (const auto& t : j.at("skipped")) {  // types ggml could not quantize for the golden set
        EXPECT_NE(nitro::type_traits(t.at("ggml_type_id").get<uint32_t>()), nullptr) << t.at("name");
    }
}

TEST(QuantTypes, UnknownAndRetiredIdsAreNull) {
    for (uint32_t id : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 40u, 41u, 255u, 1000u,
                        std::numeric_limits<uint32_t>::max()}) {
        EXPECT_EQ(nitro::type_traits(id), nullptr) << id;
    }
}

TEST(QuantTypes, NamesLookUpCaseInsensitively) {
    EXPECT_EQ(nitro::type_from_name("q4_K"), GgmlType::Q4_K);
    EXPECT_EQ(nitro::type_from_name("Q4_K"), GgmlType::Q4_K);
    EXPECT_EQ(nitro::type_from_name("q4_k"), GgmlType::Q4_K);
    EXPECT_EQ(nitro::type_from_name("MXFP4"), GgmlType::MXFP4);
    EXPECT_EQ(nitro::type_from_name("iq4_XS"), GgmlType::IQ4_XS);
    EXPECT_EQ(nitro::type_from_name("bf16"), GgmlType::BF16);
    EXPECT_EQ(nitro::type_from_name("F32"), GgmlType::F32);
    EXPECT_FALSE(nitro::type_from_name("q4_2").has_value());
    EXPECT_FALSE(nitro::type_from_name("").has_value());
    EXPECT_FALSE(nitro::type_from_name("f32 ").has_value());
    for (const Expected& e : kExpected) {
        const GgmlType t = static_cast<GgmlType>(e.id);
        EXPECT_EQ(nitro::type_from_name(nitro::type_display_name(t)), t) << e.name;
    }
    EXPECT_EQ(nitro::type_display_name(GgmlType::Q4_K), "Q4_K");
    EXPECT_EQ(nitro::type_display_name(GgmlType::MXFP4), "MXFP4");
    EXPECT_EQ(nitro::type_display_name(GgmlType::IQ4_XS), "IQ4_XS");
    EXPECT_EQ(nitro::type_display_name(GgmlType::BF16), "BF16");
}

TEST(QuantTypes, RowSize) {
    EXPECT_EQ(nitro::row_size(GgmlType::Q4_K, 256), 144u);
    EXPECT_EQ(nitro::row_size(GgmlType::Q4_K, 4096), 16u * 144u);
    EXPECT_EQ(nitro::row_size(GgmlType::MXFP4, 2880), 90u * 17u);
    EXPECT_EQ(nitro::row_size(GgmlType::F32, 3), 12u);
    EXPECT_EQ(nitro::row_size(GgmlType::BF16, 0), 0u);
}

TEST(QuantTypes, RowSizeRejectsPartialBlocks) {
    try {
        nitro::row_size(GgmlType::Q4_K, 100);
        FAIL() << "row_size(Q4_K, 100) should throw";
    } catch (const nitro::Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("Q4_K"), std::string::npos) << msg;
        EXPECT_NE(msg.find("100"), std::string::npos) << msg;
        EXPECT_NE(msg.find("256"), std::string::npos) << msg;
    }
    EXPECT_THROW(nitro::row_size(GgmlType::MXFP4, 33), nitro::Error);
    EXPECT_THROW(nitro::row_size(GgmlType::Q8_0, -32), nitro::Error);
}

TEST(QuantTypes, DequantizeAndQuantizeCheckTheCount) {
    std::vector<float> f(64, 1.0f);
    std::vector<uint8_t> b(1024);
    EXPECT_THROW(nitro::dequantize(GgmlType::Q8_0, b.data(), f.data(), 31), nitro::Error);
    EXPECT_THROW(nitro::quantize(GgmlType::Q8_0, f.data(), b.data(), 33), nitro::Error);
    EXPECT_THROW(nitro::quantize(GgmlType::Q4_K, f.data(), b.data(), 64), nitro::Error);
    EXPECT_NO_THROW(nitro::quantize(GgmlType::Q8_0, f.data(), b.data(), 64));
}

TEST(QuantTypes, QuantizeWithoutQuantizerNamesTheType) {
    std::vector<float> f(256, 1.0f);
    std::vector<uint8_t> b(1024);
    for (GgmlType t : {GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ1_S, GgmlType::IQ1_M, GgmlType::I32}) {
        EXPECT_EQ(nitro::type_traits(t).quantize, nullptr);
        try {
            nitro::quantize(t, f.data(), b.data(), 256);
            ADD_FAILURE() << "expected an error for " << nitro::type_display_name(t);
        } catch (const nitro::Error& e) {
            EXPECT_NE(std::string(e.what()).find(nitro::type_display_name(t)), std::string::npos) << e.what();
        }
    }
}

// ------------------------------------------------ hand-built blocks (formats without a golden)

/// Dequantizes one block of type t given as raw bytes.
std::vector<float> dequant_block(GgmlType t, const std::vector<uint8_t>& block) {
    const nitro::TypeTraits& tt = nitro::type_traits(t);
    EXPECT_EQ(block.size(), tt.type_size);
    std::vector<float> out(static_cast<size_t>(tt.block_size));
    nitro::dequantize(t, block.data(), out.data(), tt.block_size);
    return out;
}

void put_u16(std::vector<uint8_t>& b, size_t at, uint16_t v) { std::memcpy(b.data() + at, &v, 2); }
void put_u32(std::vector<uint8_t>& b, size_t at, uint32_t v) { std::memcpy(b.data() + at, &v, 4); }

constexpr uint16_t kHalfOne = 0x3c00;  // 1.0 as fp16

TEST(QuantFormats, Iq2XxsHandBuiltBlock) {
    // Group 0 of sub-block 0: grid index 1 = {43, 8, 8, 8, 8, 8, 8, 8}; sign index 1 -> ksigns 129
    // (elements 0 and 7 negative); sub-block scale 3 -> db = (0.5 + 3) * 0.25 = 0.875.
    std::vector<uint8_t> b(66, 0);
    put_u16(b, 0, kHalfOne);
    put_u32(b, 2, 1u);                  // four grid indices: 1, 0, 0, 0
    put_u32(b, 6, (3u << 28) | 1u);     // sign indices 1, 0, 0, 0; scale 3
    const std::vector<float> y = dequant_block(GgmlType::IQ2_XXS, b);
    const float db = 0.875f;
    EXPECT_EQ(y[0], -db * 43);
    for (int j = 1; j < 7; ++j) EXPECT_EQ(y[j], db * 8) << j;
    EXPECT_EQ(y[7], -db * 8);
    for (int j = 8; j < 32; ++j) EXPECT_EQ(y[j], db * 8) << j;  // grid 0, no signs
    EXPECT_EQ(y[32], 0.5f * 0.25f * 8);                         // sub-block 1: scale 0, grid 0
}

TEST(QuantFormats, Iq2XsHandBuiltBlock) {
    // qs[0] = grid 2 ({25, 25, 8, ...}) with sign index 3 (elements 0, 1 negative, parity even).
    std::vector<uint8_t> b(74, 0);
    put_u16(b, 0, kHalfOne);
    put_u16(b, 2, static_cast<uint16_t>(2 | (3 << 9)));
    b[66] = 0x51;  // sub-block 0: scale 1 for its first 16 values, 5 for the next 16
    const std::vector<float> y = dequant_block(GgmlType::IQ2_XS, b);
    const float db0 = 1.5f * 0.25f, db1 = 5.5f * 0.25f;
    EXPECT_EQ(y[0], -db0 * 25);
    EXPECT_EQ(y[1], -db0 * 25);
    EXPECT_EQ(y[2], db0 * 8);
    EXPECT_EQ(y[16], db1 * 8);
}

TEST(QuantFormats, Iq1sHandBuiltBlock) {
    // Sub-block 0: qh = scale 2 (dl = 5), delta negative (bit 15), group 0 index 0x102 (qs[0] = 2,
    // 3 high bits = 1), group 1 index 1. ggml-quants.c kgrid_1bit_2048: point 258 is code 4741 =
    // {0, 0, -1, 1, 1, -1, 0, -1}; point 1 is code 2 = {1, -1, -1, -1, -1, -1, -1, -1}.
    std::vector<uint8_t> b(50, 0);
    put_u16(b, 0, kHalfOne);
    b[2] = 0x02;  // qs[0]
    b[3] = 0x01;  // qs[1]
    put_u16(b, 34, static_cast<uint16_t>(0x8000 | (2 << 12) | 1));  // qh[0]
    const std::vector<float> y = dequant_block(GgmlType::IQ1_S, b);
    const float g258[8] = {0, 0, -1, 1, 1, -1, 0, -1};
    for (int j = 0; j < 8; ++j) EXPECT_EQ(y[j], 5 * (g258[j] - 0.125f)) << j;
    EXPECT_EQ(y[8], 5 * (1 - 0.125f));
    for (int j = 9; j < 16; ++j) EXPECT_EQ(y[j], 5 * (-1 - 0.125f)) << j;
    EXPECT_EQ(y[32], 1 * (-1 + 0.125f));  // sub-block 1: qh = 0 -> dl = 1, delta +, grid 0
}

TEST(QuantFormats, Iq1mHandBuiltBlock) {
    // Super-scale fp16 1.0 = 0x3c00 spread over the top nibbles of the four scale words:
    // word0 >> 12 = 0x0, word1 >> 12 = 0x0, word2 >> 12 = 0xc, word3 >> 12 = 0x3.
    std::vector<uint8_t> b(56, 0);
    const uint16_t sc[4] = {static_cast<uint16_t>(1 | (2 << 3)), 0, 0xc000, 0x3000};
    std::memcpy(b.data() + 48, sc, sizeof(sc));
    b[32] = 0x08;  // qh[0]: group 0 delta negative, group 1 positive
    const std::vector<float> y = dequant_block(GgmlType::IQ1_M, b);
    // Sub-block 0: first 16 values dl1 = 2*1+1 = 3, next 16 dl2 = 2*2+1 = 5; grid 0 is all -1.
    EXPECT_EQ(y[0], 3 * (-1 - 0.125f));
    EXPECT_EQ(y[8], 3 * (-1 + 0.125f));
    EXPECT_EQ(y[16], 5 * (-1 + 0.125f));
    EXPECT_EQ(y[32], 1 * (-1 + 0.125f));  // sub-block 1: scale 0 -> dl = 1
}

TEST(QuantFormats, Q8_1AndQ8_KRoundTrip) {
    std::vector<float> x(256);
    for (int i = 0; i < 256; ++i) x[i] = std::sin(0.37f * i) * (1 + i % 7);
    for (GgmlType t : {GgmlType::Q8_1, GgmlType::Q8_K}) {
        std::vector<uint8_t> q(nitro::row_size(t, 256));
        std::vector<float> back(256);
        nitro::quantize(t, x.data(), q.data(), 256);
        nitro::dequantize(t, q.data(), back.data(), 256);
        const int64_t bs = nitro::type_traits(t).block_size;
        for (int64_t b0 = 0; b0 < 256; b0 += bs) {
            float amax = 0;
            for (int64_t j = 0; j < bs; ++j) amax = std::max(amax, std::fabs(x[b0 + j]));
            for (int64_t j = 0; j < bs; ++j) {
                // half a step of amax/127, plus the fp16 rounding of the Q8_1 scale
                EXPECT_LE(std::fabs(back[b0 + j] - x[b0 + j]), amax / 127 * 0.5f + amax * 1e-3f)
                    << nitro::type_display_name(t) << " " << b0 + j;
            }
        }
    }
    // Q8_1's s is fp16(d * sum(q)).
    std::vector<uint8_t> q(36);
    nitro::quantize(GgmlType::Q8_1, x.data(), q.data(), 32);
    uint16_t d, s;
    std::memcpy(&d, q.data(), 2);
    std::memcpy(&s, q.data() + 2, 2);
    int sum = 0;
    for (int j = 0; j < 32; ++j) sum += static_cast<int8_t>(q[4 + j]);
    EXPECT_EQ(s, nitro::f32_to_fp16(sum * nitro::fp16_to_f32(d)));
}

TEST(QuantFormats, TernaryRoundTripsExactly) {
    // Values in {-a, 0, a} are exactly representable by TQ1_0 and TQ2_0 (a an fp16 value).
    std::vector<float> x(512);
    for (int i = 0; i < 512; ++i) x[i] = static_cast<float>((i * 7 + i / 5) % 3 - 1) * 0.75f;
    for (GgmlType t : {GgmlType::TQ1_0, GgmlType::TQ2_0}) {
        std::vector<uint8_t> q(nitro::row_size(t, 512));
        std::vector<float> back(512);
        nitro::quantize(t, x.data(), q.data(), 512);
        nitro::dequantize(t, q.data(), back.data(), 512);
        for (int i = 0; i < 512; ++i) ASSERT_EQ(back[i], x[i]) << nitro::type_display_name(t) << " " << i;
    }
}

TEST(QuantFormats, Mxfp4ScaleEdgesAndExactValues) {
    // e = 128 is scale 2^1 on E2M1 values, i.e. kvalues * 1: codes 0..15 give the doubled table.
    std::vector<uint8_t> b(17, 0);
    b[0] = 128;
    for (int j = 0; j < 16; ++j) b[1 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    std::vector<float> y = dequant_block(GgmlType::MXFP4, b);
    const float kv[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(y[j], kv[j]) << j;
        EXPECT_EQ(y[16 + j], kv[15 - j]) << j;
    }
    b[0] = 0;  // subnormal scale 2^-128
    y = dequant_block(GgmlType::MXFP4, b);
    EXPECT_EQ(y[1], std::ldexp(1.0f, -128));
    b[0] = 1;  // 2^-127
    y = dequant_block(GgmlType::MXFP4, b);
    EXPECT_EQ(y[1], std::ldexp(1.0f, -127));
    // Representable inputs survive quantize -> dequantize exactly.
    std::vector<float> x(32);
    for (int j = 0; j < 32; ++j) x[j] = kv[j % 16] * 0.25f;
    std::vector<uint8_t> q(17);
    std::vector<float> back(32);
    nitro::quantize(GgmlType::MXFP4, x.data(), q.data(), 32);
    nitro::dequantize(GgmlType::MXFP4, q.data(), back.data(), 32);
    for (int j = 0; j < 32; ++j) EXPECT_EQ(back[j], x[j]) << j;
}

TEST(QuantFormats, PlainTypesConvert) {
    const std::vector<int32_t> ints = {-5, 0, 7, 1 << 20};
    std::vector<float> out(4);
    nitro::dequantize(GgmlType::I32, ints.data(), out.data(), 4);
    EXPECT_EQ(out, (std::vector<float>{-5, 0, 7, 1 << 20}));
    const std::vector<int8_t> i8 = {-128, 127, 0, 3};
    nitro::dequantize(GgmlType::I8, i8.data(), out.data(), 4);
    EXPECT_EQ(out, (std::vector<float>{-128, 127, 0, 3}));
    const std::vector<float> f = {1.5f, -2.25f, 1e-3f, 65504.0f};
    std::vector<double> d(4);
    nitro::quantize(GgmlType::F64, f.data(), d.data(), 4);
    nitro::dequantize(GgmlType::F64, d.data(), out.data(), 4);
    EXPECT_EQ(out, f);
    std::vector<uint16_t> h(4);
    nitro::quantize(GgmlType::F16, f.data(), h.data(), 4);
    EXPECT_EQ(h[0], 0x3e00);
    EXPECT_EQ(h[3], 0x7bff);
}

}  // namespace
