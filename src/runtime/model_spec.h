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

/// One layer's attention geometry.
struct LayerSpec {
    int64_t window = 0;       ///< sliding window in tokens (0 = full attention)
    int64_t kv_capacity = 0;  ///< K/V positions held: n_ctx, or window + n_ubatch - 1 for SWA layers
};

struct ModelSpec {
    int64_t n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0, head_dim_v = 0;
    int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0, n_vocab = 0;
    int64_t n_ctx = 0;     ///< tokens: the option, capped at the training context
    int64_t n_ubatch = 0;  ///< prompt tokens per forward chunk (<= n_ctx)
    float rms_eps = 0;
    float attn_scale = 0;  ///< 1 / sqrt(head_dim)
    cpu::RopeParams rope;  ///< NEOX RoPE (+ YaRN / linear scaling) as llama.cpp computes it
    bool attn_bias = false, qk_norm = false, attn_sinks = false, expert_bias = false;
    MoeGating gating = MoeGating::SoftmaxAll;
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
void check_eval(const ModelSpec& spec, int64_t n_past, std::span<const int32_t> tokens);

}  // namespace nitro
