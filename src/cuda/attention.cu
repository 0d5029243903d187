// attention() of ops.h: the per-query kernel (decode steps, short chunks, flash-decoding splits),
// its flash-decoding split combine, and the dispatch to the tensor-core kernel of flash_attn.h for
// prompt chunks and, with AttnArgs::flash_decode (NITRO_ATTN_DECODE=flash), for decode steps (its
// splits merged by the same combine).
//
// The per-query kernel (issue 15): one block of kWarps warps per (KV head, group of its query
// heads, query, split). The split's keys go in 32-key tiles to the warps in turn; lane j scores key
// j of a tile against every query head of the group (Q in shared memory, the K row read once for
// all of them), the softmax is online per head (flash style), and each lane accumulates head_dim /
// 32 contiguous value dims of every head. The warps' (max, sum, values) are merged in shared
// memory in warp order; a second kernel merges the active splits' partials in split order. A
// decode step splits the keys one split per 128 keys of n_ctx (attention_decode_splits: a tile per
// warp), blocks of splits that hold no keys yet returning at once; its group of query heads per
// block depends on the depth (ops.h attention_decode_heads: 1 or 2 heads below 4,096 keys for
// short chains, the whole group from there so K/V rows are read once per group). The value sum
// loads the next 8 keys' rows while it weighs 8 (loads in flight, not one load's latency per
// key). The former
// kernel (one warp per query head over all of its split's keys, splits from n_ctx / 256) is the
// "old" variant of dev/kernels/attention_decode.cu, with the MEASURED comparison in docs/cuda.md.
// (Merging the splits in the last block to finish, to save the second launch, MEASURED 2-3x
// slower: that one block walks every split's partials, where the combine kernel spreads the heads
// over blocks.)
#include "cuda/ops.h"

#include "cuda/common.cuh"
#include "cuda/pdl.cuh"
#include "cuda/flash_attn.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace nitro::cuda {

namespace {

constexpr int kWarps = 4;  ///< warps per block of the per-query kernel

std::atomic<int> g_decode_flash{-1};  ///< set_attn_decode_flash; -1: NITRO_ATTN_DECODE

/// Query heads per block at head_dim HD and a group of G query heads per KV head: each lane keeps
/// heads x HD / 32 value sums in registers, at most 32.
constexpr int max_heads_per_block(int hd) { return 1024 / hd; }

/// The default (AttnArgs::heads_per_block = 0): heads x head_dim <= 128, so 1 head a block at
/// head_dim 128 or 256 and 2 at 64. MEASURED on the H200 (dev_attention_decode's sweep, graph
/// replay, 32 splits, us per launch at depths 64 ... 4,096): qwen3-30b-a3b 7.0 7.3 7.5 9.3 12.3
/// 16.6 23.2 at 1 head a block against 12.7 12.9 13.1 13.2 14.1 16.6 24.1 at 8 (the whole
/// group); gpt-oss-20b 6.9 7.1 7.5 8.3 10.7 13.8 19.6 at 2 against 9.9 10.1 10.4 11.1 12.1 14.2
/// 21.1 at 8. A decode step is a chain of one 32-key tile per warp; fewer heads in the block make
/// each warp's chain of scores, softmax and value sums shorter and spread the work over more blocks.
/// Deeper than that the group wins (its K/V rows read once for all its heads): the engine asks for
/// it there (ops.h attention_decode_heads), and for prompt chunks.
constexpr int default_heads_per_block(int hd) { return hd >= 128 ? 1 : 128 / hd; }

/// Keys of split `split` of n_split for a query at position p: [kb0, ke), tiles of 32 keys.
__device__ __forceinline__ void split_range(int64_t p, int64_t window, int split, int n_split, int64_t& kb0, int64_t& ke) {
    const int64_t lo = window > 0 ? max(static_cast<int64_t>(0), p - window + 1) : 0;
    const int64_t nk = p - lo + 1;
    const int64_t chunk = ((nk + n_split - 1) / n_split + kWarp - 1) / kWarp * kWarp;
    kb0 = lo + split * chunk;
    ke = min(p + 1, kb0 + chunk);
}

/// ND contiguous f16 values of a V row (a lane's share of head_dim), as loaded: 2 to 16 bytes.
template <int ND>
struct VSlice {
    static constexpr int kWords = ND >= 2 ? ND / 2 : 1;
    uint32_t w[kWords] = {};
    __device__ __forceinline__ static VSlice load(const __half* p) {
        VSlice v;
        if constexpr (ND == 1) v.w[0] = *reinterpret_cast<const uint16_t*>(p);
        else if constexpr (ND == 2) v.w[0] = *reinterpret_cast<const uint32_t*>(p);
        else if constexpr (ND == 4) {
            const uint2 u = *reinterpret_cast<const uint2*>(p);
            v.w[0] = u.x;
            v.w[1] = u.y;
        } else {
            static_assert(ND == 8);
            const uint4 u = *reinterpret_cast<const uint4*>(p);
            v.w[0] = u.x;
            v.w[1] = u.y;
            v.w[2] = u.z;
            v.w[3] = u.w;
        }
        return v;
    }
    __device__ __forceinline__ void to_float(float* f) const {
        if constexpr (ND == 1) {
            f[0] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[0])));
        } else {
#pragma unroll
            for (int i = 0; i < kWords; ++i) {
                __half2 h;
                static_assert(sizeof(h) == 4);
                memcpy(&h, &w[i], 4);
                const float2 x = __half22float2(h);
                f[2 * i] = x.x;
                f[2 * i + 1] = x.y;
            }
        }
    }
};

