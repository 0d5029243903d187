// Kernels of src/cuda/delta_net.h. Element-wise ones use one thread per value (256 per block);
// the conv one thread per channel looping over the tokens; l2_norm and the shared-expert gate one
// warp per row; the delta rule one warp per state row (4 per block) looping over the tokens.
// expf / logf here are CUDA's full-precision functions (not the __expf intrinsics).
#include "cuda/delta_net.h"

#include "cuda/common.cuh"

namespace nitro::cuda {

namespace {

__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float softplus_f(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

__global__ void split_q_gate_kernel(const float* __restrict__ qg, int64_t n_head, int64_t hd, float* __restrict__ q,
                                    float* __restrict__ gate, int64_t total) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;  // over [n, n_head, hd]
    if (i >= total) return;
    const int64_t d = i % hd, h = (i / hd) % n_head, t = i / (hd * n_head);
    const float* src = qg + (t * n_head + h) * 2 * hd;
    q[i] = src[d];
    gate[i] = src[hd + d];
}

__global__ void mul_sigmoid_kernel(float* __restrict__ x, const float* __restrict__ g, int64_t count) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < count) x[i] *= sigmoid_f(g[i]);
}

__global__ void mul_silu_kernel(float* __restrict__ x, const float* __restrict__ z, int64_t count) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < count) x[i] *= silu_f(z[i]);
}

__global__ void swiglu_kernel(const float* gate, const float* __restrict__ up, int64_t count, float* out) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < count) out[i] = silu_f(gate[i]) * up[i];
}

__global__ void beta_decay_kernel(const float* __restrict__ ba, const float* __restrict__ dt, const float* __restrict__ A,
                                  int64_t nv, int64_t r, bool separate, float* __restrict__ beta, float* __restrict__ g,
                                  int64_t total) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;  // over [n, nv]
    if (i >= total) return;
    const int64_t h = i % nv, t = i / nv;
    float b, a;
    if (separate) {
        b = ba[i];
        a = ba[total + i];
    } else {
        const float* row = ba + t * 2 * nv + (h / r) * 2 * r;
        b = row[h % r];
        a = row[r + h % r];
    }
    beta[i] = sigmoid_f(b);
    g[i] = softplus_f(a + dt[h]) * A[h];
}

__global__ void regroup_kernel(const float* __restrict__ in, int64_t nk, int64_t hd, int64_t r, float* __restrict__ qkv,
                               float* __restrict__ z, int64_t total) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;  // over [n, nk, grp]
    if (i >= total) return;
    const int64_t grp = 2 * hd + 2 * r * hd, kd = nk * hd, vd = nk * r * hd, cd = 2 * kd + vd;
    const int64_t e = i % grp, g = (i / grp) % nk, t = i / (grp * nk);
    const float v = in[i];
    if (e < hd) qkv[t * cd + g * hd + e] = v;
    else if (e < 2 * hd) qkv[t * cd + kd + g * hd + (e - hd)] = v;
    else if (e < 2 * hd + r * hd) qkv[t * cd + 2 * kd + g * r * hd + (e - 2 * hd)] = v;
    else z[t * vd + g * r * hd + (e - 2 * hd - r * hd)] = v;
}

__global__ void conv_kernel(const float* __restrict__ x, int64_t n, int64_t C, const float* __restrict__ w, int64_t K,
                            float* __restrict__ state, float* __restrict__ out) {
    const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (c >= C) return;
    float win[64];
    const int64_t S = K - 1;
    for (int64_t j = 0; j < S; ++j) win[j] = state[c * S + j];
    for (int64_t t = 0; t < n; ++t) {
        win[S] = x[t * C + c];
        float sum = 0.0f;
        for (int64_t j = 0; j < K; ++j) sum = __fadd_rn(sum, __fmul_rn(win[j], w[c * K + j]));  // ggml's order, no FMA
        out[t * C + c] = silu_f(sum);
        for (int64_t j = 0; j < S; ++j) win[j] = win[j + 1];
    }
    for (int64_t j = 0; j < S; ++j) state[c * S + j] = win[j];
}

