// Hyperparameters read from GGUF metadata under llama.cpp's key names
// (src/llama-arch.cpp LLM_KV_NAMES: "%s.block_count", "%s.expert_count", ...).
// Nothing is hard-coded per model: a missing required key is a clear load error.
#pragma once

#include "gguf/gguf.h"

#include <cstdint>
#include <string>
#include <vector>

namespace nitro {

/// Model shape and settings. Absent optional values are 0 / empty.
struct ModelHparams {
    std::string arch;             ///< general.architecture ("gpt-oss", "qwen3moe", ...)
    std::string name;             ///< general.name
    int64_t n_layer = 0;          ///< {arch}.block_count minus n_layer_nextn: the layers the forward pass runs
    int64_t n_embd = 0;           ///< {arch}.embedding_length
    int64_t n_head = 0;           ///< {arch}.attention.head_count
    int64_t n_head_kv = 0;        ///< {arch}.attention.head_count_kv (defaults to n_head)
    int64_t head_dim = 0;         ///< {arch}.attention.key_length (defaults to n_embd / n_head)
    int64_t head_dim_v = 0;       ///< {arch}.attention.value_length (defaults to head_dim)
    int64_t n_ff = 0;             ///< {arch}.feed_forward_length (dense FFN width)
    int64_t n_expert = 0;         ///< {arch}.expert_count (0 = dense model)
    int64_t n_expert_used = 0;    ///< {arch}.expert_used_count
    int64_t n_expert_shared = 0;  ///< {arch}.expert_shared_count
    int64_t n_ff_exp = 0;         ///< {arch}.expert_feed_forward_length
    int64_t n_ff_shexp = 0;       ///< {arch}.expert_shared_feed_forward_length
    int64_t n_ctx_train = 0;      ///< {arch}.context_length, tokens
    int64_t sliding_window = 0;   ///< {arch}.attention.sliding_window, tokens (0 = none)
    double rms_eps = 0;           ///< {arch}.attention.layer_norm_rms_epsilon
    double rope_freq_base = 0;    ///< {arch}.rope.freq_base (10000 when absent)
    int64_t rope_dim = 0;         ///< {arch}.rope.dimension_count (defaults to head_dim)
    std::string rope_scaling;     ///< {arch}.rope.scaling.type ("none", "linear", "yarn")
    double rope_scaling_factor = 0;       ///< {arch}.rope.scaling.factor
    int64_t rope_orig_ctx = 0;            ///< {arch}.rope.scaling.original_context_length
    double rope_yarn_beta_fast = 32.0;    ///< {arch}.rope.scaling.yarn_beta_fast (llama.cpp default 32)
    double rope_yarn_beta_slow = 1.0;     ///< {arch}.rope.scaling.yarn_beta_slow (llama.cpp default 1)
    int64_t swa_period = 0;               ///< {arch}.attention.sliding_window_pattern: every Nth layer is full attention (0 = none)
    /// Gated DeltaNet (linear attention) layers, llama.cpp's ssm_* hyperparameters (qwen3next,
    /// qwen35moe); 0 where the model has none.
    int64_t ssm_d_conv = 0;               ///< {arch}.ssm.conv_kernel: causal conv1d width (4)
    int64_t ssm_d_inner = 0;              ///< {arch}.ssm.inner_size: value width n_v_heads * head_v_dim
    int64_t ssm_d_state = 0;              ///< {arch}.ssm.state_size: key head dim (= value head dim)
    int64_t ssm_dt_rank = 0;              ///< {arch}.ssm.time_step_rank: number of value heads
    int64_t ssm_n_group = 0;              ///< {arch}.ssm.group_count: number of key heads
    int64_t full_attn_interval = 0;       ///< {arch}.full_attention_interval: layer il is full attention when (il + 1) % it == 0
    /// {arch}.attention.recurrent_layers: per layer, nonzero = Gated DeltaNet (empty: from the interval).
    std::vector<uint8_t> recurrent_layers;
    int64_t n_layer_nextn = 0;            ///< {arch}.nextn_predict_layers: MTP blocks after the trunk (not run), included in block_count
    /// MoE routing beyond the defaults (llama.cpp LLM_KV_EXPERT_*; DeepSeek-V2/V3, Kimi-K2, GLM-4.5):
    int64_t n_layer_dense_lead = 0;       ///< {arch}.leading_dense_block_count: first layers with a dense FFN
    int64_t expert_gating_func = 0;       ///< {arch}.expert_gating_func: 0 absent, 1 softmax, 2 sigmoid (llama_expert_gating_func_type)
    bool expert_weights_norm = false;     ///< {arch}.expert_weights_norm: divide the selected weights by their sum
    double expert_weights_scale = 0;      ///< {arch}.expert_weights_scale: routed_scaling_factor (0: absent, i.e. 1)
    int64_t expert_group_count = 0;       ///< {arch}.expert_group_count: n_group of group-limited routing (0: absent)
    int64_t expert_group_used_count = 0;  ///< {arch}.expert_group_used_count: topk_group
    /// {arch}.rope.dimension_sections: M-RoPE sections (qwen35moe: [11, 11, 10, 0]); empty when absent.
    std::vector<int32_t> rope_sections;
};

/// Writes the hyperparameters under llama.cpp's keys (the inverse of read_hparams): general.*
/// architecture/type/name and {arch}.* shape, rope (YaRN when set) and sliding-window keys.
void write_hparams(GgufMetadata& meta, const ModelHparams& hp);

/// llama.cpp's general.file_type (enum llama_ftype) for a model whose routed experts are `t`
/// (MOSTLY_MXFP4_MOE = 38, MOSTLY_Q8_0 = 7, MOSTLY_Q4_K_M = 15, ...); 0 (ALL_F32) if none fits.
uint32_t llama_file_type_for(GgmlType expert_type);

/// Reads the hyperparameters. Throws nitro::Error naming the file and key when general.architecture
/// or {arch}.block_count / embedding_length / attention.head_count is missing or mistyped.
ModelHparams read_hparams(const GgufMetadata& meta);

}  // namespace nitro
