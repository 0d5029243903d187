// nitro convert (Hugging Face gpt-oss safetensors -> GGUF): a tiny checkpoint written here with
// known values; the mapping, the gate/up de-interleave and the expert transposes are checked
// element by element against hand-written index formulas (llama.cpp's GptOssModel: gate =
// gate_up[..., ::2], up = gate_up[..., 1::2], ggml experts [n_in, n_out, n_expert]).
#include "arch/arch.h"
#include "arch/convert_hf.h"
#include "arch/summary.h"
#include "core/error.h"
#include "core/fp16.h"
#include "gguf/gguf.h"
#include "gguf_bytes.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

using namespace nitro;
using json = nlohmann::json;

namespace {

constexpr int64_t kE = 64, kL = 2, kH = 2, kHkv = 1, kHd = 32, kF = 96, kX = 4, kK = 2, kV = 8192;

/// Value of element i of tensor `name`: distinct per tensor and element, exact in bf16.
float val(const std::string& name, int64_t i) {
    uint32_t h = 2166136261u;
    for (unsigned char c : name) h = (h ^ c) * 16777619u;
    const int32_t k = static_cast<int32_t>((h + static_cast<uint32_t>(i) * 2654435761u) >> 20) % 255 - 127;
    return static_cast<float>(k) / 64.0f;  // multiples of 1/64 in [-2, 2]: 8 significant bits
}

struct Spec {
    std::string name;
    std::vector<int64_t> shape;
    bool bf16;
};

std::vector<Spec> hf_tensors() {
    std::vector<Spec> s = {{"model.embed_tokens.weight", {kV, kE}, false},
                           {"model.norm.weight", {kE}, false},
                           {"lm_head.weight", {kV, kE}, true}};
    for (int64_t i = 0; i < kL; ++i) {
        const std::string p = "model.layers." + std::to_string(i) + ".";
        s.push_back({p + "input_layernorm.weight", {kE}, false});
        s.push_back({p + "post_attention_layernorm.weight", {kE}, false});
        s.push_back({p + "self_attn.q_proj.weight", {kH * kHd, kE}, true});
        s.push_back({p + "self_attn.q_proj.bias", {kH * kHd}, false});
        s.push_back({p + "self_attn.k_proj.weight", {kHkv * kHd, kE}, true});
        s.push_back({p + "self_attn.k_proj.bias", {kHkv * kHd}, false});
        s.push_back({p + "self_attn.v_proj.weight", {kHkv * kHd, kE}, false});
        s.push_back({p + "self_attn.v_proj.bias", {kHkv * kHd}, false});
        s.push_back({p + "self_attn.o_proj.weight", {kE, kH * kHd}, false});
        s.push_back({p + "self_attn.o_proj.bias", {kE}, false});
        s.push_back({p + "self_attn.sinks", {kH}, false});
        s.push_back({p + "mlp.router.weight", {kX, kE}, false});
        s.push_back({p + "mlp.router.bias", {kX}, false});
        s.push_back({p + "mlp.experts.gate_up_proj", {kX, kE, 2 * kF}, true});
        s.push_back({p + "mlp.experts.gate_up_proj_bias", {kX, 2 * kF}, false});
        s.push_back({p + "mlp.experts.down_proj", {kX, kF, kE}, true});
        s.push_back({p + "mlp.experts.down_proj_bias", {kX, kE}, false});
    }
    return s;
}

void write_safetensors(const std::string& path, const std::vector<Spec>& specs) {
    json h;
    std::vector<uint8_t> data;
    for (const auto& s : specs) {
        int64_t n = 1;
        for (auto d : s.shape) n *= d;
        const size_t off = data.size();
        for (int64_t i = 0; i < n; ++i) {
            const float v = val(s.name, i);
            if (s.bf16) {
                const uint16_t b = f32_to_bf16(v);
                data.insert(data.end(), reinterpret_cast<const uint8_t*>(&b), reinterpret_cast<const uint8_t*>(&b) + 2);
            } else {
                data.insert(data.end(), reinterpret_cast<const uint8_t*>(&v), reinterpret_cast<const uint8_t*>(&v) + 4);
            }
        }
        h[s.name] = {{"dtype", s.bf16 ? "BF16" : "F32"}, {"shape", s.shape}, {"data_offsets", {off, data.size()}}};
    }
    h["__metadata__"] = {{"format", "pt"}};
    std::string hs = h.dump();
    while (hs.size() % 8) hs += ' ';
    std::ofstream f(path, std::ios::binary);
    const uint64_t n = hs.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f.write(hs.data(), static_cast<std::streamsize>(hs.size()));
    f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

json tiny_config() {
    return {{"architectures", {"GptOssForCausalLM"}}, {"model_type", "gpt_oss"}, {"vocab_size", kV},
            {"hidden_size", kE}, {"num_hidden_layers", kL}, {"num_attention_heads", kH},
            {"num_key_value_heads", kHkv}, {"head_dim", kHd}, {"intermediate_size", kF},
            {"num_local_experts", kX}, {"num_experts_per_tok", kK}, {"sliding_window", 8},
            {"max_position_embeddings", 512}, {"rms_norm_eps", 1e-5},
            {"layer_types", {"sliding_attention", "full_attention"}},
            {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
}

/// A model folder with config.json, model.safetensors and the embedded model's tokenizer.json.
std::string make_checkpoint(const std::string& tag, const json& cfg, const std::vector<Spec>& specs) {
    const std::string dir = test::temp_dir(tag) + "/ckpt";
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/config.json") << cfg.dump(1);
    write_safetensors(dir + "/model.safetensors", specs);
    std::filesystem::copy_file(std::string(NITRO_SOURCE_DIR) + "/tools/train/tokenizer.json", dir + "/tokenizer.json",
                               std::filesystem::copy_options::overwrite_existing);
    return dir;
}

}  // namespace

TEST(ConvertHf, ExactMappingInF32) {
    const std::string dir = make_checkpoint("convert-f32", tiny_config(), hf_tensors());
    ConvertHfOptions o;
    o.in_dir = dir;
    o.out = dir + "/../m.gguf";
    o.expert_type = o.embd_type = o.attn_type = GgmlType::F32;
    o.chat_template = std::string(NITRO_SHARED_DIR) + "/tokenizers/gptoss/chat_template.jinja";
    const ConvertHfResult r = convert_hf_gptoss(o);
    EXPECT_EQ(r.n_vocab, kV);
    GgufModel m(o.out);
    ModelSummary s = summarize_model(m);
    validate_model_tensors(m, s.hp, s.vocab_size);
    EXPECT_EQ(s.hp.n_expert, kX);
    EXPECT_EQ(s.hp.n_expert_used, kK);
    EXPECT_EQ(s.hp.sliding_window, 8);
    EXPECT_EQ(s.hp.n_ff_exp, kF);
    EXPECT_EQ(s.hp.head_dim, kHd);
    EXPECT_EQ(s.hp.n_ctx_train, 512);
    EXPECT_DOUBLE_EQ(s.hp.rope_freq_base, 10000.0);
    EXPECT_TRUE(s.hp.rope_scaling.empty() || s.hp.rope_scaling == "none");
    const auto& md = m.metadata();
    EXPECT_EQ(md.get_string("tokenizer.ggml.pre"), "gpt-4o");
    EXPECT_EQ(md.get_array("tokenizer.ggml.tokens")->size(), static_cast<size_t>(kV));
    EXPECT_EQ(md.get_array("tokenizer.ggml.merges")->size(), static_cast<size_t>(8183 - 256));
    EXPECT_EQ(md.get_int("tokenizer.ggml.bos_token_id"), 8183);  // <|startoftext|>
    EXPECT_EQ(md.get_int("tokenizer.ggml.padding_token_id"), 8184);  // <|endoftext|>
    EXPECT_EQ(md.get_int("tokenizer.ggml.eos_token_id"), 8185);  // <|return|>
    EXPECT_TRUE(md.get_string("tokenizer.chat_template")->find("<|channel|>") != std::string::npos);
    const auto* types = md.get_array("tokenizer.ggml.token_type");
    EXPECT_EQ(std::get<std::vector<int32_t>>(types->data)[100], 1);
    EXPECT_EQ(std::get<std::vector<int32_t>>(types->data)[8190], 3);

    const auto get = [&](const std::string& n) { return dequantize_tensor(m.get(n)); };
    // Same-layout tensors: ggml element i is torch element i.
    const auto same = [&](const std::string& g, const std::string& hf) {
        const auto v = get(g);
        for (size_t i = 0; i < v.size(); i += 7) ASSERT_EQ(v[i], val(hf, static_cast<int64_t>(i))) << g << " [" << i << "]";
    };
    same("token_embd.weight", "model.embed_tokens.weight");
    same("output.weight", "lm_head.weight");
    same("output_norm.weight", "model.norm.weight");
    same("blk.1.attn_q.weight", "model.layers.1.self_attn.q_proj.weight");
    same("blk.1.attn_k.bias", "model.layers.1.self_attn.k_proj.bias");
    same("blk.0.attn_output.weight", "model.layers.0.self_attn.o_proj.weight");
    same("blk.0.attn_sinks.weight", "model.layers.0.self_attn.sinks");
    same("blk.1.ffn_gate_inp.weight", "model.layers.1.mlp.router.weight");
    same("blk.1.ffn_down_exps.bias", "model.layers.1.mlp.experts.down_proj_bias");
    same("blk.0.post_attention_norm.weight", "model.layers.0.post_attention_layernorm.weight");

    // Experts: ggml [n_in, n_out, n_expert] with element (i, o, e) at i + n_in * (o + n_out * e).
    const std::string p = "model.layers.1.mlp.experts.";
    const auto gate = get("blk.1.ffn_gate_exps.weight"), up = get("blk.1.ffn_up_exps.weight");
    const auto down = get("blk.1.ffn_down_exps.weight");
    const auto gb = get("blk.1.ffn_gate_exps.bias"), ub = get("blk.1.ffn_up_exps.bias");
    for (int64_t e = 0; e < kX; ++e)
        for (int64_t f = 0; f < kF; ++f) {
            for (int64_t i = 0; i < kE; ++i) {
                // gate_up_proj[e][i][2f] is gate's weight from input i to unit f; [2f + 1] is up's.
                ASSERT_EQ(gate[i + kE * (f + kF * e)], val(p + "gate_up_proj", (e * kE + i) * 2 * kF + 2 * f));
                ASSERT_EQ(up[i + kE * (f + kF * e)], val(p + "gate_up_proj", (e * kE + i) * 2 * kF + 2 * f + 1));
                // down_proj[e][f][i]: from unit f to output i; ggml row (i, e) holds it at column f.
                ASSERT_EQ(down[f + kF * (i + kE * e)], val(p + "down_proj", (e * kF + f) * kE + i));
            }
            ASSERT_EQ(gb[f + kF * e], val(p + "gate_up_proj_bias", e * 2 * kF + 2 * f));
            ASSERT_EQ(ub[f + kF * e], val(p + "gate_up_proj_bias", e * 2 * kF + 2 * f + 1));
        }
    // One hand-picked element, spelled out: expert 2, input 3, unit 5 (n_embd 64, n_ff_exp 96).
    EXPECT_EQ(gate[3 + 64 * (5 + 96 * 2)], val(p + "gate_up_proj", (2 * 64 + 3) * 192 + 10));
    EXPECT_EQ(up[3 + 64 * (5 + 96 * 2)], val(p + "gate_up_proj", (2 * 64 + 3) * 192 + 11));
    EXPECT_EQ(down[5 + 96 * (3 + 64 * 2)], val(p + "down_proj", (2 * 96 + 5) * 64 + 3));
}

TEST(ConvertHf, DefaultTypesQuantizeExpertsToMxfp4) {
    const std::string dir = make_checkpoint("convert-q", tiny_config(), hf_tensors());
    ConvertHfOptions o;
    o.in_dir = dir;
    o.out = dir + "/../q.gguf";
    convert_hf_gptoss(o);
    GgufModel m(o.out);
    EXPECT_EQ(m.get("blk.0.ffn_gate_exps.weight").type, GgmlType::MXFP4);
    EXPECT_EQ(m.get("blk.0.ffn_down_exps.weight").type, GgmlType::MXFP4);
    EXPECT_EQ(m.get("token_embd.weight").type, GgmlType::Q8_0);
    EXPECT_EQ(m.get("output.weight").type, GgmlType::Q8_0);
    EXPECT_EQ(m.get("blk.0.attn_v.weight").type, GgmlType::F16);
    EXPECT_EQ(m.get("blk.0.ffn_gate_inp.weight").type, GgmlType::F32);
    EXPECT_EQ(m.get("blk.0.attn_sinks.weight").type, GgmlType::F32);
    EXPECT_EQ(m.metadata().get_int("general.file_type"), 38);
    // F16 holds these values exactly; MXFP4 within its block scale's step.
    const auto v = dequantize_tensor(m.get("blk.0.attn_v.weight"));
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], val("model.layers.0.self_attn.v_proj.weight", static_cast<int64_t>(i)));
    const auto up = dequantize_tensor(m.get("blk.0.ffn_up_exps.weight"));
    double err = 0, ref = 0;
    for (int64_t e = 0; e < kX; ++e)
        for (int64_t f = 0; f < kF; ++f)
            for (int64_t i = 0; i < kE; ++i) {
                const double a = up[i + kE * (f + kF * e)];
                const double b = val("model.layers.0.mlp.experts.gate_up_proj", (e * kE + i) * 2 * kF + 2 * f + 1);
                err += (a - b) * (a - b);
                ref += b * b;
            }
    EXPECT_LT(std::sqrt(err / ref), 0.2);  // MXFP4 (E2M1 + shared exponent): ~10% rms error
}

TEST(ConvertHf, ClearErrors) {
    // A missing tensor is named.
    auto specs = hf_tensors();
    specs.erase(std::remove_if(specs.begin(), specs.end(),
                               [](const Spec& s) { return s.name == "model.layers.1.mlp.experts.down_proj"; }),
                specs.end());
    ConvertHfOptions o;
    o.in_dir = make_checkpoint("convert-e1", tiny_config(), specs);
    o.out = o.in_dir + "/../x.gguf";
    try {
        convert_hf_gptoss(o);
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("model.layers.1.mlp.experts.down_proj"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(o.out));
    // A wrong shape is named with both shapes.
    specs = hf_tensors();
    for (auto& s : specs)
        if (s.name == "model.layers.0.mlp.experts.gate_up_proj") s.shape = {kX, 2 * kF, kE};
    o.in_dir = make_checkpoint("convert-e2", tiny_config(), specs);
    try {
        convert_hf_gptoss(o);
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("has shape [4, 192, 64], expected [4, 64, 192]"), std::string::npos) << e.what();
    }
    // Not gpt-oss.
    json cfg = tiny_config();
    cfg["model_type"] = "llama";
    o.in_dir = make_checkpoint("convert-e3", cfg, hf_tensors());
    EXPECT_THROW(convert_hf_gptoss(o), Error);
    // layer_types that llama.cpp's gpt-oss cannot express.
    cfg = tiny_config();
    cfg["layer_types"] = {"full_attention", "sliding_attention"};
    o.in_dir = make_checkpoint("convert-e4", cfg, hf_tensors());
    EXPECT_THROW(convert_hf_gptoss(o), Error);
}
