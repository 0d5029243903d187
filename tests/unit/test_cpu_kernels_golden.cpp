// The CPU dot-product kernels against ggml itself: every kernel at every ISA level this CPU has,
// on the bytes ggml quantized (shared/golden/quant: q.<type>, four rows of 256 values), against a
// float reference product of ggml's own dequantization (ref.<type>) with the dequantized
// activations. This checks that each kernel reads ggml's block layouts as ggml does, independently
// of our quantizers (test_cpu_matmul.cpp checks the kernels on our quantizers' bytes).
//
// Measure and bound as in test_cpu_matmul.cpp: e = |got - sum_i ref_i * y_i| / sum_i |ref_i * y_i|
// in double; the kernels' float summation gives at most (n/32 + 11) u (three times that for types
// with a min term), plus Q8_1's fp16 block sums for Q4_1/Q5_1; twice it to cover both the kernel
// and the reference quantization of the row. The rows are tested alone (256 values) and joined
// into one row of 1024 (the group loops then run several times), as a block of rows against 16
// tokens in tiles of 1, 3 and 16 tokens (the multi-token tile kernels; every tile must give the
// lone token's value bit for bit).
#include "core/fp16.h"
#include "cpu/matmul.h"
#include "gguf/gguf.h"
#include "quant/types.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace {

using nitro::GgmlType;

const std::string kGolden = std::string(NITRO_SHARED_DIR) + "/golden/quant/quant-golden.gguf";

struct Tensor {
    std::vector<uint8_t> bytes;
};

const std::map<std::string, Tensor>& tensors() {
    static const std::map<std::string, Tensor> t = [] {
        std::map<std::string, Tensor> r;
        nitro::GgufModel m(kGolden);
        for (const auto& info : m.tensors()) r[info.name].bytes.assign(info.data, info.data + info.n_bytes);
        return r;
    }();
    return t;
}

constexpr double kU = 1.0 / (1 << 24);

bool has_min_term(GgmlType t) {
    return t == GgmlType::Q4_1 || t == GgmlType::Q5_1 || t == GgmlType::Q2_K || t == GgmlType::Q4_K ||
           t == GgmlType::Q5_K;
}

double bound(GgmlType t, int64_t n) {
    const double nb = nitro::type_traits(t).block_size == 1 ? static_cast<double>(n) / 8.0 : static_cast<double>(n / 32);
    const double b = (nb + 11) * kU;
    return 2 * (has_min_term(t) ? 3 * b : b);
}

/// Q4_1/Q5_1: the fp16 rounding of Q8_1's block sums s seen through the min term, sum |m * s| 2^-11.
double q81_rounding(GgmlType wt, int64_t n, const uint8_t* w, const uint8_t* a) {
    if (wt != GgmlType::Q4_1 && wt != GgmlType::Q5_1) return 0.0;
    const size_t wb = nitro::type_traits(wt).type_size;
    double r = 0;
    for (int64_t b = 0; b < n / 32; ++b) {
        uint16_t m, s;
        std::memcpy(&m, w + b * wb + 2, 2);
        std::memcpy(&s, a + b * 36 + 2, 2);
        r += std::fabs(static_cast<double>(nitro::fp16_to_f32(m)) * nitro::fp16_to_f32(s)) * std::ldexp(1.0, -11);
    }
    return r;
}

const char* const kTypes[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_K",
                              "q3_K", "q4_K", "q5_K", "q6_K", "iq4_nl", "iq4_xs", "mxfp4"};

TEST(CpuKernelsGolden, EveryKernelAtEveryLevelMatchesGgmlsDequantization) {
    const auto isas = nitro::cpu::available_isas();
    for (const char* name : kTypes) {
        const auto wt = nitro::type_from_name(name);
        ASSERT_TRUE(wt) << name;
        const auto& q = tensors().at(std::string("q.") + name).bytes;
        const auto& ref_bytes = tensors().at(std::string("ref.") + name).bytes;
        std::vector<float> ref(ref_bytes.size() / 4);
        std::memcpy(ref.data(), ref_bytes.data(), ref_bytes.size());
        ASSERT_EQ(ref.size(), 1024u) << name;
        const size_t rb = nitro::row_size(*wt, 256);
        ASSERT_EQ(q.size(), 4 * rb) << name;
        for (int64_t n : {256, 1024}) {
            const int64_t rows = 1024 / n;
            std::mt19937 rng(static_cast<uint32_t>(n));
            std::normal_distribution<float> nd(0.f, 1.f);
            constexpr int kTokens = 16;
            nitro::cpu::ActBuffer acts;
            std::vector<float> xt(static_cast<size_t>(kTokens * n));
            for (float& v : xt) v = nd(rng) * (rng() % 50 == 0 ? 6.f : 1.f);
            nitro::cpu::quantize_acts(xt.data(), kTokens, n, *wt, acts);
            std::vector<const void*> arows(kTokens);
            for (int t = 0; t < kTokens; ++t) arows[static_cast<size_t>(t)] = acts.row(t);
            const nitro::cpu::WeightView view{*wt, q.data(), n, rows, static_cast<size_t>(n / 256) * rb};
            std::vector<float> y(static_cast<size_t>(n));
            for (const std::string& isa : isas) {
                std::vector<float> alone(static_cast<size_t>(kTokens * rows));
                for (int t = 0; t < kTokens; ++t) nitro::cpu::matmul_isa(isa, view, &arows[static_cast<size_t>(t)], 1, &alone[static_cast<size_t>(t * rows)]);
                for (int t = 0; t < kTokens; ++t) {
                    nitro::dequantize(acts.type, acts.row(t), y.data(), n);
                    for (int64_t r = 0; r < rows; ++r) {
                        const uint8_t* wrow = q.data() + static_cast<size_t>(r * n / 256) * rb;
                        const float* refrow = ref.data() + r * n;
                        double want = 0, abs = 0;
                        for (int64_t i = 0; i < n; ++i) {
                            want += static_cast<double>(refrow[i]) * y[static_cast<size_t>(i)];
                            abs += std::fabs(static_cast<double>(refrow[i]) * y[static_cast<size_t>(i)]);
                        }
                        ASSERT_GT(abs, 0.0) << name;
                        const float got = alone[static_cast<size_t>(t * rows + r)];
                        const double err = std::fabs(got - want) / abs;
                        const double tol = bound(*wt, n) + q81_rounding(*wt, n, wrow, acts.row(t)) / abs;
                        EXPECT_LE(err, tol) << isa << " " << name << " n " << n << " row " << r << " token " << t << ": "
                                            << got << " vs ggml-dequantized product " << want;
                    }
                }
                for (int nt : {3, 16}) {
                    for (int t0 = 0; t0 + nt <= kTokens; t0 += nt) {
                        std::vector<float> tile(static_cast<size_t>(nt * rows));
                        nitro::cpu::matmul_isa(isa, view, &arows[static_cast<size_t>(t0)], nt, tile.data());
                        for (int t = 0; t < nt; ++t)
                            for (int64_t r = 0; r < rows; ++r)
                                ASSERT_EQ(std::memcmp(&tile[static_cast<size_t>(t * rows + r)], &alone[static_cast<size_t>((t0 + t) * rows + r)], 4), 0)
                                    << isa << " " << name << " n " << n << ": token " << t0 + t << " row " << r << " in a tile of " << nt;
                    }
                }
            }
        }
    }
}

}  // namespace
