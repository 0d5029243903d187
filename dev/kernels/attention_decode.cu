// Kernel sandbox (issue 15): decode attention (one query per sequence over the K/V cache, with
// flash-decoding splits): the per-query kernel in src/cuda/attention.cu against the one it replaced.
//
//   build-cuda/tests/dev_attention_decode [reps]
//
//   old  one block per (KV head, query, split), one warp per query head walking all of its split's
//        keys (lanes score 32 keys, then the value sum goes key by key); splits n_ctx / 256
//        (at most 32), as the engine chose them before;
//   new  attention() with flash = false: one block of 4 warps per (KV head, head group, query,
//        split), every warp a 32-key tile of the group's heads (the K row read once for them;
//        attention_decode_heads: heads x head_dim <= 128 below 4,096 keys, the KV head's whole
//        group from there), the value sum 8 keys at a time with the
//        next 8 rows in flight, splits from attention_decode_splits (one per 128 keys, within the
//        buffer's room), empty splits returning at once, merged by a second kernel;
//   flash attention() with flash_decode (NITRO_ATTN_DECODE=flash): the tensor-core kernel of
//        flash_attn.h, one CTA per (KV head, split), the group's heads as one warp's rows, splits
//        of whole 64-key tiles, the same combine.
//
// Check: all three against an f64 reference from the same f16 Q / K / V (normalised error < 1e-5, the
// f32 kernels' bound in tests/cuda/test_ops.cpp AttentionMatchesCpu; < 1e-3 for flash, whose
// probabilities are f16: FlashAttentionMatchesCpu's) at the decode shapes below plus
// G = 1, 6 and 16 and head_dim 32 and 256, and the new one at 1 and 2 query heads per block;
// PASS / FAIL per check, exit status 1 on a FAIL. Then timed: 100 launches captured in one CUDA
// graph and replayed (as the decode graph runs them, graph launch gaps included), median of reps,
// microseconds per launch: a sweep of heads per block x splits at depths 64 to 4,096, and old vs
// new vs flash at depths 128 to 32,768 for the attention shapes of gpt-oss-20b (full and window-128
// layers), qwen3-30b-a3b and qwen3-next-80b.
// Every figure printed is MEASURED on the GPU it runs on.
#include "core/fp16.h"
#include "cuda/check.h"
#include "cuda/common.cuh"
#include "cuda/context.h"
#include "cuda/event_timing.h"
#include "cuda/ops.h"
#include "runtime/placement.h"
#include "sandbox_fill.cuh"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

using namespace nitro;
using namespace nitro::cuda;