template <int HD, int GH>
__global__ void __launch_bounds__(kWarps * kWarp)
    attention_kernel(const float* __restrict__ q, const __half* __restrict__ kc, const __half* __restrict__ vc,
                     int64_t capacity, int n_head, int n_head_kv, int64_t window, const float* __restrict__ sinks,
                     float scale, const int32_t* __restrict__ pos0, int n_split, float* __restrict__ partial,
                     float* __restrict__ out) {
    pdl_begin();
    constexpr int ND = HD / kWarp;  // value dims per lane: lane * ND .. + ND - 1
    const int G = n_head / n_head_kv, n_hg = (G + GH - 1) / GH;
    const int kvh = blockIdx.x / n_hg, hg = blockIdx.x % n_hg;
    const int h0 = kvh * G + hg * GH, ng = min(GH, G - hg * GH);
    const int qi = blockIdx.y, split = blockIdx.z;
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int64_t p = *pos0 + qi;
    int64_t kb0, ke;
    split_range(p, window, split, n_split, kb0, ke);
    if (kb0 >= ke) return;  // an empty split (the combine reads only the first active_splits)
    __shared__ float sq[GH * HD];
    __shared__ float sm[kWarps][GH], sl[kWarps][GH];
    __shared__ float sacc[kWarps][GH * HD];
    for (int i = threadIdx.x; i < GH * HD; i += blockDim.x) {  // Q in the K cache's type
        const int g = i / HD;
        sq[i] = g < ng ? __half2float(__float2half_rn(q[(static_cast<int64_t>(qi) * n_head + h0 + g) * HD + i % HD])) : 0.f;
    }
    __syncthreads();
    const int64_t ld = static_cast<int64_t>(n_head_kv) * HD;
    const __half* kbase = kc + static_cast<int64_t>(kvh) * HD;
    const __half* vbase = vc + static_cast<int64_t>(kvh) * HD + lane * ND;

    float m[GH], l[GH], acc[GH][ND];  // l: this lane's share of the sum (m is the same in every lane)
#pragma unroll
    for (int g = 0; g < GH; ++g) {
        m[g] = -INFINITY;
        l[g] = 0.f;
#pragma unroll
        for (int i = 0; i < ND; ++i) acc[g][i] = 0.f;
    }
    for (int64_t kb = kb0 + warp * kWarp; kb < ke; kb += kWarps * kWarp) {
        const int64_t j = kb + lane;
        const bool valid = j < ke;
        const int64_t row = (valid ? j : kb) % capacity * ld;  // this lane's key in the ring (its tile's first when past the end)
        const int nvalid = static_cast<int>(min(static_cast<int64_t>(kWarp), ke - kb));
        // The V rows of the tile's first 8 keys, loaded now: their latency passes under the scores.
        VSlice<ND> vs[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int64_t r = __shfl_sync(0xffffffffu, row, u);
            vs[u] = u < nvalid ? VSlice<ND>::load(vbase + r) : VSlice<ND>{};
        }
        float s[GH];
#pragma unroll
        for (int g = 0; g < GH; ++g) s[g] = 0.f;
        if (valid) {
            const uint4* kr = reinterpret_cast<const uint4*>(kbase + row);
#pragma unroll
            for (int c = 0; c < HD / 8; ++c) {
                const uint4 u = kr[c];
                const __half2* hh = reinterpret_cast<const __half2*>(&u);
                float kf[8];
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float2 f = __half22float2(hh[e]);
                    kf[2 * e] = f.x;
                    kf[2 * e + 1] = f.y;
                }
#pragma unroll
                for (int g = 0; g < GH; ++g)
#pragma unroll
                    for (int e = 0; e < 8; ++e) s[g] = fmaf(sq[g * HD + 8 * c + e], kf[e], s[g]);
            }
        }
        float pj[GH];
#pragma unroll
        for (int g = 0; g < GH; ++g) {
            const float sc = valid ? s[g] * scale : -INFINITY;
            const float mn = fmaxf(m[g], warp_max(sc));  // finite: the tile has a valid key
            const float corr = expf(m[g] - mn);
            pj[g] = valid ? expf(sc - mn) : 0.f;
            l[g] = l[g] * corr + pj[g];
#pragma unroll
            for (int i = 0; i < ND; ++i) acc[g][i] *= corr;
            m[g] = mn;
        }
        // The value sum, 8 keys at a time, the next 8 rows' loads issued before these 8 are weighed
        // (loads in flight while the FMAs run); keys past the end weigh 0 and read as 0.
        for (int j0 = 0; j0 < nvalid; j0 += 8) {
            VSlice<ND> nx[8];
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                const int jn = j0 + 8 + u;
                const int64_t r = __shfl_sync(0xffffffffu, row, jn & (kWarp - 1));
                nx[u] = jn < nvalid ? VSlice<ND>::load(vbase + r) : VSlice<ND>{};
            }
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                float vf[ND];
                vs[u].to_float(vf);
#pragma unroll
                for (int g = 0; g < GH; ++g) {
                    const float pw = __shfl_sync(0xffffffffu, pj[g], j0 + u);
#pragma unroll
                    for (int i = 0; i < ND; ++i) acc[g][i] = fmaf(pw, vf[i], acc[g][i]);
                }
            }
