// The flash-attention kernel of flash_attn.h, in a header so the kernel sandbox
// (dev/kernels/attention.cu) can build its variants. Mathematics: FlashAttention-2 (Dao 2023):
// per tile of keys, S = Q K^T on the tensor cores, an online softmax (running row max m and sum l
// in f32; earlier partial sums rescaled by exp(m_old - m_new)), O += P V on the tensor cores, and
// one division by l at the end. Logits are kept in base 2 (scale * log2(e) folded into S, exp2f).
//
// Work split: for one KV head, the rows of the problem are the (query, query head of that KV
// head) pairs, row = query * G + head (G = n_head / n_head_kv), so the G heads sharing a K/V head
// read each key tile once (GQA) and a CTA's rows span only 64 / G positions (little causal and
// window waste). A CTA of 4 warps takes 64 consecutive rows; each warp 16 of them. Per 64-key
// tile the K and V rows are copied (cp.async, double-buffered: the next tile travels during this
// one's products) from the ring cache (key j at slot j % capacity) into shared memory; keys past
// the CTA's last position are zero-filled (a zero V row times a zero probability, never NaN).
//
// Tensor-core operands (PTX ISA, "Matrix fragments for mma.m16n8k16 with floating point type"):
// with g = lane / 4 and c = lane % 4,
//   A (16 x 16, row major), 4 registers of 2 f16: {row g, cols 2c..2c+1}, {row g+8, cols 2c..},
//     {row g, cols 2c+8..}, {row g+8, cols 2c+8..};
//   B (16 x 8, "col": element (k, n)), 2 registers: {k 2c..2c+1, n g}, {k 2c+8..2c+9, n g};
//   C/D (16 x 8 f32), 4 registers: {row g, cols 2c, 2c+1}, {row g+8, cols 2c, 2c+1}.
// So the S accumulators of key n-tiles 2t and 2t+1 are exactly the A operand of keys 16t..16t+15
// for P V (FlashAttention-2's register reuse; P rounded to f16 there). B of Q K^T is K's rows
// (n = key, k = head dim: consecutive halves of a K row); B of P V is V's columns (k = key,
// n = head dim), which ldmatrix .trans reads from V's rows. kLdm = false builds the same
// fragments with plain 16- and 32-bit shared loads (the sandbox's cross-check of the ldmatrix
// addressing; slower).
//
// Flash-decoding (n_split > 1, one query): CTA (0, KV head, split) takes the split's keys of the
// query's range, split_chunk() keys each (a multiple of the 64-key tile), and writes its unnormalised
// result to the partial buffer in the per-query kernel's layout ([M, L, A[HD]] per (head, split), M
// in natural-log units), which attention()'s combine kernel merges with the sinks. The query's G
// heads are the CTA's rows, so each K/V tile is read once for the group and the group's scores
// come from one warp's tensor-core products (warps whose 16 rows hold no head only copy tiles).
#pragma once

#include "cuda/common.cuh"
#include "cuda/flash_attn.h"
#include "cuda/pdl.cuh"

#include <cuda_pipeline.h>

#include <cstdint>

