// CPU matmul (src/cpu/matmul.h): the scalar reference against an independent double-precision
// dot of dequantized values, every available ISA against the scalar reference, token grouping,
// matmul_batch (token_ids gathering, out_stride, several jobs in one region), thread-count
// invariance, quantize_acts against src/quant's quantizers, and the tensor views.
//
// Error measure: e = |got - want| / A with A = sum_i |w_i * a_i| over the dequantized operands
// (the scale of the terms being summed, so a relative bound is meaningful even when the dot
// itself cancels to ~0). With u = 2^-24 (f32 unit roundoff) and nb blocks per row:
//  - a kernel sums nb block terms in float, each block term exact in integers and then rounded
//    by <= 3 float multiplications: |error| <= (nb + 3) u A (standard recursive-summation bound);
//  - the types with a separate min/offset term (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K) round the two
//    parts d*sum(sc q y) and dmin*sum(m bsum) separately; each part is at most ~2 A for data of
//    either sign, so their error is bounded by 3x the above;
//  - two kernels (ISA vs reference) differ by at most the sum of their two bounds.
//  - Q4_1/Q5_1 use Q8_1 activations, whose cached block sum s = fp16(d * sum q) is rounded to
//    half precision (ggml's format): the kernels (like ggml's) compute the min term m * s from it,
//    so they differ from the exact dot by up to sum_b |m_b * s_b| * 2^-11 (q81_sum_rounding).
// The tolerances below are these bounds (plus 8 u A for the final lane reductions); a wrong
// nibble, scale or block offset gives e ~ 1e-2..1, far above them.
#include "core/error.h"
#include "core/fp16.h"
#include "cpu/cpu_features.h"
#include "cpu/matmul.h"
#include "cpu/thread_pool.h"
#include "quant/types.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

using nitro::GgmlType;
using namespace nitro::cpu;

constexpr double kU = 1.0 / (1 << 24);

const GgmlType kTypes[] = {GgmlType::MXFP4, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                           GgmlType::Q5_1,  GgmlType::IQ4_NL, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K,
                           GgmlType::Q5_K,  GgmlType::Q6_K, GgmlType::IQ4_XS, GgmlType::F16, GgmlType::BF16,
                           GgmlType::F32};

std::string tname(GgmlType t) { return nitro::type_display_name(t); }

/// Row lengths to test: 2880 (gpt-oss) where the block size allows, 2816 for 256-value blocks.
std::vector<int64_t> lengths(GgmlType t) {
    if (nitro::type_traits(t).block_size == 256) return {256, 512, 2816};
    // 1, 3, 7 blocks: every tail of the four-block and two-block SIMD loops
    if (nitro::type_traits(t).block_size == 32) return {32, 96, 224, 256, 512, 2880};
    return {256, 512, 2880};
}

bool has_min_term(GgmlType t) {
    return t == GgmlType::Q4_1 || t == GgmlType::Q5_1 || t == GgmlType::Q2_K || t == GgmlType::Q4_K ||
           t == GgmlType::Q5_K;
}

/// Error bound of one kernel (see the file comment), as a fraction of A.
double kernel_bound(GgmlType t, int64_t n) {
    const int64_t bs = nitro::type_traits(t).block_size;
    // Float types: the SIMD kernels sum at most n/8 terms per lane (the double reference is exact
    // to ~u). Quantized types: at most one float accumulation per 32 values (IQ4_XS, the legacy
    // and 32-value formats; the K-quants accumulate less often).
    const double nb = bs == 1 ? static_cast<double>(n) / 8.0 : static_cast<double>(n / 32);
    const double b = (nb + 3 + 8) * kU;
    return has_min_term(t) ? 3 * b : b;
}

/// Half-precision rounding of the Q8_1 block sums seen through Q4_1/Q5_1's min term:
/// sum over blocks of |m * s| * 2^-11 (absolute); 0 for other types.
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

/// Weights [rows, n] of type t: random normal floats with a few outliers, quantized by src/quant.
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

std::vector<float> make_acts(int64_t tokens, int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(tokens * n));
    for (float& v : x) v = nd(rng) * (rng() % 64 == 0 ? 10.0f : 1.0f);
    return x;
}