namespace {

// ---- the former kernel, as src/cuda/ops.cu had it (git 08fc621) ----
template <int HD>
__global__ void attention_kernel(const float* __restrict__ q, const __half* __restrict__ kc, const __half* __restrict__ vc,
                                 int64_t capacity, int n_head, int n_head_kv, int64_t window,
                                 const float* __restrict__ sinks, float scale, const int32_t* __restrict__ pos0,
                                 int n_split, float* __restrict__ partial, float* __restrict__ out) {
    constexpr int ND = HD / 32;
    const int G = n_head / n_head_kv;
    const int kvh = blockIdx.x, qi = blockIdx.y, split = blockIdx.z;
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int h = kvh * G + warp;
    extern __shared__ float sq[];
    float* myq = sq + warp * HD;
    const float* qrow = q + (static_cast<int64_t>(qi) * n_head + h) * HD;
    for (int d = lane; d < HD; d += kWarp) myq[d] = __half2float(__float2half_rn(qrow[d]));  // Q in the K cache's type
    __syncwarp();

    const int64_t p = *pos0 + qi;
    const int64_t lo = window > 0 ? max(static_cast<int64_t>(0), p - window + 1) : 0;
    const int64_t nk = p - lo + 1;
    const int64_t chunk = (nk + n_split - 1) / n_split;
    const int64_t kb0 = lo + split * chunk;
    const int64_t ke = min(p + 1, kb0 + chunk);
    const int64_t ld = static_cast<int64_t>(n_head_kv) * HD;

    float m = -INFINITY, l = 0.f, acc[ND];
#pragma unroll
    for (int i = 0; i < ND; ++i) acc[i] = 0.f;
    for (int64_t kb = kb0; kb < ke; kb += kWarp) {
        const int64_t j = kb + lane;
        float sc = -INFINITY;
        if (j < ke) {
            const uint4* kr = reinterpret_cast<const uint4*>(kc + (j % capacity) * ld + kvh * HD);
            float dot = 0.f;
#pragma unroll
            for (int c = 0; c < HD / 8; ++c) {
                const uint4 u = kr[c];
                const __half2* hh = reinterpret_cast<const __half2*>(&u);
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float2 f = __half22float2(hh[e]);
                    dot = fmaf(myq[8 * c + 2 * e], f.x, dot);
                    dot = fmaf(myq[8 * c + 2 * e + 1], f.y, dot);
                }
            }
            sc = dot * scale;
        }
        const float mc = warp_max(sc);
        const float mn = fmaxf(m, mc);
        const float corr = expf(m - mn);
        const float pj = j < ke ? expf(sc - mn) : 0.f;
        l = l * corr + warp_sum(pj);
#pragma unroll
        for (int i = 0; i < ND; ++i) acc[i] *= corr;
        const int nvalid = static_cast<int>(min(static_cast<int64_t>(kWarp), ke - kb));
        for (int jj = 0; jj < nvalid; ++jj) {
            const float pw = __shfl_sync(0xffffffffu, pj, jj);
            const __half* vr = vc + ((kb + jj) % capacity) * ld + kvh * HD;
#pragma unroll
            for (int i = 0; i < ND; ++i) acc[i] = fmaf(pw, __half2float(vr[lane + 32 * i]), acc[i]);
        }
        m = mn;
    }
    if (n_split == 1) {
        const float denom = l + (sinks ? expf(sinks[h] - m) : 0.f);
        float* o = out + (static_cast<int64_t>(qi) * n_head + h) * HD;
#pragma unroll
        for (int i = 0; i < ND; ++i) o[lane + 32 * i] = acc[i] / denom;
    } else {
        float* pp = partial + ((static_cast<int64_t>(qi) * n_head + h) * n_split + split) * (HD + 2);
        if (lane == 0) {
            pp[0] = m;
            pp[1] = l;
        }
#pragma unroll
        for (int i = 0; i < ND; ++i) pp[2 + lane + 32 * i] = acc[i];
    }
}
__global__ void old_combine_kernel(const float* __restrict__ partial, int n_head, int hd, int n_split,
                                   const float* __restrict__ sinks, float* __restrict__ out) {
    const int h = blockIdx.x, qi = blockIdx.y;
    const float* pp = partial + (static_cast<int64_t>(qi) * n_head + h) * n_split * (hd + 2);
    float M = sinks ? sinks[h] : -INFINITY;
    for (int s = 0; s < n_split; ++s) M = fmaxf(M, pp[s * (hd + 2)]);
    float L = sinks ? expf(sinks[h] - M) : 0.f;
    for (int s = 0; s < n_split; ++s) L += pp[s * (hd + 2) + 1] * expf(pp[s * (hd + 2)] - M);
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float a = 0.f;
        for (int s = 0; s < n_split; ++s) {
            const float ms = pp[s * (hd + 2)];
            if (ms == -INFINITY) continue;
            a += pp[s * (hd + 2) + 2 + d] * expf(ms - M);
        }
        out[(static_cast<int64_t>(qi) * n_head + h) * hd + d] = a / L;
    }
}

