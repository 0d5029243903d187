// The router of one token (cpu::route's arithmetic: every gating of ops/moe.h GatingSpec), shared
// by route's kernel (ops.cu) and the decode router GEMV that routes in its last block
// (router_top_k, matmul.cu).
#pragma once

#include "cuda/common.cuh"
#include "ops/moe.h"

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

/// The best value and its expert id over the lanes' experts e with lo <= e < hi (e < X), skipping
/// `skip`; ties to the lower id (cpu::top_k). Every lane gets the result.
template <int NPL>
__device__ __forceinline__ void best_in_range(const float (&v)[NPL], int X, int lo, int hi, int skip, float& bv, int& bi) {
    const int lane = threadIdx.x % kWarp;
    bv = -INFINITY;
    bi = 0x7fffffff;
#pragma unroll
    for (int i = 0; i < NPL; ++i) {
        const int e = lane + 32 * i;
        if (e < X && e >= lo && e < hi && e != skip && (v[i] > bv || (v[i] == bv && e < bi))) {
            bv = v[i];
            bi = e;
        }
    }
    warp_argmax(bv, bi);
}

/// Group-limited selection (cpu/moe.cpp keep_best_groups): a group scores the sum of its two best
/// values, the topk_group best groups keep their experts, the others' values become -inf.
template <int NPL>
__device__ __forceinline__ void keep_best_groups(float (&v)[NPL], int X, int n_group, int topk_group) {
    const int lane = threadIdx.x % kWarp;
    const int gs = X / n_group;
    float gscore = -INFINITY;  // lane g: group g's score
    for (int g = 0; g < n_group; ++g) {
        float b1, b2;
        int i1, i2;
        best_in_range<NPL>(v, X, g * gs, (g + 1) * gs, -1, b1, i1);
        best_in_range<NPL>(v, X, g * gs, (g + 1) * gs, i1, b2, i2);
        if (lane == g) gscore = b1 + b2;
    }
    uint32_t keep = 0;
    for (int r = 0; r < topk_group; ++r) {
        float bv = lane < n_group ? gscore : -INFINITY;
        int bi = lane < n_group ? lane : 0x7fffffff;
        warp_argmax(bv, bi);
        keep |= 1u << bi;
        if (lane == bi) gscore = -INFINITY;
    }
#pragma unroll
    for (int i = 0; i < NPL; ++i) {
        const int e = lane + 32 * i;
        if (e < X && !((keep >> (e / gs)) & 1u)) v[i] = -INFINITY;
    }
}

/// Routes token t, one whole warp, as cpu::route (cpu/moe.cpp) does (ops/moe.h RouteArgs): lg = its
/// X router logits (read through L2, __ldcg: another block of the same grid may have written them),
/// + logit_bias; lane j holds the scores of experts j, j + 32, ... (NPL of them, NPL * 32 >= X); the
/// k-th selection ends in lane k's registers (no per-thread arrays: they went to local memory), and
/// the weights are summed in selection order as cpu::route sums them.
template <int NPL>
__device__ __forceinline__ void route_token(const float* lg, const float* __restrict__ logit_bias,
                                            const float* __restrict__ score_bias, int t, int X, int K, const GatingSpec& g,
                                            const RouteOut& o) {
    const int lane = threadIdx.x % kWarp;
    const bool softmax_all = !g.weights_from_logits && g.score == GatingSpec::Score::Softmax;
    const bool plain = !g.score_bias && g.n_group <= 1;
    float v[NPL];
#pragma unroll
    for (int i = 0; i < NPL; ++i) {
        const int e = lane + 32 * i;
        v[i] = e < X ? __ldcg(lg + e) + (logit_bias ? logit_bias[e] : 0.f) : -INFINITY;
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
    } else if (!g.weights_from_logits) {  // sigmoid scores
#pragma unroll
        for (int i = 0; i < NPL; ++i)
            if (lane + 32 * i < X) v[i] = 1.0f / (1.0f + expf(-v[i]));
    }
    // p: the scores the weights come from; v: what the selection ranks (+ score_bias, groups kept)
    float p[NPL];
#pragma unroll
    for (int i = 0; i < NPL; ++i) p[i] = v[i];
    if (!plain) {
        if (score_bias) {
#pragma unroll
            for (int i = 0; i < NPL; ++i) {
                const int e = lane + 32 * i;
                if (e < X) v[i] += score_bias[e];
            }
        }
        if (g.n_group > 1) keep_best_groups<NPL>(v, X, g.n_group, g.topk_group);
    }
    // top-k: K rounds of a warp arg-max; ties to the lower id (cpu::top_k). Lane k keeps round k's
    // ranked value (sel), its score (sel_p) and id.
    float sel = -INFINITY, sel_p = 0.f;
    int sel_id = 0;
    for (int k = 0; k < K; ++k) {
        float bv;
        int bi;
        best_in_range<NPL>(v, X, 0, X, -1, bv, bi);
        float pv = 0.f;
#pragma unroll
        for (int i = 0; i < NPL; ++i)
            if (lane + 32 * i == bi) {
                pv = p[i];
                v[i] = -INFINITY;
            }
        pv = __shfl_sync(0xffffffffu, pv, bi % kWarp);
        if (lane == k) {
            sel = bv;
            sel_p = pv;
            sel_id = bi;
        }
    }
    // The best unselected value: the margin of the selection (cpu::top_k_margin).
    float next = -INFINITY;
#pragma unroll
    for (int i = 0; i < NPL; ++i)
        if (lane + 32 * i < X) next = fmaxf(next, v[i]);
    next = warp_max(next);
    // The weights, every lane summing the selections in order (the same sum in every lane).
    float w = sel_p;
    if (g.weights_from_logits) {  // softmax over the selected logits
        float m = -INFINITY;
        for (int k = 0; k < K; ++k) m = fmaxf(m, __shfl_sync(0xffffffffu, sel_p, k));
        const float e = lane < K ? expf(sel_p - m) : 0.f;
        double sum = 0.0;
        for (int k = 0; k < K; ++k) sum += __shfl_sync(0xffffffffu, e, k);
        w = e * static_cast<float>(1.0 / sum);
    }
    if (g.norm_weights) {
        float sum = 0.f;
        for (int k = 0; k < K; ++k) sum += __shfl_sync(0xffffffffu, w, k);
        w = w / fmaxf(sum, kMinWeightsSum);
    }
    if (g.weights_scale != 1.0f) w *= g.weights_scale;
    const float last = __shfl_sync(0xffffffffu, sel, K - 1);
    if (lane == 0) {
        const float mg = K >= X ? INFINITY : plain && softmax_all ? logf(last) - logf(next) : last - next;
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

struct RouterHostOut;  // ops.h
/// Throws (naming what) unless the CUDA router can run a: at most 512 experts, 32 used, a gating
/// it implements with the score bias it asks for (ops.cu).
void check_route(const RouteArgs& a);
/// Where route_token writes a's results (and host's copies, when given).
RouteOut route_out(const RouteArgs& a, const RouterHostOut* host);

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
