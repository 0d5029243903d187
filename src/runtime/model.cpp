#include "runtime/model.h"

#include "core/error.h"
#include "cpu/matmul.h"

#include <fmt/format.h>

namespace nitro {

void Model::check_ssm_hparams(const std::string& path) const {
    const std::string a = hp_.arch + ".";
    auto need = [&](int64_t v, const char* key) {
        if (v <= 0) fail("{}: metadata key '{}{}' is missing or not positive (Gated DeltaNet layers need it)", path, a, key);
    };
    need(hp_.ssm_d_conv, "ssm.conv_kernel");
    need(hp_.ssm_d_inner, "ssm.inner_size");
    need(hp_.ssm_d_state, "ssm.state_size");
    need(hp_.ssm_dt_rank, "ssm.time_step_rank");
    need(hp_.ssm_n_group, "ssm.group_count");
    // llama.cpp asserts the same in build_delta_net (S_k == S_v, H_v % H_k == 0).
    if (hp_.ssm_dt_rank % hp_.ssm_n_group != 0)
        fail("{}: {}ssm.time_step_rank (value heads, {}) must be a multiple of {}ssm.group_count (key heads, {})", path, a,
             hp_.ssm_dt_rank, a, hp_.ssm_n_group);
    if (hp_.ssm_d_inner != hp_.ssm_d_state * hp_.ssm_dt_rank)
        fail("{}: {}ssm.inner_size = {} must equal ssm.state_size x ssm.time_step_rank = {} x {} (value head dim = key "
             "head dim)",
             path, a, hp_.ssm_d_inner, hp_.ssm_d_state, hp_.ssm_dt_rank);
    if (hp_.rope_dim > hp_.head_dim || hp_.rope_dim % 2 != 0)
        fail("{}: {}rope.dimension_count = {} must be even and at most the head dim {}", path, a, hp_.rope_dim, hp_.head_dim);
    if (config_.rope_imrope) {
        // ggml_mrope_cache_init with is_imrope: rotated pair i (of rope_dim / 2) takes section
        // i % (sum of sections); sections 0-2 (time, height, width) hold the token's position for
        // text, section 3 a vision position. Supported: every pair in sections 0-2.
        const auto& sc = hp_.rope_sections;
        if (sc.size() < 3) fail("{}: metadata key '{}rope.dimension_sections' (4 integers) is missing", path, a);
        int64_t sum = 0;
        for (int32_t v : sc) sum += v;
        if (sum <= 0) fail("{}: {}rope.dimension_sections has no positive section", path, a);
        for (int64_t i = 0; i < hp_.rope_dim / 2; ++i) {
            const int64_t sector = i % sum;
            const bool text = (sector % 3 == 0 && sector < 3 * sc[0]) || (sector % 3 == 1 && sector < 3 * sc[1]) ||
                              (sector % 3 == 2 && sector < 3 * sc[2]);
            if (!text)
                fail("{}: {}rope.dimension_sections puts rotated pair {} into the vision section; only text models (every "
                     "pair in the first three sections) are supported",
                     path, a, i);
        }
    }
}

Model::Model(const std::string& path) : gguf_(std::make_unique<GgufModel>(path)) {
    hp_ = read_hparams(gguf_->metadata());
    const ArchInfo* arch = find_arch(hp_.arch);
    if (!arch) fail("{}: architecture '{}' is not supported (known: {})", path, hp_.arch, known_arch_names());
    config_ = arch->config(hp_);
    if (hp_.n_expert <= 0 || hp_.n_expert_used <= 0)
        fail("{}: {} needs {}.expert_count and expert_used_count > 0", path, hp_.arch, hp_.arch);
    if (hp_.n_ff_exp <= 0)
        fail("{}: metadata key '{}.expert_feed_forward_length' is {}", path, hp_.arch,
             gguf_->metadata().find(hp_.arch + ".expert_feed_forward_length")
                 ? fmt::format("{}: it must be positive", hp_.n_ff_exp)
                 : std::string("missing"));
    if (config_.swa_period > 0 && hp_.sliding_window <= 0)
        fail("{}: sliding-window layers need {}.attention.sliding_window > 0", path, hp_.arch);
    if (config_.recurrent) check_ssm_hparams(path);

    token_embd_ = gguf_->find("token_embd.weight");
    if (!token_embd_) fail("{}: required tensor 'token_embd.weight' is missing", path);
    n_vocab_ = token_embd_->ne[1];
    if (const GgufArray* toks = gguf_->metadata().get_array("tokenizer.ggml.tokens");
        toks && static_cast<int64_t>(toks->size()) != n_vocab_)
        fail("{}: tokenizer has {} tokens but token_embd.weight has {} rows", path, toks->size(), n_vocab_);
    validate_model_tensors(*gguf_, hp_, n_vocab_);

    output_norm_ = &gguf_->get("output_norm.weight");
    output_ = gguf_->find("output.weight");
    if (!output_) {
        if (!config_.tied_output) fail("{}: required tensor 'output.weight' is missing", path);
        output_ = token_embd_;
    }

    auto opt = [&](int64_t il, const char* name) { return gguf_->find(fmt::format("blk.{}.{}", il, name)); };
    layers_.resize(static_cast<size_t>(hp_.n_layer));
    for (int64_t il = 0; il < hp_.n_layer; ++il) {
        LayerWeights& L = layers_[static_cast<size_t>(il)];
        L.attn_norm = opt(il, "attn_norm.weight");
        L.wq = opt(il, "attn_q.weight");
        L.wk = opt(il, "attn_k.weight");
        L.wv = opt(il, "attn_v.weight");
        L.wo = opt(il, "attn_output.weight");
        if (config_.attn_bias) {
            L.bq = opt(il, "attn_q.bias");
            L.bk = opt(il, "attn_k.bias");
            L.bv = opt(il, "attn_v.bias");
            L.bo = opt(il, "attn_output.bias");
        }
        if (config_.qk_norm) {
            L.q_norm = opt(il, "attn_q_norm.weight");
            L.k_norm = opt(il, "attn_k_norm.weight");
        }
        if (config_.attn_sinks) L.sinks = opt(il, "attn_sinks.weight");
        L.ffn_norm = opt(il, (std::string(config_.ffn_norm) + ".weight").c_str());
        L.gate_inp = opt(il, "ffn_gate_inp.weight");
        L.gate_exps = opt(il, "ffn_gate_exps.weight");
        L.up_exps = opt(il, "ffn_up_exps.weight");
        L.down_exps = opt(il, "ffn_down_exps.weight");
        if (config_.expert_bias) {
            L.gate_inp_b = opt(il, "ffn_gate_inp.bias");
            L.gate_exps_b = opt(il, "ffn_gate_exps.bias");
            L.up_exps_b = opt(il, "ffn_up_exps.bias");
            L.down_exps_b = opt(il, "ffn_down_exps.bias");
        }
        L.swa = layer_uses_swa(config_, il);
        L.recurrent = layer_is_recurrent(config_, hp_, il);
        if (L.recurrent) {
            L.wqkv = opt(il, "attn_qkv.weight");
            L.wqkv_gate = opt(il, "attn_gate.weight");
            L.ssm_in = opt(il, "ssm_in.weight");
            L.ssm_conv1d = opt(il, "ssm_conv1d.weight");
            L.ssm_dt = opt(il, "ssm_dt.bias");
            L.ssm_a = opt(il, "ssm_a");
            L.ssm_ba = opt(il, "ssm_ba.weight");
            L.ssm_beta = opt(il, "ssm_beta.weight");
            L.ssm_alpha = opt(il, "ssm_alpha.weight");
            if (!L.ssm_ba && !(L.ssm_beta && L.ssm_alpha))
                fail("{}: layer {} is a Gated DeltaNet layer but has neither blk.{}.ssm_ba.weight nor blk.{}.ssm_beta.weight + "
                     "ssm_alpha.weight",
                     path, il, il, il);
            L.ssm_norm = opt(il, "ssm_norm.weight");
            L.ssm_out = opt(il, "ssm_out.weight");
            if (!(L.wqkv && L.wqkv_gate) && !L.ssm_in)
                fail("{}: layer {} is a Gated DeltaNet layer but has neither blk.{}.attn_qkv.weight + attn_gate.weight "
                     "nor the older blk.{}.ssm_in.weight",
                     path, il, il, il);
            if (L.ssm_conv1d->type != GgmlType::F32)
                fail("{}: tensor '{}' is {}, expected F32 (llama.cpp's ssm_conv reads F32)", path, L.ssm_conv1d->name,
                     type_display_name(L.ssm_conv1d->type));
        }
        if (config_.shared_expert_gated) {
            L.gate_inp_shexp = opt(il, "ffn_gate_inp_shexp.weight");
            L.gate_shexp = opt(il, "ffn_gate_shexp.weight");
            L.up_shexp = opt(il, "ffn_up_shexp.weight");
            L.down_shexp = opt(il, "ffn_down_shexp.weight");
            if (L.gate_inp_shexp->type != GgmlType::F32)
                fail("{}: tensor '{}' is {}, expected F32", path, L.gate_inp_shexp->name, type_display_name(L.gate_inp_shexp->type));
        }
    }
    // Every matrix must have a CPU kernel; small vectors (norms, biases, sinks) must be F32.
    for (const auto& t : gguf_->tensors()) {
        if (t.n_dims == 1 && t.type != GgmlType::F32)
            fail("{}: tensor '{}' is {}, expected F32 for a norm/bias vector", path, t.name, type_display_name(t.type));
        if (t.n_dims >= 2 && !(t.name.find("bias") != std::string::npos && t.type == GgmlType::F32))
            try {
                (void)cpu::vec_dot_type(t.type);
            } catch (const Error& e) {
                fail("{}: tensor '{}': {}", path, t.name, e.what());
            }
    }
}

}  // namespace nitro