void old_attention(cudaStream_t s, const AttnArgs& a) {
    const int G = static_cast<int>(a.n_head / a.n_head_kv);
    dim3 grid(static_cast<unsigned>(a.n_head_kv), static_cast<unsigned>(a.n_q), static_cast<unsigned>(a.n_split));
    const size_t shmem = static_cast<size_t>(G) * a.head_dim * sizeof(float);
    auto launch = [&](auto kernel) {
        kernel<<<grid, G * kWarp, shmem, s>>>(a.q, reinterpret_cast<const __half*>(a.k_cache),
                                              reinterpret_cast<const __half*>(a.v_cache), a.capacity,
                                              static_cast<int>(a.n_head), static_cast<int>(a.n_head_kv), a.window, a.sinks,
                                              a.scale, a.pos0, a.n_split, a.partial, a.out);
    };
    if (a.head_dim == 32) launch(attention_kernel<32>);
    else if (a.head_dim == 64) launch(attention_kernel<64>);
    else if (a.head_dim == 128) launch(attention_kernel<128>);
    else launch(attention_kernel<256>);
    NITRO_CUDA_LAUNCH_CHECK();
    if (a.n_split > 1)
        old_combine_kernel<<<dim3(static_cast<unsigned>(a.n_head), static_cast<unsigned>(a.n_q)), 128, 0, s>>>(
            a.partial, static_cast<int>(a.n_head), static_cast<int>(a.head_dim), a.n_split, a.sinks, a.out);
    NITRO_CUDA_LAUNCH_CHECK();
}

// ---- problems ----
struct Shape {
    int64_t H, Hkv, hd, window, pos0, n_ctx;  ///< one query at position pos0; the cache holds n_ctx (or window) rows
    bool sinks;
    int64_t cap() const { return window > 0 ? window : n_ctx; }
    int64_t keys() const { return window > 0 ? std::min(window, n_ctx) : n_ctx; }
};

int old_splits(const Shape& sh) { return static_cast<int>(std::clamp<int64_t>((sh.keys() + 255) / 256, 1, 32)); }
int new_splits(const Shape& sh) {
    return attention_decode_splits(sh.keys(), attention_max_split(sh.keys()));
}

struct Problem {
    Shape sh;
    float *q = nullptr, *sinks = nullptr, *out = nullptr, *partial = nullptr;
    uint16_t *kc = nullptr, *vc = nullptr;
    int32_t* pos0 = nullptr;
    AttnArgs args(int n_split) const {
        AttnArgs a;
        a.q = q;
        a.k_cache = kc;
        a.v_cache = vc;
        a.capacity = sh.cap();
        a.n_q = 1;
        a.n_head = sh.H;
        a.n_head_kv = sh.Hkv;
        a.head_dim = sh.hd;
        a.window = sh.window;
        a.sinks = sh.sinks ? sinks : nullptr;
        a.scale = 1.0f / std::sqrt(static_cast<float>(sh.hd));
        a.pos0 = pos0;
        a.n_split = n_split;
        a.partial = partial;
        a.out = out;
        a.flash = false;
        return a;
    }
};

Problem alloc_problem(DeviceContext& ctx, const Shape& sh) {
    Problem p{sh};
    const size_t nkv = static_cast<size_t>(sh.cap() * sh.Hkv * sh.hd);
    p.q = ctx.alloc_n<float>(static_cast<size_t>(sh.H * sh.hd), "q");
    p.kc = ctx.alloc_n<uint16_t>(nkv, "k cache");
    p.vc = ctx.alloc_n<uint16_t>(nkv, "v cache");
    p.sinks = ctx.alloc_n<float>(static_cast<size_t>(sh.H), "sinks");
    p.pos0 = ctx.alloc_n<int32_t>(1, "pos0");
    p.out = ctx.alloc_n<float>(static_cast<size_t>(sh.H * sh.hd), "out");
    p.partial = ctx.alloc_n<float>(attention_partial_floats(1, sh.H, sh.hd, 64) + 1, "partial");
    const int32_t p0 = static_cast<int32_t>(sh.pos0);
    NITRO_CUDA_CHECK(cudaMemcpy(p.pos0, &p0, 4, cudaMemcpyHostToDevice));
    return p;
}

void free_problem(DeviceContext& ctx, Problem& p) {
    for (void* x : {static_cast<void*>(p.q), static_cast<void*>(p.kc), static_cast<void*>(p.vc), static_cast<void*>(p.sinks),
                    static_cast<void*>(p.pos0), static_cast<void*>(p.out), static_cast<void*>(p.partial)})
        ctx.alloc().free(x);
}

enum Variant { kOld, kNew, kFlash };
const char* variant_name(int v) { return v == kOld ? "old" : v == kNew ? "new" : "flash"; }

