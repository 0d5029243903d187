// Golden tests of src/quant against ggml itself: shared/golden/quant/quant-golden.{gguf,json}.
//
// For every type in the golden set, q.<name> holds ggml's quantized bytes (ne = [256, 4]),
// ref.<name> ggml's dequantization of them and src.<name> the original floats. We check:
//   - dequantize(q) equals ref bit for bit;
//   - our reference quantizer reproduces ggml's bytes exactly, and its round-trip error on src is
//     no worse than the max_abs_err ggml recorded in the JSON.
// A missing or malformed golden file fails the tests (never skips them).
#include "core/error.h"
#include "gguf/gguf.h"
#include "quant/types.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using nitro::GgmlType;

const std::string kGoldenDir = std::string(NITRO_SHARED_DIR) + "/golden/quant/";

// Golden tensors are read through the project's GGUF reader (src/gguf), copied out of the mapping.
struct GgufTensor {
    uint32_t type = 0;
    std::vector<int64_t> ne;
    std::vector<uint8_t> bytes;
};

std::map<std::string, GgufTensor> read_gguf(const std::string& path) {
    nitro::GgufModel model(path);
    std::map<std::string, GgufTensor> out;
    for (const auto& t : model.tensors()) {
        GgufTensor g;
        g.type = static_cast<uint32_t>(t.type);
        g.ne.assign(t.ne.begin(), t.ne.begin() + t.n_dims);
        g.bytes.assign(t.data, t.data + t.n_bytes);
        out.emplace(t.name, std::move(g));
    }
    return out;
}

// ------------------------------------------------------------------ the golden set

struct Golden {
    std::map<std::string, GgufTensor> tensors;
    nlohmann::json json;
    std::string error;  ///< non-empty when loading failed
};

/// Loads both golden files once; a failure is recorded in `error` for each test to report.
const Golden& golden() {
    static const Golden g = [] {
        Golden r;
        try {
            r.tensors = read_gguf(kGoldenDir + "quant-golden.gguf");
            std::ifstream jf(kGoldenDir + "quant-golden.json");
            if (!jf) throw std::runtime_error("cannot open " + kGoldenDir + "quant-golden.json");
            r.json = nlohmann::json::parse(jf);
        } catch (const std::exception& e) {
            r.error = e.what();
        }
        return r;
    }();
    return g;
}

/// The JSON record of a type by ggml name, or null.
const nlohmann::json* golden_record(const std::string& ggml_name) {
    for (const auto& t : golden().json.at("types")) {
        if (t.at("ggml_type_name") == ggml_name) return &t;
    }
    return nullptr;
}

std::vector<float> as_floats(const GgufTensor& t) {
    std::vector<float> v(t.bytes.size() / sizeof(float));
    std::memcpy(v.data(), t.bytes.data(), v.size() * sizeof(float));
    return v;
}

uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    return u;
}

/// Every type in the golden set (ggml names). The test below checks the JSON lists exactly these.
const std::vector<std::string> kGoldenTypes = {
    "f32",  "f16",  "bf16", "q8_0", "q4_0",   "q4_1",   "q5_0",  "q5_1",    "q2_K", "q3_K",
    "q4_K", "q5_K", "q6_K", "iq4_nl", "iq4_xs", "mxfp4", "iq3_xxs", "iq3_s", "iq2_s",
};

/// Types whose reference quantizer must reproduce ggml's bytes exactly.
const std::vector<std::string> kQuantizedTypes = {
    "f32",  "f16",  "bf16", "q8_0", "q4_0",   "q4_1",   "q5_0",  "q5_1",
    "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "iq4_nl", "iq4_xs", "mxfp4",
};

#define REQUIRE_GOLDEN() ASSERT_TRUE(golden().error.empty()) << "golden data unusable: " << golden().error

TEST(QuantGolden, FileListsExactlyTheExpectedTypes) {
    REQUIRE_GOLDEN();
    std::vector<std::string> listed;
    for (const auto& t : golden().json.at("types")) listed.push_back(t.at("ggml_type_name"));
    std::vector<std::string> want = kGoldenTypes;
    std::sort(listed.begin(), listed.end());
    std::sort(want.begin(), want.end());
    EXPECT_EQ(listed, want);
    for (const std::string& name : kGoldenTypes) {
        for (const char* prefix : {"q.", "ref.", "src."}) {
            EXPECT_TRUE(golden().tensors.count(prefix + name)) << "missing tensor " << prefix << name;
        }
    }
}

