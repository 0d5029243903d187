// A loaded model: the mapped GGUF, its hyperparameters and layer structure, and every weight
// tensor resolved by name and checked against the architecture's table.
#pragma once

#include "arch/arch.h"
#include "arch/hparams.h"
#include "gguf/gguf.h"

#include <memory>
#include <string>
#include <vector>

namespace nitro {

/// The weights of one transformer layer (nullptr where the architecture has no such tensor).
/// Shapes in ggml order; E = n_embd, X = n_expert, F = n_ff_exp, q = n_head*head_dim
/// (2 q for a gated attn_q: [q, gate] per head), kv = n_head_kv*head_dim.
struct LayerWeights {
    const GgufTensorInfo* attn_norm = nullptr;  // [E]
    const GgufTensorInfo* wq = nullptr;         // [E, q]
    const GgufTensorInfo* bq = nullptr;         // [q]
    const GgufTensorInfo* wk = nullptr;         // [E, kv]
    const GgufTensorInfo* bk = nullptr;         // [kv]
    const GgufTensorInfo* wv = nullptr;         // [E, kv]
    const GgufTensorInfo* bv = nullptr;         // [kv]
    const GgufTensorInfo* wo = nullptr;         // [q, E]
    const GgufTensorInfo* bo = nullptr;         // [E]
    const GgufTensorInfo* q_norm = nullptr;     // [head_dim]
    const GgufTensorInfo* k_norm = nullptr;     // [head_dim]
    const GgufTensorInfo* sinks = nullptr;      // [n_head]
    const GgufTensorInfo* ffn_norm = nullptr;   // [E]
    const GgufTensorInfo* gate_inp = nullptr;   // [E, X] router
    const GgufTensorInfo* gate_inp_b = nullptr; // [X]
    const GgufTensorInfo* gate_exps = nullptr;  // [E, F, X]
    const GgufTensorInfo* up_exps = nullptr;    // [E, F, X]
    const GgufTensorInfo* down_exps = nullptr;  // [F, E, X]
    const GgufTensorInfo* gate_exps_b = nullptr;  // [F, X]
    const GgufTensorInfo* up_exps_b = nullptr;    // [F, X]
    const GgufTensorInfo* down_exps_b = nullptr;  // [E, X]
    bool swa = false;  ///< this layer attends over a sliding window of hp.sliding_window tokens

    // Gated DeltaNet (linear attention) layers, qwen3next (llama.cpp src/models/qwen3next.cpp).
    // key_dim = n_k_heads * head_k_dim, value_dim = n_v_heads * head_v_dim, conv_dim = 2 key_dim + value_dim.
    bool recurrent = false;                         ///< a Gated DeltaNet layer (no attention, no K/V)
    const GgufTensorInfo* wqkv = nullptr;           // [E, conv_dim] attn_qkv: q, k, v (all key heads, then all value heads)
    const GgufTensorInfo* wqkv_gate = nullptr;      // [E, value_dim] attn_gate: z, the output gate
    const GgufTensorInfo* ssm_in = nullptr;         // [E, conv_dim + value_dim] older files: [q, k, v, z] per key head
    const GgufTensorInfo* ssm_conv1d = nullptr;     // [d_conv, conv_dim] F32
    const GgufTensorInfo* ssm_dt = nullptr;         // [n_v_heads] dt_bias
    const GgufTensorInfo* ssm_a = nullptr;          // [n_v_heads] -exp(A_log)
    const GgufTensorInfo* ssm_ba = nullptr;         // [E, 2 n_v_heads] per key head: [beta x r, alpha x r], r = n_v / n_k
    const GgufTensorInfo* ssm_beta = nullptr;       // [E, n_v_heads] qwen35moe: beta and alpha in two matrices
    const GgufTensorInfo* ssm_alpha = nullptr;      // [E, n_v_heads]
    const GgufTensorInfo* ssm_norm = nullptr;       // [head_v_dim] gated RMSNorm weight
    const GgufTensorInfo* ssm_out = nullptr;        // [value_dim, E]
    // Shared expert with a sigmoid gate (qwen3next). Fs = n_ff_shexp.
    const GgufTensorInfo* gate_inp_shexp = nullptr; // [E] (or [E, 1]) F32
    const GgufTensorInfo* gate_shexp = nullptr;     // [E, Fs]
    const GgufTensorInfo* up_shexp = nullptr;       // [E, Fs]
    const GgufTensorInfo* down_shexp = nullptr;     // [Fs, E]
};

class Model {
public:
    /// Opens and validates `path`: architecture known, hyperparameters present, every tensor of
    /// the architecture's table present with the right shape and a type the CPU kernels handle.
    /// Throws nitro::Error naming the file and the problem.
    explicit Model(const std::string& path);

    const GgufModel& gguf() const { return *gguf_; }
    const ModelHparams& hp() const { return hp_; }
    const ArchConfig& config() const { return config_; }
    int64_t n_vocab() const { return n_vocab_; }
    const std::vector<LayerWeights>& layers() const { return layers_; }
    const GgufTensorInfo& token_embd() const { return *token_embd_; }
    const GgufTensorInfo& output_norm() const { return *output_norm_; }
    /// The LM head [E, n_vocab]: output.weight, or token_embd when tied.
    const GgufTensorInfo& output() const { return *output_; }
    const std::string& path() const { return gguf_->path(); }

private:
    /// Throws nitro::Error naming the key when the Gated DeltaNet hyperparameters are missing or inconsistent.
    void check_ssm_hparams(const std::string& path) const;

    std::unique_ptr<GgufModel> gguf_;
    ModelHparams hp_;
    ArchConfig config_;
    int64_t n_vocab_ = 0;
    std::vector<LayerWeights> layers_;
    const GgufTensorInfo* token_embd_ = nullptr;
    const GgufTensorInfo* output_norm_ = nullptr;
    const GgufTensorInfo* output_ = nullptr;
};

}  // namespace nitro