#pragma unroll
            for (int u = 0; u < 8; ++u) vs[u] = nx[u];
        }
    }
    // The warps' results, merged in warp order (a warp with no tile has max -inf and adds nothing).
#pragma unroll
    for (int g = 0; g < GH; ++g) {
        const float lw = warp_sum(l[g]);
        if (lane == 0) {
            sm[warp][g] = m[g];
            sl[warp][g] = lw;
        }
#pragma unroll
        for (int i = 0; i < ND; ++i) sacc[warp][g * HD + lane * ND + i] = acc[g][i];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < ng * HD; e += blockDim.x) {
        const int g = e / HD, d = e % HD;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sm[w][g]);
        float L = 0.f, A = 0.f;
        if (M != -INFINITY) {
#pragma unroll
            for (int w = 0; w < kWarps; ++w) {
                if (sm[w][g] == -INFINITY) continue;
                const float f = expf(sm[w][g] - M);
                L += sl[w][g] * f;
                A += sacc[w][e] * f;
            }
        }
        const int h = h0 + g;
        if (n_split == 1) {
            const float denom = L + (sinks ? expf(sinks[h] - M) : 0.f);
            out[(static_cast<int64_t>(qi) * n_head + h) * HD + d] = A / denom;
        } else {
            float* pp = partial + ((static_cast<int64_t>(qi) * n_head + h) * n_split + split) * (HD + 2);
            if (d == 0) {
                pp[0] = M;
                pp[1] = L;
            }
            pp[2 + d] = A;
        }
    }
}