namespace nitro::cuda::flash_detail {

constexpr int kRows = 64;      ///< (query, head) rows per CTA
constexpr int kKeys = kFlashTileKeys;  ///< keys per tile (flash_attn.h)
constexpr int kThreads = 128;  ///< 4 warps of 16 rows
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

/// Halves per shared K/V row: a 16-byte pad, so the 8 rows of an ldmatrix 8 x 8 piece start in
/// different bank groups (row stride 144 or 272 bytes).
template <int HD>
constexpr int lds() { return HD + 8; }
/// Dynamic shared memory: K and V tiles, two buffers each.
template <int HD>
constexpr size_t smem_bytes() { return static_cast<size_t>(2 * 2 * kKeys * lds<HD>()) * 2; }

__device__ __forceinline__ uint32_t pack_h2(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);  // .x (lo) in the low 16 bits
    return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t pack_h2(__half lo, __half hi) {
    const __half2 h = __halves2half2(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
}

/// d += A B: m16n8k16, f16 x f16 -> f32 (fragments as in the header comment).
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// Four 8 x 8 f16 matrices from shared memory; lane l gives the address of row l % 8 of matrix
/// l / 8; r[i] receives matrix i: without trans, lane l holds row l / 4, cols 2 (l % 4) and +1;
/// with trans, rows 2 (l % 4) and +1 of col l / 4.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const __half* p) {
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const __half* p) {
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
}

/// Keys per flash-decoding split of nk keys over n_split splits: ceil(nk / n_split) rounded up to
/// a whole 64-key tile (the combine kernel counts the active splits with the same rounding).
__host__ __device__ __forceinline__ int64_t split_chunk(int64_t nk, int n_split) {
    return ((nk + n_split - 1) / n_split + kKeys - 1) / kKeys * kKeys;
}

/// grid (ceil(n_q * G / kRows), n_head_kv, n_split), kThreads threads, smem_bytes<HD>() dynamic
/// shared memory; launched with launch_pdl (pdl.cuh). q [n_q, n_head * HD] f32; caches [capacity,
/// n_head_kv * HD] f16; out as q. scale_log2 = scale * log2(e); sinks (optional) [n_head]
/// natural-log logits. n_split > 1 (needs n_q == 1): the split's partial result instead of out
/// (partial [n_head, n_split, HD + 2] floats; sinks left to the combine).
template <int HD, bool kLdm>
__global__ void __launch_bounds__(kThreads) flash_attn_kernel(const float* __restrict__ q, const __half* __restrict__ kc,
                                                              const __half* __restrict__ vc, int64_t capacity, int n_q,
                                                              int n_head, int n_head_kv, int64_t window,
                                                              const float* __restrict__ sinks, float scale_log2,
                                                              const int32_t* __restrict__ pos0, int n_split,
                                                              float* __restrict__ partial, float* __restrict__ out) {
    pdl_begin();
    constexpr int LD = lds<HD>();
    constexpr int KS = HD / 16;  // k-steps of Q K^T
    constexpr int NT = HD / 8;   // n-tiles of O
    constexpr int CH = HD / 8;   // 16-byte pieces per K/V row
    extern __shared__ __align__(16) unsigned char flash_smem[];
    __half* Ks = reinterpret_cast<__half*>(flash_smem);  // [2][kKeys][LD]
    __half* Vs = Ks + 2 * kKeys * LD;                    // [2][kKeys][LD]

    const int G = n_head / n_head_kv;
    const int kvh = static_cast<int>(blockIdx.y);
    const int64_t n_rows = static_cast<int64_t>(n_q) * G;
    const int64_t r0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * kRows;  // the longest CTAs first
    const int tid = static_cast<int>(threadIdx.x), warp = tid / kWarp, lane = tid % kWarp;
    const int g = lane >> 2, c4 = lane & 3;
    const int P0 = *pos0;  // positions fit in int32 (pos0 is one)
    const int64_t ldc = static_cast<int64_t>(n_head_kv) * HD;
    const int cap = static_cast<int>(capacity);  // a ring of positions: fits in int32 (32-bit modulo)

    // the CTA's positions and keys
    const int64_t r_last = min(r0 + kRows, n_rows) - 1;
    const int p_min = P0 + static_cast<int>(r0 / G), p_max = P0 + static_cast<int>(r_last / G);
    const int win = static_cast<int>(min(window, static_cast<int64_t>(1) << 30));
    int lo = win > 0 ? max(0, p_min - win + 1) : 0;
    int hi = p_max;
    const int split = static_cast<int>(blockIdx.z);
    if (n_split > 1) {  // flash-decoding: one query (p_min == p_max), this split's keys of lo .. hi
        const int chunk = static_cast<int>(split_chunk(hi - lo + 1, n_split));
        const int kb0 = lo + split * chunk;
        if (kb0 > hi) return;  // no keys yet (the whole CTA; the combine reads only the active splits)
        lo = kb0;
        hi = min(hi, kb0 + chunk - 1);
    }
    // a warp whose 16 rows are past the end (decode: G < 64 rows) only helps copy the tiles
    const bool warp_rows = r0 + warp * 16 < n_rows;

    // this thread's rows g and g + 8 of its warp's 16: position (-1: past the end, every key
    // masked), first key, output row
    int prow[2], plo[2];
    const float* qrow[2];
    int64_t orow[2];  // offset of the output row, -1: none
    int hrow[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        const int64_t r = r0 + warp * 16 + g + 8 * e;
        const bool ok = r < n_rows;
        const int64_t t = ok ? r / G : 0;
        hrow[e] = kvh * G + static_cast<int>(ok ? r % G : 0);
        prow[e] = ok ? P0 + static_cast<int>(t) : -1;
        plo[e] = win > 0 ? prow[e] - win + 1 : 0;
        qrow[e] = ok ? q + (t * n_head + hrow[e]) * HD : nullptr;
        orow[e] = ok ? (t * n_head + hrow[e]) * HD : -1;
    }

    auto load_tile = [&](int kb, int buf) {
        __half* kd = Ks + buf * kKeys * LD;
        __half* vd = Vs + buf * kKeys * LD;
#pragma unroll
        for (int i = tid; i < kKeys * CH; i += kThreads) {
            const int r = i / CH, c = (i % CH) * 8;
            const int j = kb + r;
            if (j <= hi) {
                const int64_t off = static_cast<int64_t>(j % cap) * ldc + static_cast<int64_t>(kvh) * HD + c;
                __pipeline_memcpy_async(kd + r * LD + c, kc + off, 16);
                __pipeline_memcpy_async(vd + r * LD + c, vc + off, 16);
            } else {
                *reinterpret_cast<uint4*>(kd + r * LD + c) = make_uint4(0, 0, 0, 0);
                *reinterpret_cast<uint4*>(vd + r * LD + c) = make_uint4(0, 0, 0, 0);
            }
        }
        __pipeline_commit();
    };
    load_tile(lo, 0);

    // Q as A fragments, rounded to f16 like the K cache (the per-query kernel rounds it the same way)
    uint32_t qa[KS][4];
#pragma unroll
    for (int ks = 0; ks < KS; ++ks)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int e = i & 1, d = 16 * ks + 2 * c4 + 8 * (i >> 1);
            if (qrow[e]) {
                const float2 v = *reinterpret_cast<const float2*>(qrow[e] + d);
                qa[ks][i] = pack_h2(v.x, v.y);
            } else {
                qa[ks][i] = 0u;
            }
        }

    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    float o[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) o[nt][i] = 0.f;

