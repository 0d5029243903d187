// Gated DeltaNet kernels (src/cpu/delta_net.h) against hand computations and a float64 recurrence
// written straight from the definition (Yang et al. 2024, "Gated Delta Networks", eq. for S_t;
// ggml_gated_delta_net's loop): S = exp(g) S; S += k (beta (v - S^T k))^T; o = S^T q / sqrt(d).
#include "cpu/delta_net.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace nitro::cpu {
namespace {

TEST(DeltaNet, ElementwiseFunctionsAreGgmls) {
    EXPECT_FLOAT_EQ(softplus(0.0f), std::log(2.0f));
    EXPECT_FLOAT_EQ(softplus(25.0f), 25.0f);  // ggml: x itself above 20
    EXPECT_FLOAT_EQ(sigmoid(0.0f), 0.5f);
    EXPECT_FLOAT_EQ(silu(2.0f), 2.0f / (1.0f + std::exp(-2.0f)));
    float v[2] = {3.0f, 4.0f};
    l2_norm(v, 2, 1e-6f);
    EXPECT_FLOAT_EQ(v[0], 0.6f);
    EXPECT_FLOAT_EQ(v[1], 0.8f);
    float z[3] = {0.0f, 0.0f, 0.0f};
    l2_norm(z, 3, 1e-6f);  // 1 / max(0, eps): stays zero, no NaN
    EXPECT_EQ(z[0], 0.0f);
}

TEST(DeltaNet, ConvWithStateByHand) {
    // One channel, d_conv 4: state (oldest first) 1, 2, 3; inputs 4, 5; kernel 0.5, -1, 2, 0.25.
    // Rows 0 and 2 of a 3-row chunk belong to the sequence (row 1 is another sequence's).
    const float w[4] = {0.5f, -1.0f, 2.0f, 0.25f};
    float state[3] = {1, 2, 3};
    const float x[3] = {4, 99, 5};
    const int64_t rows[2] = {0, 2};
    float out[3] = {0, -7, 0};
    ConvArgs a;
    a.x = x;
    a.x_stride = 1;
    a.rows = rows;
    a.n = 2;
    a.w = w;
    a.d_conv = 4;
    a.state = state;
    a.out = out;
    a.out_stride = 1;
    ssm_conv_silu(a, 0, 1);
    EXPECT_FLOAT_EQ(out[0], silu(1 * 0.5f - 2 + 3 * 2 + 4 * 0.25f));  // 5.5
    EXPECT_FLOAT_EQ(out[2], silu(2 * 0.5f - 3 + 4 * 2 + 5 * 0.25f));  // 7.25
    EXPECT_EQ(out[1], -7.0f);                                        // other rows untouched
    EXPECT_EQ(state[0], 3.0f);
    EXPECT_EQ(state[1], 4.0f);
    EXPECT_EQ(state[2], 5.0f);
}

/// The recurrence from the definition, float64, with S[i][j] indexed (key i, value j).
void reference(int64_t n, int64_t d, const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
               const std::vector<float>& g, const std::vector<float>& beta, std::vector<double>& S, std::vector<double>& out) {
    out.assign(static_cast<size_t>(n * d), 0.0);
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    for (int64_t t = 0; t < n; ++t) {
        const double e = std::exp(static_cast<double>(g[t]));
        for (auto& s : S) s *= e;
        std::vector<double> delta(static_cast<size_t>(d));
        for (int64_t j = 0; j < d; ++j) {
            double pred = 0;
            for (int64_t i = 0; i < d; ++i) pred += S[i * d + j] * k[t * d + i];
            delta[j] = beta[t] * (v[t * d + j] - pred);
        }
        for (int64_t i = 0; i < d; ++i)
            for (int64_t j = 0; j < d; ++j) S[i * d + j] += k[t * d + i] * delta[j];
        for (int64_t j = 0; j < d; ++j) {
            double o = 0;
            for (int64_t i = 0; i < d; ++i) o += S[i * d + j] * q[t * d + i];
            out[t * d + j] = o * scale;
        }
    }
}

struct Case {
    int64_t n, d;
    std::vector<float> q, k, v, g, beta, M0;  // q, k l2-normalised; M0 the initial state (transposed layout)
};

Case make_case(int64_t n, int64_t d, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> N(0.0f, 1.0f);
    std::uniform_real_distribution<float> U(0.0f, 1.0f);
    Case c;
    c.n = n;
    c.d = d;
    for (auto* x : {&c.q, &c.k, &c.v}) {
        x->resize(static_cast<size_t>(n * d));
        for (auto& e : *x) e = N(rng);
    }
    for (int64_t t = 0; t < n; ++t) {
        l2_norm(&c.q[t * d], d, 1e-6f);
        l2_norm(&c.k[t * d], d, 1e-6f);
        // Decays from 0.45 to 0.995 per step (the synth and fixture range), beta in (0, 1).
        c.g.push_back(-softplus(N(rng) - 3.0f) * (1.0f + 7.0f * U(rng)));
        c.beta.push_back(sigmoid(N(rng)));
    }
    c.M0.resize(static_cast<size_t>(d * d));
    for (auto& e : c.M0) e = 0.3f * N(rng);
    return c;
}

/// Runs `fn` over a case laid out in a 2-sequence chunk (the case's rows are the odd rows) and
/// returns its output and final state; checks both against the float64 recurrence.
template <class F>
void check_against_reference(const Case& c, F fn, double tol) {
    const int64_t n = c.n, d = c.d;
    // Interleave: row 2t + 1 holds token t (row 2t is another sequence's and must stay untouched).
    std::vector<float> q(static_cast<size_t>(2 * n * d), 7.0f), k = q, v = q, g(static_cast<size_t>(2 * n), 7.0f), b = g;
    std::vector<int64_t> rows;
    for (int64_t t = 0; t < n; ++t) {
        const int64_t r = 2 * t + 1;
        rows.push_back(r);
        std::copy(&c.q[t * d], &c.q[t * d] + d, &q[r * d]);
        std::copy(&c.k[t * d], &c.k[t * d] + d, &k[r * d]);
        std::copy(&c.v[t * d], &c.v[t * d] + d, &v[r * d]);
        g[r] = c.g[t];
        b[r] = c.beta[t];
    }
    std::vector<float> M = c.M0, out(static_cast<size_t>(2 * n * d), -3.0f);
    DeltaHeadArgs a;
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.q_stride = a.k_stride = a.v_stride = d;
    a.g = g.data();
    a.beta = b.data();
    a.gb_stride = 1;
    a.rows = rows.data();
    a.n = n;
    a.d = d;
    a.M = M.data();
    a.out = out.data();
    a.out_stride = d;
    fn(a);

    std::vector<double> S(static_cast<size_t>(d * d)), ref;
    for (int64_t i = 0; i < d; ++i)
        for (int64_t j = 0; j < d; ++j) S[i * d + j] = c.M0[j * d + i];
    reference(n, d, c.q, c.k, c.v, c.g, c.beta, S, ref);
    double worst = 0;
    for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < d; ++j) worst = std::max(worst, std::abs(out[(2 * t + 1) * d + j] - ref[t * d + j]));
    EXPECT_LT(worst, tol) << "output";
    for (int64_t t = 0; t < n; ++t) EXPECT_EQ(out[2 * t * d], -3.0f) << "row of another sequence written";
    double worst_s = 0;
    for (int64_t i = 0; i < d; ++i)
        for (int64_t j = 0; j < d; ++j) worst_s = std::max(worst_s, std::abs(M[j * d + i] - S[i * d + j]));
    EXPECT_LT(worst_s, tol) << "final state";
}

