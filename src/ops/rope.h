// RoPE parameters, one struct for the CPU (cpu/ops.h rope_cache, rope_neox) and CUDA
// (cuda/ops.h rope_neox, qk_norm_rope_kv_store) kernels and the model spec that fills them.
#pragma once

#include <algorithm>
#include <cmath>

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
    /// YaRN's correction range, in rotated pairs: pairs below corr_low keep the original
    /// frequency, pairs above corr_high are interpolated by freq_scale, a linear ramp between
    /// (set_yarn_corr_dims; both kernels read it, neither computes it).
    float corr_low = 0.f, corr_high = 0.f;
};

/// Sets p's YaRN correction range from n_rot, n_ctx_orig, beta_fast / beta_slow and freq_base
/// (ggml_rope_yarn_corr_dims; transformers _compute_yarn_parameters): the pair index whose
/// wavelength turns beta times over the original context. truncate: rounded outwards to whole pairs,
/// as ggml always does and transformers does by default; gpt-oss's config says truncate false
/// (transformers and OpenAI's reference keep the fractional bounds: 8.09 and 17.40 for
/// gpt-oss, where llama.cpp uses 8 and 18).
inline void set_yarn_corr_dims(RopeParams& p, bool truncate) {
    const auto dim = [&](float n_turns) {
        return static_cast<float>(p.n_rot) * std::log(static_cast<float>(p.n_ctx_orig) / (n_turns * 2.0f * 3.14159265358979323846f)) /
               (2.0f * std::log(p.freq_base));
    };
    const float lo = dim(p.beta_fast), hi = dim(p.beta_slow);
    p.corr_low = std::max(0.0f, truncate ? std::floor(lo) : lo);
    p.corr_high = std::min(static_cast<float>(p.n_rot - 1), truncate ? std::ceil(hi) : hi);
}

}  // namespace nitro
