// Element-wise and small ops of the transformer forward pass on the CPU (f32).
// The math follows llama.cpp's CPU backend (ggml-cpu/ops.cpp) so both engines compute the same
// functions; each op's source is named at its declaration.
#pragma once

#include "ops/rope.h"

#include <cstdint>
#include <span>

namespace nitro::cpu {

/// out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i], over n values (ggml_rms_norm then ggml_mul).
/// `w` may be nullptr (no scale). out may alias x.
void rms_norm(const float* x, const float* w, int64_t n, float eps, float* out);

/// x[i] += b[i] for i < n.
void add(float* x, const float* b, int64_t n);

/// Precomputed cos/sin for one position: cache[2*i] = cos, cache[2*i+1] = sin for pair i < n_rot/2
/// (ggml_rope_cache_init).
void rope_cache(const RopeParams& p, int64_t pos, float* cache);

/// NEOX-style rotation (pairs (x[i], x[i + n_rot/2])) of `n_heads` heads of `head_dim` values,
/// in place, with a cache from rope_cache (ggml rope, GGML_ROPE_TYPE_NEOX).
void rope_neox(float* x, int64_t n_heads, int64_t head_dim, int n_rot, const float* cache);

/// In-place softmax over n values.
void softmax(float* x, int64_t n);

/// out[i] = silu(gate[i]) * up[i] (ggml_swiglu). out may alias gate.
void swiglu(const float* gate, const float* up, int64_t n, float* out);

/// gpt-oss's clamped SwiGLU (ggml_swiglu_oai, alpha 1.702, limit 7.0):
/// g = min(gate, limit); u = clamp(up, -limit, limit); out = g * sigmoid(alpha * g) * (u + 1).
void swiglu_oai(const float* gate, const float* up, int64_t n, float alpha, float limit, float* out);

/// Indices of the k largest values of x[0..n) in descending order of value (ties: lower index
/// first), written to idx[0..k).
void top_k(const float* x, int64_t n, int k, int32_t* idx);

/// x[idx[k-1]] - max over the values not in idx[0..k): how far the last selected value is above
/// the first one left out (the router's selection margin; +inf when k == n). idx as top_k wrote it.
float top_k_margin(const float* x, int64_t n, int k, const int32_t* idx);

}  // namespace nitro::cpu
