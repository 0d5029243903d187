// nitro synth: files follow the architecture's tensor table, open in the reader, carry the
// requested types, and weights have the intended scale. Hand-computed sizes.
#include "arch/arch.h"
#include "arch/summary.h"
#include "arch/synth.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf_bytes.h"
#include "core/fp16.h"
#include "quant/blocks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <filesystem>

using namespace nitro;

namespace {

double rms(const std::vector<float>& v) {
    double s = 0;
    for (float x : v) s += static_cast<double>(x) * x;
    return std::sqrt(s / static_cast<double>(v.size()));
}

}  // namespace

TEST(Synth, TinyGptOssEveryExpertType) {
    const std::string dir = test::temp_dir("synth");
    for (GgmlType t : {GgmlType::MXFP4, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                       GgmlType::IQ4_XS, GgmlType::F16, GgmlType::BF16}) {
        SCOPED_TRACE(type_display_name(t));
        SynthOptions o;
        o.arch = "gpt-oss";
        o.preset = "tiny";
        o.expert_type = t;
        o.out = dir + "/g.gguf";
        synth_model(o);
        GgufModel m(o.out);
        ModelSummary s = summarize_model(m);
        validate_model_tensors(m, s.hp, s.vocab_size);  // throws on a missing or mis-shaped tensor
        EXPECT_EQ(m.get("blk.2.ffn_up_exps.weight").type, t);
        EXPECT_EQ(m.get("blk.2.attn_q.weight").type, GgmlType::F16);
        EXPECT_EQ(m.get("token_embd.weight").type, GgmlType::Q8_0);
        // One expert: gate, up and down are 256 x 256 values each (what a VRAM slot holds), and
        // 256 + 256 + 256 F32 biases (kept with the dense core).
        const auto& tt = type_traits(t);
        const uint64_t per_matrix = 256u * (256u / static_cast<uint64_t>(tt.block_size)) * tt.type_size;
        EXPECT_EQ(s.bytes_per_expert, 3 * per_matrix);
        EXPECT_EQ(s.bias_bytes_per_expert, 3u * 256 * 4);
        // Expert gate weights have rms near gain 0.5 / sqrt(fan_in) = 1/32, down 1.4 / 16 (the fixtures'
        // scales; quantization and MXFP4's power-of-two scale allow a factor of 1.5 either way).
        const double r = rms(dequantize_tensor(m.get("blk.0.ffn_gate_exps.weight")));
        EXPECT_GT(r, 0.03125 / 1.5);
        EXPECT_LT(r, 0.03125 * 1.5);
        const double rd = rms(dequantize_tensor(m.get("blk.0.ffn_down_exps.weight")));
        EXPECT_GT(rd, 1.4 / 16 / 1.5);
        EXPECT_LT(rd, 1.4 / 16 * 1.5);
    }
}

// The types written as random codes instead of quantized Gaussians (fast): dequantised with the
// reference dequantizers, every expert matrix has the std init_scale asks for (gain / sqrt(fan_in),
// hand-computed here: gate 0.5 / sqrt(256), down 1.4 / sqrt(256) on gpt-oss tiny) within 2% and mean
// ~0, and every fp16 scale of every block is finite and nonzero.
TEST(Synth, RandomCodeTypesHaveTheTargetStd) {
    using namespace nitro::quant;
    struct T { GgmlType t; std::vector<size_t> fp16_offsets; };  // offsets of a block's fp16 scales
    const T types[] = {
        {GgmlType::Q4_1, {offsetof(BlockQ4_1, d), offsetof(BlockQ4_1, m)}},
        {GgmlType::Q5_0, {offsetof(BlockQ5_0, d)}},
        {GgmlType::Q5_1, {offsetof(BlockQ5_1, d), offsetof(BlockQ5_1, m)}},
        {GgmlType::IQ4_NL, {offsetof(BlockIQ4_NL, d)}},
        {GgmlType::IQ4_XS, {offsetof(BlockIQ4_XS, d)}},
        {GgmlType::Q2_K, {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)}},
        {GgmlType::Q3_K, {offsetof(BlockQ3_K, d)}},
        {GgmlType::Q4_K, {offsetof(BlockQ4_K, d), offsetof(BlockQ4_K, dmin)}},
        {GgmlType::Q5_K, {offsetof(BlockQ5_K, d), offsetof(BlockQ5_K, dmin)}},
        {GgmlType::Q6_K, {offsetof(BlockQ6_K, d)}},
    };
    const std::string dir = test::temp_dir("synth-codes");
    for (const T& ty : types) {
        SCOPED_TRACE(type_display_name(ty.t));
        SynthOptions o;
        o.arch = "gpt-oss";
        o.preset = "tiny";
        o.expert_type = ty.t;
        o.out = dir + "/c.gguf";
        synth_model(o);
        GgufModel m(o.out);
        for (const auto& [name, target] : {std::pair<std::string, double>{"blk.1.ffn_gate_exps.weight", 0.5 / 16},
                                           {"blk.1.ffn_down_exps.weight", 1.4 / 16}}) {
            const GgufTensorInfo& t = m.get(name);
            ASSERT_EQ(t.type, ty.t);
            const std::vector<float> v = dequantize_tensor(t);
            double sum = 0, sum2 = 0;
            for (float x : v) {
                sum += x;
                sum2 += static_cast<double>(x) * x;
            }
            const double n = static_cast<double>(v.size()), mean = sum / n, sd = std::sqrt(sum2 / n - mean * mean);
            EXPECT_NEAR(sd / target, 1.0, 0.02) << name << ": std " << sd << ", target " << target;
            EXPECT_LT(std::abs(mean), 0.01 * target) << name << ": mean " << mean;
            const auto& tt = type_traits(ty.t);
            const auto* bytes = static_cast<const uint8_t*>(t.data);
            for (uint64_t b = 0; b < t.n_bytes / tt.type_size; ++b)
                for (size_t off : ty.fp16_offsets) {
                    uint16_t h;
                    std::memcpy(&h, bytes + b * tt.type_size + off, 2);
                    const float f = fp16_to_f32(h);
                    ASSERT_TRUE(std::isfinite(f) && f != 0) << name << " block " << b << " scale at byte " << off << ": " << f;
                }
        }
    }
}

