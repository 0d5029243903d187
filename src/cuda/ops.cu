// Kernels of src/cuda/ops.h. Numerics notes (docs/cuda.md has the full story):
//  - weights are decoded to f32 exactly as src/quant does (quant.cuh);
//  - matrix-vector products keep activations in f32 (the CPU reference rounds them to its
//    vec-dot type first; the parity harness bounds the difference);
//  - RMSNorm sums squares in double and RoPE computes its angles with the CPU's operation order.
#include "cuda/ops.h"

#include "cpu/matmul.h"
#include "cuda/common.cuh"
#include "cuda/pdl.cuh"
#include "cuda/mmvq.h"
#include "cuda/q8dot.cuh"
#include "cuda/route.cuh"
#include "ops/gpu_limits.h"


#include <cublas_v2.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <vector>

namespace nitro::cuda {

namespace {
std::atomic<int> g_pdl{-1};  ///< set_pdl_enabled: -1 the default, 0 off, 1 on
bool pdl_device() {  // compute capability 9.0 or newer (griddepcontrol)
    static const bool ok = [] {
        int dev = 0, major = 0;
        if (cudaGetDevice(&dev) != cudaSuccess) return false;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
        return major >= 9;
    }();
    return ok;
}
}  // namespace

void set_pdl_enabled(int on) { g_pdl.store(on < 0 ? -1 : on > 0 ? 1 : 0); }

bool pdl_enabled() {
    const int o = g_pdl.load(std::memory_order_relaxed);
    if (o >= 0) return o == 1 && pdl_device();
    static const bool dflt = [] {
        const char* e = std::getenv("NITRO_PDL");
        return !(e && std::string_view(e) == "0");
    }();
    return dflt && pdl_device();
}

// ------------------------------------------------------------------------------ norms, add

namespace {

/// The RMSNorm scale 1 / sqrt(mean(x^2) + eps) of the n values xr[i] (f64 sum of squares, each
/// thread over i = threadIdx.x, + blockDim.x, ..., then a fixed tree), for every thread of the block.
__device__ float rms_scale(const float* xr, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += static_cast<double>(xr[i]) * xr[i];
    __shared__ double red[32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = sum;
    __syncthreads();
    if (threadIdx.x < 32) {
        double v = threadIdx.x < blockDim.x / 32 ? red[threadIdx.x] : 0.0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (threadIdx.x == 0) red[0] = v;
    }
    __syncthreads();
    const float scale = 1.0f / sqrtf(static_cast<float>(red[0] / static_cast<double>(n)) + eps);
    __syncthreads();  // red is reused by the next call
    return scale;
}

/// rms_norm's block size for rows of n values (the reduction order depends on it).
inline int rms_threads(int64_t n) { return n >= 1024 ? 512 : (n >= 256 ? 256 : 64); }

/// Blocks per row: one per blockDim.x values for decode-sized row counts (a 2048-value row in 4
/// blocks that each sum the whole row: one pass of writes each, not four in one block), else 1.
inline unsigned rms_slices(int64_t n_rows, int64_t n) {
    return n_rows <= kGemvMaxTokens ? static_cast<unsigned>(ceil_div(n, rms_threads(n))) : 1u;
}

/// Blocks of rows (blockIdx.x) and slices (blockIdx.y): every block of a row computes the row's
/// scale (the same sum in the same order), then writes values blockIdx.y * blockDim.x + threadIdx.x,
/// + gridDim.y * blockDim.x, ... (rms_slices: decode rows in several blocks, shorter chains).
__global__ void rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ w, int64_t n, int64_t ld_x,
                                float eps, float* __restrict__ out, int64_t ld_out, float* __restrict__ host_out) {
    pdl_begin();
    const float* xr = x + blockIdx.x * ld_x;
    const float scale = rms_scale(xr, n, eps);
    float* o = out + blockIdx.x * ld_out;
    for (int64_t i = blockIdx.y * blockDim.x + threadIdx.x; i < n; i += gridDim.y * blockDim.x) {
        const float y = w ? __fmul_rn(__fmul_rn(xr[i], scale), w[i]) : __fmul_rn(xr[i], scale);
        o[i] = y;
        if (host_out) host_out[blockIdx.x * n + i] = y;
    }
}

/// rms_norm_kernel, then its outputs quantized as quantize_q8_kernel quantizes them: q [n] int8
/// and d [n / 32] of this row. Threads walk the row in steps of blockDim.x (a multiple of the
/// block of VDT), so a warp (Q8_0) or 256 threads (Q8_K) hold one whole block in each step.
template <GgmlType VDT>
__global__ void rms_norm_q8_kernel(const float* __restrict__ x, const float* __restrict__ w, int64_t n, int64_t ld_x,
                                   float eps, float* __restrict__ out, int64_t ld_out, float* __restrict__ host_out,
                                   int8_t* __restrict__ q, float* __restrict__ d) {
    pdl_begin();
    const float* xr = x + blockIdx.x * ld_x;
    const float scale = rms_scale(xr, n, eps);
    float* o = out + blockIdx.x * ld_out;
    int8_t* qr = q + blockIdx.x * n;
    float* dr = d + blockIdx.x * (n / 32);
    // the same trip count for every thread of the block
    for (int64_t base = blockIdx.y * blockDim.x; base < n; base += gridDim.y * blockDim.x) {
        const int64_t i = base + threadIdx.x;
        const bool in = i < n;
        float y = 0.f;
        if (in) {
            y = w ? __fmul_rn(__fmul_rn(xr[i], scale), w[i]) : __fmul_rn(xr[i], scale);
            o[i] = y;
            if (host_out) host_out[blockIdx.x * n + i] = y;
        }
        int qi;
        float di;
        q8_value<VDT>(y, qi, di);
        if (!in) continue;
        qr[i] = static_cast<int8_t>(qi);
        if ((i & 31) == 0) dr[i / 32] = di;
    }
}

__global__ void add_kernel(float* __restrict__ x, const float* __restrict__ y, const float* __restrict__ b, int64_t total,
                           int64_t n) {
    pdl_begin();
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= total) return;
    float v = x[i];
    if (y) v += y[i];
    if (b) v += b[i % n];
    x[i] = v;
}

}  // namespace

