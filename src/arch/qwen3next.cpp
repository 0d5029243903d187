// qwen3next (llama.cpp LLM_ARCH_QWEN3NEXT, src/models/qwen3next.cpp; Qwen3-Next-80B-A3B,
// Qwen3-Coder-Next-80B): Gated DeltaNet layers (linear attention: fused q/k/v and z projections,
// beta/alpha projection, causal conv1d, decay, gated norm) interleaved with gated full attention
// (attn_q holds [q, gate] per head, q/k norms, partial NEOX RoPE); every layer a MoE with a
// sigmoid-gated shared expert; softmax over all experts then the top k renormalised; norms before
// attention and before the FFN (post_attention_norm). Older files hold the recurrent projections
// as one interleaved ssm_in [E, 2 key_dim + 2 value_dim] instead of attn_qkv + attn_gate.
//
// qwen35moe (arch/qwen35moe.cpp) is these layers with two changes; the shared parts are here
// (arch/qwen3next.h).
#include "arch/qwen3next.h"

#include "core/error.h"

#include <cmath>

namespace nitro {

using T = TensorId;
using K = TensorKind;
using C = TensorCategory;

std::vector<TensorSpec> delta_net_family_tensors(const ModelHparams& hp, int64_t n_vocab, bool separate_beta_alpha) {
    const int64_t E = hp.n_embd, hd = hp.head_dim, F = hp.n_ff_exp, X = hp.n_expert;
    const int64_t Fs = hp.n_ff_shexp > 0 ? hp.n_ff_shexp : hp.n_ff;
    const int64_t key_dim = hp.ssm_d_state * hp.ssm_n_group, value_dim = hp.ssm_d_state * hp.ssm_dt_rank;
    const int64_t conv_dim = 2 * key_dim + value_dim, nv = hp.ssm_dt_rank;
    const ArchConfig cfg = delta_net_family_config(hp);
    std::vector<TensorSpec> rows;
    TensorTable g(rows);
    g.add(T::token_embd, "token_embd.weight", {E, n_vocab}, K::Embedding, C::Embedding, E);
    g.add(T::output_norm, "output_norm.weight", {E}, K::Norm, C::Output, E);
    g.add_optional(T::output, "output.weight", {E, n_vocab}, K::Output, C::Output, E);
    for (int il = 0; il < hp.n_layer; ++il) {
        TensorTable t(rows, il);
        t.add(T::attn_norm, "attn_norm.weight", {E}, K::Norm, C::Norm, E);
        t.add(T::ffn_norm, "post_attention_norm.weight", {E}, K::Norm, C::Norm, E);
        if (cfg.layers[static_cast<size_t>(il)].mixer == LayerKind::DeltaNet) {
            if (separate_beta_alpha) {
                t.add(T::attn_qkv, "attn_qkv.weight", {E, conv_dim}, K::Matrix, C::Recurrent, E);
                t.add(T::attn_gate, "attn_gate.weight", {E, value_dim}, K::Matrix, C::Recurrent, E);
            } else {  // or, in older files, the fused ssm_in
                t.add(T::attn_qkv, "attn_qkv.weight", {E, conv_dim}, K::Matrix, C::Recurrent, E).unless = T::ssm_in;
                t.add(T::attn_gate, "attn_gate.weight", {E, value_dim}, K::Matrix, C::Recurrent, E).unless = T::ssm_in;
                t.add_optional(T::ssm_in, "ssm_in.weight", {E, conv_dim + value_dim}, K::Matrix, C::Recurrent, E).legacy = true;
            }
            t.add(T::ssm_conv1d, "ssm_conv1d.weight", {hp.ssm_d_conv, conv_dim}, K::SsmConv, C::Recurrent, hp.ssm_d_conv);
            t.add(T::ssm_dt, "ssm_dt.bias", {nv}, K::SsmDt, C::Recurrent, 1);
            t.add(T::ssm_a, "ssm_a", {nv}, K::SsmA, C::Recurrent, 1);
            if (separate_beta_alpha) {
                t.add(T::ssm_beta, "ssm_beta.weight", {E, nv}, K::Matrix, C::Recurrent, E);
                t.add(T::ssm_alpha, "ssm_alpha.weight", {E, nv}, K::Matrix, C::Recurrent, E);
            } else {
                t.add(T::ssm_ba, "ssm_ba.weight", {E, 2 * nv}, K::Matrix, C::Recurrent, E);
            }
            t.add(T::ssm_norm, "ssm_norm.weight", {hp.ssm_d_state}, K::Norm, C::Recurrent, hp.ssm_d_state);
            t.add(T::ssm_out, "ssm_out.weight", {value_dim, E}, K::Matrix, C::Recurrent, value_dim);
        } else {
            t.add(T::attn_q, "attn_q.weight", {E, 2 * hd * hp.n_head}, K::Matrix, C::Attention, E);
            t.add(T::attn_k, "attn_k.weight", {E, hd * hp.n_head_kv}, K::Matrix, C::Attention, E);
            t.add(T::attn_v, "attn_v.weight", {E, hp.head_dim_v * hp.n_head_kv}, K::Matrix, C::Attention, E);
            t.add(T::attn_output, "attn_output.weight", {hp.head_dim_v * hp.n_head, E}, K::Matrix, C::Attention,
                  hp.head_dim_v * hp.n_head);
            t.add(T::attn_q_norm, "attn_q_norm.weight", {hd}, K::Norm, C::Attention, hd);
            t.add(T::attn_k_norm, "attn_k_norm.weight", {hd}, K::Norm, C::Attention, hd);
        }
        t.add(T::ffn_gate_inp, "ffn_gate_inp.weight", {E, X}, K::Router, C::Router, E);
        t.add(T::ffn_down_exps, "ffn_down_exps.weight", {F, E, X}, K::Expert, C::RoutedExpert, F);
        t.add(T::ffn_gate_exps, "ffn_gate_exps.weight", {E, F, X}, K::Expert, C::RoutedExpert, E);
        t.add(T::ffn_up_exps, "ffn_up_exps.weight", {E, F, X}, K::Expert, C::RoutedExpert, E);
        t.add(T::ffn_gate_inp_shexp, "ffn_gate_inp_shexp.weight", {E}, K::ShexpGate, C::SharedExpert, E);
        t.add(T::ffn_gate_shexp, "ffn_gate_shexp.weight", {E, Fs}, K::Matrix, C::SharedExpert, E);
        t.add(T::ffn_up_shexp, "ffn_up_shexp.weight", {E, Fs}, K::Matrix, C::SharedExpert, E);
        t.add(T::ffn_down_shexp, "ffn_down_shexp.weight", {Fs, E}, K::Matrix, C::SharedExpert, Fs);
    }
    return rows;
}

/// llama.cpp qwen3next load_arch_hparams: a layer is Gated DeltaNet where
/// attention.recurrent_layers says so when the file has it, else every layer with
/// (il + 1) % full_attention_interval != 0 (interval 4 by default).
ArchConfig delta_net_family_config(const ModelHparams& hp) {
    ArchConfig c;
    c.qk_norm = true;
    c.gating = GatingSpec::softmax_all_normalized();
    c.act = FfnAct::Swiglu;
    c.tied_output = true;
    c.attn_output_gate = true;
    c.ssm_head_map = SsmHeadMap::Interleaved;
    c.shared_expert_gated = true;
    const int64_t interval = hp.full_attn_interval > 0 ? hp.full_attn_interval : 4;
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        LayerShape l;
        const bool recurrent = !hp.recurrent_layers.empty() ? hp.recurrent_layers[static_cast<size_t>(il)] != 0
                                                            : (il + 1) % interval != 0;
        l.mixer = recurrent ? LayerKind::DeltaNet : LayerKind::Attention;
        c.layers.push_back(l);
    }
    return c;
}