void run(int variant, cudaStream_t s, const Problem& p, int heads_per_block = 0) {
    if (variant == kFlash) {
        AttnArgs a = p.args(new_splits(p.sh));  // the engine's split count, as NITRO_ATTN_DECODE=flash runs it
        a.flash = true;
        a.flash_decode = true;
        attention(s, a);
    } else if (variant == kNew) {
        AttnArgs a = p.args(new_splits(p.sh));
        // as the engine: attention_decode_heads for this depth, unless forced
        a.heads_per_block = heads_per_block > 0 ? heads_per_block
                                                : attention_decode_heads(p.sh.H, p.sh.Hkv, p.sh.window, p.sh.pos0);
        attention(s, a);
    } else {
        old_attention(s, p.args(old_splits(p.sh)));
    }
}

/// Median microseconds per launch of f's burst of kBurst launches, captured in one CUDA graph and
/// replayed (as the engine's decode graph runs them: graph launch gaps, not stream launch gaps).
template <typename F>
double graph_us(cudaStream_t s, int reps, F&& f) {
    constexpr int kBurst = 100;
    cudaGraph_t g;
    cudaGraphExec_t exec;
    NITRO_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kBurst; ++i) f();
    NITRO_CUDA_CHECK(cudaStreamEndCapture(s, &g));
    NITRO_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    const double ms = time_ms(s, reps, [&] { NITRO_CUDA_CHECK(cudaGraphLaunch(exec, s)); });
    NITRO_CUDA_CHECK(cudaGraphExecDestroy(exec));
    NITRO_CUDA_CHECK(cudaGraphDestroy(g));
    return 1000.0 * ms / kBurst;
}

/// Checks one variant on sh against the f64 reference; prints one line; true on PASS.
bool check(DeviceContext& ctx, int variant, const Shape& sh, uint32_t seed, int heads_per_block = 0) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    std::vector<float> q(static_cast<size_t>(sh.H * sh.hd)), sinks(static_cast<size_t>(sh.H));
    std::vector<uint16_t> kc(static_cast<size_t>(sh.cap() * sh.Hkv * sh.hd)), vc(kc.size());
    for (auto& x : q) x = nd(rng);
    for (auto& x : kc) x = f32_to_fp16(nd(rng));
    for (auto& x : vc) x = f32_to_fp16(nd(rng));
    for (auto& x : sinks) x = 3.f * nd(rng);
    Problem p = alloc_problem(ctx, sh);
    NITRO_CUDA_CHECK(cudaMemcpy(p.q, q.data(), q.size() * 4, cudaMemcpyHostToDevice));
    NITRO_CUDA_CHECK(cudaMemcpy(p.kc, kc.data(), kc.size() * 2, cudaMemcpyHostToDevice));
    NITRO_CUDA_CHECK(cudaMemcpy(p.vc, vc.data(), vc.size() * 2, cudaMemcpyHostToDevice));
    NITRO_CUDA_CHECK(cudaMemcpy(p.sinks, sinks.data(), sinks.size() * 4, cudaMemcpyHostToDevice));
    NITRO_CUDA_CHECK(cudaMemset(p.out, 0xFF, q.size() * 4));  // NaN: an unwritten element fails
    run(variant, ctx.compute(), p, heads_per_block);
    NITRO_CUDA_CHECK(cudaStreamSynchronize(ctx.compute()));
    std::vector<float> got(q.size());
    NITRO_CUDA_CHECK(cudaMemcpy(got.data(), p.out, got.size() * 4, cudaMemcpyDeviceToHost));
    free_problem(ctx, p);

    const int64_t G = sh.H / sh.Hkv, hd = sh.hd, ld = sh.Hkv * hd, pos = sh.pos0;
    const int64_t lo = sh.window > 0 ? std::max<int64_t>(0, pos - sh.window + 1) : 0;
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    double num = 0, den2 = 0;
    for (int64_t h = 0; h < sh.H; ++h) {
        const int64_t kvh = h / G;
        std::vector<double> sc;
        double m = sh.sinks ? sinks[h] : -INFINITY;
        for (int64_t j = lo; j <= pos; ++j) {
            double dot = 0;
            for (int64_t d = 0; d < hd; ++d)
                dot += static_cast<double>(fp16_to_f32(f32_to_fp16(q[h * hd + d]))) * fp16_to_f32(kc[(j % sh.cap()) * ld + kvh * hd + d]);
            sc.push_back(dot * scale);
            m = std::max(m, sc.back());
        }
        double den = sh.sinks ? std::exp(sinks[h] - m) : 0;
        std::vector<double> acc(static_cast<size_t>(hd), 0.0);
        for (int64_t j = lo; j <= pos; ++j) {
            const double w = std::exp(sc[j - lo] - m);
            den += w;
            for (int64_t d = 0; d < hd; ++d) acc[d] += w * fp16_to_f32(vc[(j % sh.cap()) * ld + kvh * hd + d]);
        }
        for (int64_t d = 0; d < hd; ++d) {
            const double ref = acc[d] / den, g = got[h * hd + d];
            num += std::isfinite(g) ? (g - ref) * (g - ref) : INFINITY;
            den2 += ref * ref;
        }
    }
    const double ne = std::sqrt(num / den2);
    const bool ok = ne < (variant == kFlash ? 1e-3 : 1e-5);
    std::printf(
        "check %s%s H=%3lld/%lld hd=%3lld window=%4lld pos=%5lld n_ctx=%5lld sinks=%d splits %2d: normalised %.2e %s\n",
        variant_name(variant), heads_per_block > 0 ? (heads_per_block == 1 ? " hpb1" : " hpb2") : "",
        static_cast<long long>(sh.H), static_cast<long long>(sh.Hkv), static_cast<long long>(sh.hd),
        static_cast<long long>(sh.window), static_cast<long long>(pos), static_cast<long long>(sh.n_ctx), sh.sinks ? 1 : 0,
        variant == kOld ? old_splits(sh) : new_splits(sh), ne, ok ? "PASS" : "FAIL");
    return ok;
}

