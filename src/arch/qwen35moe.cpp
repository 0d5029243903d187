// qwen35moe (llama.cpp LLM_ARCH_QWEN35MOE, src/models/qwen35moe.cpp; Qwen3.5/3.6-35B-A3B, text):
// the qwen3next layers (arch/qwen3next.cpp) with beta and alpha from two matrices (ssm_beta,
// ssm_alpha) instead of ssm_ba, value heads stored tiled by the converter (value head h reads key
// head h % n_k; llama.cpp llama-model.cpp get_split_segments), and interleaved M-RoPE, which for text
// (every section at the token's position) rotates as NEOX.
#include "arch/qwen3next.h"

namespace nitro {

namespace {

ArchConfig qwen35moe_config(const ModelHparams& hp) {
    ArchConfig c = delta_net_family_config(hp);
    c.ssm_head_map = SsmHeadMap::Tiled;
    c.rope_imrope = true;
    return c;
}

/// Qwen/Qwen3.5-35B-A3B (transformers Qwen3_5MoeTextConfig defaults; Qwen3.6-35B-A3B has the same
/// shapes): Qwen3-Next's layers with 40 layers, 256 experts, 8 used + shared, vocabulary 248,320;
/// M-RoPE sections [11, 11, 10, 0] as convert_hf_to_gguf.py writes them.
void qwen35moe_base(ModelHparams& h) {
    delta_net_family_base(h);
    h.n_layer = 40; h.n_expert = 256; h.n_expert_used = 8;
    h.rope_sections = {11, 11, 10, 0};
}

constexpr SynthPreset kPresets[] = {
    {"tiny", [](ModelHparams& h) { qwen35moe_base(h); delta_net_family_tiny(h); delta_net_family_derived(h); }, 0},
    {"qwen3.5-35b-a3b", [](ModelHparams& h) { qwen35moe_base(h); delta_net_family_derived(h); }, 248320},
};

}  // namespace

extern const std::string_view kChatmlSpecials[7];  // arch/qwen3moe.cpp

extern const ArchInfo kArchQwen35Moe;
const ArchInfo kArchQwen35Moe = {
    .name = "qwen35moe",
    .tensors = [](const ModelHparams& hp, int64_t n_vocab) { return delta_net_family_tensors(hp, n_vocab, true); },
    .config = qwen35moe_config,
    .check_hparams = delta_net_family_check,
    .presets = kPresets,
    .synth_init = delta_net_family_synth_init,
    .default_expert_type = GgmlType::Q8_0,
    .vocab = {.pre = "qwen2", .specials = kChatmlSpecials, .bos = "<|endoftext|>", .eos = "<|im_end|>",
              .pad = "<|endoftext|>", .add_bos_token = 0, .real_n_vocab = 248320},
};

}  // namespace nitro