void delta_net_family_check(const ModelHparams& hp, const ArchConfig& cfg, const std::string& path) {
    const std::string a = hp.arch + ".";
    auto need = [&](int64_t v, const char* key) {
        if (v <= 0) fail("{}: metadata key '{}{}' is missing or not positive (Gated DeltaNet layers need it)", path, a, key);
    };
    need(hp.ssm_d_conv, "ssm.conv_kernel");
    need(hp.ssm_d_inner, "ssm.inner_size");
    need(hp.ssm_d_state, "ssm.state_size");
    need(hp.ssm_dt_rank, "ssm.time_step_rank");
    need(hp.ssm_n_group, "ssm.group_count");
    // llama.cpp asserts the same in build_delta_net (S_k == S_v, H_v % H_k == 0).
    if (hp.ssm_dt_rank % hp.ssm_n_group != 0)
        fail("{}: {}ssm.time_step_rank (value heads, {}) must be a multiple of {}ssm.group_count (key heads, {})", path, a,
             hp.ssm_dt_rank, a, hp.ssm_n_group);
    if (hp.ssm_d_inner != hp.ssm_d_state * hp.ssm_dt_rank)
        fail("{}: {}ssm.inner_size = {} must equal ssm.state_size x ssm.time_step_rank = {} x {} (value head dim = key "
             "head dim)",
             path, a, hp.ssm_d_inner, hp.ssm_d_state, hp.ssm_dt_rank);
    if (hp.rope_dim > hp.head_dim || hp.rope_dim % 2 != 0)
        fail("{}: {}rope.dimension_count = {} must be even and at most the head dim {}", path, a, hp.rope_dim, hp.head_dim);
    if (cfg.rope_imrope) {
        // ggml_mrope_cache_init with is_imrope: rotated pair i (of rope_dim / 2) takes section
        // i % (sum of sections); sections 0-2 (time, height, width) hold the token's position for
        // text, section 3 a vision position. Supported: every pair in sections 0-2.
        const auto& sc = hp.rope_sections;
        if (sc.size() < 3) fail("{}: metadata key '{}rope.dimension_sections' (4 integers) is missing", path, a);
        int64_t sum = 0;
        for (int32_t v : sc) sum += v;
        if (sum <= 0) fail("{}: {}rope.dimension_sections has no positive section", path, a);
        for (int64_t i = 0; i < hp.rope_dim / 2; ++i) {
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

/// The defaults of ../shared/tools/build_qwen3next_hf.py (the fixture's generator): token_embd std
/// 1.5; untied output gain 3 (logit std ~3); full attention q(+gate)/k/v/o gain 2, q_norm/k_norm 2
/// (1 + 0.1 N); attn_qkv, attn_gate and ssm_ba gain 1, ssm_conv1d gain 1 (fan-in d_conv), ssm_out
/// gain 1.5; A uniform in [1, 8] and dt log-uniform in [0.005, 0.1] (per-step decay exp(-A dt) from
/// about 0.45 to 0.995: short- and long-memory heads); router gain 2; routed and shared experts
/// gate/up 0.5, down 2; shared-expert gate gain 1; norms 1 + 0.1 N. A projection's gain is divided
/// by sqrt(fan_in).
SynthInit delta_net_family_synth_init(const TensorSpec& s, bool) {
    const double inv = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(s.fan_in, 1)));
    switch (s.kind) {
        case K::Embedding: return {1.5};
        case K::Output: return {3.0 * inv};
        case K::Norm:
            if (s.id == T::attn_q_norm || s.id == T::attn_k_norm) return {0.2, 2.0};
            return {0.1, 1.0};
        case K::Matrix:
            switch (s.id) {
                case T::attn_q: case T::attn_k: case T::attn_v: case T::attn_output: return {2.0 * inv};
                case T::ssm_out: return {1.5 * inv};
                case T::ffn_down_shexp: return {2.0 * inv};
                case T::ffn_gate_shexp: case T::ffn_up_shexp: return {0.5 * inv};
                default: return {inv};  // attn_qkv, attn_gate, ssm_ba, ssm_beta, ssm_alpha
            }
        case K::Router: return {2.0 * inv};
        case K::Expert: return {(s.id == T::ffn_down_exps ? 2.0 : 0.5) * inv};
        case K::SsmConv: case K::ShexpGate: return {inv};
        case K::SsmA: { SynthInit i; i.dist = SynthInit::Dist::SsmA; i.lo = 1.0; i.hi = 8.0; return i; }
        case K::SsmDt: { SynthInit i; i.dist = SynthInit::Dist::SsmDt; i.lo = 0.005; i.hi = 0.1; return i; }
        default: return {0.02};
    }
}

/// Qwen/Qwen3-Next-80B-A3B-Instruct config.json (Qwen3-Coder-Next-80B has the same shapes): 48
/// layers, every 4th full attention (16 query / 2 KV heads of 256, output gate, a quarter of each
/// head rotated), the others Gated DeltaNet (16 key / 32 value heads of 128, conv 4), 512 experts of
/// 512, 10 used, a shared expert of 512.
void delta_net_family_base(ModelHparams& h) {
    h.n_layer = 48; h.n_embd = 2048; h.n_head = 16; h.n_head_kv = 2; h.head_dim = 256; h.n_expert = 512;
    h.n_expert_used = 10; h.n_ff_exp = 512; h.n_ff_shexp = 512; h.n_ff = 5120; h.n_ctx_train = 262144;
    h.rms_eps = 1e-6; h.rope_freq_base = 1e7;
    h.ssm_d_conv = 4; h.ssm_d_state = 128; h.ssm_n_group = 16; h.ssm_dt_rank = 32; h.full_attn_interval = 4;
}

/// The toy: 3 DeltaNet layers then 1 attention layer; 2 key heads shared by 4 value heads.
void delta_net_family_tiny(ModelHparams& h) {
    h.n_layer = 4; h.n_embd = 256; h.n_head = 4; h.n_head_kv = 2; h.head_dim = 64; h.n_expert = 16;
    h.n_expert_used = 4; h.n_ff_exp = 256; h.n_ff_shexp = 256; h.n_ff = 768;
    h.ssm_d_state = 64; h.ssm_n_group = 2; h.ssm_dt_rank = 4;
}

void delta_net_family_derived(ModelHparams& h) {
    h.ssm_d_inner = h.ssm_d_state * h.ssm_dt_rank;
    h.head_dim_v = h.head_dim;
    h.rope_dim = h.head_dim / 4;  // partial_rotary_factor 0.25
}

namespace {

constexpr SynthPreset kPresets[] = {
    {"tiny", [](ModelHparams& h) { delta_net_family_base(h); delta_net_family_tiny(h); delta_net_family_derived(h); }, 0},
    {"qwen3-next-80b-a3b", [](ModelHparams& h) { delta_net_family_base(h); delta_net_family_derived(h); }, 151936},
};

}  // namespace

extern const std::string_view kChatmlSpecials[7];  // arch/qwen3moe.cpp

extern const ArchInfo kArchQwen3Next;
const ArchInfo kArchQwen3Next = {
    .name = "qwen3next",
    .tensors = [](const ModelHparams& hp, int64_t n_vocab) { return delta_net_family_tensors(hp, n_vocab, false); },
    .config = delta_net_family_config,
    .check_hparams = delta_net_family_check,
    .presets = kPresets,
    .synth_init = delta_net_family_synth_init,
    .default_expert_type = GgmlType::Q8_0,
    .vocab = {.pre = "qwen2", .specials = kChatmlSpecials, .bos = "<|endoftext|>", .eos = "<|im_end|>",
              .pad = "<|endoftext|>", .add_bos_token = 0, .real_n_vocab = 151936},
};

}  // namespace nitro