using sandbox::fill_f16;
using sandbox::fill_f32;

/// alloc_problem with Q, K, V and sinks filled on the device (pseudo-random, for timing).
Problem filled_problem(DeviceContext& ctx, const Shape& sh) {
    cudaStream_t s = ctx.compute();
    Problem p = alloc_problem(ctx, sh);
    const size_t nkv = static_cast<size_t>(sh.cap() * sh.Hkv * sh.hd);
    fill_f32<<<256, 256, 0, s>>>(p.q, static_cast<size_t>(sh.H * sh.hd), 1);
    fill_f16<<<1024, 256, 0, s>>>(reinterpret_cast<__half*>(p.kc), nkv, 2);
    fill_f16<<<1024, 256, 0, s>>>(reinterpret_cast<__half*>(p.vc), nkv, 3);
    fill_f32<<<1, 64, 0, s>>>(p.sinks, static_cast<size_t>(sh.H), 4);
    NITRO_CUDA_LAUNCH_CHECK();
    return p;
}

void time_shape(DeviceContext& ctx, const char* name, const Shape& sh, int reps) {
    cudaStream_t s = ctx.compute();
    Problem p = filled_problem(ctx, sh);
    double us[3];
    const bool flash = sh.hd == 64 || sh.hd == 128;  // the flash kernel's head dims
    for (int v : {kOld, kNew, kFlash})
        us[v] = v != kFlash || flash ? graph_us(s, reps, [&] { run(v, s, p); }) : NAN;
    const int64_t keys = sh.window > 0 ? std::min(sh.pos0 + 1, sh.window) : sh.pos0 + 1;
    const double bytes = 2.0 * 2.0 * static_cast<double>(keys * sh.Hkv * sh.hd);  // K and V rows read, f16
    std::printf("  %-24s depth %6lld n_ctx %6lld: old %7.2f us (%2d splits)  new %7.2f us (%2d splits, %6.1f GB/s of K/V)  "
                "old/new %.2fx  flash %7.2f us (%6.1f GB/s)  new/flash %.2fx\n",
                name, static_cast<long long>(sh.pos0), static_cast<long long>(sh.n_ctx), us[0], old_splits(sh), us[1],
                new_splits(sh), bytes / (us[1] * 1e3), us[0] / us[1], us[2], bytes / (us[2] * 1e3), us[1] / us[2]);
    free_problem(ctx, p);
}