/// Splits of n_split that hold keys for a query at position p, with chunks of ceil(nk / n_split)
/// keys rounded up to a multiple of `round` (32: split_range of the per-query kernel; 64: the
/// flash kernel's split_chunk): the combine reads only these, and the kernels' blocks of the
/// others return at once.
__device__ __forceinline__ int active_splits(int64_t p, int64_t window, int n_split, int round) {
    const int64_t lo = window > 0 ? max(static_cast<int64_t>(0), p - window + 1) : 0;
    const int64_t nk = p - lo + 1;
    const int64_t chunk = ((nk + n_split - 1) / n_split + round - 1) / round * round;
    return static_cast<int>(min(static_cast<int64_t>(n_split), (nk + chunk - 1) / chunk));
}

constexpr int kMaxSplit = 64;  ///< attention_max_split's cap (runtime/placement.h)

/// Merges the active splits' partials of one (head, query), in split order: each split's max and
/// sum read once into shared memory with its weight exp(M_s - M), then every value dim. `round`:
/// the split kernel's chunk rounding (active_splits).
__global__ void attention_combine_kernel(const float* __restrict__ partial, int n_head, int hd, int n_split, int round,
                                         const float* __restrict__ sinks, const int32_t* __restrict__ pos0, int64_t window,
                                         float* __restrict__ out) {
    pdl_begin();
    const int h = blockIdx.x, qi = blockIdx.y;
    const int n_act = active_splits(*pos0 + qi, window, n_split, round);
    const float* pp = partial + (static_cast<int64_t>(qi) * n_head + h) * n_split * (hd + 2);
    __shared__ float sms[kMaxSplit], sls[kMaxSplit], sf[kMaxSplit];
    for (int s = threadIdx.x; s < n_act; s += blockDim.x) {
        sms[s] = pp[s * (hd + 2)];
        sls[s] = pp[s * (hd + 2) + 1];
    }
    __syncthreads();
    float M = sinks ? sinks[h] : -INFINITY;
    for (int s = 0; s < n_act; ++s) M = fmaxf(M, sms[s]);
    for (int s = threadIdx.x; s < n_act; s += blockDim.x) sf[s] = expf(sms[s] - M);
    __syncthreads();
    float L = sinks ? expf(sinks[h] - M) : 0.f;
    for (int s = 0; s < n_act; ++s) L += sls[s] * sf[s];
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float a = 0.f;
        for (int s = 0; s < n_act; ++s) a += pp[s * (hd + 2) + 2 + d] * sf[s];
        out[(static_cast<int64_t>(qi) * n_head + h) * hd + d] = a / L;
    }
}

/// Launches attention_kernel<HD, GH> with GH the smallest power of two >= the group size, capped
/// at max_heads_per_block(HD).
template <int HD, int GH = 1>
void launch_per_query(cudaStream_t s, const AttnArgs& a, int G) {
    if constexpr (GH < max_heads_per_block(HD)) {
        if (GH < G && GH < (a.heads_per_block > 0 ? a.heads_per_block : default_heads_per_block(HD))) {
            launch_per_query<HD, GH * 2>(s, a, G);
            return;
        }
    }
    const int n_hg = (G + GH - 1) / GH;
    const dim3 grid(static_cast<unsigned>(a.n_head_kv * n_hg), static_cast<unsigned>(a.n_q), static_cast<unsigned>(a.n_split));
    launch_pdl(s, grid, kWarps * kWarp, 0, attention_kernel<HD, GH>, a.q, reinterpret_cast<const __half*>(a.k_cache),
               reinterpret_cast<const __half*>(a.v_cache), a.capacity, static_cast<int>(a.n_head),
               static_cast<int>(a.n_head_kv), a.window, a.sinks, a.scale, a.pos0, a.n_split, a.partial, a.out);
}

}  // namespace