__global__ void l2_norm_kernel(float* __restrict__ x, int64_t n_heads, int64_t hd, int64_t ld, float eps, int64_t rows) {
    const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / kWarp) + threadIdx.x / kWarp;  // (token, head)
    if (row >= rows) return;
    const int lane = threadIdx.x % kWarp;
    float* v = x + (row / n_heads) * ld + (row % n_heads) * hd;
    double sum = 0.0;  // ggml_l2_norm sums squares in double
    for (int64_t i = lane; i < hd; i += kWarp) sum += static_cast<double>(v[i]) * v[i];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const float scale = 1.0f / fmaxf(sqrtf(static_cast<float>(sum)), eps);
    for (int64_t i = lane; i < hd; i += kWarp) v[i] *= scale;
}

constexpr int kDeltaWarps = 4;
constexpr int kMaxPerLane = 8;  // d <= 256

__global__ void delta_kernel(DeltaArgs a) {
    const int64_t row = blockIdx.x * static_cast<int64_t>(kDeltaWarps) + threadIdx.x / kWarp;  // h * d + j
    if (row >= a.n_v_heads * a.d) return;
    const int lane = threadIdx.x % kWarp;
    const int64_t d = a.d, h = row / d, j = row % d;
    const int64_t kh = a.tiled ? h % a.n_k_heads : h / (a.n_v_heads / a.n_k_heads);
    const int npl = static_cast<int>(d / kWarp);
    const float scale = 1.0f / sqrtf(static_cast<float>(d));
    float* M = a.M + row * d;
    float m[kMaxPerLane];
#pragma unroll
    for (int c = 0; c < kMaxPerLane; ++c)
        if (c < npl) m[c] = M[lane + c * kWarp];
    for (int64_t t = 0; t < a.n; ++t) {
        const float* q = a.qkv + t * a.ld + kh * d;
        const float* k = q + a.key_dim;
        const float v = a.qkv[t * a.ld + 2 * a.key_dim + h * d + j];
        const float e = expf(a.g[t * a.n_v_heads + h]);
        const float beta = a.beta[t * a.n_v_heads + h];
        float kk[kMaxPerLane], sk = 0.0f;
#pragma unroll
        for (int c = 0; c < kMaxPerLane; ++c)
            if (c < npl) {
                kk[c] = k[lane + c * kWarp];
                m[c] *= e;
                sk += m[c] * kk[c];
            }
        const float delta = (v - warp_sum(sk)) * beta;
        float so = 0.0f;
#pragma unroll
        for (int c = 0; c < kMaxPerLane; ++c)
            if (c < npl) {
                m[c] += delta * kk[c];
                so += m[c] * q[lane + c * kWarp];
            }
        so = warp_sum(so);
        if (lane == 0) a.out[t * a.ld_out + h * d + j] = so * scale;
    }
#pragma unroll
    for (int c = 0; c < kMaxPerLane; ++c)
        if (c < npl) M[lane + c * kWarp] = m[c];
}

__global__ void shexp_gate_kernel(float* __restrict__ x, const float* __restrict__ h, const float* __restrict__ wg,
                                  const float* __restrict__ y, int64_t E) {
    const int64_t t = blockIdx.x;
    const float* hr = h + t * E;
    double dot = 0.0;
    for (int64_t i = threadIdx.x; i < E; i += blockDim.x) dot += static_cast<double>(hr[i]) * wg[i];
    __shared__ double red[32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    if (threadIdx.x % kWarp == 0) red[threadIdx.x / kWarp] = dot;
    __syncthreads();
    if (threadIdx.x < kWarp) {
        double v = threadIdx.x < blockDim.x / kWarp ? red[threadIdx.x] : 0.0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (threadIdx.x == 0) red[0] = v;
    }
    __syncthreads();
    const float g = sigmoid_f(static_cast<float>(red[0]));
    for (int64_t i = threadIdx.x; i < E; i += blockDim.x) x[t * E + i] += g * y[t * E + i];
}

int blocks(int64_t n) { return ceil_div(n, 256); }

}  // namespace

