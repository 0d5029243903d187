// What every executor (CPU Session, CUDA GpuSession, the hybrid) needs to walk the forward pass,
// computed once from the model and the session options: dimensions, RoPE, the attention scale,
// per-layer sliding window and K/V capacity, the router's gating and the expert activation.
// Executors read these fields and nothing architecture-specific (arch/arch.h ArchConfig is folded
// in here), so the spec is the one place where a rule such as "an SWA layer's K/V ring holds
// window + n_ubatch - 1 positions" lives.
#pragma once

#include "arch/arch.h"
#include "cpu/ops.h"
#include "runtime/model.h"

#include <cstdint>
#include <span>
#include <vector>

namespace nitro {

struct SessionOptions;

/// One layer of the plan: what mixes its tokens (arch/arch.h LayerKind), its FFN, its attention
/// geometry.
struct LayerSpec {
    LayerKind kind = LayerKind::Attention;
    FfnKind ffn = FfnKind::Moe;
    int64_t n_expert = 0;     ///< routed experts of this layer (0: a dense FFN layer)
    int64_t window = 0;       ///< sliding window in tokens (0 = full attention)
    int64_t kv_capacity = 0;  ///< K/V positions held: n_ctx, or window + n_ubatch - 1 for SWA layers; 0 for DeltaNet layers
};

/// Gated DeltaNet geometry (llama.cpp hparams ssm_*; src/models/qwen3next.cpp).
struct SsmSpec {
    int64_t d_conv = 0;       ///< causal conv1d width (the conv state holds d_conv - 1 inputs)
    int64_t n_k_heads = 0;    ///< key heads (ssm_n_group)
    int64_t n_v_heads = 0;    ///< value heads (ssm_dt_rank); a multiple of n_k_heads
    int64_t head_dim = 0;     ///< key and value head dim (ssm_d_state): the state per value head is [head_dim, head_dim]
    SsmHeadMap head_map = SsmHeadMap::Interleaved;
    int64_t key_dim() const { return n_k_heads * head_dim; }
    int64_t value_dim() const { return n_v_heads * head_dim; }
    int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }   ///< channels of the conv: q, k, v
    /// Key head of value head h.
    int64_t k_head(int64_t h) const {
        return head_map == SsmHeadMap::Interleaved ? h / (n_v_heads / n_k_heads) : h % n_k_heads;
    }
    /// Floats of one sequence's conv state in one layer: [conv_dim, d_conv - 1] (per channel, oldest first).
    int64_t conv_state_size() const { return (d_conv - 1) * conv_dim(); }
    /// Floats of one sequence's delta-rule state in one layer: [n_v_heads, head_dim (v), head_dim (k)].
    int64_t delta_state_size() const { return n_v_heads * head_dim * head_dim; }
};

struct ModelSpec {
    int64_t n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0, head_dim_v = 0;
    int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0, n_vocab = 0;
    int64_t n_ctx = 0;     ///< tokens: the option, capped at the training context
    int64_t n_ubatch = 0;  ///< prompt tokens per forward chunk (<= n_ctx)
    int64_t n_seq = 1;     ///< sequences held (SessionOptions::n_seq), each with its own K/V and recurrent state
    float rms_eps = 0;
    float attn_scale = 0;  ///< 1 / sqrt(head_dim)
    RopeParams rope;  ///< NEOX RoPE (+ YaRN / linear scaling) as llama.cpp computes it
    bool attn_bias = false, qk_norm = false, attn_sinks = false, expert_bias = false;
    /// attn_q holds [q, gate] per head; the attention output is multiplied by sigmoid(gate).
    bool attn_gate = false;
    /// Every layer adds a shared expert scaled by sigmoid(h . ffn_gate_inp_shexp) to the MoE output.
    bool shared_expert = false;
    int64_t n_ff_shexp = 0;  ///< shared expert width
    int64_t n_ff = 0;        ///< dense FFN width of the layers without routed experts (0: none)
    SsmSpec ssm;             ///< Gated DeltaNet geometry (zeros when no layer is one)
    /// True when some layer is a DeltaNet layer (the executor holds a recurrent state per sequence).
    bool has_recurrent() const { return ssm.n_v_heads > 0; }
    GatingSpec gating;     ///< the router (ops/moe.h)
    FfnAct act = FfnAct::Swiglu;
    /// gpt-oss clamped SwiGLU constants (ggml_swiglu_oai): alpha, limit.
    float swiglu_alpha = 1.702f, swiglu_limit = 7.0f;
    std::vector<LayerSpec> layers;

    int64_t n_q() const { return n_head * head_dim; }      ///< query width [n_head * head_dim]
    int64_t n_k() const { return n_head_kv * head_dim; }   ///< key width
    int64_t n_v() const { return n_head_kv * head_dim_v; } ///< value width
    int64_t n_o() const { return n_head * head_dim_v; }    ///< attention output width
    /// Window per layer (0 = full), as KvCache takes it.
    std::vector<int64_t> windows() const;
};

/// The spec of `model` for a session with options `opt`. Throws nitro::Error if n_ctx or
/// n_ubatch is not positive.
ModelSpec make_model_spec(const Model& model, const SessionOptions& opt);
/// The same from hyperparameters alone (a synth preset, a plan without a file).
ModelSpec make_model_spec(const ModelHparams& hp, const ArchConfig& cfg, int64_t n_vocab, const SessionOptions& opt);

/// The checks every engine makes before evaluating `tokens` at positions n_past..: at least one
/// token, every id in [0, n_vocab), n_past + n <= n_ctx. Throws nitro::Error with both numbers.
/// Sets spec's context to n_ctx tokens (capped at nothing: the caller caps it at the training
/// context where it should) and every layer's K/V capacity from it: n_ctx, or window + n_ubatch - 1
/// for sliding-window layers, 0 for DeltaNet layers; n_ubatch is capped at n_ctx. The one place that
/// rule is written (make_model_spec, the plan's context ladder).
void set_context(ModelSpec& spec, int64_t n_ctx);

void check_eval(const ModelSpec& spec, int64_t n_past, std::span<const int32_t> tokens);

}  // namespace nitro
