#include "runtime/model.h"

#include "core/error.h"
#include "cpu/matmul.h"

#include <fmt/format.h>

namespace nitro {

namespace {

/// A tensor's type must suit its kind: F32 for norms, biases and the other vectors; a type a CPU
/// kernel multiplies for matrices.
void check_type(const std::string& path, const TensorSpec& spec, const GgufTensorInfo& t) {
    if (tensor_kind_is_f32(spec.kind)) {
        if (t.type != GgmlType::F32)
            fail("{}: tensor '{}' is {}, expected F32 for a {}", path, t.name, type_display_name(t.type),
                 t.n_dims == 1 ? "norm/bias vector" : "tensor of this kind");
        return;
    }
    try {
        (void)cpu::vec_dot_type(t.type);
    } catch (const Error& e) {
        fail("{}: tensor '{}': {}", path, t.name, e.what());
    }
}

const float* f32(const GgufTensorInfo* t) { return t ? reinterpret_cast<const float*>(t->data) : nullptr; }

}  // namespace

cpu::ExpertWeights layer_experts(const LayerWeights& L, FfnAct act) {
    using T = TensorId;
    return {L[T::ffn_gate_exps], L[T::ffn_up_exps], L[T::ffn_down_exps], f32(L[T::ffn_gate_exps_bias]),
            f32(L[T::ffn_up_exps_bias]), f32(L[T::ffn_down_exps_bias]), act};
}

Model::Model(const std::string& path) : gguf_(std::make_unique<GgufModel>(path)) {
    hp_ = read_hparams(gguf_->metadata());
    arch_ = &require_arch(hp_.arch, path);
    config_ = arch_->config(hp_);
    bool any_moe = false;
    for (const LayerShape& l : config_.layers) any_moe |= l.ffn == FfnKind::Moe;
    if (any_moe && (hp_.n_expert <= 0 || hp_.n_expert_used <= 0))
        fail("{}: {} needs {}.expert_count and expert_used_count > 0", path, hp_.arch, hp_.arch);
    if (any_moe && hp_.n_ff_exp <= 0)
        fail("{}: metadata key '{}.expert_feed_forward_length' is {}", path, hp_.arch,
             gguf_->metadata().find(hp_.arch + ".expert_feed_forward_length")
                 ? fmt::format("{}: it must be positive", hp_.n_ff_exp)
                 : std::string("missing"));
    if (arch_->check_hparams) arch_->check_hparams(hp_, config_, path);

    const GgufTensorInfo* te = gguf_->find("token_embd.weight");
    if (!te) fail("{}: required tensor 'token_embd.weight' is missing", path);
    n_vocab_ = te->ne[1];
    if (const GgufArray* toks = gguf_->metadata().get_array("tokenizer.ggml.tokens");
        toks && static_cast<int64_t>(toks->size()) != n_vocab_)
        fail("{}: tokenizer has {} tokens but token_embd.weight has {} rows", path, toks->size(), n_vocab_);
    validate_model_tensors(*gguf_, hp_, n_vocab_);

    // Bind every row of the table the file holds.
    layers_.resize(static_cast<size_t>(hp_.n_layer));
    for (int64_t il = 0; il < hp_.n_layer; ++il) layers_[static_cast<size_t>(il)].shape = config_.layers[static_cast<size_t>(il)];
    std::vector<TensorSpec> table = arch_->tensors(hp_, n_vocab_);
    auto slot = [&](const TensorSpec& spec) -> const GgufTensorInfo*& {
        return spec.layer < 0 ? globals_[static_cast<size_t>(spec.id)]
                              : layers_[static_cast<size_t>(spec.layer)].t[static_cast<size_t>(spec.id)];
    };
    // The current layout first; an older layout's alternative (legacy) only where a tensor it
    // replaces is absent.
    for (int pass = 0; pass < 2; ++pass)
        for (TensorSpec& spec : table) {
            if (spec.legacy != (pass == 1)) continue;
            const GgufTensorInfo* t = gguf_->find(spec.name);
            if (!t) continue;
            if (spec.legacy) {
                bool replaced = false;
                for (const TensorSpec& o : table)
                    if (o.unless == spec.id && o.layer == spec.layer && !slot(o)) replaced = true;
                if (!replaced) continue;
            }
            check_type(path, spec, *t);
            slot(spec) = t;
            tensors_.push_back(std::move(spec));
        }
    if (!global(TensorId::output)) {
        if (!config_.tied_output) fail("{}: required tensor 'output.weight' is missing", path);
        globals_[static_cast<size_t>(TensorId::output)] = te;
    }
}

}  // namespace nitro