/// The small-depth sweep: microseconds per launch (graph replay) of the new kernel at query heads
/// per block 1, 2, 4, 8 (the group, capped) and forced split counts, for the depths where one
/// 32-key tile per warp is the whole split and the chains of one warp set the time.
void sweep_shape(DeviceContext& ctx, const char* name, const Shape& base, int reps) {
    cudaStream_t s = ctx.compute();
    for (int64_t d : {64, 128, 256, 512, 1024, 2048, 4096}) {
        Shape sh = base;
        sh.pos0 = d;
        Problem p = filled_problem(ctx, sh);
        std::printf("  %-20s d%-5lld", name, static_cast<long long>(d));
        for (int hpb : {1, 2, 4, 8}) {
            std::printf(" | hpb%d", hpb);
            for (int ns : {1, 2, 4, 8, 16, 32}) {
                AttnArgs a = p.args(ns);
                a.heads_per_block = hpb;
                std::printf(" %5.1f", graph_us(s, reps, [&] { attention(s, a); }));
            }
        }
        std::printf("\n");
        free_problem(ctx, p);
    }
}

}  // namespace

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines survive a timeout
    const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 10;
    try {
        DeviceContext ctx(0, 0.0);
        std::printf("device: %s\n", ctx.describe().c_str());
        const Shape checks[] = {
            {64, 8, 64, 0, 300, 512, true},        // gpt-oss full layer
            {64, 8, 64, 0, 3000, 4096, true},      // many splits
            {64, 8, 64, 128, 700, 4096, true},     // window over a wrapped ring
            {32, 4, 128, 0, 2047, 2048, false},    // qwen3, the last position
            {32, 4, 128, 0, 5, 32768, false},      // 64 splits, most of them empty
            {16, 2, 256, 0, 999, 4096, false},     // qwen3-next: two head groups of 4
            {8, 8, 64, 16, 70, 1024, true},        // G = 1, window shorter than a tile
            {12, 2, 128, 0, 333, 1024, true},      // G = 6
            {32, 2, 64, 0, 1000, 1100, true},      // G = 16
            {4, 2, 32, 0, 100, 128, false},        // the fixtures' tiny heads
        };
        bool ok = true;
        uint32_t seed = 1;
        for (const Shape& sh : checks)
            for (int v : {kOld, kNew, kFlash})
                if (v != kFlash || sh.hd == 64 || sh.hd == 128) ok = check(ctx, v, sh, seed++) && ok;
        for (int hpb : {1, 2})  // fewer query heads per block than the group (AttnArgs::heads_per_block)
            for (const Shape& sh : {checks[0], checks[3], checks[4], checks[5], checks[7]})
                ok = check(ctx, kNew, sh, seed++, hpb) && ok;
        std::printf("%s\n", ok ? "ALL CHECKS PASS" : "SOME CHECKS FAIL");
        std::printf(
            "MEASURED small-depth sweep, us per launch (graph of 100, median of %d); columns: splits 1 2 4 8 16 32 "
            "at each query-heads-per-block\n",
            reps);
        sweep_shape(ctx, "qwen3-30b-a3b", {32, 4, 128, 0, 0, 4096, false}, reps);
        sweep_shape(ctx, "gpt-oss-20b full", {64, 8, 64, 0, 0, 4096, true}, reps);
        std::printf("MEASURED microseconds per launch (graph of 100 back to back, median of %d)\n", reps);
        for (int64_t d : {128, 512, 2048, 4096, 8192, 32768}) {
            const int64_t n_ctx = std::max<int64_t>(4096, d + 1);
            time_shape(ctx, "gpt-oss-20b full", {64, 8, 64, 0, d, n_ctx, true}, reps);
            time_shape(ctx, "gpt-oss-20b window 128", {64, 8, 64, 128, d, n_ctx, true}, reps);
            time_shape(ctx, "qwen3-30b-a3b", {32, 4, 128, 0, d, n_ctx, false}, reps);
            time_shape(ctx, "qwen3-next-80b-a3b", {16, 2, 256, 0, d, n_ctx, false}, reps);
        }
        return ok ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
