// Tensor tables of the supported architectures.
#include "arch/arch.h"
#include "core/error.h"

#include <fmt/format.h>

namespace nitro {

namespace {

std::string blk(int64_t il, const char* suffix) { return fmt::format("blk.{}.{}", il, suffix); }

ArchConfig qwen3next_config(const ModelHparams&);

/// gpt-oss (llama.cpp LLM_ARCH_OPENAI_MOE): biased attention with sinks, router with bias,
/// experts with biases. Shapes from llama-model.cpp (case LLM_ARCH_OPENAI_MOE).
std::vector<TensorSpec> gptoss_tensors(const ModelHparams& hp, int64_t n_vocab) {
    const int64_t E = hp.n_embd, q = hp.n_head * hp.head_dim, k = hp.n_head_kv * hp.head_dim,
                  v = hp.n_head_kv * hp.head_dim_v, o = hp.n_head * hp.head_dim_v, F = hp.n_ff_exp,
                  X = hp.n_expert;
    std::vector<TensorSpec> t;
    t.push_back({"token_embd.weight", {E, n_vocab}, TensorKind::Embedding, E});
    t.push_back({"output_norm.weight", {E}, TensorKind::Norm, E});
    t.push_back({"output.weight", {E, n_vocab}, TensorKind::Output, E});
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        t.push_back({blk(il, "attn_norm.weight"), {E}, TensorKind::Norm, E});
        t.push_back({blk(il, "post_attention_norm.weight"), {E}, TensorKind::Norm, E});
        t.push_back({blk(il, "attn_q.weight"), {E, q}, TensorKind::Matrix, E});
        t.push_back({blk(il, "attn_q.bias"), {q}, TensorKind::Bias, E});
        t.push_back({blk(il, "attn_k.weight"), {E, k}, TensorKind::Matrix, E});
        t.push_back({blk(il, "attn_k.bias"), {k}, TensorKind::Bias, E});
        t.push_back({blk(il, "attn_v.weight"), {E, v}, TensorKind::Matrix, E});
        t.push_back({blk(il, "attn_v.bias"), {v}, TensorKind::Bias, E});
        t.push_back({blk(il, "attn_output.weight"), {o, E}, TensorKind::Matrix, o});
        t.push_back({blk(il, "attn_output.bias"), {E}, TensorKind::Bias, o});
        t.push_back({blk(il, "attn_sinks.weight"), {hp.n_head}, TensorKind::Sinks, 1});
        t.push_back({blk(il, "ffn_gate_inp.weight"), {E, X}, TensorKind::Router, E});
        t.push_back({blk(il, "ffn_gate_inp.bias"), {X}, TensorKind::RouterBias, E});
        t.push_back({blk(il, "ffn_gate_exps.weight"), {E, F, X}, TensorKind::Expert, E});
        t.push_back({blk(il, "ffn_gate_exps.bias"), {F, X}, TensorKind::ExpertBias, E});
        t.push_back({blk(il, "ffn_down_exps.weight"), {F, E, X}, TensorKind::Expert, F});
        t.push_back({blk(il, "ffn_down_exps.bias"), {E, X}, TensorKind::ExpertBias, F});
        t.push_back({blk(il, "ffn_up_exps.weight"), {E, F, X}, TensorKind::Expert, E});
        t.push_back({blk(il, "ffn_up_exps.bias"), {F, X}, TensorKind::ExpertBias, E});
    }
    return t;
}

/// qwen3moe (llama.cpp LLM_ARCH_QWEN3MOE): per-head q/k RMSNorm, no biases, output tied to
/// token_embd when output.weight is absent.
std::vector<TensorSpec> qwen3moe_tensors(const ModelHparams& hp, int64_t n_vocab) {
    const int64_t E = hp.n_embd, q = hp.n_head * hp.head_dim, k = hp.n_head_kv * hp.head_dim,
                  v = hp.n_head_kv * hp.head_dim_v, o = hp.n_head * hp.head_dim_v, F = hp.n_ff_exp,
                  X = hp.n_expert;
    std::vector<TensorSpec> t;
    t.push_back({"token_embd.weight", {E, n_vocab}, TensorKind::Embedding, E});
    t.push_back({"output_norm.weight", {E}, TensorKind::Norm, E});
    t.push_back({"output.weight", {E, n_vocab}, TensorKind::Output, E, /*required=*/false});
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        t.push_back({blk(il, "attn_norm.weight"), {E}, TensorKind::Norm, E});
        t.push_back({blk(il, "attn_q.weight"), {E, q}, TensorKind::Matrix, E});
        t.push_back({blk(il, "attn_q_norm.weight"), {hp.head_dim}, TensorKind::Norm, hp.head_dim});
        t.push_back({blk(il, "attn_k.weight"), {E, k}, TensorKind::Matrix, E});
        t.push_back({blk(il, "attn_k_norm.weight"), {hp.head_dim}, TensorKind::Norm, hp.head_dim});
        t.push_back({blk(il, "attn_v.weight"), {E, v}, TensorKind::Matrix, E});
        t.push_back({blk(il, "attn_output.weight"), {o, E}, TensorKind::Matrix, o});
        t.push_back({blk(il, "ffn_norm.weight"), {E}, TensorKind::Norm, E});
        t.push_back({blk(il, "ffn_gate_inp.weight"), {E, X}, TensorKind::Router, E});
        t.push_back({blk(il, "ffn_gate_exps.weight"), {E, F, X}, TensorKind::Expert, E});
        t.push_back({blk(il, "ffn_down_exps.weight"), {F, E, X}, TensorKind::Expert, F});
        t.push_back({blk(il, "ffn_up_exps.weight"), {E, F, X}, TensorKind::Expert, E});
    }
    return t;
}

