// gpt-oss (llama.cpp LLM_ARCH_OPENAI_MOE, src/models/openai-moe-iswa.cpp; openai/gpt-oss-20b and
// -120b): biased attention with learned sinks, sliding-window attention on every other layer, a
// router with a bias, routed experts with biases and gpt-oss's clamped SwiGLU, softmax over the
// selected logits. Shapes from llama-model.cpp (case LLM_ARCH_OPENAI_MOE).
#include "arch/arch.h"

#include <cmath>

namespace nitro {

namespace {

using T = TensorId;
using K = TensorKind;
using C = TensorCategory;

std::vector<TensorSpec> gptoss_tensors(const ModelHparams& hp, int64_t n_vocab) {
    const int64_t E = hp.n_embd, q = hp.n_head * hp.head_dim, k = hp.n_head_kv * hp.head_dim,
                  v = hp.n_head_kv * hp.head_dim_v, o = hp.n_head * hp.head_dim_v, F = hp.n_ff_exp,
                  X = hp.n_expert;
    std::vector<TensorSpec> rows;
    TensorTable g(rows);
    g.add(T::token_embd, "token_embd.weight", {E, n_vocab}, K::Embedding, C::Embedding, E);
    g.add(T::output_norm, "output_norm.weight", {E}, K::Norm, C::Output, E);
    g.add(T::output, "output.weight", {E, n_vocab}, K::Output, C::Output, E);
    for (int il = 0; il < hp.n_layer; ++il) {
        TensorTable t(rows, il);
        t.add(T::attn_norm, "attn_norm.weight", {E}, K::Norm, C::Norm, E);
        t.add(T::ffn_norm, "post_attention_norm.weight", {E}, K::Norm, C::Norm, E);
        t.add(T::attn_q, "attn_q.weight", {E, q}, K::Matrix, C::Attention, E);
        t.add(T::attn_q_bias, "attn_q.bias", {q}, K::Bias, C::Attention, E);
        t.add(T::attn_k, "attn_k.weight", {E, k}, K::Matrix, C::Attention, E);
        t.add(T::attn_k_bias, "attn_k.bias", {k}, K::Bias, C::Attention, E);
        t.add(T::attn_v, "attn_v.weight", {E, v}, K::Matrix, C::Attention, E);
        t.add(T::attn_v_bias, "attn_v.bias", {v}, K::Bias, C::Attention, E);
        t.add(T::attn_output, "attn_output.weight", {o, E}, K::Matrix, C::Attention, o);
        t.add(T::attn_output_bias, "attn_output.bias", {E}, K::Bias, C::Attention, o);
        t.add(T::attn_sinks, "attn_sinks.weight", {hp.n_head}, K::Sinks, C::Attention, 1);
        t.add(T::ffn_gate_inp, "ffn_gate_inp.weight", {E, X}, K::Router, C::Router, E);
        t.add(T::ffn_gate_inp_bias, "ffn_gate_inp.bias", {X}, K::RouterBias, C::Router, E);
        t.add(T::ffn_gate_exps, "ffn_gate_exps.weight", {E, F, X}, K::Expert, C::RoutedExpert, E);
        t.add(T::ffn_gate_exps_bias, "ffn_gate_exps.bias", {F, X}, K::ExpertBias, C::RoutedExpert, E);
        t.add(T::ffn_down_exps, "ffn_down_exps.weight", {F, E, X}, K::Expert, C::RoutedExpert, F);
        t.add(T::ffn_down_exps_bias, "ffn_down_exps.bias", {E, X}, K::ExpertBias, C::RoutedExpert, F);
        t.add(T::ffn_up_exps, "ffn_up_exps.weight", {E, F, X}, K::Expert, C::RoutedExpert, E);
        t.add(T::ffn_up_exps_bias, "ffn_up_exps.bias", {F, X}, K::ExpertBias, C::RoutedExpert, E);
    }
    return rows;
}

/// Sliding window on the even layers (llama.cpp set_swa_pattern(2) unless the file says otherwise:
/// every swa_period-th layer is full attention), sinks, biases everywhere, softmax over the
/// selected logits, clamped SwiGLU.
ArchConfig gptoss_config(const ModelHparams& hp) {
    ArchConfig c;
    c.attn_bias = true;
    c.attn_sinks = true;
    c.expert_bias = true;
    c.gating = GatingSpec::softmax_selected();
    c.rope_yarn_truncate = false;  // config.json rope_scaling.truncate: false (transformers, OpenAI gpt_oss/torch)
    c.act = FfnAct::SwigluOai;
    const int64_t period = hp.sliding_window > 0 ? (hp.swa_period > 0 ? hp.swa_period : 2) : 0;
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        LayerShape l;
        l.swa = period > 0 && il % period < period - 1;
        c.layers.push_back(l);
    }
    return c;
}

/// Initial scales of a synthetic model, those of the fixtures (../shared/fixtures/README.md, "Weight
/// scales"): token_embd std 1.5; q/k/v/o gain 1; biases 0.02; sinks std 1; router gain 2; experts
/// gate/up gain 0.5, down gain 1.4; output gain 3 (logit std ~3); norms 1 + 0.1 N. A projection's
/// gain is divided by sqrt(fan_in).
SynthInit gptoss_synth_init(const TensorSpec& s, bool) {
    const double inv = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(s.fan_in, 1)));
    switch (s.kind) {
        case K::Embedding: return {1.5};
        case K::Output: return {3.0 * inv};
        case K::Norm: return {0.1, 1.0};
        case K::Matrix: return {inv};
        case K::Bias: case K::RouterBias: case K::ExpertBias: return {0.02};
        case K::Router: return {2.0 * inv};
        case K::Sinks: return {1.0};
        case K::Expert: return {(s.id == T::ffn_down_exps ? 1.4 : 0.5) * inv};
        default: return {inv};
    }
}