// Every row draws a fixed number of values, so a file does not depend on how rows are split into
// chunks or over threads: one thread with one chunk per tensor, one thread with 16 KiB chunks, and
// 3 threads with 16 KiB chunks write the same bytes, for every random-code type, MXFP4 and Q8_0 (as
// experts and, but for MXFP4, as dense matrices; the F32 norms and Q8_0 embeddings ride along).
TEST(Synth, BytesDoNotDependOnThreadsOrChunks) {
    const std::string dir = test::temp_dir("synth-threads");
    for (GgmlType t : {GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::Q2_K,
                       GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::MXFP4, GgmlType::Q8_0}) {
        SCOPED_TRACE(type_display_name(t));
        std::vector<std::string> files;
        for (auto [threads, chunk] : {std::pair<int, int64_t>{1, int64_t{1} << 30}, {1, 16384}, {3, 16384}}) {
            SynthOptions o;
            o.arch = "qwen3moe";
            o.preset = "tiny";
            o.expert_type = t;
            o.dense_type = t == GgmlType::MXFP4 ? GgmlType::F16 : t;
            o.n_threads = threads;
            o.chunk_bytes = chunk;
            o.out = dir + "/t" + std::to_string(files.size()) + ".gguf";
            synth_model(o);
            files.push_back(o.out);
        }
        GgufModel a(files[0]);
        for (size_t f = 1; f < files.size(); ++f) {
            GgufModel b(files[f]);
            ASSERT_EQ(a.tensors().size(), b.tensors().size());
            for (size_t i = 0; i < a.tensors().size(); ++i)
                ASSERT_EQ(0, std::memcmp(a.tensors()[i].data, b.tensors()[i].data, a.tensors()[i].n_bytes))
                    << "file " << f << ": " << a.tensors()[i].name;
        }
    }
}

TEST(Synth, Qwen3TinyIsTiedAndDeterministic) {
    const std::string dir = test::temp_dir("synth-q");
    SynthOptions o;
    o.arch = "qwen3moe";
    o.preset = "tiny";
    o.out = dir + "/a.gguf";
    synth_model(o);
    o.out = dir + "/b.gguf";
    synth_model(o);
    GgufModel a(dir + "/a.gguf"), b(dir + "/b.gguf");
    ModelSummary s = summarize_model(a);
    validate_model_tensors(a, s.hp, s.vocab_size);
    EXPECT_EQ(a.find("output.weight"), nullptr);
    EXPECT_EQ(a.get("blk.0.ffn_down_exps.weight").type, GgmlType::Q8_0);
    EXPECT_EQ(a.get("blk.0.attn_k_norm.weight").ne[0], 64);
    ASSERT_EQ(std::filesystem::file_size(dir + "/a.gguf"), std::filesystem::file_size(dir + "/b.gguf"));
    for (size_t i = 0; i < a.tensors().size(); ++i)
        EXPECT_EQ(0, std::memcmp(a.tensors()[i].data, b.tensors()[i].data, a.tensors()[i].n_bytes)) << a.tensors()[i].name;
    // A different seed gives different weights.
    o.seed = 7;
    o.out = dir + "/c.gguf";
    synth_model(o);
    GgufModel c(o.out);
    const auto& ta = a.get("blk.1.ffn_up_exps.weight");
    EXPECT_NE(0, std::memcmp(ta.data, c.get("blk.1.ffn_up_exps.weight").data, ta.n_bytes));
}

