// `nitro inspect` on the shared fixtures: figures checked against hand computation from the
// fixture README (shapes and types) and ggml's block sizes.
#include "arch/summary.h"
#include "gguf/gguf.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cstring>
#include <cstdio>
#include <memory>

using namespace nitro;

namespace {

std::string fixture(const std::string& name) { return std::string(NITRO_SHARED_DIR) + "/fixtures/" + name; }

/// Runs the nitro binary and returns stdout; `rc` gets the exit status.
std::string run_nitro(const std::string& args, int* rc = nullptr) {
    std::string cmd = std::string(NITRO_BINARY) + " " + args + " 2>&1";
    std::unique_ptr<FILE, int (*)(FILE*)> p(::popen(cmd.c_str(), "r"), ::pclose);
    std::string out;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), p.get())) > 0) out.append(buf.data(), n);
    int status = ::pclose(p.release());
    if (rc) *rc = WEXITSTATUS(status);
    return out;
}

}  // namespace

TEST(Inspect, GptOssFixtureSummary) {
    GgufModel m(fixture("tiny-gptoss-mxfp4.gguf"));
    ModelSummary s = summarize_model(m);
    EXPECT_EQ(s.hp.arch, "gpt-oss");
    EXPECT_EQ(s.hp.n_layer, 4);
    EXPECT_EQ(s.hp.n_embd, 32);
    EXPECT_EQ(s.hp.n_head, 4);
    EXPECT_EQ(s.hp.n_head_kv, 2);
    EXPECT_EQ(s.hp.head_dim, 32);
    EXPECT_EQ(s.hp.n_expert, 16);
    EXPECT_EQ(s.hp.n_expert_used, 4);
    EXPECT_EQ(s.hp.n_ff_exp, 64);
    EXPECT_EQ(s.hp.sliding_window, 16);
    EXPECT_EQ(s.hp.n_ctx_train, 131072);
    EXPECT_EQ(s.hp.rope_freq_base, 150000.0);
    EXPECT_EQ(s.hp.rope_scaling, "yarn");
    EXPECT_EQ(s.hp.rope_scaling_factor, 32.0);
    EXPECT_EQ(s.hp.rope_orig_ctx, 4096);
    EXPECT_EQ(s.tokenizer_pre, "gpt-4o");
    EXPECT_EQ(s.vocab_size, 201088);
    EXPECT_EQ(s.n_merges, 446189);
    // One expert of one layer, by hand: gate and up are MXFP4 [32 -> 64]: 64 rows x 1 block x 17 B
    // = 1088 B each; down [64 -> 32]: 32 rows x 2 blocks x 17 B = 1088 B: 3264 B of weights (one
    // expert as placement counts it); biases F32: 64 + 64 + 32 floats = 640 B. Total 3904 B.
    EXPECT_EQ(s.bytes_per_expert, 3264u);
    EXPECT_EQ(s.bias_bytes_per_expert, 640u);
    EXPECT_EQ(s.bytes_by_category[TensorCategory::RoutedExpert], 4u * 16 * 3904);
    // token_embd and output are Q4_0 [32, 201088]: 201088 rows x 18 B; output_norm 32 floats.
    EXPECT_EQ(s.bytes_by_category[TensorCategory::Embedding], 201088u * 18);
    EXPECT_EQ(s.bytes_by_category[TensorCategory::Output], 201088u * 18 + 32 * 4);
    // attn_norm and post_attention_norm (the FFN's norm) of 4 layers: 32 floats each.
    EXPECT_EQ(s.bytes_by_category[TensorCategory::Norm], 4u * 2 * 32 * 4);
    EXPECT_EQ(s.bytes_by_category[TensorCategory::SharedExpert], 0u);
    EXPECT_EQ(s.bytes_by_category[TensorCategory::DenseFfn], 0u);
    EXPECT_EQ(s.types[GgmlType::MXFP4].n_tensors, 12);
}

TEST(Inspect, Qwen3FixtureSummary) {
    GgufModel m(fixture("tiny-qwen3moe-q8.gguf"));
    ModelSummary s = summarize_model(m);
    EXPECT_EQ(s.hp.arch, "qwen3moe");
    EXPECT_EQ(s.hp.n_expert, 16);
    EXPECT_EQ(s.hp.n_ff_exp, 64);
    EXPECT_EQ(s.hp.rms_eps, static_cast<double>(1e-6f));
    EXPECT_EQ(s.tokenizer_pre, "qwen2");
    EXPECT_EQ(s.vocab_size, 151936);
    // Q8_0 experts: gate/up 64 rows x 1 block x 34 B, down 32 rows x 2 blocks x 34 B; no biases.
    EXPECT_EQ(s.bytes_per_expert, 3u * 2176);
    EXPECT_EQ(s.bias_bytes_per_expert, 0u);
    EXPECT_EQ(m.find("output.weight"), nullptr);  // tied embeddings
}

