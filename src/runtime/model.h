// A loaded model: the mapped GGUF, its hyperparameters and layer plan, and every weight tensor
// bound by its architecture's table (arch/arch.h) and checked against it.
#pragma once

#include "arch/arch.h"
#include "arch/hparams.h"
#include "cpu/moe.h"
#include "gguf/gguf.h"

#include <array>
#include <memory>
#include <string>
#include <vector>

namespace nitro {

/// The weights of one layer, by TensorId (nullptr where the layer has no such tensor), and its
/// place in the layer plan. Shapes: arch/arch.h TensorId.
struct LayerWeights {
    std::array<const GgufTensorInfo*, kTensorIds> t{};
    LayerShape shape;

    const GgufTensorInfo* operator[](TensorId id) const { return t[static_cast<size_t>(id)]; }
    bool recurrent() const { return shape.mixer == LayerKind::DeltaNet; }
    bool moe() const { return shape.ffn == FfnKind::Moe; }
};

/// A layer's routed experts for the CPU MoE step (cpu/moe.h): the three matrices and their biases
/// straight from the mapped file. (Empty matrices in a layer without routed experts.)
cpu::ExpertWeights layer_experts(const LayerWeights& L, FfnAct act);

class Model {
public:
    /// Opens and validates `path`: architecture known, hyperparameters present, every tensor of
    /// the architecture's table present with the right shape and a type the CPU kernels handle.
    /// Throws nitro::Error naming the file and the problem.
    explicit Model(const std::string& path);

    const GgufModel& gguf() const { return *gguf_; }
    const ModelHparams& hp() const { return hp_; }
    const ArchInfo& arch() const { return *arch_; }
    const ArchConfig& config() const { return config_; }
    int64_t n_vocab() const { return n_vocab_; }
    const std::vector<LayerWeights>& layers() const { return layers_; }
    /// The rows of the architecture's table that this file holds (what the engines upload or bind).
    const std::vector<TensorSpec>& tensors() const { return tensors_; }
    /// A model-wide tensor (token_embd, output_norm, output), null when absent.
    const GgufTensorInfo* global(TensorId id) const { return globals_[static_cast<size_t>(id)]; }
    const GgufTensorInfo& token_embd() const { return *global(TensorId::token_embd); }
    const GgufTensorInfo& output_norm() const { return *global(TensorId::output_norm); }
    /// The LM head [E, n_vocab]: output.weight, or token_embd when tied.
    const GgufTensorInfo& output() const { return *global(TensorId::output); }
    const std::string& path() const { return gguf_->path(); }

private:
    std::unique_ptr<GgufModel> gguf_;
    ModelHparams hp_;
    const ArchInfo* arch_ = nullptr;
    ArchConfig config_;
    int64_t n_vocab_ = 0;
    std::vector<LayerWeights> layers_;
    std::array<const GgufTensorInfo*, kTensorIds> globals_{};
    std::vector<TensorSpec> tensors_;
};

}  // namespace nitro