    const int ntiles = (hi - lo) / kKeys + 1;
    for (int it = 0; it < ntiles; ++it) {
        const int kb = lo + it * kKeys;
        if (it + 1 < ntiles) {
            load_tile(kb + kKeys, (it + 1) & 1);
            __pipeline_wait_prior(1);
        } else {
            __pipeline_wait_prior(0);
        }
        __syncthreads();
        if (!warp_rows) {  // no rows here: the copies and the barriers only
            __syncthreads();
            continue;
        }
        const __half* kt = Ks + (it & 1) * kKeys * LD;
        const __half* vt = Vs + (it & 1) * kKeys * LD;

        // S = Q K^T: 16 rows x 64 keys per warp, n-tile nt = keys kb + 8 nt ..
        float s[8][4];
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) s[nt][i] = 0.f;
#pragma unroll
        for (int ks = 0; ks < KS; ++ks)
#pragma unroll
            for (int np = 0; np < 4; ++np) {
                uint32_t b[4];  // b[0..1]: n-tile 2 np, b[2..3]: n-tile 2 np + 1
                if constexpr (kLdm) {
                    const int mi = lane >> 3;
                    ldsm_x4(b, kt + (16 * np + (lane & 7) + 8 * (mi >> 1)) * LD + 16 * ks + 8 * (mi & 1));
                } else {
#pragma unroll
                    for (int sub = 0; sub < 2; ++sub) {
                        const __half* kr = kt + (16 * np + 8 * sub + g) * LD + 16 * ks + 2 * c4;
                        b[2 * sub] = *reinterpret_cast<const uint32_t*>(kr);
                        b[2 * sub + 1] = *reinterpret_cast<const uint32_t*>(kr + 8);
                    }
                }
                mma_16816(s[2 * np], qa[ks], b[0], b[1]);
                mma_16816(s[2 * np + 1], qa[ks], b[2], b[3]);
            }