class QuantGoldenType : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantGoldenType, DequantizeIsBitExact) {
    REQUIRE_GOLDEN();
    const std::string& name = GetParam();
    const GgufTensor& q = golden().tensors.at("q." + name);
    const GgufTensor& ref = golden().tensors.at("ref." + name);
    const std::optional<GgmlType> t = nitro::type_from_name(name);
    ASSERT_TRUE(t.has_value());
    ASSERT_EQ(q.type, static_cast<uint32_t>(*t));
    ASSERT_EQ(ref.type, 0u);
    ASSERT_EQ(q.ne, (std::vector<int64_t>{256, 4}));
    const std::vector<float> want = as_floats(ref);
    ASSERT_EQ(want.size(), 1024u);
    std::vector<float> got(want.size(), -12345.0f);
    nitro::dequantize(*t, q.bytes.data(), got.data(), static_cast<int64_t>(got.size()));
    int mismatches = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        if (bits(got[i]) != bits(want[i]) && ++mismatches <= 5) {
            ADD_FAILURE() << name << " value " << i << ": got " << got[i] << " (0x" << std::hex
                          << bits(got[i]) << "), ggml " << want[i] << " (0x" << bits(want[i]) << ")"
                          << std::dec;
        }
    }
    EXPECT_EQ(mismatches, 0) << name << ": values differing from ggml";
}

INSTANTIATE_TEST_SUITE_P(Golden, QuantGoldenType, ::testing::ValuesIn(kGoldenTypes),
                         [](const auto& info) { return info.param; });

class QuantGoldenQuantizer : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantGoldenQuantizer, ReproducesGgmlBytesAndError) {
    REQUIRE_GOLDEN();
    const std::string& name = GetParam();
    const GgufTensor& q = golden().tensors.at("q." + name);
    const std::vector<float> src = as_floats(golden().tensors.at("src." + name));
    const nlohmann::json* rec = golden_record(name);
    ASSERT_NE(rec, nullptr);
    const GgmlType t = *nitro::type_from_name(name);
    const int64_t n_per_row = 256;
    const int64_t rows = static_cast<int64_t>(src.size()) / n_per_row;
    const size_t rs = nitro::row_size(t, n_per_row);

    std::vector<uint8_t> mine(rs * static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
        nitro::quantize(t, src.data() + r * n_per_row, mine.data() + r * static_cast<int64_t>(rs), n_per_row);
    }
    ASSERT_EQ(mine.size(), q.bytes.size());
    size_t first_diff = mine.size();
    for (size_t i = 0; i < mine.size(); ++i) {
        if (mine[i] != q.bytes[i]) {
            first_diff = i;
            break;
        }
    }
    EXPECT_EQ(first_diff, mine.size()) << name << ": quantized bytes differ from ggml's, first at byte "
                                       << first_diff << " (block " << first_diff / nitro::type_traits(t).type_size << ")";

    std::vector<float> back(src.size());
    nitro::dequantize(t, mine.data(), back.data(), static_cast<int64_t>(back.size()));
    const std::vector<double> ggml_row_err = rec->at("max_abs_err_per_row").get<std::vector<double>>();
    ASSERT_EQ(ggml_row_err.size(), static_cast<size_t>(rows));
    double max_err = 0;
    for (int64_t r = 0; r < rows; ++r) {
        double row_err = 0;
        for (int64_t j = 0; j < n_per_row; ++j) {
            row_err = std::max(row_err, static_cast<double>(std::fabs(back[r * n_per_row + j] - src[r * n_per_row + j])));
        }
        EXPECT_LE(row_err, ggml_row_err[r] * (1 + 1e-6)) << name << " row " << r;
        max_err = std::max(max_err, row_err);
    }
    const double ggml_err = rec->at("max_abs_err").get<double>();
    EXPECT_LE(max_err, ggml_err * (1 + 1e-6)) << name;
    RecordProperty("max_abs_err", std::to_string(max_err));
    RecordProperty("ggml_max_abs_err", std::to_string(ggml_err));
}

INSTANTIATE_TEST_SUITE_P(Golden, QuantGoldenQuantizer, ::testing::ValuesIn(kQuantizedTypes),
                         [](const auto& info) { return info.param; });

TEST(QuantGolden, GridTypesWithoutQuantizerSayWhy) {
    REQUIRE_GOLDEN();
    std::vector<float> src(256, 0.5f);
    std::vector<uint8_t> dst(1024);
    for (const char* name : {"iq3_xxs", "iq3_s", "iq2_s"}) {
        const GgmlType t = *nitro::type_from_name(name);
        try {
            nitro::quantize(t, src.data(), dst.data(), 256);
            ADD_FAILURE() << name << ": quantize should throw";
        } catch (const nitro::Error& e) {
            EXPECT_NE(std::string(e.what()).find(nitro::type_display_name(t)), std::string::npos) << e.what();
        }
    }
}

}  // namespace
