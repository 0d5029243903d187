// The multi-token tile kernels (src/cpu/kernels.h TileFn): a block of weight rows against 1..16
// tokens, each weight group decoded once for all of them. At every ISA level this CPU has, for
// every quantized type and the row lengths of the models' experts (gpt-oss-20b: n_embd = n_ff_exp
// = 2880; qwen3moe: 2048 -> 768; qwen3next: 2048 -> 512; 2816: gpt-oss's K-quant rows) plus rows
// that end in every kind of partial group:
//  - every token of a tile of 1..16 tokens (odd counts included) equals the same token computed
//    alone, bit for bit: per token the kernels do the same integer and float operations in the same
//    order whatever the tile (this is what keeps batched decode, prompt chunks and threads from
//    changing a result);
//  - the one-token result equals the scalar reference within the float-summation bound of
//    test_cpu_matmul.cpp (the integer part of every sub-block is exact at every level), and the
//    scalar reference is itself checked against a double dot of the dequantized rows there;
//  - a row's last partial group read in place (the bytes after the row are the next row, or NaN
//    garbage) equals the same row read from a zero-padded copy (the end of the readable weights).
#include "core/error.h"
#include "core/fp16.h"
#include "cpu/kernels.h"
#include "cpu/matmul.h"
#include "quant/types.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace nitro::cpu::kernels {
// tests/isa/avxvnni_emulated_*.cpp: the AVX-VNNI tile kernels with vpdpbusd emulated.
void fill_avxvnni_emulated(Table& t);
void fill_kquants_avxvnni_emulated(Table& t);
}  // namespace nitro::cpu::kernels

namespace {

using nitro::GgmlType;
using namespace nitro::cpu;

constexpr double kU = 1.0 / (1 << 24);

const GgmlType kQuantTypes[] = {GgmlType::MXFP4, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                                GgmlType::Q5_1,  GgmlType::IQ4_NL, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K,
                                GgmlType::Q5_K,  GgmlType::Q6_K, GgmlType::IQ4_XS};

std::string tname(GgmlType t) { return nitro::type_display_name(t); }

/// Row lengths: the experts' (2880, 2048, 768, 512), 2816 (gpt-oss K-quants), and for 32-value
/// blocks lengths whose last group of 16 blocks has 1, 3, 7, 9, 10 (2880), 15 blocks; for 256-value
/// blocks 1, 3, 5 (a last group of one super-block for the 2-super-block groups) and 11 (2816).
std::vector<int64_t> row_lengths(GgmlType t) {
    if (nitro::type_traits(t).block_size == 256) return {256, 768, 1280, 2048, 2816, 512};
    return {32, 96, 224, 288, 544, 992, 512, 768, 2048, 2880};
}

bool has_min_term(GgmlType t) {
    return t == GgmlType::Q4_1 || t == GgmlType::Q5_1 || t == GgmlType::Q2_K || t == GgmlType::Q4_K ||
           t == GgmlType::Q5_K;
}

/// One kernel's float-summation error bound as a fraction of A = sum |w_i a_i| (test_cpu_matmul.cpp).
double kernel_bound(GgmlType t, int64_t n) {
    const double b = (static_cast<double>(n / 16) + 3 + 8) * kU;
    return has_min_term(t) ? 3 * b : b;
}

/// Q4_1/Q5_1: fp16 rounding of Q8_1's block sums through the min term (absolute).
double q81_sum_rounding(GgmlType wt, int64_t n, const uint8_t* w, const uint8_t* a) {
    if (wt != GgmlType::Q4_1 && wt != GgmlType::Q5_1) return 0.0;
    const size_t wb = nitro::type_traits(wt).type_size;
    double r = 0;
    for (int64_t b = 0; b < n / 32; ++b) {
        uint16_t m, sy;
        std::memcpy(&m, w + b * wb + 2, 2);
        std::memcpy(&sy, a + b * 36 + 2, 2);
        r += std::fabs(static_cast<double>(nitro::fp16_to_f32(m)) * nitro::fp16_to_f32(sy)) * std::ldexp(1.0, -11);
    }
    return r;
}

std::vector<uint8_t> make_weights(GgmlType t, int64_t rows, int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> f(static_cast<size_t>(rows * n));
    for (float& v : f) v = nd(rng) * (rng() % 50 == 0 ? 8.0f : 1.0f);
    const size_t rb = nitro::row_size(t, n);
    std::vector<uint8_t> w(rb * static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) nitro::quantize(t, f.data() + r * n, w.data() + r * rb, n);
    return w;
}

/// Activation rows in vec_dot_type(t), quantized by src/quant (what quantize_acts produces).
std::vector<std::vector<uint8_t>> make_act_rows(GgmlType t, int tokens, int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const GgmlType vt = vec_dot_type(t);
    std::vector<std::vector<uint8_t>> rows(static_cast<size_t>(tokens));
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& r : rows) {
        for (float& v : x) v = nd(rng) * (rng() % 64 == 0 ? 10.0f : 1.0f);
        r.resize(nitro::row_size(vt, n));
        nitro::quantize(vt, x.data(), r.data(), n);
    }
    return rows;
}