TEST(DeltaNet, StepsEqualTheDefinition) {
    const Case c = make_case(40, 32, 1);
    check_against_reference(c, [](const DeltaHeadArgs& a) { gated_delta_rule_steps(a); }, 2e-5);
}

TEST(DeltaNet, ChunkedEqualsTheDefinitionForAnyChunkSize) {
    // 150 tokens: two full chunks of 64 and a partial one; also odd chunk sizes and 1 (pure recurrence).
    const Case c = make_case(150, 64, 2);
    for (int64_t chunk : {64, 7, 1, 200}) {
        SCOPED_TRACE(chunk);
        DeltaScratch s;
        check_against_reference(c, [&](const DeltaHeadArgs& a) { gated_delta_rule_chunked(a, s, chunk); }, 5e-5);
    }
}

TEST(DeltaNet, ChunkedContinuesFromSteps) {
    // A prompt in two parts (chunked, then steps, then chunked) equals one pass over all tokens.
    const Case c = make_case(90, 32, 3);
    DeltaScratch s;
    check_against_reference(
        c,
        [&](const DeltaHeadArgs& a) {
            DeltaHeadArgs p = a;
            p.n = 50;
            gated_delta_rule_chunked(p, s);
            p.rows = a.rows + 50;
            p.n = 3;
            gated_delta_rule_steps(p);
            p.rows = a.rows + 53;
            p.n = 37;
            gated_delta_rule_chunked(p, s);
        },
        5e-5);
}

}  // namespace
}  // namespace nitro::cpu