struct Exact {
    double dot = 0, abs = 0;
};

/// Double-precision dot of the dequantized rows (independent of src/cpu).
Exact exact_dot(GgmlType wt, GgmlType at, int64_t n, const uint8_t* w, const uint8_t* a) {
    std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    nitro::dequantize(wt, w, x.data(), n);
    nitro::dequantize(at, a, y.data(), n);
    Exact e;
    for (int64_t i = 0; i < n; ++i) {
        e.dot += static_cast<double>(x[i]) * y[i];
        e.abs += std::fabs(static_cast<double>(x[i]) * y[i]);
    }
    return e;
}

TEST(CpuMatmul, VecDotTypesAreLlamaCpps) {
    EXPECT_EQ(vec_dot_type(GgmlType::MXFP4), GgmlType::Q8_0);
    EXPECT_EQ(vec_dot_type(GgmlType::Q4_0), GgmlType::Q8_0);
    EXPECT_EQ(vec_dot_type(GgmlType::Q5_0), GgmlType::Q8_0);
    EXPECT_EQ(vec_dot_type(GgmlType::Q8_0), GgmlType::Q8_0);
    EXPECT_EQ(vec_dot_type(GgmlType::IQ4_NL), GgmlType::Q8_0);
    EXPECT_EQ(vec_dot_type(GgmlType::Q4_1), GgmlType::Q8_1);
    EXPECT_EQ(vec_dot_type(GgmlType::Q5_1), GgmlType::Q8_1);
    for (GgmlType t : {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_XS})
        EXPECT_EQ(vec_dot_type(t), GgmlType::Q8_K) << tname(t);
    EXPECT_EQ(vec_dot_type(GgmlType::F16), GgmlType::F16);
    EXPECT_EQ(vec_dot_type(GgmlType::BF16), GgmlType::BF16);
    EXPECT_EQ(vec_dot_type(GgmlType::F32), GgmlType::F32);
    EXPECT_THROW(vec_dot_type(GgmlType::IQ2_XXS), nitro::Error);
    EXPECT_THROW(vec_dot_type(GgmlType::I32), nitro::Error);
}

TEST(CpuMatmul, QuantizeActsIsBitExactWithSrcQuant) {
    for (GgmlType wt : kTypes) {
        for (int64_t n : lengths(wt)) {
            const int64_t tokens = 3;
            const std::vector<float> x = make_acts(tokens, n, 7);
            ActBuffer acts;
            acts.data.assign(5, 0xAB);  // stale storage must be resized and overwritten
            quantize_acts(x.data(), tokens, n, wt, acts);
            const GgmlType vt = vec_dot_type(wt);
            ASSERT_EQ(acts.type, vt);
            ASSERT_EQ(acts.ne0, n);
            ASSERT_EQ(acts.n_tokens, tokens);
            ASSERT_EQ(acts.row_bytes, nitro::row_size(vt, n));
            ASSERT_EQ(acts.data.size(), acts.row_bytes * tokens);
            std::vector<uint8_t> want(acts.row_bytes);
            const bool scaled = vt == GgmlType::Q8_0 || vt == GgmlType::Q8_1;
            ASSERT_EQ(acts.block_scales.size(), scaled ? static_cast<size_t>(tokens * n / 32) : 0u) << tname(wt);
            for (int64_t t = 0; t < tokens; ++t) {
                nitro::quantize(vt, x.data() + t * n, want.data(), n);
                EXPECT_EQ(std::memcmp(acts.row(t), want.data(), want.size()), 0) << tname(wt) << " n " << n << " t " << t;
                for (int64_t b = 0; scaled && b < n / 32; ++b) {
                    uint16_t d;
                    std::memcpy(&d, want.data() + b * nitro::type_traits(vt).type_size, 2);
                    ASSERT_EQ(acts.block_scales[static_cast<size_t>(t * (n / 32) + b)], nitro::fp16_to_f32(d));
                }
            }
        }
    }
    ActBuffer acts;
    std::vector<float> x(100);
    EXPECT_THROW(quantize_acts(x.data(), 1, 100, GgmlType::Q8_0, acts), nitro::Error);  // not a multiple of 32
    EXPECT_THROW(quantize_acts(x.data(), 1, 64, GgmlType::IQ2_XXS, acts), nitro::Error);
}