/// sum |w_i a_i| of the dequantized operands.
double abs_dot(GgmlType wt, int64_t n, const uint8_t* w, const uint8_t* a) {
    std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    nitro::dequantize(wt, w, x.data(), n);
    nitro::dequantize(vec_dot_type(wt), a, y.data(), n);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += std::fabs(static_cast<double>(x[static_cast<size_t>(i)]) * y[static_cast<size_t>(i)]);
    return s;
}

TEST(CpuMatmulTiles, EveryLevelTileEqualsOneTokenAndTheReference) {
    constexpr int kTokens = 16;
    constexpr int64_t kRows = 19;  // two blocks of 8 rows (pairs) and 3 more (a pair and a single row)
    for (const std::string& isa : available_isas()) {
        for (GgmlType wt : kQuantTypes) {
            for (int64_t n : row_lengths(wt)) {
                const std::string where = isa + " " + tname(wt) + " n " + std::to_string(n);
                const auto w = make_weights(wt, kRows, n, 101 + static_cast<uint32_t>(n));
                const size_t rb = nitro::row_size(wt, n);
                const WeightView view{wt, w.data(), n, kRows, rb};
                const auto acts = make_act_rows(wt, kTokens, n, 7 + static_cast<uint32_t>(n));
                std::vector<const void*> arows(kTokens);
                for (int t = 0; t < kTokens; ++t) arows[static_cast<size_t>(t)] = acts[static_cast<size_t>(t)].data();
                // Each token alone.
                std::vector<float> single(static_cast<size_t>(kTokens * kRows));
                for (int t = 0; t < kTokens; ++t) matmul_isa(isa, view, &arows[static_cast<size_t>(t)], 1, &single[static_cast<size_t>(t * kRows)]);
                double worst = 0;
                for (int t = 0; t < kTokens; ++t) {
                    for (int64_t r = 0; r < kRows; ++r) {
                        const float got = single[static_cast<size_t>(t * kRows + r)];
                        const float want = vec_dot_reference(wt, n, w.data() + r * rb, arows[static_cast<size_t>(t)]);
                        const double A = abs_dot(wt, n, w.data() + r * rb, acts[static_cast<size_t>(t)].data());
                        ASSERT_GT(A, 0.0) << where;
                        const double tol = 2 * kernel_bound(wt, n) +
                                           2 * q81_sum_rounding(wt, n, w.data() + r * rb, acts[static_cast<size_t>(t)].data()) / A;
                        const double err = std::fabs(static_cast<double>(got) - want) / A;
                        worst = std::max(worst, err);
                        ASSERT_LE(err, tol) << where << " row " << r << " token " << t << ": " << got << " vs reference " << want;
                    }
                }
                // Tiles of 1..16 tokens starting at token t0: every value equals the lone token's.
                for (int nt = 1; nt <= kTokens; ++nt) {
                    const int t0 = (nt * 5) % (kTokens - nt + 1);
                    std::vector<float> tile(static_cast<size_t>(nt * kRows), std::nanf(""));
                    matmul_isa(isa, view, &arows[static_cast<size_t>(t0)], nt, tile.data());
                    for (int t = 0; t < nt; ++t)
                        for (int64_t r = 0; r < kRows; ++r)
                            ASSERT_EQ(std::memcmp(&tile[static_cast<size_t>(t * kRows + r)], &single[static_cast<size_t>((t0 + t) * kRows + r)], 4), 0)
                                << where << ": token " << t0 + t << " row " << r << " in a tile of " << nt << " tokens: "
                                << tile[static_cast<size_t>(t * kRows + r)] << " vs alone " << single[static_cast<size_t>((t0 + t) * kRows + r)];
                }
                if (isa != "scalar" && (n == 2880 || n == 2816 || n == 768))
                    std::printf("[ tile ] %-6s %-6s n=%-4lld max normalised error vs reference %.2e\n", isa.c_str(),
                                tname(wt).c_str(), static_cast<long long>(n), worst);
            }
        }
    }
}

