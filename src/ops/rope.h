// RoPE parameters, one struct for the CPU (cpu/ops.h rope_cache, rope_neox) and CUDA
// (cuda/ops.h rope_neox, qk_norm_rope_kv_store) kernels and the model spec that fills them.
#pragma once

namespace nitro {

/// RoPE settings (ggml_rope_ext arguments). YaRN per Peng et al. 2023, "YaRN: Efficient Context
/// Window Extension", as implemented in ggml (rope_yarn, ggml_rope_yarn_corr_dims).
struct RopeParams {
    int n_rot = 0;              ///< rotated dimensions per head (<= head_dim)
    int n_ctx_orig = 0;         ///< original training context (YaRN), tokens
    float freq_base = 10000.f;
    float freq_scale = 1.f;     ///< 1 / scaling factor
    float ext_factor = 0.f;     ///< YaRN extrapolation mix (1 for YaRN, 0 otherwise)
    float attn_factor = 1.f;    ///< magnitude scale
    float beta_fast = 32.f;
    float beta_slow = 1.f;
};

}  // namespace nitro