/// qwen3next (llama.cpp LLM_ARCH_QWEN3NEXT, src/models/qwen3next.cpp load_arch_tensors): Gated
/// DeltaNet layers (fused q/k/v and z projections, beta/alpha projection, conv1d, decay, gated norm)
/// interleaved with gated full attention (attn_q holds [q, gate] per head); every layer a MoE with a
/// sigmoid-gated shared expert; norms before attention and before the FFN
/// (post_attention_norm). Older files hold the recurrent projections as one interleaved ssm_in
/// [E, 2 key_dim + 2 value_dim] instead of attn_qkv + attn_gate (Model loads either form).
std::vector<TensorSpec> hybrid_delta_net_tensors(const ModelHparams& hp, int64_t n_vocab, bool separate_beta_alpha);

std::vector<TensorSpec> qwen3next_tensors(const ModelHparams& hp, int64_t n_vocab) {
    return hybrid_delta_net_tensors(hp, n_vocab, false);
}

/// qwen35moe (llama.cpp LLM_ARCH_QWEN35MOE, src/models/qwen35moe.cpp; Qwen3.5/3.6-35B-A3B): the
/// qwen3next layers with beta and alpha from two matrices (ssm_beta, ssm_alpha) instead of ssm_ba.
std::vector<TensorSpec> qwen35moe_tensors(const ModelHparams& hp, int64_t n_vocab) {
    return hybrid_delta_net_tensors(hp, n_vocab, true);
}