TEST(CpuMatmulTiles, AvxVnniKernelsEqualAvx2BitForBit) {
    // The AVX-VNNI level runs AVX2's decoders with one vpdpbusd per slice, every type unsigned
    // (Q8_0, IQ4_NL and IQ4_XS + 128 with the offset correction, where AVX2 uses the sign trick).
    // Every sub-block's integer dot is exact either way and the float operations are the same, so
    // every value must equal AVX2's bit for bit, at 1..16 tokens and every row length. Checked with
    // vpdpbusd emulated exactly in AVX2 (tests/isa/avxvnni_emulated_*.cpp: no development machine
    // and no qemu here has AVX-VNNI), and with the real level where this CPU has it.
    const auto isas = available_isas();
    if (std::find(isas.begin(), isas.end(), "avx2") == isas.end()) GTEST_SKIP() << "no AVX2 on this CPU";
    const bool real = std::find(isas.begin(), isas.end(), "avxvnni") != isas.end();
    kernels::Table emu;
    kernels::fill_scalar(emu);
    kernels::fill_avx2(emu);
    kernels::fill_kquants_avx2(emu);
    kernels::fill_avxvnni_emulated(emu);
    kernels::fill_kquants_avxvnni_emulated(emu);
    constexpr int kTokens = 16;
    constexpr int64_t kRows = 11;
    for (GgmlType wt : kQuantTypes) {
        for (int64_t n : row_lengths(wt)) {
            const std::string where = tname(wt) + " n " + std::to_string(n);
            const auto w = make_weights(wt, kRows, n, 31 + static_cast<uint32_t>(n));
            const WeightView view{wt, w.data(), n, kRows, nitro::row_size(wt, n)};
            const auto acts = make_act_rows(wt, kTokens, n, 17 + static_cast<uint32_t>(n));
            std::vector<const void*> arows(kTokens);
            for (int t = 0; t < kTokens; ++t) arows[static_cast<size_t>(t)] = acts[static_cast<size_t>(t)].data();
            for (int nt : {1, 2, 5, 16}) {
                std::vector<float> avx2(static_cast<size_t>(nt * kRows)), vnni(avx2.size(), std::nanf(""));
                matmul_isa("avx2", view, arows.data(), nt, avx2.data());
                kernels::matmul_table(emu, view, arows.data(), nt, vnni.data());
                ASSERT_EQ(std::memcmp(avx2.data(), vnni.data(), 4 * avx2.size()), 0)
                    << where << ", " << nt << " tokens, emulated";
                if (real) {
                    matmul_isa("avxvnni", view, arows.data(), nt, vnni.data());
                    ASSERT_EQ(std::memcmp(avx2.data(), vnni.data(), 4 * avx2.size()), 0) << where << ", " << nt << " tokens";
                }
            }
        }
    }
    std::printf("[ avxvnni ] every type equals avx2 bit for bit (emulated vpdpbusd%s)\n",
                real ? ", and this CPU's AVX-VNNI" : "; this CPU has no AVX-VNNI");
}

