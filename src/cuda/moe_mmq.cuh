// The integer grouped MoE GEMM's kernel (moe_mmq.h), in a header so the kernel sandbox
// (dev/kernels/moe_mmq.cu) checks and times the same code.
//
// One CTA of 4 warps computes a 64 x 64 tile of one group's output (64 grouped rows x 64 weight
// rows). Per step of 256 values of K (8 blocks of 32):
//   - the activation tile: each thread copies 32-byte blocks of int8 values of its rows to shared
//     memory (rows gathered through a_row), with each block's f32 scale and, for Q4_K / Q5_K, the
//     block's sum of int8 values (the min term);
//   - the weight tile: each thread unpacks 16-value chunks of one weight row (Q8Dot<T>::load of
//     q8dot.cuh, the decode kernels' unpacking) and stores the int8 values in K order, with the
//     chunk's scale d (and min m);
//   - each warp multiplies a 32 x 32 quarter, block by block: per 32-value block one
//     mma.sync.m16n8k32 (or two m16n8k16, one per 16-value half: Q6_K, whose halves have their own
//     scales) per 16 x 8 piece gives the exact int32 block dot products, which are scaled in f32
//     and added to the f32 accumulators (block order = K order, the same for every row).
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 / m16n8k32 with integer type";
// gid = lane / 4, tig = lane % 4; a register holds 4 consecutive int8 of K):
//   m16n8k16: A {a0: row gid, K 4tig..; a1: row gid + 8, K 4tig..}; B {b0: col gid, K 4tig..};
//   m16n8k32: A {a0: row gid, K 4tig..; a1: row gid + 8, K 4tig..; a2: row gid, K 16 + 4tig..;
//             a3: row gid + 8, K 16 + 4tig..}; B {b0: col gid, K 4tig..; b1: col gid, K 16 + 4tig..};
//   C/D (int32): c0, c1: row gid, cols 2tig, 2tig + 1; c2, c3: row gid + 8, the same cols.
// So with A = activations [rows, K] and B = weights [cols, K], both row-major int8 in shared memory,
// every fragment register is one aligned 32-bit load, and a k32 MMA's halves are exactly the two
// k16 MMAs on (a0, a1, b0) and (a2, a3, b1): the k16 form (kK32 = false) checks the k32 form.
#pragma once

#include "cuda/common.cuh"
#include "cuda/moe_gemm.cuh"
#include "cuda/moe_mmq.h"
#include "cuda/q8dot.cuh"

namespace nitro::cuda::moe_mmq_detail {

using moe_gemm_detail::find_group;
using moe_gemm_detail::GroupTable;
using moe_gemm_detail::HostGroups;
using moe_gemm_detail::kMaxGroups;
using moe_gemm_detail::SlotGroups;
using moe_gemm_detail::Tile;

constexpr int kBM = moe_gemm_detail::kBM;  ///< grouped rows per tile (moe_group's tile starts count these)
constexpr int kBN = 64;                    ///< weight rows per tile
constexpr int kBK = 256;                   ///< values of K per step
constexpr int kBlk = kBK / 32;             ///< 32-value blocks per step
constexpr int kLdq = kBK + 16;             ///< bytes per shared row: 68 words, so rows gid = 0..7 start 4 banks apart
constexpr int kThreads = 128;
static_assert(kBM == 64, "the warp layout below assumes 64 x 64 tiles");

struct Smem {
    int8_t a[kBM * kLdq];           ///< activations [row][K of the step]
    int8_t w[kBN * kLdq];           ///< weights [row][K of the step]
    float ad[kBM][kBlk + 1];        ///< activation block scales (+1: rows apart in banks)
    int as[kBM][kBlk + 1];          ///< activation block sums (Q4_K / Q5_K)
    float wd[kBN][2 * kBlk + 1];    ///< weight scale of each 16-value chunk
    float wm[kBN][kBlk + 1];        ///< weight min of each 32-value block (Q4_K / Q5_K)
    int64_t arow[kBM];              ///< element offset of each tile row's activations; -1: past the group
};

/// d (+)= a x b, int8 in, int32 accumulate: 16 x 8 x 16.
__device__ __forceinline__ void mma_k16(int (&d)[4], int a0, int a1, int b0) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(b0));
#else
    (void)d, (void)a0, (void)a1, (void)b0;
    __trap();  // sm_80+ only (the build's architectures all are)
#endif
}

/// d (+)= a x b, int8 in, int32 accumulate: 16 x 8 x 32.
__device__ __forceinline__ void mma_k32(int (&d)[4], const int (&a)[4], int b0, int b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    (void)d, (void)a, (void)b0, (void)b1;
    __trap();
#endif
}