size_t attention_partial_floats(int64_t n_q, int64_t n_head, int64_t head_dim, int n_split) {
    return n_split > 1 ? static_cast<size_t>(n_q * n_head * n_split * (head_dim + 2)) : 0;
}

int attention_decode_splits(int64_t keys, int max_split) {
    const int64_t tiles = (keys + kWarps * kWarp - 1) / (kWarps * kWarp);  // one 32-key tile per warp
    return static_cast<int>(std::clamp<int64_t>(tiles, 1, std::max(1, max_split)));
}

void attention(cudaStream_t s, const AttnArgs& a) {
    if (a.n_head % a.n_head_kv != 0) cfail("CUDA attention: {} query heads are not a multiple of {} KV heads", a.n_head, a.n_head_kv);
    const int G = static_cast<int>(a.n_head / a.n_head_kv);
    if (G > 32) cfail("CUDA attention: {} query heads per KV head (at most 32 supported)", G);
    if (a.n_split > 1 && !a.partial) cfail("CUDA attention: {} splits need the partial buffer", a.n_split);
    if (a.n_split > kMaxSplit) cfail("CUDA attention: {} splits (at most {})", a.n_split, kMaxSplit);
    if (a.flash && a.n_split == 1 && a.n_q >= kFlashMinQueries && flash_attention_supported(a)) {
        flash_attention(s, a);  // prompt chunks: tensor cores, K/V tiles shared by the chunk's queries
        return;
    }
    // a decode step on the tensor cores (AttnArgs::flash_decode), else the per-query kernel
    const bool flash_decode = a.flash && a.flash_decode && a.n_q == 1 && flash_attention_supported(a);
    if (flash_decode) flash_attention(s, a);
    else if (a.head_dim == 32) launch_per_query<32>(s, a, G);
    else if (a.head_dim == 64) launch_per_query<64>(s, a, G);
    else if (a.head_dim == 128) launch_per_query<128>(s, a, G);
    else if (a.head_dim == 256) launch_per_query<256>(s, a, G);
    else cfail("CUDA attention: head_dim {} is not supported (32, 64, 128, 256)", a.head_dim);
    NITRO_CUDA_LAUNCH_CHECK();
    if (a.n_split > 1) {
        const int round = flash_decode ? kFlashTileKeys : kWarp;
        launch_pdl(s, dim3(static_cast<unsigned>(a.n_head), static_cast<unsigned>(a.n_q)), 128, 0, attention_combine_kernel,
                   a.partial, static_cast<int>(a.n_head), static_cast<int>(a.head_dim), a.n_split, round, a.sinks, a.pos0,
                   a.window, a.out);
        NITRO_CUDA_LAUNCH_CHECK();
    }
}

void set_attn_decode_flash(int on) { g_decode_flash.store(on < 0 ? -1 : on > 0 ? 1 : 0); }

bool attn_decode_flash() {
    int v = g_decode_flash.load(std::memory_order_relaxed);
    if (v >= 0) return v == 1;
    const char* e = std::getenv("NITRO_ATTN_DECODE");
    if (e && *e && std::strcmp(e, "flash") != 0 && std::strcmp(e, "per-query") != 0)
        cfail("NITRO_ATTN_DECODE={}: flash (decode steps on the tensor-core kernel) or per-query (the default)", e);
    v = e && std::strcmp(e, "flash") == 0 ? 1 : 0;
    g_decode_flash.store(v);
    return v == 1;
}

}  // namespace nitro::cuda