std::vector<TensorSpec> hybrid_delta_net_tensors(const ModelHparams& hp, int64_t n_vocab, bool separate_beta_alpha) {
    const int64_t E = hp.n_embd, hd = hp.head_dim, F = hp.n_ff_exp, X = hp.n_expert;
    const int64_t Fs = hp.n_ff_shexp > 0 ? hp.n_ff_shexp : hp.n_ff;
    const int64_t key_dim = hp.ssm_d_state * hp.ssm_n_group, value_dim = hp.ssm_d_state * hp.ssm_dt_rank;
    const int64_t conv_dim = 2 * key_dim + value_dim, nv = hp.ssm_dt_rank;
    std::vector<TensorSpec> t;
    t.push_back({"token_embd.weight", {E, n_vocab}, TensorKind::Embedding, E});
    t.push_back({"output_norm.weight", {E}, TensorKind::Norm, E});
    t.push_back({"output.weight", {E, n_vocab}, TensorKind::Output, E, /*required=*/false});
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        t.push_back({blk(il, "attn_norm.weight"), {E}, TensorKind::Norm, E});
        t.push_back({blk(il, "post_attention_norm.weight"), {E}, TensorKind::Norm, E});
        if (layer_is_recurrent(qwen3next_config(hp), hp, il)) {
            t.push_back({blk(il, "attn_qkv.weight"), {E, conv_dim}, TensorKind::Matrix, E, /*required=*/separate_beta_alpha});
            t.push_back({blk(il, "attn_gate.weight"), {E, value_dim}, TensorKind::Matrix, E, /*required=*/separate_beta_alpha});
            if (!separate_beta_alpha)
                t.push_back({blk(il, "ssm_in.weight"), {E, conv_dim + value_dim}, TensorKind::Matrix, E, /*required=*/false,
                             /*legacy=*/true});
            t.push_back({blk(il, "ssm_conv1d.weight"), {hp.ssm_d_conv, conv_dim}, TensorKind::SsmConv, hp.ssm_d_conv});
            t.push_back({blk(il, "ssm_dt.bias"), {nv}, TensorKind::SsmDt, 1});
            t.push_back({blk(il, "ssm_a"), {nv}, TensorKind::SsmA, 1});
            if (separate_beta_alpha) {
                t.push_back({blk(il, "ssm_beta.weight"), {E, nv}, TensorKind::Matrix, E});
                t.push_back({blk(il, "ssm_alpha.weight"), {E, nv}, TensorKind::Matrix, E});
            } else {
                t.push_back({blk(il, "ssm_ba.weight"), {E, 2 * nv}, TensorKind::Matrix, E});
            }
            t.push_back({blk(il, "ssm_norm.weight"), {hp.ssm_d_state}, TensorKind::Norm, hp.ssm_d_state});
            t.push_back({blk(il, "ssm_out.weight"), {value_dim, E}, TensorKind::Matrix, value_dim});
        } else {
            t.push_back({blk(il, "attn_q.weight"), {E, 2 * hd * hp.n_head}, TensorKind::Matrix, E});
            t.push_back({blk(il, "attn_k.weight"), {E, hd * hp.n_head_kv}, TensorKind::Matrix, E});
            t.push_back({blk(il, "attn_v.weight"), {E, hp.head_dim_v * hp.n_head_kv}, TensorKind::Matrix, E});
            t.push_back({blk(il, "attn_output.weight"), {hp.head_dim_v * hp.n_head, E}, TensorKind::Matrix, hp.head_dim_v * hp.n_head});
            t.push_back({blk(il, "attn_q_norm.weight"), {hd}, TensorKind::Norm, hd});
            t.push_back({blk(il, "attn_k_norm.weight"), {hd}, TensorKind::Norm, hd});
        }
        t.push_back({blk(il, "ffn_gate_inp.weight"), {E, X}, TensorKind::Router, E});
        t.push_back({blk(il, "ffn_down_exps.weight"), {F, E, X}, TensorKind::Expert, F});
        t.push_back({blk(il, "ffn_gate_exps.weight"), {E, F, X}, TensorKind::Expert, E});
        t.push_back({blk(il, "ffn_up_exps.weight"), {E, F, X}, TensorKind::Expert, E});
        t.push_back({blk(il, "ffn_gate_inp_shexp.weight"), {E}, TensorKind::ShexpGate, E});
        t.push_back({blk(il, "ffn_gate_shexp.weight"), {E, Fs}, TensorKind::Matrix, E});
        t.push_back({blk(il, "ffn_up_shexp.weight"), {E, Fs}, TensorKind::Matrix, E});
        t.push_back({blk(il, "ffn_down_shexp.weight"), {Fs, E}, TensorKind::Matrix, Fs});
    }
    return t;
}

/// gpt-oss: sliding window on even layers (llama.cpp set_swa_pattern(2) unless the file says
/// otherwise), sinks, biases everywhere, softmax over the selected logits, clamped SwiGLU.
ArchConfig gptoss_config(const ModelHparams& hp) {
    ArchConfig c;
    c.attn_bias = true;
    c.attn_sinks = true;
    c.swa_period = hp.sliding_window > 0 ? static_cast<int>(hp.swa_period > 0 ? hp.swa_period : 2) : 0;
    c.expert_bias = true;
    c.gating = MoeGating::SoftmaxSelected;
    c.act = FfnAct::SwigluOai;
    c.ffn_norm = "post_attention_norm";
    return c;
}

