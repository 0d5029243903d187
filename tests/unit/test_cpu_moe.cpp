// cpu::moe_ffn (src/cpu/moe.h): the one-region MoE step against a plain reference built from the
// public matmul API one (token, expert) at a time: quantize the token, gate and up products, bias,
// SwiGLU, quantize, down product, bias, weighted sum in router order. The kernels are the same, so
// the result must be identical bit for bit, for every thread count, skip mask and token count
// (MUL_MAT_ID grouping, the 16-row units, the 256-row quantization groups and the work stealing
// must not change any value).
#include "core/error.h"
#include "cpu/matmul.h"
#include "cpu/moe.h"
#include "cpu/ops.h"
#include "cpu/thread_pool.h"
#include "quant/types.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using nitro::GgmlType;
using namespace nitro::cpu;

struct ExpertTensor {
    nitro::GgufTensorInfo info;
    std::vector<uint8_t> bytes;
};

/// A [ne0, ne1, n_expert] expert tensor of random weights quantized to `t`.
ExpertTensor make_experts(const std::string& name, GgmlType t, int64_t ne0, int64_t ne1, int64_t nx, uint32_t seed) {
    ExpertTensor e;
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.f, 0.05f);
    const size_t rb = nitro::row_size(t, ne0);
    e.bytes.resize(rb * static_cast<size_t>(ne1 * nx));
    std::vector<float> row(static_cast<size_t>(ne0));
    for (int64_t r = 0; r < ne1 * nx; ++r) {
        for (float& v : row) v = nd(rng);
        nitro::quantize(t, row.data(), e.bytes.data() + static_cast<size_t>(r) * rb, ne0);
    }
    e.info.name = name;
    e.info.type = t;
    e.info.n_dims = 3;
    e.info.ne = {ne0, ne1, nx, 1};
    e.info.n_bytes = e.bytes.size();
    e.info.data = e.bytes.data();
    return e;
}

std::vector<float> randn(size_t n, uint32_t seed, float sd = 1.f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.f, sd);
    std::vector<float> v(n);
    for (float& x : v) x = nd(rng);
    return v;
}

/// The MoE step written out one (token, expert) at a time.
std::vector<float> reference(ThreadPool& pool, const ExpertWeights& ex, const std::vector<float>& h, int64_t n, int K,
                             const std::vector<int32_t>& ids, const std::vector<float>& w, const uint8_t* skip) {
    const int64_t E = ex.n_embd(), F = ex.n_ff();
    std::vector<float> out(static_cast<size_t>(n * E), 0.f), g(static_cast<size_t>(F)), u(g.size()), d(static_cast<size_t>(E));
    ActBuffer a, b;
    for (int64_t i = 0; i < n; ++i) {
        for (int j = 0; j < K; ++j) {
            const int32_t x = ids[static_cast<size_t>(i * K + j)];
            if (skip && skip[x]) continue;
            quantize_acts(h.data() + i * E, 1, E, ex.gate->type, a);
            matmul(pool, expert_view(*ex.gate, x), a, g.data());
            quantize_acts(h.data() + i * E, 1, E, ex.up->type, a);
            matmul(pool, expert_view(*ex.up, x), a, u.data());
            if (ex.gate_b) add(g.data(), ex.gate_b + x * F, F);
            if (ex.up_b) add(u.data(), ex.up_b + x * F, F);
            if (ex.act == nitro::FfnAct::SwigluOai) swiglu_oai(g.data(), u.data(), F, 1.702f, 7.0f, g.data());
            else swiglu(g.data(), u.data(), F, g.data());
            quantize_acts(g.data(), 1, F, ex.down->type, b);
            matmul(pool, expert_view(*ex.down, x), b, d.data());
            if (ex.down_b) add(d.data(), ex.down_b + x * E, E);
            const float wt = w[static_cast<size_t>(i * K + j)];
            for (int64_t c = 0; c < E; ++c) out[static_cast<size_t>(i * E + c)] += wt * d[static_cast<size_t>(c)];
        }
    }
    return out;
}

struct Case {
    GgmlType gate, up, down;
    int64_t E, F, X;
    int K;
    bool biases;
};

