// cpu::route (the router op of every architecture, ops/moe.h RouteArgs) against hand computations:
// the four gatings of llama.cpp's build_moe_ffn that the architectures use. cuda::route is tested
// against this op in tests/cuda/test_ops.cpp (RouterMatchesCpuRoute).
#include "cpu/moe.h"
#include "ops/moe.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

using namespace nitro;

namespace {

struct Routed {
    std::vector<int32_t> ids;
    std::vector<float> w;
    float margin = 0;
};

Routed route_one(std::vector<float> logits, const GatingSpec& g, int k, const std::vector<float>& logit_bias = {},
                 const std::vector<float>& score_bias = {}) {
    Routed r;
    r.ids.assign(static_cast<size_t>(k), -1);
    r.w.assign(static_cast<size_t>(k), 0.f);
    RouteArgs a;
    a.logits = logits.data();
    a.logit_bias = logit_bias.empty() ? nullptr : logit_bias.data();
    a.score_bias = score_bias.empty() ? nullptr : score_bias.data();
    a.n = 1;
    a.n_expert = static_cast<int64_t>(logits.size());
    a.k = k;
    a.gating = g;
    a.ids = r.ids.data();
    a.weights = r.w.data();
    a.margin = &r.margin;
    cpu::route(a);
    return r;
}

float logit_of(double p) { return static_cast<float>(std::log(p / (1.0 - p))); }

GatingSpec sigmoid_biased(float scale) {
    GatingSpec g;
    g.score = GatingSpec::Score::Sigmoid;
    g.score_bias = true;
    g.norm_weights = true;
    g.weights_scale = scale;
    return g;
}

}  // namespace

TEST(Router, SoftmaxOverAllRenormalisedQwen3) {
    // probabilities 0.1 0.2 0.3 0.4: the best two are 3 and 2, weights 4/7 and 3/7, and the margin is
    // log(0.3 / 0.2) in nats.
    const Routed r = route_one({0.f, std::log(2.f), std::log(3.f), std::log(4.f)}, GatingSpec::softmax_all_normalized(), 2);
    EXPECT_EQ(r.ids, (std::vector<int32_t>{3, 2}));
    EXPECT_NEAR(r.w[0], 4.0 / 7.0, 1e-6);
    EXPECT_NEAR(r.w[1], 3.0 / 7.0, 1e-6);
    EXPECT_NEAR(r.margin, std::log(1.5), 1e-5);
}

TEST(Router, SoftmaxOverTheSelectedLogitsGptOss) {
    // logits 1 2 0 0.5 plus the router bias 0 -1.5 0 0: 1 0.5 0 0.5; the tie of 1 and 3 goes to 1.
    const Routed r = route_one({1.f, 2.f, 0.f, 0.5f}, GatingSpec::softmax_selected(), 2, {0.f, -1.5f, 0.f, 0.f});
    EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 1}));
    const double e = std::exp(0.5);
    EXPECT_NEAR(r.w[0], e / (e + 1.0), 1e-6);
    EXPECT_NEAR(r.w[1], 1.0 / (e + 1.0), 1e-6);
    EXPECT_EQ(r.margin, 0.f);
}

TEST(Router, SigmoidScoreBiasChoosesButDoesNotWeighGlm) {
    // scores 0.5 0.75 0.25 0.9; + the bias 0.5 0 0.7 -0.3 = 1.0 0.75 0.95 0.6: experts 0 and 2 are
    // chosen (without the bias they would be 3 and 1), weighted by their unbiased scores 0.5 and
    // 0.25, normalised (2/3, 1/3) and scaled by 2.5; the margin is 0.95 - 0.75 in score units.
    const Routed r = route_one({logit_of(0.5), logit_of(0.75), logit_of(0.25), logit_of(0.9)}, sigmoid_biased(2.5f), 2, {},
                               {0.5f, 0.f, 0.7f, -0.3f});
    EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 2}));
    EXPECT_NEAR(r.w[0], 2.5 * 2.0 / 3.0, 1e-5);
    EXPECT_NEAR(r.w[1], 2.5 * 1.0 / 3.0, 1e-5);
    EXPECT_NEAR(r.margin, 0.2, 1e-5);
    // Without normalisation the weights are the scores themselves, times the scale.
    GatingSpec raw = sigmoid_biased(2.0f);
    raw.norm_weights = false;
    const Routed u = route_one({logit_of(0.5), logit_of(0.75), logit_of(0.25), logit_of(0.9)}, raw, 2, {}, {0.5f, 0.f, 0.7f, -0.3f});
    EXPECT_NEAR(u.w[0], 1.0, 1e-5);
    EXPECT_NEAR(u.w[1], 0.5, 1e-5);
}

