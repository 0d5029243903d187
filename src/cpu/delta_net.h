// Gated DeltaNet (linear attention) on the CPU, f32: the causal conv1d with its state, the
// gated delta rule (token by token for decode, chunked for prompts) and the small element-wise
// functions around them. Math: Yang, Kautz, Hatamizadeh 2024, "Gated Delta Networks: Improving
// Mamba2 with Delta Rule" (arXiv:2412.06464); the chunked form as transformers'
// modeling_qwen3_next.py torch_chunk_gated_delta_rule and llama.cpp's
// src/models/delta-net-base.cpp build_delta_net_chunking compute it; the single step as ggml's
// ggml_compute_forward_gated_delta_net (ggml-cpu/ops.cpp) does.
//
// State layout (as ggml's): for one value head the state S is [d_k, d_v], stored transposed,
// M[j * d + i] = S[i][j] (row j is value dim j, contiguous over the key dim i), so every product
// below walks contiguous rows. Key and value heads have the same dim d (llama.cpp asserts S_k == S_v).
//
// These loops are plain C++ compiled once for the baseline ISA: results do not depend on the
// host's SIMD level.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace nitro::cpu {

/// ggml_softplus: log(1 + exp(x)), x itself above 20.
inline float softplus(float x) { return x > 20.0f ? x : std::log(1.0f + std::exp(x)); }
/// ggml_sigmoid: 1 / (1 + exp(-x)).
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
/// ggml_silu: x / (1 + exp(-x)).
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }

/// x / max(||x||_2, eps) over n values, in place (ggml_l2_norm: the sum of squares in double).
void l2_norm(float* x, int64_t n, float eps);

/// Causal depthwise conv1d of one sequence followed by SiLU (ggml_ssm_conv then ggml_silu), for
/// channels [c0, c1). For row t of the sequence and channel c:
///   out[t][c] = silu(sum_{j < d_conv} win_c[t + j] * w[c][j]),
/// where win_c = (state[c][0 .. d_conv-2], x[0][c], x[1][c], ...) (oldest first; the sum runs in
/// this order in f32, as ggml's). Afterwards state[c] holds the last d_conv - 1 inputs of win_c.
/// x: row t at x + rows[t] * x_stride (conv_dim values); w: [conv_dim, d_conv] (ssm_conv1d);
/// state: [conv_dim, d_conv - 1]; out: row t at out + rows[t] * out_stride.
struct ConvArgs {
    const float* x = nullptr;
    int64_t x_stride = 0;
    const int64_t* rows = nullptr;  ///< [n] row indices of this sequence in the chunk, in order
    int64_t n = 0;
    const float* w = nullptr;
    int64_t d_conv = 0;
    float* state = nullptr;
    float* out = nullptr;
    int64_t out_stride = 0;
};
void ssm_conv_silu(const ConvArgs& a, int64_t c0, int64_t c1);

/// One value head of one sequence over n tokens. Row t of q, k, v at q + rows[t] * q_stride (etc.),
/// d values each; q and k already l2-normalised (q is scaled by 1/sqrt(d) inside). g[rows[t] *
/// gb_stride] is the log decay (softplus(a + dt_bias) * A, <= 0) and beta[rows[t] * gb_stride]
/// the update strength, of this head. M: the state [d (v), d (k)] (see the top of the file), read
/// and updated. out: row t at out + rows[t] * out_stride, d values.
struct DeltaHeadArgs {
    const float* q = nullptr;
    const float* k = nullptr;
    const float* v = nullptr;
    int64_t q_stride = 0, k_stride = 0, v_stride = 0;
    const float* g = nullptr;
    const float* beta = nullptr;
    int64_t gb_stride = 0;
    const int64_t* rows = nullptr;
    int64_t n = 0;
    int64_t d = 0;
    float* M = nullptr;
    float* out = nullptr;
    int64_t out_stride = 0;
};

/// Working memory of the chunked rule (per thread; grows to the largest call).
struct DeltaScratch {
    std::vector<float> q, k, kb, u, w, gc, A, qk, vnew;
};

/// The gated delta rule token by token (ggml_gated_delta_net's loop): per token
///   S = exp(g) S;  delta = beta (v - S^T k);  S = S + k delta^T;  out = S^T q / sqrt(d).
void gated_delta_rule_steps(const DeltaHeadArgs& a);

/// The same result computed in chunks of `chunk` tokens (64, as transformers and llama.cpp): within
/// a chunk, with gc the cumulative log decay, A[t][s] = beta_t (k_t . k_s) exp(gc_t - gc_s) for
/// s < t, T = (I + A)^-1 by forward substitution, U = T (beta v), W = T (beta exp(gc) k); then
/// v_new = U - W S, out = exp(gc) q S + tril(q k^T exp(gc_t - gc_s)) v_new, and
/// S = exp(gc_last) S + (k exp(gc_last - gc))^T v_new. Equal to gated_delta_rule_steps up to
/// rounding (f32; tested).
void gated_delta_rule_chunked(const DeltaHeadArgs& a, DeltaScratch& s, int64_t chunk = 64);

}  // namespace nitro::cpu
