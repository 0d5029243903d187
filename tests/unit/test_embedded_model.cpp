// The embedded model (models/tiny-moe-pystd.gguf) against transformers, the reference gpt-oss
// implementation. tests/golden/embedded_model.json was recorded on the device by
// tools/train/eval.py: transformers' GptOssForCausalLM in float32 on the GGUF's own dequantized
// weights, so nitro must reproduce it up to float rounding and its activation handling:
//  - teacher-forced: at every position of prompt + greedy continuation, nitro's top-1 equals the
//    reference's wherever the reference's top-1/top-2 logit margin is above the near-tie
//    threshold, and nitro's probability of that token is close to the reference's;
//  - free-running greedy decoding gives the reference's tokens until nitro takes the other branch
//    of a near-tie.
// This also checks the converter end to end (names, gate/up split, transposes, metadata).
#include "core/error.h"
#include "runtime/generate.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

using json = nlohmann::json;

namespace {

constexpr double kNearTie = 0.5;  // logits (nats): below this margin the top-1 may flip
// Probability bounds, from llama.cpp itself on this file (node-llama-cpp 3.21.1, teacher-forced,
// MEASURED over the same 286 decisive positions of the model retrained on 2026-12-03):
// llama.cpp's top-1 equals transformers' at all 286 and its probability differs by at most 0.143
// (99th percentile 0.071, median 0.0025; 10 positions above 0.03), because both engines round
// activations to 8 bits before quantized products and this trained model has large activation
// outliers. nitro uses the same numerics (max 0.144, 12 above 0.03, when measured; the first
// model of 2026-12-01: llama.cpp 0.117, nitro 0.109 over 309). Bounds: every position within
// 0.15, and at most 10% of positions off by more than 0.03.
constexpr double kProbTol = 0.15;
constexpr double kProbTolTypical = 0.03;
constexpr double kMaxShareAboveTypical = 0.10;

const std::string kModel = std::string(NITRO_SOURCE_DIR) + "/models/tiny-moe-pystd.gguf";

json golden() {
    std::ifstream f(std::string(NITRO_SOURCE_DIR) + "/tests/golden/embedded_model.json");
    EXPECT_TRUE(f.good());
    return json::parse(f);
}

double margin(const json& row) { return row["logits"][0].get<double>() - row["logits"][1].get<double>(); }

}  // namespace

TEST(EmbeddedModel, TeacherForcedMatchesTransformers) {
    const json g = golden();
    ASSERT_GE(g["cases"].size(), 5u);
    int checked = 0, above_typical = 0;
    double max_dp = 0;
    for (const auto& c : g["cases"]) {
        SCOPED_TRACE(c["prompt"].get<std::string>());
        std::vector<int32_t> ids = c["prompt_ids"].get<std::vector<int32_t>>();
        for (int32_t t : c["greedy_ids"].get<std::vector<int32_t>>()) ids.push_back(t);
        nitro::GenerateOptions o;
        o.model = kModel;
        o.prompt_ids.assign(ids.begin(), ids.end() - 1);
        o.n_predict = 1;
        o.ignore_eos = true;
        o.n_probs = 5;
        o.echo = true;
        o.sampling.temperature = 0;
        o.session.n_ctx = 1024;
        const nitro::GenerateResult r = nitro::generate(o, nullptr);
        std::vector<std::vector<nitro::TokenProb>> rows = r.prompt_probs;
        rows.insert(rows.end(), r.probs.begin(), r.probs.end());
        ASSERT_EQ(rows.size(), ids.size());
        const auto& top5 = c["top5"];
        for (size_t pos = 0; pos + 1 < ids.size(); ++pos) {
            const json& ref = top5[pos];
            if (margin(ref) < kNearTie) continue;
            ++checked;
            ASSERT_EQ(rows[pos][0].id, ref["ids"][0].get<int32_t>()) << "position " << pos << ", margin " << margin(ref);
            const double dp = std::abs(rows[pos][0].p - std::exp(ref["logprobs"][0].get<double>()));
            max_dp = std::max(max_dp, dp);
            above_typical += dp > kProbTolTypical;
            EXPECT_LE(dp, kProbTol) << "position " << pos;
        }
    }
    EXPECT_GT(checked, 200);  // most positions are decisive (286 of 405 when recorded)
    std::printf("embedded model vs transformers: %d decisive positions, max |dp| %.4f, %d above %.2f\n", checked, max_dp,
                above_typical, kProbTolTypical);
    EXPECT_LE(above_typical, kMaxShareAboveTypical * checked);
}

TEST(EmbeddedModel, GreedyMatchesTransformersUntilANearTie) {
    const json g = golden();
    for (const auto& c : g["cases"]) {
        SCOPED_TRACE(c["prompt"].get<std::string>());
        const auto want = c["greedy_ids"].get<std::vector<int32_t>>();
        const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
        nitro::GenerateOptions o;
        o.model = kModel;
        o.prompt_ids = prompt;
        o.n_predict = static_cast<int64_t>(want.size());
        o.ignore_eos = true;
        o.sampling.temperature = 0;
        o.session.n_ctx = 1024;
        const nitro::GenerateResult r = nitro::generate(o, nullptr);
        ASSERT_EQ(r.ids.size(), want.size());
        // nitro follows the reference until it takes the other branch of a near-tie (then the
        // contexts differ and nothing more is compared); leaving it at a decisive step fails.
        for (size_t i = 0; i < want.size(); ++i) {
            if (r.ids[i] == want[i]) continue;
            EXPECT_LT(margin(c["top5"][prompt.size() - 1 + i]), kNearTie) << "step " << i << ": " << r.ids[i] << " instead of " << want[i];
            break;
        }
    }
}