TEST(CpuMatmul, ReferenceMatchesDoubleDotOfDequantizedRows) {
    for (GgmlType wt : kTypes) {
        for (int64_t n : lengths(wt)) {
            const int64_t rows = 7, tokens = 3;
            const auto w = make_weights(wt, rows, n, 11 + static_cast<uint32_t>(n));
            ActBuffer acts;
            quantize_acts(make_acts(tokens, n, 5).data(), tokens, n, wt, acts);
            const size_t rb = nitro::row_size(wt, n);
            double worst = 0;
            const double tol = kernel_bound(wt, n);
            for (int64_t r = 0; r < rows; ++r) {
                for (int64_t t = 0; t < tokens; ++t) {
                    const Exact e = exact_dot(wt, acts.type, n, w.data() + r * rb, acts.row(t));
                    const float got = vec_dot_reference(wt, n, w.data() + r * rb, acts.row(t));
                    ASSERT_GT(e.abs, 0.0);
                    const double extra = q81_sum_rounding(wt, n, w.data() + r * rb, acts.row(t)) / e.abs;
                    const double err = std::fabs(got - e.dot) / e.abs;
                    worst = std::max(worst, err);
                    EXPECT_LE(err, tol + extra) << tname(wt) << " n " << n << " row " << r << " token " << t << ": got " << got
                                        << ", exact " << e.dot;
                }
            }
            RecordProperty(tname(wt) + "_" + std::to_string(n) + "_ref_err", std::to_string(worst));
        }
    }
    std::vector<uint8_t> buf(64);
    EXPECT_THROW(vec_dot_reference(GgmlType::Q8_0, 33, buf.data(), buf.data()), nitro::Error);
    EXPECT_THROW(vec_dot_reference(GgmlType::IQ2_XXS, 256, buf.data(), buf.data()), nitro::Error);
}

TEST(CpuMatmul, ReferenceCatchesAWrongValue) {
    // The measure above must be able to fail: flip one quant of a Q4_0 row and the reference
    // must move by far more than the tolerance.
    const int64_t n = 2880;
    auto w = make_weights(GgmlType::Q4_0, 1, n, 3);
    ActBuffer acts;
    quantize_acts(make_acts(1, n, 4).data(), 1, n, GgmlType::Q4_0, acts);
    const Exact e = exact_dot(GgmlType::Q4_0, acts.type, n, w.data(), acts.row(0));
    w[18 * 40 + 2 + 5] ^= 0x08;  // block 40, byte 5, low nibble's top bit
    const float got = vec_dot_reference(GgmlType::Q4_0, n, w.data(), acts.row(0));
    EXPECT_GT(std::fabs(got - e.dot) / e.abs, 10 * kernel_bound(GgmlType::Q4_0, n));
}

