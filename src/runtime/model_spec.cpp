#include "runtime/model_spec.h"

#include "core/error.h"
#include "runtime/session.h"

#include <algorithm>
#include <cmath>

namespace nitro {

std::vector<int64_t> ModelSpec::windows() const {
    std::vector<int64_t> w;
    for (const LayerSpec& L : layers) w.push_back(L.window);
    return w;
}

ModelSpec make_model_spec(const Model& model, const SessionOptions& opt) {
    return make_model_spec(model.hp(), model.config(), model.n_vocab(), opt);
}

ModelSpec make_model_spec(const ModelHparams& hp, const ArchConfig& cfg, int64_t n_vocab, const SessionOptions& opt) {
    if (opt.n_ctx <= 0) fail("context length must be positive (got {})", opt.n_ctx);
    if (opt.n_ubatch <= 0) fail("ubatch size must be positive (got {})", opt.n_ubatch);
    if (opt.n_seq < 1) fail("the number of sequences must be positive (got {})", opt.n_seq);
    ModelSpec s;
    s.n_seq = opt.n_seq;
    s.n_layer = hp.n_layer;
    s.n_embd = hp.n_embd;
    s.n_head = hp.n_head;
    s.n_head_kv = hp.n_head_kv;
    s.head_dim = hp.head_dim;
    s.head_dim_v = hp.head_dim_v;
    s.n_expert = hp.n_expert;
    s.n_expert_used = hp.n_expert_used;
    s.n_ff_exp = hp.n_ff_exp;
    s.n_vocab = n_vocab;
    s.n_ctx = hp.n_ctx_train > 0 ? std::min(opt.n_ctx, hp.n_ctx_train) : opt.n_ctx;
    s.n_ubatch = std::min(opt.n_ubatch, s.n_ctx);
    s.rms_eps = static_cast<float>(hp.rms_eps);
    s.attn_scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));

    // RoPE (llama.cpp llama_model_loader / ggml_rope_ext parameters).
    s.rope.n_rot = static_cast<int>(hp.rope_dim);
    s.rope.freq_base = static_cast<float>(hp.rope_freq_base);
    s.rope.n_ctx_orig = static_cast<int>(hp.rope_orig_ctx > 0 ? hp.rope_orig_ctx : hp.n_ctx_train);
    if ((hp.rope_scaling == "yarn" || hp.rope_scaling == "linear") && hp.rope_scaling_factor > 0)
        s.rope.freq_scale = static_cast<float>(1.0 / hp.rope_scaling_factor);
    s.rope.ext_factor = hp.rope_scaling == "yarn" ? 1.0f : 0.0f;
    s.rope.beta_fast = static_cast<float>(hp.rope_yarn_beta_fast);
    s.rope.beta_slow = static_cast<float>(hp.rope_yarn_beta_slow);
    if (s.rope.ext_factor != 0.0f) set_yarn_corr_dims(s.rope, cfg.rope_yarn_truncate);

    s.attn_bias = cfg.attn_bias;
    s.qk_norm = cfg.qk_norm;
    s.attn_sinks = cfg.attn_sinks;
    s.expert_bias = cfg.expert_bias;
    s.gating = cfg.gating;
    if (const std::string why = gating_problem(cfg.gating, hp.n_expert, static_cast<int>(hp.n_expert_used)); hp.n_expert > 0 && !why.empty())
        fail("{}: the router of this model cannot run: {} (expert_count {}, expert_used_count {}, expert_group_count {}, "
             "expert_group_used_count {})",
             hp.arch, why, hp.n_expert, hp.n_expert_used, cfg.gating.n_group, cfg.gating.topk_group);
    s.act = cfg.act;
    s.attn_gate = cfg.attn_output_gate;
    s.shared_expert = cfg.shared_expert_gated;
    s.n_ff_shexp = cfg.shared_expert_gated ? (hp.n_ff_shexp > 0 ? hp.n_ff_shexp : hp.n_ff) : 0;
    if (cfg.recurrent()) {
        s.ssm.d_conv = hp.ssm_d_conv;
        s.ssm.n_k_heads = hp.ssm_n_group;
        s.ssm.n_v_heads = hp.ssm_dt_rank;
        s.ssm.head_dim = hp.ssm_d_state;
        s.ssm.head_map = cfg.ssm_head_map;
    }

    // K/V capacity: a sliding-window layer's ring must hold the window behind the oldest query of
    // a prompt chunk plus the chunk itself (src/runtime/kv_cache.h).
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        LayerSpec ls;
        const LayerShape& shape = cfg.layers[static_cast<size_t>(il)];
        ls.kind = shape.mixer;
        ls.ffn = shape.ffn;
        ls.n_expert = shape.ffn == FfnKind::Moe ? hp.n_expert : 0;
        ls.window = shape.swa ? hp.sliding_window : 0;
        if (ls.ffn == FfnKind::Dense) s.n_ff = hp.n_ff;
        s.layers.push_back(ls);
    }
    set_context(s, s.n_ctx);
    return s;
}

void set_context(ModelSpec& s, int64_t n_ctx) {
    s.n_ctx = n_ctx;
    s.n_ubatch = std::min(s.n_ubatch, n_ctx);
    for (LayerSpec& ls : s.layers)
        ls.kv_capacity = ls.kind == LayerKind::DeltaNet ? 0 : ls.window > 0 ? std::min(n_ctx, ls.window + s.n_ubatch - 1) : n_ctx;
}

void check_eval(const ModelSpec& spec, int64_t n_past, std::span<const int32_t> tokens) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    if (n == 0) fail("eval: no tokens");
    if (n_past + n > spec.n_ctx)
        fail("the prompt and generated tokens need {} positions but the context holds {} (n_ctx)", n_past + n, spec.n_ctx);
    for (int32_t t : tokens)
        if (t < 0 || t >= spec.n_vocab) fail("token id {} is out of range (vocabulary has {} tokens)", t, spec.n_vocab);
}

}  // namespace nitro
