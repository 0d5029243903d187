// CUDA kernels of qwen3next's layers beyond the plain attention + MoE block: the Gated DeltaNet
// (conv1d with its state, q/k l2 norm, the gated delta rule, the gated RMSNorm's SiLU gate), the
// gated attention's output gate and the sigmoid-gated shared expert. Same names and math as
// src/cpu/delta_net.h (the CPU reference they are tested against, tests/cuda); all pointers are
// device pointers, f32, row-major.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace nitro::cuda {

/// Gated attention: attn_q's output qg [n, n_head, 2, hd] (q then gate per head, llama.cpp
/// qwen3next build_layer_attn) -> q [n, n_head * hd] and gate [n, n_head * hd].
void split_q_gate(cudaStream_t s, const float* qg, int64_t n, int64_t n_head, int64_t hd, float* q, float* gate);
/// x[i] *= sigmoid(g[i]) for i < count.
void mul_sigmoid(cudaStream_t s, float* x, const float* g, int64_t count);
/// x[i] *= silu(z[i]) for i < count (the gate of the DeltaNet's gated RMSNorm).
void mul_silu(cudaStream_t s, float* x, const float* z, int64_t count);
/// out[i] = silu(gate[i]) * up[i] for i < count (out may alias gate).
void swiglu(cudaStream_t s, const float* gate, const float* up, int64_t count, float* out);

/// beta and log decay of n tokens from ssm_ba's output ba [n, 2 n_v] ([beta x r, alpha x r] per
/// key head, r = n_v / n_k), or with `separate` from ssm_beta's and ssm_alpha's outputs ([n, n_v]
/// each, alpha after beta): beta[t, h] = sigmoid(b), g[t, h] = softplus(a + dt_bias[h]) * A[h].
void ssm_beta_decay(cudaStream_t s, const float* ba, const float* dt_bias, const float* A, int64_t n, int64_t n_v,
                    int64_t r, bool separate, float* beta, float* g);
/// Older files' fused ssm_in output in [n, conv_dim + value_dim] ([q, k, v x r, z x r] per key
/// head) regrouped into qkv [n, conv_dim] (all q, all k, all v) and z [n, value_dim].
void ssm_in_regroup(cudaStream_t s, const float* in, int64_t n, int64_t n_k, int64_t hd, int64_t r, float* qkv, float* z);

/// Causal depthwise conv1d of one sequence's n rows x [n, C] with its state [C, d_conv - 1]
/// (oldest first), then SiLU: out[t, c] = silu(sum_j win_c[t + j] * w[c, j]); the state then
/// holds the last d_conv - 1 inputs (cpu::ssm_conv_silu). d_conv <= 64.
void ssm_conv_silu(cudaStream_t s, const float* x, int64_t n, int64_t C, const float* w, int64_t d_conv, float* state,
                   float* out);

/// x / max(||x||, eps) for each of the n_heads heads of hd values of each of n rows (ld apart).
void l2_norm_heads(cudaStream_t s, float* x, int64_t n, int64_t n_heads, int64_t hd, int64_t ld, float eps);

/// The gated delta rule of one sequence over n tokens, token by token (cpu::gated_delta_rule_steps:
/// S = exp(g) S; S += k (beta (v - S^T k))^T; o = S^T q / sqrt(d)). The rows of a value head's state
/// evolve independently, so one warp keeps one row in registers across all n tokens: the same
/// kernel serves decode (n = 1) and prompts. qkv: [n, ld] with q of the key heads at 0, k at
/// key_dim, v of the value heads at 2 key_dim (l2-normalised q and k); g, beta [n, n_v]; M: the
/// state [n_v, d, d] (row j = value dim j, cpu/delta_net.h layout); out [n, ld_out], value head h
/// at h * d. d a multiple of 32, at most 256.
struct DeltaArgs {
    const float* qkv = nullptr;
    int64_t ld = 0, key_dim = 0;
    int64_t n_k_heads = 0, n_v_heads = 0, d = 0;
    bool tiled = false;  ///< key head of value head h: h % n_k (tiled) or h / (n_v / n_k)
    const float* g = nullptr;
    const float* beta = nullptr;
    int64_t n = 0;
    float* M = nullptr;
    float* out = nullptr;
    int64_t ld_out = 0;
};
void gated_delta_rule(cudaStream_t s, const DeltaArgs& a);

/// The shared expert's gate and residual: x[t] += sigmoid(h[t] . wg) * y[t] for n rows of E values.
void shexp_gate_add(cudaStream_t s, float* x, const float* h, const float* wg, const float* y, int64_t n, int64_t E);

}  // namespace nitro::cuda