TEST(CpuMatmul, EveryIsaMatchesTheReference) {
    const auto isas = available_isas();
    ASSERT_FALSE(isas.empty());
    EXPECT_EQ(isas.front(), "scalar");
    for (const std::string& isa : isas) {
        for (GgmlType wt : kTypes) {
            for (int64_t n : lengths(wt)) {
                const int64_t rows = 7, tokens = 4;
                const auto w = make_weights(wt, rows, n, 21 + static_cast<uint32_t>(n));
                ActBuffer acts;
                quantize_acts(make_acts(tokens, n, 9).data(), tokens, n, wt, acts);
                const size_t rb = nitro::row_size(wt, n);
                const double tol = 2 * kernel_bound(wt, n);
                double worst = 0;
                for (int64_t r = 0; r < rows; ++r) {
                    const void* a[4] = {acts.row(0), acts.row(1), acts.row(2), acts.row(3)};
                    float single[4], multi[4];
                    for (int t = 0; t < 4; ++t) vec_dot_isa(isa, wt, n, w.data() + r * rb, &a[t], 1, &single[t]);
                    for (int nt = 2; nt <= 4; ++nt) {
                        vec_dot_isa(isa, wt, n, w.data() + r * rb, a, nt, multi);
                        for (int t = 0; t < nt; ++t)
                            ASSERT_EQ(std::memcmp(&multi[t], &single[t], 4), 0)
                                << isa << " " << tname(wt) << ": token " << t << " of a group of " << nt
                                << " differs from the same token alone";
                    }
                    for (int t = 0; t < 4; ++t) {
                        const float want = vec_dot_reference(wt, n, w.data() + r * rb, a[t]);
                        const Exact e = exact_dot(wt, acts.type, n, w.data() + r * rb, acts.row(t));
                        const double err = std::fabs(static_cast<double>(single[t]) - want) / e.abs;
                        worst = std::max(worst, err);
                        EXPECT_LE(err, tol) << isa << " " << tname(wt) << " n " << n << " row " << r << " token " << t
                                            << ": " << single[t] << " vs reference " << want;
                    }
                }
                if (isa != "scalar") {
                    std::printf("[ isa ] %-6s %-6s n=%-4lld max normalised error vs reference %.2e (tolerance %.1e)\n",
                                isa.c_str(), tname(wt).c_str(), static_cast<long long>(n), worst, tol);
                }
            }
        }
    }
    std::vector<uint8_t> buf(64);
    const void* a[1] = {buf.data()};
    float out;
    EXPECT_THROW(vec_dot_isa("neon", GgmlType::Q8_0, 32, buf.data(), a, 1, &out), nitro::Error);
}

TEST(CpuMatmul, KernelIsaIsOneOfTheAvailable) {
    const std::string k = kernel_isa();
    const auto isas = available_isas();
    EXPECT_NE(std::find(isas.begin(), isas.end(), k), isas.end()) << k;
    const char* env = std::getenv("NITRO_ISA");
    if (env && *env) {
        // Forced levels are never above the hardware.
        const std::string want = env;
        if (std::find(isas.begin(), isas.end(), want) != isas.end()) {
            EXPECT_EQ(k, want);
        }
    } else {
        EXPECT_EQ(k, isas.back());  // the best the CPU has
    }
}

TEST(CpuMatmul, AvailableLevelsFollowTheCpuFeatures) {
    // The levels are not nested (Zen 4 has AVX-512 VNNI but not AVX-VNNI), so each is listed only
    // where this CPU has its features.
    const CpuFeatures& f = cpu_features();
    const bool avx2 = f.avx2 && f.fma && f.f16c;
    std::vector<std::string> want = {"scalar"};
    if (avx2) want.emplace_back("avx2");
    if (avx2 && f.avx_vnni) want.emplace_back("avxvnni");
    if (avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni) want.emplace_back("avx512");
    EXPECT_EQ(available_isas(), want);
    for (const char* level : {"avxvnni", "avx512", "avx2"})
        if (std::find(want.begin(), want.end(), level) == want.end()) {
            EXPECT_THROW(set_kernel_isa(level), nitro::Error) << level;
        }
}

TEST(CpuMatmul, NitroIsaLowersToTheBestLevelAtOrBelowIt) {
    // In a fresh process (the level is read once): NITRO_ISA=avxvnni runs avxvnni where the CPU has
    // it, else the best level below it (avx2 on Zen 4 and older Intel, scalar without AVX2).
    const auto isas = available_isas();
    auto has = [&](const char* l) { return std::find(isas.begin(), isas.end(), l) != isas.end(); };
    int status = -1;  // exit status of the last run
    auto version = [&](const std::string& env) {
        const std::string cmd = env + " " + std::string(NITRO_BINARY) + " --version 2>&1";
        FILE* p = popen(cmd.c_str(), "r");
        std::string out;
        char buf[256];
        while (p && std::fgets(buf, sizeof buf, p)) out += buf;
        const int w = p ? pclose(p) : -1;
        status = w != -1 && WIFEXITED(w) ? WEXITSTATUS(w) : -1;  // -1: killed by a signal (e.g. abort)
        return out;
    };
    const std::string want = has("avxvnni") ? "avxvnni" : has("avx2") ? "avx2" : "scalar";
    EXPECT_NE(version("NITRO_ISA=avxvnni").find("kernels: " + want + " "), std::string::npos)
        << version("NITRO_ISA=avxvnni");
    const std::string bad = version("NITRO_ISA=avx10");
    EXPECT_NE(bad.find("NITRO_ISA=avx10 is not one of scalar, avx2, avxvnni, avx512"), std::string::npos) << bad;
    EXPECT_EQ(status, 1) << "a bad NITRO_ISA must be an error exit, not an abort: " << bad;
}