        // scale to base-2 logits; mask keys outside each row's range and past the CTA's last key (a
        // split's end: zero-filled, not -inf); only where some row has any
        const bool all_valid = kb + kKeys - 1 <= min(p_min, hi) && (win <= 0 || kb >= p_max - win + 1);
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                float v = s[nt][i] * scale_log2;
                if (!all_valid) {
                    const int j = kb + 8 * nt + 2 * c4 + (i & 1);
                    const int e = i >> 1;
                    if (j > prow[e] || j < plo[e] || j > hi) v = -INFINITY;
                }
                s[nt][i] = v;
            }

        // online softmax: a row's 64 scores are spread over the 4 lanes of its quad
        float mx[2] = {m[0], m[1]};
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
            mx[0] = fmaxf(mx[0], fmaxf(s[nt][0], s[nt][1]));
            mx[1] = fmaxf(mx[1], fmaxf(s[nt][2], s[nt][3]));
        }
        float base[2], corr[2], rs[2] = {0.f, 0.f};
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            mx[e] = fmaxf(mx[e], __shfl_xor_sync(0xffffffffu, mx[e], 1));
            mx[e] = fmaxf(mx[e], __shfl_xor_sync(0xffffffffu, mx[e], 2));
            base[e] = mx[e] == -INFINITY ? 0.f : mx[e];  // a row with no key yet: exp2(-inf - 0) = 0, no NaN
            corr[e] = exp2f(m[e] - base[e]);
            m[e] = mx[e];
        }
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                s[nt][i] = exp2f(s[nt][i] - base[i >> 1]);
                rs[i >> 1] += s[nt][i];
            }
#pragma unroll
        for (int e = 0; e < 2; ++e) l[e] = l[e] * corr[e] + rs[e];  // this lane's part of the row sum
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            o[nt][0] *= corr[0];
            o[nt][1] *= corr[0];
            o[nt][2] *= corr[1];
            o[nt][3] *= corr[1];
        }

        // O += P V: k-step kk = keys 16 kk .. 16 kk + 15 = S n-tiles 2 kk, 2 kk + 1
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            const uint32_t pa[4] = {pack_h2(s[2 * kk][0], s[2 * kk][1]), pack_h2(s[2 * kk][2], s[2 * kk][3]),
                                    pack_h2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                    pack_h2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int dp = 0; dp < HD / 16; ++dp) {
                uint32_t b[4];  // b[0..1]: head dims 16 dp .., b[2..3]: 16 dp + 8 ..
                if constexpr (kLdm) {
                    const int mi = lane >> 3;
                    ldsm_x4_trans(b, vt + (16 * kk + (lane & 7) + 8 * (mi & 1)) * LD + 16 * dp + 8 * (mi >> 1));
                } else {
#pragma unroll
                    for (int sub = 0; sub < 2; ++sub) {
                        const __half* vr = vt + (16 * kk + 2 * c4) * LD + 16 * dp + 8 * sub + g;
                        b[2 * sub] = pack_h2(vr[0], vr[LD]);
                        b[2 * sub + 1] = pack_h2(vr[8 * LD], vr[9 * LD]);
                    }
                }
                mma_16816(o[2 * dp], pa, b[0], b[1]);
                mma_16816(o[2 * dp + 1], pa, b[2], b[3]);
            }
        }
        __syncthreads();  // the next iteration's copy overwrites this buffer
    }

    // the row sums over the quad, the sink, and the output
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        l[e] += __shfl_xor_sync(0xffffffffu, l[e], 1);
        l[e] += __shfl_xor_sync(0xffffffffu, l[e], 2);
        if (orow[e] < 0) continue;
        if (n_split > 1) {  // unnormalised, M in natural-log units (the combine adds the sink)
            float* pp = partial + ((orow[e] / HD) * n_split + split) * (HD + 2);
            if (c4 == 0) {
                pp[0] = m[e] * kLn2;
                pp[1] = l[e];
            }
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                pp[2 + 8 * nt + 2 * c4] = o[nt][2 * e];
                pp[3 + 8 * nt + 2 * c4] = o[nt][2 * e + 1];
            }
            continue;
        }
        float f = 1.f, L = l[e];
        if (sinks) {  // sink logit in the denominator: rescale to max(m, sink) so neither overflows
            const float sk = sinks[hrow[e]] * kLog2e;
            const float M = fmaxf(m[e], sk);
            f = exp2f(m[e] - M);
            L = l[e] * f + exp2f(sk - M);
        }
        const float inv = f / L;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
            *reinterpret_cast<float2*>(out + orow[e] + 8 * nt + 2 * c4) = make_float2(o[nt][2 * e] * inv, o[nt][2 * e + 1] * inv);
    }
}

}  // namespace nitro::cuda::flash_detail