TEST(CpuMatmulTiles, LastPartialGroupInPlaceEqualsAPaddedCopy) {
    // Row 0 alone in a view: its last group is decoded from a zero-padded copy. Row 0 followed by a
    // row of 0xFF bytes (fp16 NaN scales, every quant bit set): decoded in place, reading the NaN
    // row; the dropped lanes must not leak into row 0. Both must equal, bit for bit, for 1 and 5 tokens.
    for (const std::string& isa : available_isas()) {
        for (GgmlType wt : kQuantTypes) {
            for (int64_t n : row_lengths(wt)) {
                const std::string where = isa + " " + tname(wt) + " n " + std::to_string(n);
                const size_t rb = nitro::row_size(wt, n);
                std::vector<uint8_t> w = make_weights(wt, 1, n, 5);
                w.resize(2 * rb, 0xFF);
                const auto acts = make_act_rows(wt, 5, n, 9);
                const void* arows[5] = {acts[0].data(), acts[1].data(), acts[2].data(), acts[3].data(), acts[4].data()};
                for (int nt : {1, 5}) {
                    std::vector<float> alone(static_cast<size_t>(nt)), joined(static_cast<size_t>(2 * nt));
                    matmul_isa(isa, WeightView{wt, w.data(), n, 1, rb}, arows, nt, alone.data());
                    matmul_isa(isa, WeightView{wt, w.data(), n, 2, rb}, arows, nt, joined.data());
                    for (int t = 0; t < nt; ++t) {
                        ASSERT_FALSE(std::isnan(alone[static_cast<size_t>(t)])) << where;
                        ASSERT_EQ(std::memcmp(&alone[static_cast<size_t>(t)], &joined[static_cast<size_t>(2 * t)], 4), 0)
                            << where << " token " << t << " of " << nt << ": " << alone[static_cast<size_t>(t)] << " (padded copy) vs "
                            << joined[static_cast<size_t>(2 * t)] << " (in place, NaN row after it)";
                    }
                }
            }
        }
    }
}

TEST(CpuMatmulTiles, BadTileArgumentsAreErrors) {
    std::vector<uint8_t> w(34, 0);
    const void* a[1] = {w.data()};
    float out[17];
    const WeightView view{GgmlType::Q8_0, w.data(), 32, 1, 34};
    EXPECT_THROW(matmul_isa("scalar", view, a, 0, out), nitro::Error);
    EXPECT_THROW(matmul_isa("scalar", view, a, 17, out), nitro::Error);
    EXPECT_THROW(matmul_isa("neon", view, a, 1, out), nitro::Error);
    // The prefetch knobs of `nitro bench`: named hints only, and they do not change a result.
    EXPECT_THROW(set_prefetch_hint("t3"), nitro::Error);
    EXPECT_STREQ(prefetch_hint(), "t0");
    const auto w2 = make_weights(GgmlType::MXFP4, 3, 2880, 1);
    const auto acts = make_act_rows(GgmlType::MXFP4, 2, 2880, 2);
    const void* ar[2] = {acts[0].data(), acts[1].data()};
    const WeightView v2{GgmlType::MXFP4, w2.data(), 2880, 3, nitro::row_size(GgmlType::MXFP4, 2880)};
    float base[6], other[6];
    matmul_isa(available_isas().back(), v2, ar, 2, base);
    for (const char* h : {"t1", "t2", "nta"}) {
        set_prefetch_hint(h);
        EXPECT_STREQ(prefetch_hint(), h);
        set_prefetch_bytes(4096);
        matmul_isa(available_isas().back(), v2, ar, 2, other);
        EXPECT_EQ(std::memcmp(base, other, sizeof(base)), 0) << h;
    }
    set_prefetch_hint("t0");
    set_prefetch_bytes(kDefaultPrefetchBytes);
}

}  // namespace