void rms_norm(cudaStream_t s, const float* x, const float* w, int64_t n_rows, int64_t n, int64_t ld_x, float eps, float* out,
              int64_t ld_out, float* host_out) {
    if (n_rows <= 0) return;
    const int threads = rms_threads(n);
    const dim3 grid(static_cast<unsigned>(n_rows), rms_slices(n_rows, n));
    launch_pdl(s, grid, threads, 0, rms_norm_kernel, x, w, n, ld_x, eps, out, ld_out, host_out);
    NITRO_CUDA_LAUNCH_CHECK();
}

const Q8Acts* q8_ready(const Q8Input* in, const float* x, int64_t ldx, int64_t n_tok, GgmlType weight) {
    if (!in || !in->x || in->x != x || in->ldx != ldx || in->rows != n_tok) return nullptr;
    if (!q8_supported(weight) || cpu::vec_dot_type(weight) != in->vdt || in->acts.ne0 <= 0) return nullptr;
    return &in->acts;
}

bool rms_norm_q8(cudaStream_t s, const float* x, const float* w, int64_t n_rows, int64_t n, int64_t ld_x, float eps,
                 float* out, int64_t ld_out, float* host_out, GgmlType weight, void* buf, size_t buf_bytes, Q8Input& q) {
    q = Q8Input{};
    if (n_rows <= 0 || n_rows > kGemvMaxTokens || !buf || !q8_supported(weight)) return false;
    const GgmlType vdt = cpu::vec_dot_type(weight);
    const int64_t block = vdt == GgmlType::Q8_K ? 256 : 32;
    const int threads = rms_threads(n);  // rms_norm's (its reduction order)
    if ((vdt != GgmlType::Q8_0 && vdt != GgmlType::Q8_K) || n % block != 0 || threads % block != 0 || threads > 512 ||
        q8_act_bytes(n_rows, n) > buf_bytes)
        return false;
    const Q8Acts view = q8_acts_view(buf, n_rows, n);  // quantize_q8's layout
    auto* qp = static_cast<int8_t*>(buf);
    auto* dp = const_cast<float*>(view.d);
    const dim3 grid(static_cast<unsigned>(n_rows), rms_slices(n_rows, n));
    if (vdt == GgmlType::Q8_0)
        launch_pdl(s, grid, threads, 0, rms_norm_q8_kernel<GgmlType::Q8_0>, x, w, n, ld_x, eps, out, ld_out, host_out, qp,
                   dp);
    else
        launch_pdl(s, grid, threads, 0, rms_norm_q8_kernel<GgmlType::Q8_K>, x, w, n, ld_x, eps, out, ld_out, host_out, qp,
                   dp);
    NITRO_CUDA_LAUNCH_CHECK();
    q.x = out;
    q.ldx = ld_out;
    q.rows = n_rows;
    q.vdt = vdt;
    q.acts = view;
    return true;
}