void split_q_gate(cudaStream_t s, const float* qg, int64_t n, int64_t n_head, int64_t hd, float* q, float* gate) {
    const int64_t total = n * n_head * hd;
    if (total <= 0) return;
    split_q_gate_kernel<<<blocks(total), 256, 0, s>>>(qg, n_head, hd, q, gate, total);
    NITRO_CUDA_LAUNCH_CHECK();
}

void mul_sigmoid(cudaStream_t s, float* x, const float* g, int64_t count) {
    if (count <= 0) return;
    mul_sigmoid_kernel<<<blocks(count), 256, 0, s>>>(x, g, count);
    NITRO_CUDA_LAUNCH_CHECK();
}

void mul_silu(cudaStream_t s, float* x, const float* z, int64_t count) {
    if (count <= 0) return;
    mul_silu_kernel<<<blocks(count), 256, 0, s>>>(x, z, count);
    NITRO_CUDA_LAUNCH_CHECK();
}

void swiglu(cudaStream_t s, const float* gate, const float* up, int64_t count, float* out) {
    if (count <= 0) return;
    swiglu_kernel<<<blocks(count), 256, 0, s>>>(gate, up, count, out);
    NITRO_CUDA_LAUNCH_CHECK();
}

void ssm_beta_decay(cudaStream_t s, const float* ba, const float* dt_bias, const float* A, int64_t n, int64_t n_v,
                    int64_t r, bool separate, float* beta, float* g) {
    const int64_t total = n * n_v;
    if (total <= 0) return;
    beta_decay_kernel<<<blocks(total), 256, 0, s>>>(ba, dt_bias, A, n_v, r, separate, beta, g, total);
    NITRO_CUDA_LAUNCH_CHECK();
}

void ssm_in_regroup(cudaStream_t s, const float* in, int64_t n, int64_t n_k, int64_t hd, int64_t r, float* qkv, float* z) {
    const int64_t total = n * n_k * (2 * hd + 2 * r * hd);
    if (total <= 0) return;
    regroup_kernel<<<blocks(total), 256, 0, s>>>(in, n_k, hd, r, qkv, z, total);
    NITRO_CUDA_LAUNCH_CHECK();
}

void ssm_conv_silu(cudaStream_t s, const float* x, int64_t n, int64_t C, const float* w, int64_t d_conv, float* state,
                   float* out) {
    if (n <= 0 || C <= 0) return;
    conv_kernel<<<blocks(C), 256, 0, s>>>(x, n, C, w, d_conv, state, out);
    NITRO_CUDA_LAUNCH_CHECK();
}

void l2_norm_heads(cudaStream_t s, float* x, int64_t n, int64_t n_heads, int64_t hd, int64_t ld, float eps) {
    const int64_t rows = n * n_heads;
    if (rows <= 0) return;
    l2_norm_kernel<<<ceil_div(rows, 8), 8 * kWarp, 0, s>>>(x, n_heads, hd, ld, eps, rows);
    NITRO_CUDA_LAUNCH_CHECK();
}

void gated_delta_rule(cudaStream_t s, const DeltaArgs& a) {
    const int64_t rows = a.n_v_heads * a.d;
    if (rows <= 0 || a.n <= 0) return;
    delta_kernel<<<ceil_div(rows, kDeltaWarps), kDeltaWarps * kWarp, 0, s>>>(a);
    NITRO_CUDA_LAUNCH_CHECK();
}

void shexp_gate_add(cudaStream_t s, float* x, const float* h, const float* wg, const float* y, int64_t n, int64_t E) {
    if (n <= 0) return;
    shexp_gate_kernel<<<static_cast<unsigned>(n), 256, 0, s>>>(x, h, wg, y, E);
    NITRO_CUDA_LAUNCH_CHECK();
}

}  // namespace nitro::cuda