/// qwen3moe: q/k norms, softmax over all experts then renormalised top-k, SwiGLU, tied output allowed.
ArchConfig qwen3moe_config(const ModelHparams&) {
    ArchConfig c;
    c.qk_norm = true;
    c.gating = MoeGating::SoftmaxAll;
    c.act = FfnAct::Swiglu;
    c.ffn_norm = "ffn_norm";
    c.tied_output = true;
    return c;
}

/// qwen3next: Gated DeltaNet layers (value heads share key heads in consecutive groups), gated
/// full attention with q/k norms and partial NEOX RoPE, softmax over all experts then renormalised
/// top-k, SwiGLU, a sigmoid-gated shared expert, tied output allowed (llama.cpp qwen3next.cpp).
ArchConfig qwen3next_config(const ModelHparams&) {
    ArchConfig c;
    c.qk_norm = true;
    c.gating = MoeGating::SoftmaxAll;
    c.act = FfnAct::Swiglu;
    c.ffn_norm = "post_attention_norm";
    c.tied_output = true;
    c.attn_output_gate = true;
    c.recurrent = true;
    c.ssm_head_map = SsmHeadMap::Interleaved;
    c.shared_expert_gated = true;
    return c;
}

/// qwen35moe: as qwen3next, but the converter stores the value heads tiled (value head h reads key
/// head h % n_k; llama.cpp llama-model.cpp get_split_segments) and the attention's RoPE is
/// interleaved M-RoPE, which for text (every section at the token's position) rotates as NEOX.
ArchConfig qwen35moe_config(const ModelHparams& hp) {
    ArchConfig c = qwen3next_config(hp);
    c.ssm_head_map = SsmHeadMap::Tiled;
    c.rope_imrope = true;
    return c;
}

const ArchInfo kArchs[] = {
    {"gpt-oss", gptoss_tensors, gptoss_config},
    {"qwen3moe", qwen3moe_tensors, qwen3moe_config},
    {"qwen3next", qwen3next_tensors, qwen3next_config},
    {"qwen35moe", qwen35moe_tensors, qwen35moe_config},
};

}  // namespace

bool layer_is_recurrent(const ArchConfig& c, const ModelHparams& hp, int64_t il) {
    if (!c.recurrent) return false;
    if (!hp.recurrent_layers.empty()) return hp.recurrent_layers[static_cast<size_t>(il)] != 0;
    const int64_t interval = hp.full_attn_interval > 0 ? hp.full_attn_interval : 4;
    return (il + 1) % interval != 0;
}

const ArchInfo* find_arch(std::string_view name) {
    for (const auto& a : kArchs)
        if (a.name == name) return &a;
    return nullptr;
}

std::string known_arch_names() {
    std::string s;
    for (const auto& a : kArchs) s += (s.empty() ? "" : ", ") + std::string(a.name);
    return s;
}

void validate_model_tensors(const GgufModel& model, const ModelHparams& hp, int64_t n_vocab) {
    const ArchInfo* arch = find_arch(hp.arch);
    if (!arch) fail("{}: architecture '{}' is not supported (known: {})", model.path(), hp.arch, known_arch_names());
    for (const auto& spec : arch->tensors(hp, n_vocab)) {
        const GgufTensorInfo* t = model.find(spec.name);
        if (!t) {
            if (spec.required) fail("{}: required tensor '{}' is missing", model.path(), spec.name);
            continue;
        }
        // Dimensions beyond the declared ones must be 1, as llama.cpp's check_tensor_dims compares
        // all four (a [n_embd, 1] ffn_gate_inp_shexp passes for a declared [n_embd]).
        bool ok = t->n_dims >= 1 && t->n_dims <= 4;
        for (size_t d = 0; ok && d < 4; ++d) ok = t->ne[d] == (d < spec.ne.size() ? spec.ne[d] : 1);
        if (!ok) {
            std::string want = "[";
            for (size_t d = 0; d < spec.ne.size(); ++d) want += (d ? ", " : "") + std::to_string(spec.ne[d]);
            fail("{}: tensor '{}' has shape {}, expected {} for this model's hyperparameters", model.path(),
                 spec.name, t->shape_string(), want + "]");
        }
    }
}

}  // namespace nitro