/// openai/gpt-oss-20b and -120b config.json; tiny keeps the structure at toy width.
void gptoss_base(ModelHparams& h) {
    h.n_embd = 2880; h.n_head = 64; h.n_head_kv = 8; h.head_dim = 64; h.n_expert_used = 4;
    h.n_ff_exp = 2880; h.n_ff = 2880; h.sliding_window = 128; h.n_ctx_train = 131072; h.rms_eps = 1e-5;
    h.rope_freq_base = 150000; h.rope_scaling = "yarn"; h.rope_scaling_factor = 32; h.rope_orig_ctx = 4096;
}
void gptoss_derived(ModelHparams& h) {
    h.head_dim_v = h.head_dim;
    h.rope_dim = h.head_dim;
}

constexpr SynthPreset kPresets[] = {
    {"tiny",
     [](ModelHparams& h) {
         gptoss_base(h);
         h.n_layer = 4; h.n_embd = 256; h.n_head = 4; h.n_head_kv = 2; h.head_dim = 64; h.n_expert = 16;
         h.n_ff_exp = 256; h.n_ff = 256; h.sliding_window = 16;
         gptoss_derived(h);
     },
     0},
    {"gpt-oss-20b", [](ModelHparams& h) { gptoss_base(h); h.n_layer = 24; h.n_expert = 32; gptoss_derived(h); }, 201088},
    {"gpt-oss-120b", [](ModelHparams& h) { gptoss_base(h); h.n_layer = 36; h.n_expert = 128; gptoss_derived(h); }, 201088},
};

constexpr std::string_view kSpecials[] = {"<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>",
                                          "<|start|>",       "<|end|>",       "<|message|>", "<|call|>"};

}  // namespace

extern const ArchInfo kArchGptOss;
const ArchInfo kArchGptOss = {
    .name = "gpt-oss",
    .tensors = gptoss_tensors,
    .config = gptoss_config,
    .presets = kPresets,
    .synth_init = gptoss_synth_init,
    .default_expert_type = GgmlType::MXFP4,
    .vocab = {.pre = "gpt-4o", .specials = kSpecials, .bos = "<|startoftext|>", .eos = "<|return|>",
              .pad = "<|endoftext|>", .add_bos_token = -1, .real_n_vocab = 201088},
    .skew_router_bias = true,
};

}  // namespace nitro
