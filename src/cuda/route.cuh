// The router's top-k of one token (cpu::route's arithmetic, bit for bit), shared by
// top_k_route's kernel (ops.cu) and the decode router GEMV that routes in its last block
// (router_top_k, matmul.cu).
#pragma once

#include "cuda/common.cuh"

#include <cstdint>

namespace nitro::cuda {

constexpr int kMaxExpertsPerLane = 16;  // up to 512 experts

__device__ __forceinline__ void warp_argmax(float& v, int& idx) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (ov > v || (ov == v && oi < idx)) {
            v = ov;
            idx = oi;
        }
    }
}

__device__ __forceinline__ uint64_t globaltimer_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/// Where route_token writes token t's selection: ids/w [n, K], margin [n] (device, optional), and
/// the pinned host copies with their ready flag (RouterHostOut; all null when unused).
struct RouteOut {
    int32_t* ids;
    float* w;
    float* margin;
    int32_t* host_ids;
    float* host_w;
    float* host_margin;
    volatile uint32_t* host_ready;
    const uint32_t* step;
    uint64_t* host_t;
};

/// Routes token t, one whole warp: lg = its X router logits (read through L2, __ldcg: another
/// block of the same grid may have written them), + bias; lane j holds the scores of experts j,
/// j + 32, ... (NPL of them, NPL * 32 >= X); the k-th selection ends in lane k's registers (no
/// per-thread arrays: they went to local memory), and the weights are summed in selection order
/// as cpu::route (cpu/moe.cpp) sums them.
template <int NPL>
__device__ __forceinline__ void route_token(const float* lg, const float* __restrict__ bias, int t, int X, int K,
                                            int softmax_all, const RouteOut& o) {
    const int lane = threadIdx.x % kWarp;
    float v[NPL];
#pragma unroll
    for (int i = 0; i < NPL; ++i) {
        const int e = lane + 32 * i;
        v[i] = e < X ? __ldcg(lg + e) + (bias ? bias[e] : 0.f) : -INFINITY;
    }
    if (softmax_all) {  // cpu::softmax: float exp, double sum, multiply by (float)(1/sum)
        float m = -INFINITY;
#pragma unroll
        for (int i = 0; i < NPL; ++i) m = fmaxf(m, v[i]);
        m = warp_max(m);
        double sum = 0.0;
#pragma unroll
        for (int i = 0; i < NPL; ++i) {
            const int e = lane + 32 * i;
            v[i] = e < X ? expf(v[i] - m) : -INFINITY;
            if (e < X) sum += v[i];
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        const float inv = static_cast<float>(1.0 / sum);
#pragma unroll
        for (int i = 0; i < NPL; ++i)
            if (lane + 32 * i < X) v[i] *= inv;
    }
    // top-k: K rounds of a warp arg-max; ties to the lower id (cpu::top_k). Lane k keeps round k's.
    float sel = -INFINITY;
    int sel_id = 0;
    for (int k = 0; k < K; ++k) {
        float bv = -INFINITY;
        int bi = 0x7fffffff;
#pragma unroll
        for (int i = 0; i < NPL; ++i) {
            const int e = lane + 32 * i;
            if (e < X && (v[i] > bv || (v[i] == bv && e < bi))) {
                bv = v[i];
                bi = e;
            }
        }
        warp_argmax(bv, bi);
        if (lane == k) {
            sel = bv;
            sel_id = bi;
        }
#pragma unroll
        for (int i = 0; i < NPL; ++i)
            if (lane + 32 * i == bi) v[i] = -INFINITY;
    }
    // The best unselected value: the margin of the selection (cpu::top_k_margin).
    float next = -INFINITY;
#pragma unroll
    for (int i = 0; i < NPL; ++i)
        if (lane + 32 * i < X) next = fmaxf(next, v[i]);
    next = warp_max(next);
    // The weights, every lane summing the selections in order (the same sum in every lane).
    float w;
    if (softmax_all) {  // renormalise the selected probabilities
        float sum = 0.f;
        for (int k = 0; k < K; ++k) sum += __shfl_sync(0xffffffffu, sel, k);
        w = sel / sum;
    } else {  // softmax over the selected logits
        float m = -INFINITY;
        for (int k = 0; k < K; ++k) m = fmaxf(m, __shfl_sync(0xffffffffu, sel, k));
        const float e = lane < K ? expf(sel - m) : 0.f;
        double sum = 0.0;
        for (int k = 0; k < K; ++k) sum += __shfl_sync(0xffffffffu, e, k);
        w = e * static_cast<float>(1.0 / sum);
    }
    const float last = __shfl_sync(0xffffffffu, sel, K - 1);
    if (lane == 0) {
        const float mg = K >= X ? INFINITY : softmax_all ? logf(last) - logf(next) : last - next;
        if (o.margin) o.margin[t] = mg;
        if (o.host_margin) o.host_margin[t] = mg;
    }
    if (lane < K) {
        o.ids[t * K + lane] = sel_id;
        o.w[t * K + lane] = w;
        if (o.host_ids) {
            o.host_ids[t * K + lane] = sel_id;
            o.host_w[t * K + lane] = w;
        }
    }
    if (o.host_ready) {
        __threadfence_system();  // every lane's ids and weights reach host memory before the flag
        __syncwarp();
        if (lane == 0) {
            if (o.host_t) *o.host_t = globaltimer_ns();
            *o.host_ready = *o.step;
        }
    }
}

/// Calls f.template operator()<NPL>() with NPL = ceil(X / 32) rounded up to a power of two, the
/// route_token instance for X experts (X <= 32 * kMaxExpertsPerLane, checked by the callers).
template <typename F>
void with_lanes_per_expert(int64_t X, F&& f) {
    if (X <= 32) f.template operator()<1>();
    else if (X <= 64) f.template operator()<2>();
    else if (X <= 128) f.template operator()<4>();
    else if (X <= 256) f.template operator()<8>();
    else f.template operator()<kMaxExpertsPerLane>();
}

}  // namespace nitro::cuda