/// out[t * stride + r] for every job, computed one dot at a time with the active ISA's kernel.
std::vector<float> expected_job(const MatmulJob& j) {
    std::vector<float> out(static_cast<size_t>(j.n_tokens * j.w.n_rows));
    for (int64_t t = 0; t < j.n_tokens; ++t) {
        const void* a[1] = {j.acts->row(j.token_ids ? j.token_ids[t] : t)};
        for (int64_t r = 0; r < j.w.n_rows; ++r)
            vec_dot_isa(kernel_isa(), j.w.type, j.w.ne0, j.w.row(r), a, 1, &out[static_cast<size_t>(t * j.w.n_rows + r)]);
    }
    return out;
}

TEST(CpuMatmul, BatchGathersTokensAndHonoursOutStride) {
    ThreadPool pool(3);
    const int64_t n = 2880;
    const std::vector<float> x = make_acts(6, n, 17);
    struct Spec {
        GgmlType type;
        int64_t rows;
        std::vector<int32_t> ids;
    };
    const std::vector<Spec> specs = {{GgmlType::MXFP4, 64, {5, 0, 3, 3, 1}},
                                     {GgmlType::Q8_0, 7, {2}},
                                     {GgmlType::F16, 33, {4, 4, 0}},
                                     {GgmlType::MXFP4, 1, {0, 1, 2, 3, 4, 5, 0}}};
    std::vector<std::vector<uint8_t>> weights;
    std::vector<ActBuffer> acts(specs.size());
    std::vector<std::vector<float>> outs;
    std::vector<MatmulJob> jobs;
    for (size_t i = 0; i < specs.size(); ++i) {
        weights.push_back(make_weights(specs[i].type, specs[i].rows, n, 100 + static_cast<uint32_t>(i)));
        quantize_acts(x.data(), 6, n, specs[i].type, acts[i]);
    }
    const float kSentinel = -12345.0f;
    for (size_t i = 0; i < specs.size(); ++i) {
        MatmulJob j;
        j.w = WeightView{specs[i].type, weights[i].data(), n, specs[i].rows, nitro::row_size(specs[i].type, n)};
        j.acts = &acts[i];
        j.token_ids = specs[i].ids.data();
        j.n_tokens = static_cast<int64_t>(specs[i].ids.size());
        j.out_stride = specs[i].rows + 5;  // padding that must stay untouched
        outs.emplace_back(static_cast<size_t>(j.n_tokens * j.out_stride), kSentinel);
        jobs.push_back(j);
    }
    for (size_t i = 0; i < jobs.size(); ++i) jobs[i].out = outs[i].data();
    matmul_batch(pool, jobs);
    for (size_t i = 0; i < jobs.size(); ++i) {
        const MatmulJob& j = jobs[i];
        const std::vector<float> want = expected_job(j);
        for (int64_t t = 0; t < j.n_tokens; ++t) {
            for (int64_t c = 0; c < j.out_stride; ++c) {
                const float got = outs[i][static_cast<size_t>(t * j.out_stride + c)];
                if (c < j.w.n_rows) {
                    ASSERT_EQ(got, want[static_cast<size_t>(t * j.w.n_rows + c)]) << "job " << i << " token " << t << " row " << c;
                } else {
                    ASSERT_EQ(got, kSentinel) << "job " << i << " wrote padding at token " << t << " column " << c;
                }
            }
        }
    }
    // Bad jobs are refused with a message, not a crash.
    MatmulJob bad = jobs[0];
    const int32_t bad_ids[1] = {6};
    bad.token_ids = bad_ids;
    bad.n_tokens = 1;
    EXPECT_THROW(matmul_batch(pool, std::span<const MatmulJob>(&bad, 1)), nitro::Error);
    bad = jobs[0];
    bad.acts = &acts[2];  // F16 activations for MXFP4 weights
    EXPECT_THROW(matmul_batch(pool, std::span<const MatmulJob>(&bad, 1)), nitro::Error);
    ActBuffer hand_made = acts[0];
    hand_made.block_scales.clear();  // not from quantize_acts
    bad = jobs[0];
    bad.acts = &hand_made;
    EXPECT_THROW(matmul_batch(pool, std::span<const MatmulJob>(&bad, 1)), nitro::Error);
    matmul_batch(pool, {});  // no jobs: nothing to do
}

