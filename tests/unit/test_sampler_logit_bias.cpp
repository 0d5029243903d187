// logit_bias in the sampler (issue 50: the server accepted it and ignored it): the bias is added
// to the logit before every other step, greedy or sampled, under a grammar mask too, against
// hand-computed choices and probabilities.
#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <cmath>

namespace nitro {
namespace {

TEST(SamplerLogitBias, GreedyFollowsTheBiasedLogits) {
    const std::vector<float> logits = {1.0f, 2.0f, 3.0f, 0.0f};
    SamplerParams p;  // temperature 0: greedy
    EXPECT_EQ(Sampler(p).sample(logits), 2);
    p.logit_bias = {{0, 5.0f}};  // 6 > 3
    EXPECT_EQ(Sampler(p).sample(logits), 0);
    p.logit_bias = {{2, -100.0f}};  // banned: the next best
    EXPECT_EQ(Sampler(p).sample(logits), 1);
    p.logit_bias = {{2, -1.5f}, {3, 2.0f}};  // 1.5 vs 2: token 1
    EXPECT_EQ(Sampler(p).sample(logits), 1);
    p.logit_bias = {{99, 100.0f}};  // outside the vocabulary: nothing changes
    EXPECT_EQ(Sampler(p).sample(logits), 2);
    // Under a grammar mask (tokens 0 and 2 allowed): a bias cannot pick a masked token.
    const std::vector<uint64_t> allowed = {0b0101};
    p.logit_bias = {{1, 100.0f}};
    EXPECT_EQ(Sampler(p).sample(logits, &allowed), 2);
    p.logit_bias = {{2, -100.0f}};
    EXPECT_EQ(Sampler(p).sample(logits, &allowed), 0);
}

TEST(SamplerLogitBias, SampledProbabilitiesAreThoseOfTheBiasedLogits) {
    // Logits [0, 0] with ln(3) added to token 1, temperature 1: P(1) = 3 / (1 + 3) = 0.75.
    const std::vector<float> logits = {0.0f, 0.0f};
    SamplerParams p;
    p.temperature = 1.0f;
    p.top_k = 0;
    p.seed = 7;
    p.logit_bias = {{1, static_cast<float>(std::log(3.0))}};
    Sampler s(p);
    int ones = 0;
    const int n = 20000;
    for (int i = 0; i < n; ++i) ones += s.sample(logits) == 1;
    EXPECT_NEAR(static_cast<double>(ones) / n, 0.75, 0.015);  // ~5 standard deviations
    // -100 is a ban in practice (e^-100), +100 a forced choice.
    p.logit_bias = {{0, -100.0f}};
    Sampler banned(p);
    for (int i = 0; i < 2000; ++i) ASSERT_EQ(banned.sample(logits), 1);
    p.logit_bias = {{0, 100.0f}};
    Sampler forced(p);
    for (int i = 0; i < 2000; ++i) ASSERT_EQ(forced.sample(logits), 0);
}

}  // namespace
}  // namespace nitro