TEST(Inspect, CliTextJsonTensorsAndDump) {
    int rc = -1;
    std::string text = run_nitro("inspect " + fixture("tiny-gptoss-mxfp4.gguf"), &rc);
    EXPECT_EQ(rc, 0);
    EXPECT_NE(text.find("n_expert / used        16 / 4"), std::string::npos) << text;
    EXPECT_NE(text.find("per expert per layer"), std::string::npos);
    EXPECT_NE(text.find("(3264 bytes: gate, up and down weights, one VRAM slot)"), std::string::npos) << text;
    EXPECT_NE(text.find("640 B per expert, kept with the dense core"), std::string::npos) << text;

    auto j = nlohmann::json::parse(run_nitro("inspect --json " + fixture("tiny-qwen3moe-q8.gguf"), &rc));
    EXPECT_EQ(rc, 0);
    EXPECT_EQ(j["architecture"], "qwen3moe");
    EXPECT_EQ(j["hparams"]["n_expert_used"], 4);
    EXPECT_EQ(j["bytes_per_expert"], 6528);
    EXPECT_EQ(j["types"]["Q8_0"]["tensors"], 12);

    std::string list = run_nitro("inspect --tensors " + fixture("tiny-gptoss-mxfp4.gguf"), &rc);
    EXPECT_NE(list.find("blk.3.ffn_down_exps.weight"), std::string::npos);
    EXPECT_NE(list.find("[64, 32, 16]"), std::string::npos);

    // --dump of an F32 tensor equals the raw floats in the file.
    GgufModel m(fixture("tiny-gptoss-mxfp4.gguf"));
    const auto& t = m.get("blk.0.attn_sinks.weight");
    auto d = nlohmann::json::parse(run_nitro("inspect --dump blk.0.attn_sinks.weight " + fixture("tiny-gptoss-mxfp4.gguf")));
    EXPECT_EQ(d["name"], "blk.0.attn_sinks.weight");
    EXPECT_EQ(d["type"], "F32");
    EXPECT_EQ(d["shape"], nlohmann::json::array({4}));
    ASSERT_EQ(d["data"].size(), 4u);
    for (int i = 0; i < 4; ++i) {
        float v;
        std::memcpy(&v, t.data + 4 * i, 4);
        EXPECT_EQ(d["data"][i].get<float>(), v);
    }
}

TEST(Inspect, CliErrorsAreClean) {
    int rc = 0;
    std::string out = run_nitro("inspect /nonexistent.gguf", &rc);
    EXPECT_EQ(rc, 1);
    EXPECT_NE(out.find("error: cannot open '/nonexistent.gguf'"), std::string::npos) << out;
    out = run_nitro("inspect --dump no.such.tensor " + fixture("tiny-gptoss-mxfp4.gguf"), &rc);
    EXPECT_EQ(rc, 1);
    EXPECT_NE(out.find("has no tensor named 'no.such.tensor'"), std::string::npos) << out;
}

TEST(Inspect, NonModelFileStillSummarised) {
    GgufModel m(std::string(NITRO_SHARED_DIR) + "/golden/quant/quant-golden.gguf");
    ModelSummary s = summarize_model(m);
    EXPECT_FALSE(s.hparams_error.empty());
    EXPECT_EQ(s.n_tensors, 57);
}

TEST(Inspect, DumpEqualsGgmlDequantization) {
    // --dump of ggml-quantized tensors equals ggml's own dequantization (ref.*) value for value.
    const std::string golden = std::string(NITRO_SHARED_DIR) + "/golden/quant/quant-golden.gguf";
    for (const char* t : {"q4_K", "mxfp4", "iq4_xs", "q6_K"}) {
        auto q = nlohmann::json::parse(run_nitro(std::string("inspect --dump q.") + t + " " + golden));
        auto ref = nlohmann::json::parse(run_nitro(std::string("inspect --dump ref.") + t + " " + golden));
        EXPECT_EQ(q["shape"], nlohmann::json::array({256, 4}));
        ASSERT_EQ(q["data"].size(), 1024u) << t;
        for (size_t i = 0; i < 1024; ++i) ASSERT_EQ(q["data"][i].get<float>(), ref["data"][i].get<float>()) << t << " " << i;
    }
}

// One expert is one size everywhere: `nitro inspect` and `nitro plan` agree on it, for a model
// with expert biases (gpt-oss: the biases stay with the dense core) and one without.
TEST(Inspect, OneExpertIsTheSizeThePlanCounts) {
    const std::string embedded = std::string(NITRO_SOURCE_DIR) + "/models/tiny-moe-pystd.gguf";
    // The embedded model by hand (models/README.md): gate/up interleaved MXFP4 [256 -> 192]: 192 rows
    // x 8 blocks x 17 B = 26112 B; down [96 -> 256]: 256 rows x 3 blocks x 17 B = 13056 B.
    const std::pair<std::string, uint64_t> cases[] = {{embedded, 26112 + 13056},
                                                      {fixture("tiny-gptoss-mxfp4.gguf"), 3264},
                                                      {fixture("tiny-qwen3moe-q8.gguf"), 3 * 2176}};
    for (const auto& [file, bytes] : cases) {
        int rc = -1;
        const auto inspect = nlohmann::json::parse(run_nitro("inspect --json " + file, &rc));
        ASSERT_EQ(rc, 0) << file;
        const auto plan = nlohmann::json::parse(run_nitro("plan --json --vram-budget 4 -m " + file + " 2>/dev/null", &rc));
        ASSERT_EQ(rc, 0) << file;
        EXPECT_EQ(inspect["bytes_per_expert"].get<uint64_t>(), bytes) << file;
        EXPECT_EQ(plan["expert_bytes"].get<uint64_t>(), bytes) << file;
    }
}