TEST(CpuMatmul, ResultsAreIdenticalForAnyThreadCount) {
    const GgmlType types[] = {GgmlType::MXFP4, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K,
                              GgmlType::Q6_K,  GgmlType::IQ4_XS, GgmlType::F16, GgmlType::F32};
    ThreadPool p1(1), p2(2), p3(3), p8(8);
    ThreadPool* pools[] = {&p1, &p2, &p3, &p8};
    for (GgmlType wt : types) {
        const int64_t n = nitro::type_traits(wt).block_size == 256 ? 512 : 2880;
        for (int64_t rows : {1, 7, 64}) {
            const auto w = make_weights(wt, rows, n, 31);
            const WeightView view{wt, w.data(), n, rows, nitro::row_size(wt, n)};
            for (int64_t tokens : {1, 3, 17}) {
                ActBuffer acts;
                quantize_acts(make_acts(tokens, n, 41).data(), tokens, n, wt, acts);
                std::vector<float> first;
                for (ThreadPool* p : pools) {
                    std::vector<float> out(static_cast<size_t>(tokens * rows), std::numeric_limits<float>::quiet_NaN());
                    matmul(*p, view, acts, out.data());
                    if (first.empty()) {
                        first = out;
                        // Every output is the same kernel call as a lone dot of that row and token.
                        MatmulJob j;
                        j.w = view;
                        j.acts = &acts;
                        j.n_tokens = tokens;
                        EXPECT_EQ(std::memcmp(first.data(), expected_job(j).data(), 4 * first.size()), 0)
                            << tname(wt) << " rows " << rows << " tokens " << tokens;
                    } else {
                        EXPECT_EQ(std::memcmp(out.data(), first.data(), 4 * out.size()), 0)
                            << tname(wt) << " rows " << rows << " tokens " << tokens << " threads " << p->size();
                    }
                }
            }
        }
    }
}

TEST(CpuMatmul, ViewsOfMatricesAndExperts) {
    std::vector<uint8_t> bytes(3 * 4 * 17 * 2);
    nitro::GgufTensorInfo t;
    t.name = "blk.0.ffn_up_exps.weight";
    t.type = GgmlType::MXFP4;
    t.n_dims = 3;
    t.ne = {64, 4, 3, 1};
    t.data = bytes.data();
    const WeightView e2 = expert_view(t, 2);
    EXPECT_EQ(e2.ne0, 64);
    EXPECT_EQ(e2.n_rows, 4);
    EXPECT_EQ(e2.row_bytes, 34u);
    EXPECT_EQ(e2.data, bytes.data() + 2 * 4 * 34);
    EXPECT_EQ(e2.row(3), bytes.data() + 2 * 4 * 34 + 3 * 34);
    EXPECT_THROW(expert_view(t, 3), nitro::Error);
    EXPECT_THROW(expert_view(t, -1), nitro::Error);
    EXPECT_THROW(weight_view(t), nitro::Error);  // 3-D is not a matrix
    t.n_dims = 2;
    t.ne = {64, 12, 1, 1};
    const WeightView m = weight_view(t);
    EXPECT_EQ(m.n_rows, 12);
    EXPECT_EQ(m.data, bytes.data());
    EXPECT_THROW(expert_view(t, 0), nitro::Error);  // 2-D has no experts
    t.ne = {60, 12, 1, 1};                          // not a multiple of the block size
    EXPECT_THROW(weight_view(t), nitro::Error);
}

}  // namespace
