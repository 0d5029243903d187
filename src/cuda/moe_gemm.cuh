// The grouped MoE GEMM's kernel (moe_gemm.h), in a header so the kernel sandbox
// (dev/kernels/moe_gemm.cu) can time its variants against it. One CTA of 4 warps computes a 64 x 64 tile of one group's output
// (64 grouped rows x 64 weight rows): per step of 64 values of K it copies the activation tile
// (f16) to shared memory, decodes the weight tile there (each thread one 32-value chunk of one
// weight row, decode32 as src/quant, rounded to f16 as dequantize_f16 rounds), then the warps
// multiply with WMMA 16x16x16 (f16 in, f32 accumulate), each warp a 32 x 32 quarter. The tile's
// sums go through shared memory to global, masked to the group's rows.
// blockIdx.x: the 64-row tile of the weight; blockIdx.y: a (group, 64-row tile of the group) pair,
// found by binary search in the launch's table of tile offsets.
#pragma once

#include "cuda/common.cuh"
#include "cuda/moe_gemm.h"
#include "cuda/quant.cuh"

#include <mma.h>

namespace nitro::cuda::moe_gemm_detail {

constexpr int kBM = 64, kBN = 64, kBK = 64;
constexpr int kLds = kBK + 8;   ///< halves per shared row (a pad of 16 bytes against bank conflicts)
constexpr int kLdc = kBN + 4;   ///< floats per shared output row
constexpr int kThreads = 128;
constexpr int kMaxGroups = 96;  ///< groups per launch (the table travels in the kernel's parameters)

struct GroupTable {
    const uint8_t* w[kMaxGroups];
    int64_t row0[kMaxGroups];
    int32_t rows[kMaxGroups];
    int32_t tile0[kMaxGroups + 1];  ///< first blockIdx.y of each group; tile0[n] = gridDim.y
    int32_t n;
};

/// The last g < n with tile0[g] <= ty (tile0 non-decreasing, tile0[0] = 0 <= ty).
__device__ __forceinline__ int find_group(const int32_t* tile0, int n, int ty) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (tile0[mid] <= ty) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/// A CTA's tile: its group's weights, first grouped row, and rows left from m0.
struct Tile {
    const uint8_t* w;
    int64_t row0;  ///< grouped row of the tile's first row
    int rows;      ///< rows of the tile (<= kBM)
};

/// Groups from the host (kernel parameters).
struct HostGroups {
    GroupTable tab;
    __device__ bool tile(int ty, Tile& t) const {
        const int g = find_group(tab.tile0, tab.n, ty);
        const int m0 = (ty - tab.tile0[g]) * kBM;
        t = {tab.w[g], tab.row0[g] + m0, min(kBM, tab.rows[g] - m0)};
        return true;
    }
};

/// Groups computed on the device (moe_group_kernel): expert e's rows [off[e], off[e + 1]), its
/// tiles from tile0[e] (none when not resident), its weights in slot slot_of[e].
struct SlotGroups {
    const int32_t* off;
    const int32_t* tile0;
    int n_expert;
    const uint8_t* base;
    size_t stride;
    const int32_t* slot_of;
    __device__ bool tile(int ty, Tile& t) const {
        if (ty >= tile0[n_expert]) return false;  // the grid is sized for the worst case
        const int e = find_group(tile0, n_expert, ty);
        const int m0 = (ty - tile0[e]) * kBM;
        t = {base + static_cast<size_t>(slot_of[e]) * stride, static_cast<int64_t>(off[e]) + m0,
             min(kBM, off[e + 1] - off[e] - m0)};
        return true;
    }
};

template <GgmlType T, typename Groups>
__global__ void __launch_bounds__(kThreads, 4) moe_gemm_kernel(const Groups groups, size_t row_bytes, int N, int K,
                                                               const __half* __restrict__ a, int64_t lda,
                                                               float* __restrict__ out, int64_t ldo) {
    using namespace nvcuda;
    __shared__ __align__(128) __half sA[kBM * kLds];
    __shared__ __align__(128) __half sW[kBN * kLds];
    __shared__ __align__(128) float sC[kBM * kLdc];

    Tile tl;
    if (!groups.tile(static_cast<int>(blockIdx.y), tl)) return;
    const int mrows = tl.rows;
    const int n0 = static_cast<int>(blockIdx.x) * kBN;
    const __half* A = a + tl.row0 * lda;
    const uint8_t* W = tl.w;

    const int tid = static_cast<int>(threadIdx.x), warp = tid / kWarp;
    const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.f);

    // The weight chunk this thread decodes: row wr of the tile, 32-value chunk wj of the step.
    const int wr = tid / 2, wj = tid % 2;
    const bool wrow_ok = n0 + wr < N;
    const uint8_t* wrow = W + static_cast<size_t>(n0 + wr) * row_bytes;

    for (int k0 = 0; k0 < K; k0 += kBK) {
        // Activations: 64 rows x 64 halves = 512 pieces of 16 bytes, 4 per thread, coalesced.
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int idx = tid + i * kThreads, r = idx / 8, c = (idx % 8) * 8;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (r < mrows && k0 + c < K) v = *reinterpret_cast<const uint4*>(A + static_cast<int64_t>(r) * lda + k0 + c);
            *reinterpret_cast<uint4*>(&sA[r * kLds + c]) = v;
        }
        // Weights: decode 32 values, round to f16 (as dequantize_f16), 4 stores of 16 bytes.
        {
            __half2 h[16];
            const int kc = k0 / 32 + wj;
            if (wrow_ok && kc * 32 < K) {
                float w[32];
                decode32<T>(wrow, kc, w);
#pragma unroll
                for (int q = 0; q < 16; ++q) h[q] = __floats2half2_rn(w[2 * q], w[2 * q + 1]);
            } else {
#pragma unroll
                for (int q = 0; q < 16; ++q) h[q] = __floats2half2_rn(0.f, 0.f);
            }
            uint4* dst = reinterpret_cast<uint4*>(&sW[wr * kLds + wj * 32]);
#pragma unroll
            for (int q = 0; q < 4; ++q) dst[q] = reinterpret_cast<const uint4*>(h)[q];
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < kBK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(fa[i], &sA[(wm + 16 * i) * kLds + kk], kLds);
#pragma unroll
            for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], &sW[(wn + 16 * j) * kLds + kk], kLds);
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j)
            wmma::store_matrix_sync(&sC[(wm + 16 * i) * kLdc + wn + 16 * j], acc[i][j], kLdc, wmma::mem_row_major);
    __syncthreads();
    float* O = out + tl.row0 * ldo + n0;
    for (int idx = tid; idx < kBM * kBN; idx += kThreads) {
        const int r = idx / kBN, c = idx % kBN;
        if (r < mrows && n0 + c < N) O[static_cast<int64_t>(r) * ldo + c] = sC[r * kLdc + c];
    }
}

}  // namespace nitro::cuda::moe_gemm_detail