void check_case(const Case& c) {
    const std::string what = nitro::type_display_name(c.gate) + "/" + nitro::type_display_name(c.up) + "/" +
                             nitro::type_display_name(c.down) + " E " + std::to_string(c.E) + " F " + std::to_string(c.F);
    const ExpertTensor gate = make_experts("gate", c.gate, c.E, c.F, c.X, 1);
    const ExpertTensor up = make_experts("up", c.up, c.E, c.F, c.X, 2);
    const ExpertTensor down = make_experts("down", c.down, c.F, c.E, c.X, 3);
    const std::vector<float> gb = randn(static_cast<size_t>(c.F * c.X), 4, 0.1f), ub = randn(gb.size(), 5, 0.1f);
    const std::vector<float> db = randn(static_cast<size_t>(c.E * c.X), 6, 0.1f);
    ExpertWeights ex{&gate.info, &up.info, &down.info, nullptr, nullptr, nullptr, nitro::FfnAct::Swiglu};
    if (c.biases) ex = {&gate.info, &up.info, &down.info, gb.data(), ub.data(), db.data(), nitro::FfnAct::SwigluOai};
    ThreadPool p1(1), p2(2), p3(3), p8(8);
    ThreadPool* pools[] = {&p1, &p2, &p3, &p8};
    std::mt19937 rng(7);
    for (int64_t n : {1, 3, 17}) {
        const std::vector<float> h = randn(static_cast<size_t>(n * c.E), 8 + static_cast<uint32_t>(n));
        std::vector<int32_t> ids(static_cast<size_t>(n * c.K));
        std::vector<float> w(ids.size());
        for (int64_t i = 0; i < n; ++i) {
            std::vector<int32_t> perm(static_cast<size_t>(c.X));
            for (int64_t x = 0; x < c.X; ++x) perm[static_cast<size_t>(x)] = static_cast<int32_t>(x);
            std::shuffle(perm.begin(), perm.end(), rng);
            for (int j = 0; j < c.K; ++j) {
                ids[static_cast<size_t>(i * c.K + j)] = perm[static_cast<size_t>(j)];
                w[static_cast<size_t>(i * c.K + j)] = 1.f / static_cast<float>(j + 2);
            }
        }
        std::vector<uint8_t> skip_some(static_cast<size_t>(c.X), 0), skip_all(static_cast<size_t>(c.X), 1);
        for (int64_t x = 0; x < c.X; x += 3) skip_some[static_cast<size_t>(x)] = 1;
        // all but one expert skipped: tokens that did not choose it have no computed pair (their
        // inputs are not quantized, their output rows are zeros)
        std::vector<uint8_t> skip_most(static_cast<size_t>(c.X), 1);
        skip_most[static_cast<size_t>(ids[0])] = 0;
        for (const uint8_t* skip : {static_cast<const uint8_t*>(nullptr), static_cast<const uint8_t*>(skip_some.data()),
                                    static_cast<const uint8_t*>(skip_all.data()), static_cast<const uint8_t*>(skip_most.data())}) {
            const std::vector<float> want = reference(p1, ex, h, n, c.K, ids, w, skip);
            for (ThreadPool* p : pools) {
                MoeScratch s;
                std::vector<float> got(want.size(), -1.f);
                for (int rep = 0; rep < 2; ++rep) {  // the scratch is reused
                    std::fill(got.begin(), got.end(), -1.f);
                    const MoeStats st = moe_ffn(*p, ex, h.data(), n, c.K, ids.data(), w.data(), skip, got.data(), s);
                    const std::string where = what + ", " + std::to_string(n) + " tokens, " + std::to_string(p->size()) +
                                              " threads, skip " + (skip == nullptr ? "none" : skip == skip_all.data() ? "all" : "some");
                    ASSERT_EQ(std::memcmp(got.data(), want.data(), 4 * want.size()), 0) << where;
                    if (skip == skip_all.data()) {
                        EXPECT_EQ(st.rows, 0) << where;
                    }
                    if (!skip) {
                        EXPECT_EQ(st.rows, n * c.K) << where;
                    }
                }
            }
        }
    }
}

TEST(CpuMoe, OneRegionStepEqualsTheReferenceForAnyThreadsAndSkipMask) {
    // gpt-oss-like: MXFP4 everywhere, biases, clamped SwiGLU; F not a multiple of 256 (a partial
    // quantization group) and E not a multiple of 16 columns... E must be a multiple of 32.
    check_case({GgmlType::MXFP4, GgmlType::MXFP4, GgmlType::MXFP4, 352, 288, 9, 4, true});
    // Qwen-like K-quant mix, up of another type than gate (two activation buffers).
    check_case({GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, 512, 768, 10, 8, false});
    check_case({GgmlType::Q8_0, GgmlType::Q8_0, GgmlType::IQ4_XS, 256, 256, 6, 2, false});
}