// The tied LM head's logits have std rms(output_norm) * rms(token_embd) * sqrt(n_embd) for a
// unit-rms hidden state. The fixture sets it to 3.0 (fixtures/README.md, "Weight scales"); the
// synth models must too at their own n_embd. At 3 * sqrt(256 / 32) = 8.5 (the fixture's 1.76 gain
// copied to n_embd 256) nitro and llama.cpp differed by up to 0.108 in probability on these
// models, against 0.02 at std 3 (docs/peer.md).
TEST(Synth, Qwen3TiedLogitScaleIsTheFixtures) {
    const auto logit_std = [](const GgufModel& m) {
        const auto& norm = m.get("output_norm.weight");
        return rms(dequantize_tensor(norm)) * rms(dequantize_tensor(m.get("token_embd.weight"))) *
               std::sqrt(static_cast<double>(norm.ne[0]));
    };
    const double fixture = logit_std(GgufModel(std::string(NITRO_SHARED_DIR) + "/fixtures/tiny-qwen3moe-q8.gguf"));
    EXPECT_NEAR(fixture, 3.0, 0.3);
    const std::string dir = test::temp_dir("synth-scale");
    SynthOptions o;
    o.arch = "qwen3moe";
    o.preset = "tiny";
    o.out = dir + "/q.gguf";
    synth_model(o);
    EXPECT_NEAR(logit_std(GgufModel(o.out)), 3.0, 0.3);
}

TEST(Synth, VocabFromCopiesTokenizer) {
    SynthOptions o;
    o.arch = "qwen3moe";
    o.preset = "tiny";
    o.vocab_from = std::string(NITRO_SHARED_DIR) + "/fixtures/tiny-qwen3moe-q8.gguf";
    o.out = test::temp_dir("synth-v") + "/v.gguf";
    synth_model(o);
    GgufModel m(o.out);
    EXPECT_EQ(m.metadata().get_array("tokenizer.ggml.tokens")->size(), 151936u);
    EXPECT_EQ(m.metadata().get_array("tokenizer.ggml.merges")->size(), 151387u);
    EXPECT_EQ(m.get("token_embd.weight").ne[1], 151936);
}

TEST(Synth, BadOptionsAreErrors) {
    SynthOptions o;
    o.out = test::temp_dir("synth-bad") + "/x.gguf";
    o.preset = "gpt-oss-7b";
    EXPECT_THROW(synth_model(o), Error);
    o.preset = "tiny";
    o.arch = "llama";
    EXPECT_THROW(synth_model(o), Error);
    o.arch = "gpt-oss";
    o.expert_type = GgmlType::IQ2_S;  // no quantizer
    EXPECT_THROW(synth_model(o), Error);
    EXPECT_FALSE(std::filesystem::exists(o.out));
    // Q8_K (an activation type: it has a quantizer, but no engine kernel) as experts or dense weights.
    for (bool dense : {false, true}) {
        SynthOptions q = o;
        q.expert_type = dense ? GgmlType::Q8_0 : GgmlType::Q8_K;
        if (dense) q.dense_type = GgmlType::Q8_K;
        try {
            synth_model(q);
            ADD_FAILURE() << "Q8_K was written as " << (dense ? "dense" : "expert") << " weights";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("Q8_K is an activation type"), std::string::npos) << e.what();
        }
        EXPECT_FALSE(std::filesystem::exists(q.out));
    }
}

TEST(ArchTables, FixturesMatchTheirTables) {
    for (const char* f : {"tiny-gptoss-mxfp4.gguf", "tiny-qwen3moe-q8.gguf"}) {
        GgufModel m(std::string(NITRO_SHARED_DIR) + "/fixtures/" + f);
        ModelSummary s = summarize_model(m);
        EXPECT_NO_THROW(validate_model_tensors(m, s.hp, s.vocab_size)) << f;
        // A wrong expectation (different n_ff_exp) is reported with the tensor and both shapes.
        ModelHparams wrong = s.hp;
        wrong.n_ff_exp = 128;
        try {
            validate_model_tensors(m, wrong, s.vocab_size);
            ADD_FAILURE() << "mis-shaped tensor accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("ffn_gate_exps.weight' has shape [32, 64, 16], expected [32, 128, 16]"),
                      std::string::npos)
                << e.what();
        }
    }
}