void add(cudaStream_t s, float* x, const float* y, const float* b, int64_t n_rows, int64_t n) {
    if (n_rows * n <= 0) return;
    launch_pdl(s, ceil_div(n_rows * n, 256), 256, 0, add_kernel, x, y, b, n_rows * n, n);
    NITRO_CUDA_LAUNCH_CHECK();
}

// ------------------------------------------------------------------------------ RoPE, KV

namespace {

struct RopeDev {
    int n_rot;
    float theta_scale, freq_scale, ext_factor, mscale, corr0, corr1;
};

/// Rotates the pair (v[i], v[i + n_rot/2]) of one head at position pos (cpu::rope_cache and
/// cpu::rope_neox: the same float operations in the same order).
__device__ __forceinline__ void rope_pair(float* v, int i, int64_t pos, const RopeDev& p) {
    const int half = p.n_rot / 2;
    // cpu::rope_cache: theta_extrap = pos * theta_scale^i by repeated multiplication.
    float theta_extrap = static_cast<float>(pos);
    for (int k = 0; k < i; ++k) theta_extrap = __fmul_rn(theta_extrap, p.theta_scale);
    const float theta_interp = __fmul_rn(p.freq_scale, theta_extrap);
    float theta = theta_interp;
    float mscale = 1.0f;
    if (p.ext_factor != 0.0f) {
        const float y = __fdiv_rn(static_cast<float>(i) - p.corr0, fmaxf(0.001f, p.corr1 - p.corr0));
        const float ramp = 1.0f - fminf(1.0f, fmaxf(0.0f, y));
        const float ramp_mix = __fmul_rn(ramp, p.ext_factor);
        theta = __fadd_rn(__fmul_rn(theta_interp, 1 - ramp_mix), __fmul_rn(theta_extrap, ramp_mix));
        mscale = p.mscale;
    } else {
        mscale = p.mscale;
    }
    const float c = __fmul_rn(cosf(theta), mscale), sn = __fmul_rn(sinf(theta), mscale);
    const float a = v[i], b = v[i + half];
    v[i] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, sn));
    v[i + half] = __fadd_rn(__fmul_rn(a, sn), __fmul_rn(b, c));
}

__global__ void rope_kernel(float* __restrict__ x, int64_t n_heads, int64_t head_dim, int64_t ld, RopeDev p,
                            const int32_t* __restrict__ pos0, int64_t total) {
    const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    const int half = p.n_rot / 2;
    if (idx >= total) return;
    const int i = static_cast<int>(idx % half);
    const int64_t h = (idx / half) % n_heads;
    const int64_t t = idx / (static_cast<int64_t>(half) * n_heads);
    rope_pair(x + t * ld + h * head_dim, i, *pos0 + t, p);
}