TEST(CpuMoe, TheModelsExpertShapesWithMultiTokenTilesEqualTheReference) {
    // The experts of gpt-oss-20b (n_embd = n_ff_exp = 2880, MXFP4, biases), qwen3moe (2048 -> 768,
    // Q4_K / Q6_K down) and qwen3next (2048 -> 512, Q8_0), two of each: every token chooses both,
    // so each expert runs tiles of n tokens (16: one full tile; 7 odd; 1), against the step written
    // out one (token, expert) at a time, bit for bit, on 1 and 3 threads.
    struct Shape {
        GgmlType gate, up, down;
        int64_t E, F;
        bool biases;
    };
    for (const Shape& sh : {Shape{GgmlType::MXFP4, GgmlType::MXFP4, GgmlType::MXFP4, 2880, 2880, true},
                            Shape{GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q6_K, 2048, 768, false},
                            Shape{GgmlType::Q8_0, GgmlType::Q8_0, GgmlType::Q8_0, 2048, 512, false}}) {
        constexpr int64_t X = 2;
        constexpr int K = 2;
        const ExpertTensor gate = make_experts("gate", sh.gate, sh.E, sh.F, X, 11);
        const ExpertTensor up = make_experts("up", sh.up, sh.E, sh.F, X, 12);
        const ExpertTensor down = make_experts("down", sh.down, sh.F, sh.E, X, 13);
        const std::vector<float> gb = randn(static_cast<size_t>(sh.F * X), 14, 0.1f), ub = randn(gb.size(), 15, 0.1f);
        const std::vector<float> db = randn(static_cast<size_t>(sh.E * X), 16, 0.1f);
        ExpertWeights ex{&gate.info, &up.info, &down.info, nullptr, nullptr, nullptr, nitro::FfnAct::Swiglu};
        if (sh.biases) ex = {&gate.info, &up.info, &down.info, gb.data(), ub.data(), db.data(), nitro::FfnAct::SwigluOai};
        ThreadPool p1(1), p3(3);
        for (int64_t n : {16, 7, 1}) {
            const std::vector<float> h = randn(static_cast<size_t>(n * sh.E), 20 + static_cast<uint32_t>(n));
            std::vector<int32_t> ids(static_cast<size_t>(n * K));
            std::vector<float> w(ids.size());
            for (int64_t i = 0; i < n; ++i)
                for (int j = 0; j < K; ++j) {
                    ids[static_cast<size_t>(i * K + j)] = static_cast<int32_t>((i + j) % X);  // both, rotated
                    w[static_cast<size_t>(i * K + j)] = 0.1f * static_cast<float>(j + 1);
                }
            const std::vector<float> want = reference(p1, ex, h, n, K, ids, w, nullptr);
            for (ThreadPool* p : {&p1, &p3}) {
                MoeScratch s;
                std::vector<float> got(want.size(), -1.f);
                const MoeStats st = moe_ffn(*p, ex, h.data(), n, K, ids.data(), w.data(), nullptr, got.data(), s);
                EXPECT_EQ(st.rows, n * K);
                ASSERT_EQ(std::memcmp(got.data(), want.data(), 4 * want.size()), 0)
                    << nitro::type_display_name(sh.gate) << " E " << sh.E << " F " << sh.F << ", " << n << " tokens, "
                    << p->size() << " threads";
            }
        }
    }
}

TEST(CpuMoe, BadExpertIdIsAnError) {
    const ExpertTensor gate = make_experts("gate", GgmlType::Q8_0, 64, 32, 2, 1);
    const ExpertTensor down = make_experts("down", GgmlType::Q8_0, 32, 64, 2, 3);
    ExpertWeights ex{&gate.info, &gate.info, &down.info, nullptr, nullptr, nullptr, nitro::FfnAct::Swiglu};
    ThreadPool pool(2);
    MoeScratch s;
    std::vector<float> h(64, 0.5f), out(64);
    const int32_t ids[1] = {2};
    const float w[1] = {1.f};
    EXPECT_THROW(moe_ffn(pool, ex, h.data(), 1, 1, ids, w, nullptr, out.data(), s), nitro::Error);
}

}  // namespace