/// The grouped product (moe_mmq.h). T: weight type (q8_supported); kK32: one m16n8k32 per block
/// (false: two m16n8k16; Q6_K always uses two, one per scaled half). K: values per row (whole
/// 32-value blocks); aq, ad: the Q8Acts of the activations (row stride K); a_row: the activation
/// row of each grouped row, or null.
template <GgmlType T, bool kK32, typename Groups>
__global__ void __launch_bounds__(kThreads) moe_mmq_kernel(const Groups groups, size_t row_bytes, int N, int K,
                                                           const int8_t* __restrict__ aq, const float* __restrict__ ad,
                                                           const int32_t* __restrict__ a_row, float* __restrict__ out,
                                                           int64_t ldo, const float* __restrict__ bias, int accumulate) {
    constexpr bool kMin = kHasMin<T>;
    constexpr bool kHalves = T == GgmlType::Q6_K;
    __shared__ __align__(16) Smem sm;

    Tile tl;
    if (!groups.tile(static_cast<int>(blockIdx.y), tl)) return;
    const int mrows = tl.rows;
    const int n0 = static_cast<int>(blockIdx.x) * kBN;
    const int tid = static_cast<int>(threadIdx.x), warp = tid / kWarp, lane = tid % kWarp;
    const int gid = lane / 4, tig = lane % 4;
    const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;

    for (int r = tid; r < kBM; r += kThreads) {
        int64_t off = -1;
        if (r < mrows) {
            const int64_t g = tl.row0 + r;
            off = (a_row ? static_cast<int64_t>(a_row[g]) : g) * K;
        }
        sm.arow[r] = off;
    }

    float acc[2][4][4];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

    for (int k0 = 0; k0 < K; k0 += kBK) {
        const int nblk = min(kBlk, (K - k0) / 32);
        __syncthreads();  // arow written / the previous step's tiles consumed
        // Activations: 64 rows x 8 blocks of 32 bytes, 4 per thread; 8 consecutive threads one row.
#pragma unroll
        for (int i = 0; i < (kBM * kBlk) / kThreads; ++i) {
            const int idx = tid + i * kThreads, r = idx / kBlk, b = idx % kBlk;
            int4 v0 = make_int4(0, 0, 0, 0), v1 = v0;
            float d = 0.f;
            const int64_t off = sm.arow[r];
            if (off >= 0 && b < nblk) {
                const int8_t* src = aq + off + k0 + 32 * b;
                v0 = *reinterpret_cast<const int4*>(src);
                v1 = *reinterpret_cast<const int4*>(src + 16);
                d = ad[off / 32 + k0 / 32 + b];
            }
            int4* dst = reinterpret_cast<int4*>(&sm.a[r * kLdq + 32 * b]);
            dst[0] = v0;
            dst[1] = v1;
            sm.ad[r][b] = d;
            if constexpr (kMin) {
                int sx = 0;
                sx = __dp4a(v0.x, 0x01010101, sx);
                sx = __dp4a(v0.y, 0x01010101, sx);
                sx = __dp4a(v0.z, 0x01010101, sx);
                sx = __dp4a(v0.w, 0x01010101, sx);
                sx = __dp4a(v1.x, 0x01010101, sx);
                sx = __dp4a(v1.y, 0x01010101, sx);
                sx = __dp4a(v1.z, 0x01010101, sx);
                sx = __dp4a(v1.w, 0x01010101, sx);
                sm.as[r][b] = sx;
            }
        }
        // Weights: 64 rows x 16 chunks of 16 values, 8 per thread; 16 consecutive threads one row.
#pragma unroll 2
        for (int i = 0; i < (kBN * 2 * kBlk) / kThreads; ++i) {
            const int idx = tid + i * kThreads, n = idx / (2 * kBlk), c = idx % (2 * kBlk);
            const int b = c / 2, h = c % 2;
            Chunk ch;
            if (n0 + n < N && b < nblk) {
                Q8Dot<T>::load(tl.w + static_cast<size_t>(n0 + n) * row_bytes, k0 / 16 + c, ch);
            } else {
                ch.q[0] = ch.q[1] = ch.q[2] = ch.q[3] = 0;
                ch.d = ch.m = 0.f;
            }
            int8_t* dst = &sm.w[n * kLdq + 32 * b];
            if constexpr (Q8Dot<T>::kSplit) {
                // lanes 0-1: values 8h .. 8h + 7 of the block; lanes 2-3: 16 + 8h .. 16 + 8h + 7 (q8dot.cuh)
                *reinterpret_cast<int2*>(dst + 8 * h) = make_int2(ch.q[0], ch.q[1]);
                *reinterpret_cast<int2*>(dst + 16 + 8 * h) = make_int2(ch.q[2], ch.q[3]);
            } else {
                *reinterpret_cast<int4*>(dst + 16 * h) = make_int4(ch.q[0], ch.q[1], ch.q[2], ch.q[3]);
            }
            sm.wd[n][c] = ch.d;
            if constexpr (kMin)
                if (h == 0) sm.wm[n][b] = ch.m;
        }
        __syncthreads();

        for (int b = 0; b < nblk; ++b) {
            int af[2][4];
#pragma unroll
            for (int mi = 0; mi < 2; ++mi) {
                const int r = wm + 16 * mi + gid;
                const int* p0 = reinterpret_cast<const int*>(&sm.a[r * kLdq + 32 * b]);
                const int* p1 = reinterpret_cast<const int*>(&sm.a[(r + 8) * kLdq + 32 * b]);
                af[mi][0] = p0[tig];
                af[mi][1] = p1[tig];
                af[mi][2] = p0[4 + tig];
                af[mi][3] = p1[4 + tig];
            }
            int bf[4][2];
#pragma unroll
            for (int ni = 0; ni < 4; ++ni) {
                const int* q = reinterpret_cast<const int*>(&sm.w[(wn + 8 * ni + gid) * kLdq + 32 * b]);
                bf[ni][0] = q[tig];
                bf[ni][1] = q[4 + tig];
            }
            float da[2][2];
            int sa[2][2];
#pragma unroll
            for (int mi = 0; mi < 2; ++mi)
#pragma unroll
                for (int hr = 0; hr < 2; ++hr) {
                    const int r = wm + 16 * mi + gid + 8 * hr;
                    da[mi][hr] = sm.ad[r][b];
                    sa[mi][hr] = kMin ? sm.as[r][b] : 0;
                }
#pragma unroll
            for (int ni = 0; ni < 4; ++ni) {
                float dw[2], dw1[2], mw[2];
#pragma unroll
                for (int hc = 0; hc < 2; ++hc) {
                    const int cidx = wn + 8 * ni + 2 * tig + hc;
                    dw[hc] = sm.wd[cidx][2 * b];
                    dw1[hc] = kHalves ? sm.wd[cidx][2 * b + 1] : 0.f;
                    mw[hc] = kMin ? sm.wm[cidx][b] : 0.f;
                }
#pragma unroll
                for (int mi = 0; mi < 2; ++mi) {
                    int c[4] = {0, 0, 0, 0};
                    if constexpr (kHalves) {
                        int c1[4] = {0, 0, 0, 0};
                        mma_k16(c, af[mi][0], af[mi][1], bf[ni][0]);
                        mma_k16(c1, af[mi][2], af[mi][3], bf[ni][1]);
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const float dx = da[mi][e / 2];
                            acc[mi][ni][e] += (dw[e % 2] * dx) * static_cast<float>(c[e]);
                            acc[mi][ni][e] += (dw1[e % 2] * dx) * static_cast<float>(c1[e]);
                        }
                    } else {
                        if constexpr (kK32) {
                            mma_k32(c, af[mi], bf[ni][0], bf[ni][1]);
                        } else {
                            mma_k16(c, af[mi][0], af[mi][1], bf[ni][0]);
                            mma_k16(c, af[mi][2], af[mi][3], bf[ni][1]);
                        }
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const float dx = da[mi][e / 2];
                            if constexpr (kMin)
                                acc[mi][ni][e] += dx * (dw[e % 2] * static_cast<float>(c[e]) -
                                                        mw[e % 2] * static_cast<float>(sa[mi][e / 2]));
                            else
                                acc[mi][ni][e] += (dw[e % 2] * dx) * static_cast<float>(c[e]);
                        }
                    }
                }
            }
        }
    }

    // c0, c1: row gid, cols 2tig, 2tig + 1; c2, c3: row gid + 8.
    float* O = out + tl.row0 * ldo;
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = wm + 16 * mi + gid + 8 * (e / 2);
                const int col = n0 + wn + 8 * ni + 2 * tig + e % 2;
                if (r < mrows && col < N) {  // as mmvq: y = product + bias, then out = y or out + y
                    float* o = O + static_cast<int64_t>(r) * ldo + col;
                    const float y = acc[mi][ni][e] + (bias ? bias[col] : 0.f);
                    *o = accumulate ? *o + y : y;
                }
            }
}

/// Launches the kernel for weight type t (q8_supported) over a grid of (N tiles, row tiles).
template <bool kK32, typename Groups>
void launch(cudaStream_t s, GgmlType t, const Groups& g, dim3 grid, size_t row_bytes, int N, int K, const Q8Acts& a,
            const int32_t* a_row, float* out, int64_t ldo, const float* bias = nullptr, bool accumulate = false) {
    dispatch_q8_type(t, [&]<GgmlType T>() {
        moe_mmq_kernel<T, kK32, Groups>
            <<<grid, kThreads, 0, s>>>(g, row_bytes, N, K, a.q, a.d, a_row, out, ldo, bias, accumulate ? 1 : 0);
    });
}

}  // namespace nitro::cuda::moe_mmq_detail
