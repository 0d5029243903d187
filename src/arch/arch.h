// Architectures: one place per architecture that says which tensors a GGUF must hold, with
// their llama.cpp names and shapes (src/llama-arch.cpp LLM_TENSOR_NAMES, src/llama-model.cpp
// load_tensors). The loader validates files against it; `nitro synth` writes files from it.
#pragma once

#include "arch/hparams.h"
#include "arch/summary.h"
#include "gguf/gguf.h"

#include <string>
#include <string_view>
#include <vector>

namespace nitro {

/// What a tensor does; decides its default weight type and initial scale in `nitro synth`.
enum class TensorKind {
    Embedding,   ///< token_embd [n_embd, n_vocab]
    Output,      ///< output (LM head) [n_embd, n_vocab]
    Norm,        ///< RMSNorm weight [n] (also q/k norms [head_dim])
    Matrix,      ///< dense projection [n_in, n_out]
    Bias,        ///< bias [n_out]
    Router,      ///< ffn_gate_inp [n_embd, n_expert]
    RouterBias,  ///< ffn_gate_inp.bias [n_expert]
    Sinks,       ///< attention sinks [n_head]
    Expert,      ///< routed experts [n_in, n_out, n_expert]
    ExpertBias,  ///< routed expert bias [n_out, n_expert]
};

/// One tensor an architecture declares.
struct TensorSpec {
    std::string name;          ///< GGUF name, e.g. "blk.3.ffn_down_exps.weight"
    std::vector<int64_t> ne;   ///< shape in ggml order (ne[0] = row length)
    TensorKind kind;
    int64_t fan_in;            ///< inputs per output (initial scale of synthetic weights)
    bool required = true;      ///< optional tensors (e.g. output.weight when tied) may be absent
};

/// An architecture: its GGUF name and its tensor table for given hyperparameters.
struct ArchInfo {
    std::string_view name;  ///< general.architecture ("gpt-oss", "qwen3moe")
    /// Every tensor of the model, in llama.cpp's conventional file order.
    std::vector<TensorSpec> (*tensors)(const ModelHparams& hp, int64_t n_vocab);
};

/// The architecture named `name`, or nullptr if this build does not know it.
const ArchInfo* find_arch(std::string_view name);
/// Names of all known architectures, for messages.
std::string known_arch_names();

/// Checks that `model` holds every required tensor of its architecture with the declared shape.
/// Throws nitro::Error naming the file, the tensor, the expected and the found shape.
void validate_model_tensors(const GgufModel& model, const ModelHparams& hp, int64_t n_vocab);

}  // namespace nitro
