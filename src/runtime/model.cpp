#include "runtime/model.h"

#include "core/error.h"
#include "cpu/matmul.h"

#include <fmt/format.h>

namespace nitro {

Model::Model(const std::string& path) : gguf_(std::make_unique<GgufModel>(path)) {
    hp_ = read_hparams(gguf_->metadata());
    const ArchInfo* arch = find_arch(hp_.arch);
    if (!arch) fail("{}: architecture '{}' is not supported (known: {})", path, hp_.arch, known_arch_names());
    config_ = arch->config(hp_);
    if (hp_.n_expert <= 0 || hp_.n_expert_used <= 0)
        fail("{}: {} needs {}.expert_count and expert_used_count > 0", path, hp_.arch, hp_.arch);
    if (hp_.n_ff_exp <= 0) fail("{}: metadata key '{}.expert_feed_forward_length' is missing", path, hp_.arch);
    if (config_.swa_period > 0 && hp_.sliding_window <= 0)
        fail("{}: sliding-window layers need {}.attention.sliding_window > 0", path, hp_.arch);

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
