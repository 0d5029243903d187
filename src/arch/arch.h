// Architectures, one file each (src/arch/<name>.cpp, registered in arch/registry.cpp), as
// llama.cpp's src/models/<arch>.cpp. An architecture says, as data, everything the rest of the
// program needs to know about a model family:
//   - its tensor table: every tensor's GGUF name (llama.cpp's LLM_TENSOR_NAMES), shape from the
//     hyperparameters, what it is (kind, category), required or optional, and the TensorId it binds
//     to; the loader validates files against it, the CPU engine binds it, the GPU engine uploads it,
//     placement and `nitro inspect` count its bytes by category, `nitro synth` writes it;
//   - its layer plan (per layer: attention or Gated DeltaNet, MoE or dense FFN, sliding window);
//   - its gating (ops/moe.h GatingSpec) and expert activation;
//   - its `nitro synth` presets and initial weight scales.
// Nothing outside arch/ names an architecture. docs/architecture.md, "How to add an architecture".
#pragma once

#include "arch/hparams.h"
#include "gguf/gguf.h"
#include "ops/moe.h"

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace nitro {

/// Every tensor a model can bind, model-wide ones first (llama.cpp llm_tensor). The loaded weights
/// (runtime/model.h) and the GPU engine's copies of them are arrays indexed by it; an architecture's
/// table says which GGUF name binds to which id.
enum class TensorId : uint8_t {
    token_embd,          ///< [n_embd, n_vocab]
    output_norm,         ///< [n_embd]
    output,              ///< [n_embd, n_vocab] the LM head (token_embd when tied)
    // per layer
    attn_norm,           ///< [n_embd]
    attn_q,              ///< [n_embd, n_q] (gated attention: [n_embd, 2 n_q], [q, gate] per head)
    attn_q_bias,         ///< [n_q]
    attn_k,              ///< [n_embd, n_k]
    attn_k_bias,         ///< [n_k]
    attn_v,              ///< [n_embd, n_v]
    attn_v_bias,         ///< [n_v]
    attn_output,         ///< [n_o, n_embd]
    attn_output_bias,    ///< [n_embd]
    attn_q_norm,         ///< [head_dim]
    attn_k_norm,         ///< [head_dim]
    attn_sinks,          ///< [n_head]
    ffn_norm,            ///< [n_embd] the norm before the FFN (GGUF ffn_norm, or post_attention_norm)
    ffn_gate_inp,        ///< [n_embd, n_expert] router
    ffn_gate_inp_bias,   ///< [n_expert] router bias (added to the logits)
    ffn_exp_probs_b,     ///< [n_expert] score-correction bias (GGUF exp_probs_b.bias): added to the scores to select, not in the weights
    ffn_gate_exps,       ///< [n_embd, n_ff_exp, n_expert]
    ffn_up_exps,         ///< [n_embd, n_ff_exp, n_expert]
    ffn_down_exps,       ///< [n_ff_exp, n_embd, n_expert]
    ffn_gate_exps_bias,  ///< [n_ff_exp, n_expert]
    ffn_up_exps_bias,    ///< [n_ff_exp, n_expert]
    ffn_down_exps_bias,  ///< [n_embd, n_expert]
    ffn_gate_inp_shexp,  ///< [n_embd] the shared expert's sigmoid gate
    ffn_gate_shexp,      ///< [n_embd, n_ff_shexp]
    ffn_up_shexp,        ///< [n_embd, n_ff_shexp]
    ffn_down_shexp,      ///< [n_ff_shexp, n_embd]
    ffn_gate,            ///< [n_embd, n_ff] a dense FFN layer (no routed experts)
    ffn_up,              ///< [n_embd, n_ff]
    ffn_down,            ///< [n_ff, n_embd]
    attn_qkv,            ///< [n_embd, conv_dim] Gated DeltaNet q|k|v
    attn_gate,           ///< [n_embd, value_dim] Gated DeltaNet output gate z
    ssm_in,              ///< [n_embd, conv_dim + value_dim] older qwen3next files: q|k|v|z per key head
    ssm_conv1d,          ///< [d_conv, conv_dim] F32
    ssm_dt,              ///< [n_v_heads] dt_bias
    ssm_a,               ///< [n_v_heads] -exp(A_log)
    ssm_ba,              ///< [n_embd, 2 n_v_heads] beta and alpha
    ssm_beta,            ///< [n_embd, n_v_heads] (qwen35moe: beta and alpha in two matrices)
    ssm_alpha,           ///< [n_embd, n_v_heads]
    ssm_norm,            ///< [head_v_dim] gated RMSNorm weight
    ssm_out,             ///< [value_dim, n_embd]
    count
};
inline constexpr size_t kTensorIds = static_cast<size_t>(TensorId::count);
/// The id's name (as in the enum), for messages.
const char* tensor_id_name(TensorId id);

/// What a tensor is for: placement (only routed experts leave the GPU), `nitro inspect`'s bytes by
/// category, the GPU engine's upload.
enum class TensorCategory : uint8_t {
    Embedding,     ///< token_embd
    Output,        ///< output (the LM head) and output_norm
    Norm,          ///< a layer's RMSNorm weights
    Attention,     ///< attention projections, biases, q/k norms, sinks
    Router,        ///< ffn_gate_inp and its bias
    RoutedExpert,  ///< ffn_{gate,up,down}_exps and their biases (MUL_MAT_ID operands)
    SharedExpert,  ///< ffn_{gate,up,down}_shexp, ffn_gate_inp_shexp
    DenseFfn,      ///< ffn_{gate,up,down} of a layer without routed experts
    Recurrent,     ///< Gated DeltaNet projections, conv kernel, decay parameters, norm
};
const char* tensor_category_name(TensorCategory c);
inline constexpr TensorCategory kTensorCategories[] = {
    TensorCategory::Embedding, TensorCategory::Output,       TensorCategory::Norm,
    TensorCategory::Attention, TensorCategory::Router,       TensorCategory::RoutedExpert,
    TensorCategory::SharedExpert, TensorCategory::DenseFfn,  TensorCategory::Recurrent,
};

/// What a tensor's values are: its weight types (vectors F32, matrices any type a CPU kernel takes)
/// and its initial values in `nitro synth`.
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
/// True for the kinds whose values must be F32 (norms, biases, sinks, conv kernels, decay
/// parameters, the shared-expert gate); the others are matrices of any weight type.
bool tensor_kind_is_f32(TensorKind k);

/// One row of an architecture's tensor table.
struct TensorSpec {
    TensorId id = TensorId::count;  ///< what it binds to
    int layer = -1;                 ///< its layer, -1 for a model-wide tensor
    std::string name;               ///< GGUF name, e.g. "blk.3.ffn_down_exps.weight"
    std::vector<int64_t> ne;        ///< shape in ggml order (ne[0] = row length)
    TensorKind kind = TensorKind::Matrix;
    TensorCategory category = TensorCategory::Attention;
    int64_t fan_in = 1;             ///< inputs per output (initial scale of synthetic weights)
    bool required = true;           ///< optional tensors (e.g. output.weight when tied) may be absent
    /// A required tensor that an older layout replaces: it may be absent when the tensor of this id
    /// in the same layer is present (qwen3next's attn_qkv and attn_gate, unless ssm_in).
    TensorId unless = TensorId::count;
    /// An older file layout's alternative (qwen3next's fused ssm_in before attn_qkv/attn_gate): its
    /// shape is checked when present, `nitro synth` does not write it.
    bool legacy = false;
};

/// Builds table rows for one layer (or the model-wide ones with layer -1): `add(id, suffix, shape,
/// kind, category, fan_in)` names the tensor "blk.<layer>.<suffix>" (or `suffix` alone model-wide).
class TensorTable {
public:
    explicit TensorTable(std::vector<TensorSpec>& rows, int layer = -1) : rows_(rows), layer_(layer) {}
    TensorSpec& add(TensorId id, std::string_view suffix, std::vector<int64_t> ne, TensorKind kind, TensorCategory cat,
                    int64_t fan_in);
    /// The same, optional (a file may lack it).
    TensorSpec& add_optional(TensorId id, std::string_view suffix, std::vector<int64_t> ne, TensorKind kind,
                             TensorCategory cat, int64_t fan_in);

private:
    std::vector<TensorSpec>& rows_;
    int layer_;
};

/// What mixes tokens in a layer: softmax attention over a K/V cache, or a Gated DeltaNet (linear
/// attention with a recurrent state per sequence, qwen3next).
enum class LayerKind { Attention, DeltaNet };
/// The FFN of a layer: routed experts (MoE, with or without a shared expert) or one dense FFN
/// (ffn_gate / ffn_up / ffn_down, the leading layers of DeepSeek and GLM).
enum class FfnKind { Moe, Dense };

/// One layer of the layer plan.
struct LayerShape {
    LayerKind mixer = LayerKind::Attention;
    FfnKind ffn = FfnKind::Moe;
    bool swa = false;  ///< attends over a sliding window of hp.sliding_window tokens
};

/// How Gated DeltaNet value heads share key heads when n_v_heads > n_k_heads (llama.cpp
/// llama-model.cpp get_split_segments): qwen3next repeats each key head for consecutive value heads
/// (value head h uses key head h / (n_v / n_k)); qwen35 files hold the value heads tiled by the
/// converter (value head h uses key head h % n_k).
enum class SsmHeadMap { Interleaved, Tiled };

/// The structure of a model of an architecture, for given hyperparameters: which optional parts it
/// has, and the layer plan. The forward pass (runtime/forward.h) reads these through the model spec
/// (runtime/model_spec.h); architecture names never appear there.
struct ArchConfig {
    bool attn_bias = false;      ///< q/k/v/o projections have biases
    bool qk_norm = false;        ///< per-head RMSNorm of q and k before RoPE
    bool attn_sinks = false;     ///< learned per-head sink logits in the attention softmax
    bool expert_bias = false;    ///< routed expert projections have biases
    GatingSpec gating;           ///< the router (ops/moe.h)
    FfnAct act = FfnAct::Swiglu;
    bool tied_output = false;    ///< LM head may reuse token_embd when output.weight is absent
    /// Gated attention (qwen3next): attn_q holds [q, gate] per head (2 * head_dim rows each); the
    /// attention output is multiplied by sigmoid(gate) before attn_output.
    bool attn_output_gate = false;
    SsmHeadMap ssm_head_map = SsmHeadMap::Interleaved;
    /// Every MoE layer has a shared expert (ffn_{gate,up,down}_shexp) scaled by sigmoid(h . ffn_gate_inp_shexp).
    bool shared_expert_gated = false;
    /// Interleaved M-RoPE (llama.cpp LLAMA_ROPE_TYPE_IMROPE, rope.dimension_sections): for text every
    /// section takes the token's position, so it rotates as NEOX as long as no rotated pair falls to
    /// the fourth (vision) section (checked at load).
    bool rope_imrope = false;
    /// YaRN's correction range rounded to whole rotated pairs (ggml always; transformers unless the
    /// config says truncate false, as gpt-oss's does): ops/rope.h set_yarn_corr_dims.
    bool rope_yarn_truncate = true;
    std::vector<LayerShape> layers;  ///< the layer plan, [n_layer]

    bool recurrent() const;   ///< some layer is a Gated DeltaNet layer
};

/// Initial values of one tensor of a synthetic model: value = sign * (mean + std * N(0,1)), with
/// sign = +-1 at random when `random_sign`, else +1; or Gated DeltaNet decay parameters.
struct SynthInit {
    double std = 0;
    double mean = 0;
    bool random_sign = false;
    /// Two uniform draws per value (like a normal): SsmA: -A with A uniform in [lo, hi]; SsmDt: the
    /// dt_bias whose softplus is dt, log-uniform in [lo, hi].
    enum class Dist { Normal, SsmA, SsmDt } dist = Dist::Normal;
    double lo = 0, hi = 0;
};

/// A `nitro synth` preset: the hyperparameters of a real model (or a toy of the same structure).
struct SynthPreset {
    std::string_view name;       ///< "gpt-oss-120b", "tiny"
    void (*fill)(ModelHparams& hp);  ///< sets the shape on top of the architecture's defaults
    int64_t n_vocab = 0;         ///< the real vocabulary size; 0: a minimal vocabulary (toys)
    bool tied_output = false;    ///< written without output.weight (the LM head is token_embd)
};

/// The minimal vocabulary `nitro synth` writes when no tokenizer is given: the 256 byte tokens and
/// the family's special tokens (its chat format's markup).
struct SynthVocab {
    std::string_view pre;                         ///< tokenizer.ggml.pre ("gpt-4o", "qwen2")
    std::span<const std::string_view> specials;   ///< after the byte tokens, in this order
    std::string_view bos, eos, pad;               ///< which specials are BOS, EOS and padding
    int add_bos_token = -1;                       ///< tokenizer.ggml.add_bos_token 0 / 1, or -1: not written
    int64_t real_n_vocab = 0;                     ///< the real models' vocabulary size (a toy with a real tokenizer)
};

/// An architecture: its GGUF name and everything described above.
struct ArchInfo {
    std::string_view name;  ///< general.architecture ("gpt-oss", "qwen3moe")
    /// Every tensor of the model, in llama.cpp's conventional file order.
    std::vector<TensorSpec> (*tensors)(const ModelHparams& hp, int64_t n_vocab);
    /// Structure and layer plan for given hyperparameters.
    ArchConfig (*config)(const ModelHparams& hp);
    /// Checks the architecture's own hyperparameters (beyond read_hparams'); throws nitro::Error
    /// naming `path` and the key. May be null.
    void (*check_hparams)(const ModelHparams& hp, const ArchConfig& cfg, const std::string& path) = nullptr;
    // `nitro synth`:
    std::span<const SynthPreset> presets;  ///< the first is the default
    SynthInit (*synth_init)(const TensorSpec& t, bool tied_output) = nullptr;
    GgmlType default_expert_type = GgmlType::Q8_0;
    SynthVocab vocab;
    /// --router-skew: which tensor carries it: the router bias (a bias per expert), or, without one,
    /// the router's rows (each expert's row scaled).
    bool skew_router_bias = false;
};

/// The architecture named `name`, or nullptr if this build does not know it.
const ArchInfo* find_arch(std::string_view name);
/// Every architecture, in registration order.
std::span<const ArchInfo* const> all_archs();
/// Names of all known architectures, for messages.
std::string known_arch_names();
/// The architecture named `name`; throws nitro::Error listing the known ones (`what` says who asks).
const ArchInfo& require_arch(std::string_view name, std::string_view what);

/// Checks that `model` holds every required tensor of its architecture with the declared shape and
/// a type the declared kind allows. Throws nitro::Error naming the file, the tensor, the expected
/// and the found shape or type.
void validate_model_tensors(const GgufModel& model, const ModelHparams& hp, int64_t n_vocab);

/// The category of a tensor of a file whose architecture this build does not know (`nitro inspect`
/// of any GGUF), by llama.cpp's naming conventions; for a known architecture use its table.
TensorCategory guess_tensor_category(const std::string& name);
/// Layer index of a "blk.N." tensor, or -1.
int tensor_layer(const std::string& name);

}  // namespace nitro