/// qk_norm_rope_kv_store: block (j, t) of token t: j < n_head a q head, then the k heads, then
/// pieces of 256 values of v. A head is normed (rms_scale, as rms_norm), synchronised, rotated
/// pair by pair (rope_pair), and k is stored to the cache (as kv_store).
__global__ void qk_rope_kv_kernel(float* __restrict__ q, float* __restrict__ k, const float* __restrict__ v, int n_head,
                                  int n_head_kv, int head_dim, int64_t dim_v, const float* __restrict__ q_norm,
                                  const float* __restrict__ k_norm, float eps, RopeDev p, const int32_t* __restrict__ pos0,
                                  __half* __restrict__ k_cache, __half* __restrict__ v_cache, int64_t capacity) {
    pdl_begin();
    const int j = static_cast<int>(blockIdx.x);
    const int64_t t = blockIdx.y;
    const int64_t slot = (*pos0 + t) % capacity;
    if (j >= n_head + n_head_kv) {
        const int64_t b = static_cast<int64_t>(j - n_head - n_head_kv) * 256;
        for (int64_t i = b + threadIdx.x; i < min(dim_v, b + 256); i += blockDim.x)
            v_cache[slot * dim_v + i] = __float2half_rn(v[t * dim_v + i]);
        return;
    }
    const bool is_q = j < n_head;
    float* x = is_q ? q + (t * n_head + j) * head_dim : k + (t * n_head_kv + (j - n_head)) * head_dim;
    const float* w = is_q ? q_norm : k_norm;
    if (w) {
        const float scale = rms_scale(x, head_dim, eps);
        for (int i = threadIdx.x; i < head_dim; i += blockDim.x) x[i] = __fmul_rn(__fmul_rn(x[i], scale), w[i]);
        __syncthreads();
    }
    for (int i = threadIdx.x; i < p.n_rot / 2; i += blockDim.x) rope_pair(x, i, *pos0 + t, p);
    if (is_q) return;
    __syncthreads();
    const int64_t dim_k = static_cast<int64_t>(n_head_kv) * head_dim;
    __half* kc = k_cache + slot * dim_k + static_cast<int64_t>(j - n_head) * head_dim;
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) kc[i] = __float2half_rn(x[i]);
}

__global__ void kv_store_kernel(const float* __restrict__ src, int64_t n_tok, int64_t dim, __half* __restrict__ cache,
                                int64_t capacity, const int32_t* __restrict__ pos0) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= n_tok * dim) return;
    const int64_t t = i / dim, d = i % dim;
    const int64_t slot = (*pos0 + t) % capacity;
    cache[slot * dim + d] = __float2half_rn(src[i]);
}

}  // namespace

namespace {

RopeDev rope_dev(const RopeParams& p) {
    RopeDev d{};
    d.n_rot = p.n_rot;
    d.theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
    d.freq_scale = p.freq_scale;
    d.ext_factor = p.ext_factor;
    d.mscale = p.attn_factor;
    if (p.ext_factor != 0.0f) {
        d.corr0 = p.corr_low;
        d.corr1 = p.corr_high;
        d.mscale = p.attn_factor * (1.0f + 0.1f * std::log(1.0f / p.freq_scale));
    }
    return d;
}

}  // namespace

void rope_neox(cudaStream_t s, float* x, int64_t n_tok, int64_t n_heads, int64_t head_dim, int64_t ld,
               const RopeParams& p, const int32_t* pos0) {
    const RopeDev d = rope_dev(p);
    const int64_t total = n_tok * n_heads * (p.n_rot / 2);
    if (total <= 0) return;
    rope_kernel<<<ceil_div(total, 256), 256, 0, s>>>(x, n_heads, head_dim, ld, d, pos0, total);
    NITRO_CUDA_LAUNCH_CHECK();
}

void kv_store(cudaStream_t s, const float* k, const float* v, int64_t n_tok, int64_t dim_k, int64_t dim_v,
              uint16_t* k_cache, uint16_t* v_cache, int64_t capacity, const int32_t* pos0) {
    kv_store_kernel<<<ceil_div(n_tok * dim_k, 256), 256, 0, s>>>(k, n_tok, dim_k, reinterpret_cast<__half*>(k_cache),
                                                                  capacity, pos0);
    NITRO_CUDA_LAUNCH_CHECK();
    kv_store_kernel<<<ceil_div(n_tok * dim_v, 256), 256, 0, s>>>(v, n_tok, dim_v, reinterpret_cast<__half*>(v_cache),
                                                                  capacity, pos0);
    NITRO_CUDA_LAUNCH_CHECK();
}