TEST(Router, GroupLimitedSelectionDeepSeekV3) {
    // 8 experts in 4 groups of 2, 2 groups kept. Scores by group: (0.9 0.1) sums 1.0, (0.6 0.6)
    // 1.2, (0.55 0.5) 1.05, (0.2 0.3) 0.5: groups 1 and 2 are kept, so the best expert (0, 0.9) is
    // not chosen; the tie of 2 and 3 goes to 2; the margin is against expert 4 of a kept group.
    GatingSpec g = sigmoid_biased(1.0f);
    g.n_group = 4;
    g.topk_group = 2;
    std::vector<float> lg;
    for (double p : {0.9, 0.1, 0.6, 0.6, 0.55, 0.5, 0.2, 0.3}) lg.push_back(logit_of(p));
    const Routed r = route_one(lg, g, 2, {}, std::vector<float>(8, 0.f));
    EXPECT_EQ(r.ids, (std::vector<int32_t>{2, 3}));
    EXPECT_NEAR(r.w[0], 0.5, 1e-6);
    EXPECT_NEAR(r.w[1], 0.5, 1e-6);
    EXPECT_NEAR(r.margin, 0.05, 1e-5);
    // The score bias takes part in the group scores: +0.7 on expert 7 makes group 3 score
    // 1.0 + 0.2 = 1.2, so groups 1 and 3 (1.2 each) are kept and group 2 (1.05) is not.
    std::vector<float> sb(8, 0.f);
    sb[7] = 0.7f;
    const Routed b = route_one(lg, g, 2, {}, sb);
    EXPECT_EQ(b.ids, (std::vector<int32_t>{7, 2}));  // biased 1.0, then 0.6 (2 before 3)
    EXPECT_NEAR(b.w[0], 0.3 / 0.9, 1e-5);            // unbiased 0.3 and 0.6, normalised
    EXPECT_NEAR(b.w[1], 0.6 / 0.9, 1e-5);
}

TEST(Router, TinyWeightSumsAreClampedAsLlamaCpp) {
    // sigmoid(-20) = 2.06e-9 each: their sum is below llama.cpp's clamp of 6.103515625e-5, so each
    // weight is sigmoid(-20) / 6.103515625e-5, not 1/2.
    GatingSpec g = sigmoid_biased(1.0f);
    g.score_bias = false;
    const Routed r = route_one({-20.f, -20.f, -30.f, -30.f}, g, 2);
    const double s = 1.0 / (1.0 + std::exp(20.0));
    EXPECT_NEAR(r.w[0], s / 6.103515625e-5, 1e-9);
    EXPECT_NEAR(r.w[1], s / 6.103515625e-5, 1e-9);
}

TEST(Router, GatingsTheKernelsCannotRunAreNamed) {
    GatingSpec g = sigmoid_biased(1.0f);
    g.n_group = 3;
    g.topk_group = 1;
    EXPECT_NE(gating_problem(g, 8, 2).find("divide"), std::string::npos);
    g.n_group = 8;
    EXPECT_NE(gating_problem(g, 8, 2).find("at least 2 experts"), std::string::npos);
    g.n_group = 4;
    g.topk_group = 1;
    EXPECT_NE(gating_problem(g, 8, 4).find("fewer experts"), std::string::npos);
    g.topk_group = 5;
    EXPECT_NE(gating_problem(g, 8, 2).find("expert_group_used_count"), std::string::npos);
    GatingSpec s = GatingSpec::softmax_selected();
    s.score = GatingSpec::Score::Sigmoid;
    EXPECT_FALSE(gating_problem(s, 8, 2).empty());
    EXPECT_TRUE(gating_problem(GatingSpec::softmax_all_normalized(), 128, 8).empty());
    GatingSpec v3 = sigmoid_biased(2.5f);
    v3.n_group = 8;
    v3.topk_group = 4;
    EXPECT_TRUE(gating_problem(v3, 256, 8).empty());
}
