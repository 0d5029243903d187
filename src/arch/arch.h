// Architectures: one place per architecture that says which tensors a GGUF must hold, with
// their llama.cpp names and shapes (src/llama-arch.cpp LLM_TENSOR_NAMES, src/llama-model.cpp
// load_tensors). The loader validates files against it; `nitro synth` writes files from it.
#pragma once

#include "arch/hparams.h"
#include "arch/summary.h"
#include "gguf/gguf.h"
#include "ops/moe.h"

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
    SsmConv,     ///< Gated DeltaNet causal conv1d kernel ssm_conv1d [d_conv, conv_dim] (F32)
    SsmA,        ///< ssm_a [n_v_heads]: -exp(A_log), the per-head decay rate (negative, F32)
    SsmDt,       ///< ssm_dt.bias [n_v_heads]: dt_bias, added before softplus (F32)
    ShexpGate,   ///< ffn_gate_inp_shexp [n_embd]: the shared expert's sigmoid gate (F32 vector)
};

/// One tensor an architecture declares.
struct TensorSpec {
    std::string name;          ///< GGUF name, e.g. "blk.3.ffn_down_exps.weight"
    std::vector<int64_t> ne;   ///< shape in ggml order (ne[0] = row length)
    TensorKind kind;
    int64_t fan_in;            ///< inputs per output (initial scale of synthetic weights)
    bool required = true;      ///< optional tensors (e.g. output.weight when tied) may be absent
    /// An older file layout's alternative (qwen3next's fused ssm_in before attn_qkv/attn_gate): its
    /// shape is checked when present, `nitro synth` does not write it.
    bool legacy = false;
};

/// How Gated DeltaNet value heads share key heads when n_v_heads > n_k_heads (llama.cpp
/// llama-model.cpp get_split_segments): qwen3next repeats each key head for consecutive value heads
/// (value head h uses key head h / (n_v / n_k)); qwen35 files hold the value heads tiled by the
/// converter (value head h uses key head h % n_k).
enum class SsmHeadMap { Interleaved, Tiled };

/// The per-layer structure of a MoE transformer: which optional parts it has. The forward pass
/// (src/runtime/session.cpp) reads these flags; architecture names never appear there.
struct ArchConfig {
    bool attn_bias = false;      ///< q/k/v/o projections have biases
    bool qk_norm = false;        ///< per-head RMSNorm of q and k before RoPE
    bool attn_sinks = false;     ///< learned per-head sink logits in the attention softmax
    int swa_period = 0;          ///< layers il with il % swa_period != swa_period - 1 use the sliding window (0 = none)
    bool expert_bias = false;    ///< router and expert projections have biases
    MoeGating gating = MoeGating::SoftmaxAll;
    FfnAct act = FfnAct::Swiglu;
    std::string_view ffn_norm;   ///< name of the norm before the FFN ("post_attention_norm", "ffn_norm")
    bool tied_output = false;    ///< LM head may reuse token_embd when output.weight is absent
    /// Gated attention (qwen3next): attn_q holds [q, gate] per head (2 * head_dim rows each); the
    /// attention output is multiplied by sigmoid(gate) before attn_output.
    bool attn_output_gate = false;
    /// Some layers are Gated DeltaNet linear attention (hparams ssm_*; which ones: layer_is_recurrent).
    bool recurrent = false;
    SsmHeadMap ssm_head_map = SsmHeadMap::Interleaved;
    /// Every MoE layer has a shared expert (ffn_{gate,up,down}_shexp) scaled by sigmoid(h . ffn_gate_inp_shexp).
    bool shared_expert_gated = false;
    /// Interleaved M-RoPE (llama.cpp LLAMA_ROPE_TYPE_IMROPE, rope.dimension_sections): for text every
    /// section takes the token's position, so it rotates as NEOX as long as no rotated pair falls to
    /// the fourth (vision) section (checked at load).
    bool rope_imrope = false;
};

/// True when layer `il` attends over a sliding window (llama.cpp set_swa_pattern: every
/// swa_period-th layer is full attention, the others use the window).
inline bool layer_uses_swa(const ArchConfig& c, int64_t il) {
    return c.swa_period > 0 && (il % c.swa_period) < c.swa_period - 1;
}

/// True when layer `il` of a model with config `c` is a Gated DeltaNet layer (llama.cpp
/// qwen3next load_arch_hparams: attention.recurrent_layers when the file has it, else every layer
/// with (il + 1) % full_attention_interval != 0, interval 4 by default).
bool layer_is_recurrent(const ArchConfig& c, const ModelHparams& hp, int64_t il);

/// An architecture: its GGUF name, its tensor table and its layer structure.
struct ArchInfo {
    std::string_view name;  ///< general.architecture ("gpt-oss", "qwen3moe")
    /// Every tensor of the model, in llama.cpp's conventional file order.
    std::vector<TensorSpec> (*tensors)(const ModelHparams& hp, int64_t n_vocab);
    /// Layer structure for given hyperparameters.
    ArchConfig (*config)(const ModelHparams& hp);
};

/// The architecture named `name`, or nullptr if this build does not know it.
const ArchInfo* find_arch(std::string_view name);
/// Names of all known architectures, for messages.
std::string known_arch_names();

/// Checks that `model` holds every required tensor of its architecture with the declared shape.
/// Throws nitro::Error naming the file, the tensor, the expected and the found shape.
void validate_model_tensors(const GgufModel& model, const ModelHparams& hp, int64_t n_vocab);

}  // namespace nitro