void qk_norm_rope_kv_store(cudaStream_t s, float* q, float* k, const float* v, int64_t n_tok, int64_t n_head,
                           int64_t n_head_kv, int64_t head_dim, int64_t dim_v, const float* q_norm, const float* k_norm,
                           float eps, const RopeParams& p, const int32_t* pos0, uint16_t* k_cache, uint16_t* v_cache,
                           int64_t capacity) {
    if (n_tok <= 0) return;
    if ((q_norm == nullptr) != (k_norm == nullptr)) cfail("CUDA qk_norm_rope_kv_store: q_norm and k_norm go together");
    // rms_norm's block size for head_dim values, so the norms sum in its order (the same bits)
    const int threads = q_norm ? rms_threads(head_dim) : 64;
    const dim3 grid(static_cast<unsigned>(n_head + n_head_kv + (dim_v + 255) / 256), static_cast<unsigned>(n_tok));
    launch_pdl(s, grid, threads, 0, qk_rope_kv_kernel, q, k, v, static_cast<int>(n_head), static_cast<int>(n_head_kv),
               static_cast<int>(head_dim), dim_v, q_norm, k_norm, eps, rope_dev(p), pos0, reinterpret_cast<__half*>(k_cache),
               reinterpret_cast<__half*>(v_cache), capacity);
    NITRO_CUDA_LAUNCH_CHECK();
}

// ------------------------------------------------------------------------------ router

namespace {

/// One warp per token (route.cuh's route_token).
template <int NPL>
__global__ void route_kernel(const float* __restrict__ logits, const float* __restrict__ logit_bias,
                             const float* __restrict__ score_bias, int n, int X, int K, GatingSpec g, RouteOut o) {
    pdl_begin();
    const int warp = threadIdx.x / kWarp;
    const int t = blockIdx.x * (blockDim.x / kWarp) + warp;
    if (t >= n) return;
    route_token<NPL>(logits + static_cast<int64_t>(t) * X, logit_bias, score_bias, t, X, K, g, o);
}

__global__ void wait_flag_kernel(const volatile uint32_t* flag, const uint32_t* __restrict__ step, uint64_t* t_ns) {
    const uint32_t want = *step;
    const uint64_t t0 = globaltimer_ns();
    // Wrap-safe "flag has reached step".
    while (static_cast<int32_t>(*flag - want) < 0) __nanosleep(200);
    __threadfence_system();
    if (t_ns) {
        t_ns[0] = t0;
        t_ns[1] = globaltimer_ns();
    }
}

}  // namespace

void wait_flag(cudaStream_t s, const volatile uint32_t* flag, const uint32_t* step, uint64_t* t_ns) {
    wait_flag_kernel<<<1, 1, 0, s>>>(flag, step, t_ns);
    NITRO_CUDA_LAUNCH_CHECK();
}

void check_route(const RouteArgs& a) {
    const int64_t X = a.n_expert;
    const int K = a.k;
    if (X > 32 * kMaxExpertsPerLane) cfail("CUDA router: {} experts (at most {} supported)", X, 32 * kMaxExpertsPerLane);
    if (K < 1 || K > 32 || K > X) cfail("CUDA router: {} experts used of {} (at most 32)", K, X);
    if (const std::string why = gating_problem(a.gating, X, K); !why.empty()) cfail("CUDA router: {}", why);
    if (a.gating.score_bias != (a.score_bias != nullptr))
        cfail("CUDA router: the gating {} a score bias but {} was given", a.gating.score_bias ? "takes" : "takes no",
              a.score_bias ? "one" : "none");
}

RouteOut route_out(const RouteArgs& a, const RouterHostOut* host) {
    return RouteOut{a.ids, a.weights, a.margin, host ? host->ids : nullptr, host ? host->w : nullptr, host ? host->margin : nullptr,
                    host ? host->ready : nullptr, host ? host->step : nullptr, host ? host->t_ns : nullptr};
}

void route(cudaStream_t s, const RouteArgs& a, const RouterHostOut* host) {
    check_route(a);
    if (host && host->ready && a.n != 1) cfail("CUDA router: the host ready flag is for single-token steps");
    constexpr int kWarpsPerBlock = 4;
    const RouteOut o = route_out(a, host);
    with_lanes_per_expert(a.n_expert, [&]<int NPL>() {
        launch_pdl(s, ceil_div(a.n, kWarpsPerBlock), kWarpsPerBlock * kWarp, 0, route_kernel<NPL>, a.logits, a.logit_bias,
                   a.score_bias, static_cast<int>(a.n), static_cast<int>(a.n_expert), a.k, a.gating, o);
    });
    NITRO_CUDA_LAUNCH_CHECK();
}


}  // namespace nitro::cuda
