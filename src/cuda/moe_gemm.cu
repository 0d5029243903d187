// Grouped MoE GEMM (moe_gemm.h). One CTA of 4 warps computes a 64 x 64 tile of one group's output
// (64 grouped rows x 64 weight rows): per step of 64 values of K it copies the activation tile
// (f16) to shared memory, decodes the weight tile there (each thread one 32-value chunk of one
// weight row, decode32 as src/quant, rounded to f16 as dequantize_f16 rounds), then the warps
// multiply with WMMA 16x16x16 (f16 in, f32 accumulate), each warp a 32 x 32 quarter. The tile's
// sums go through shared memory to global, masked to the group's rows.
// blockIdx.x: the 64-row tile of the weight; blockIdx.y: a (group, 64-row tile of the group) pair,
// found by binary search in the launch's table of tile offsets.
#include "cuda/moe_gemm.h"

#include "cuda/common.cuh"
#include "cuda/quant.cuh"

#include <mma.h>

#include <algorithm>

namespace nitro::cuda {

namespace {

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


void check_shape(const DWeight& shape, int64_t lda) {
    if (!supported_weight_type(shape.type)) cfail("CUDA moe_gemm: weight type {} is not supported", type_display_name(shape.type));
    if (shape.ne0 % 32 != 0 || lda % 8 != 0)
        cfail("CUDA moe_gemm: K = {} must be whole blocks of 32 and lda = {} a multiple of 8", shape.ne0, lda);
}

constexpr int kGroupThreads = 1024;

/// moe_group: one CTA. Counts of each expert (shared-memory atomics), their exclusive prefix sums
/// (offsets; and tile starts over the resident experts) by one warp, then each pair takes the next
/// row of its expert (atomics: the order of rows within an expert varies from run to run, which
/// changes no result: every step after this is row-wise).
__global__ void __launch_bounds__(kGroupThreads) moe_group_kernel(const int32_t* __restrict__ ids, int R, int K, int X,
                                                                  const int32_t* __restrict__ slot_of, int32_t* __restrict__ off,
                                                                  int32_t* __restrict__ tile0, int32_t* __restrict__ group_tok,
                                                                  int32_t* __restrict__ group_exp, int32_t* __restrict__ row_of) {
    extern __shared__ int32_t sh[];
    int32_t* cnt = sh;       // [X], then the cursor of each expert
    const int tid = static_cast<int>(threadIdx.x);
    for (int e = tid; e < X; e += kGroupThreads) cnt[e] = 0;
    __syncthreads();
    for (int r = tid; r < R; r += kGroupThreads) atomicAdd(&cnt[ids[r]], 1);
    __syncthreads();
    if (tid < kWarp) {
        // lane l scans experts [l * per, (l + 1) * per)
        const int per = (X + kWarp - 1) / kWarp, b = min(X, tid * per), e_end = min(X, b + per);
        int rows = 0, tiles = 0;
        for (int e = b; e < e_end; ++e) {
            rows += cnt[e];
            tiles += slot_of[e] >= 0 ? (cnt[e] + kBM - 1) / kBM : 0;
        }
        int rows_incl = rows, tiles_incl = tiles;
#pragma unroll
        for (int o = 1; o < kWarp; o <<= 1) {
            const int ro = __shfl_up_sync(0xffffffffu, rows_incl, o), to = __shfl_up_sync(0xffffffffu, tiles_incl, o);
            if (tid >= o) rows_incl += ro, tiles_incl += to;
        }
        int r0 = rows_incl - rows, t0 = tiles_incl - tiles;
        for (int e = b; e < e_end; ++e) {
            const int c = cnt[e];
            off[e] = r0;
            tile0[e] = t0;
            cnt[e] = r0;  // the cursor
            r0 += c;
            t0 += slot_of[e] >= 0 ? (c + kBM - 1) / kBM : 0;
        }
        if (tid == kWarp - 1) {
            off[X] = rows_incl;
            tile0[X] = tiles_incl;
        }
    }
    __syncthreads();
    for (int r = tid; r < R; r += kGroupThreads) {
        const int e = ids[r];
        const int g = atomicAdd(&cnt[e], 1);
        group_tok[g] = r / K;
        group_exp[g] = e;
        row_of[r] = g;
    }
}
}  // namespace

void moe_gemm_f16(cudaStream_t s, const DWeight& shape, std::span<const MoeGemmGroup> groups, const __half* a, int64_t lda,
                  float* out, int64_t ldo) {
    const int N = static_cast<int>(shape.n_rows), K = static_cast<int>(shape.ne0);
    check_shape(shape, lda);
    GroupTable tab{};
    auto flush = [&]() {
        if (tab.n == 0) return;
        const dim3 grid(static_cast<unsigned>(ceil_div(N, kBN)), static_cast<unsigned>(tab.tile0[tab.n]));
        dispatch_type(shape.type, [&]<GgmlType T>() {
            moe_gemm_kernel<T, HostGroups><<<grid, kThreads, 0, s>>>(HostGroups{tab}, shape.row_bytes, N, K, a, lda, out, ldo);
        });
        NITRO_CUDA_LAUNCH_CHECK();
        tab.n = 0;
        tab.tile0[0] = 0;
    };
    for (const MoeGemmGroup& g : groups) {
        if (g.rows <= 0) continue;
        tab.w[tab.n] = g.w;
        tab.row0[tab.n] = g.row0;
        tab.rows[tab.n] = static_cast<int32_t>(g.rows);
        tab.tile0[tab.n + 1] = tab.tile0[tab.n] + ceil_div(g.rows, kBM);
        if (++tab.n == kMaxGroups) flush();
    }
    flush();
}

}  // namespace nitro::cuda

namespace nitro::cuda {

void moe_group(cudaStream_t s, const int32_t* ids, int64_t n, int K, const int32_t* slot_of, int64_t n_expert, MoeScratch& sc) {
    const int64_t R = n * K;
    if (R >= (int64_t{1} << 31) || n_expert > 12000) cfail("CUDA moe_group: {} pairs over {} experts is too many", R, n_expert);
    moe_group_kernel<<<1, kGroupThreads, static_cast<size_t>(n_expert) * 4, s>>>(
        ids, static_cast<int>(R), K, static_cast<int>(n_expert), slot_of, sc.group_off, sc.group_off + n_expert + 1,
        sc.group_tok, sc.group_exp, sc.row_of);
    NITRO_CUDA_LAUNCH_CHECK();
}

int64_t moe_max_tiles(int64_t rows, int64_t n_expert) { return (rows + kBM - 1) / kBM + std::min(rows, n_expert); }

void moe_gemm_f16_slots(cudaStream_t s, const DWeight& shape, size_t stride, const int32_t* slot_of, int64_t n_expert,
                        const int32_t* group_off, int64_t rows, const __half* a, int64_t lda, float* out, int64_t ldo) {
    check_shape(shape, lda);
    const int64_t tiles = moe_max_tiles(rows, n_expert);
    if (tiles == 0) return;
    if (tiles > 65535) cfail("CUDA moe_gemm: {} row tiles exceed a launch's 65535", tiles);
    const int N = static_cast<int>(shape.n_rows), K = static_cast<int>(shape.ne0);
    const SlotGroups g{group_off, group_off + n_expert + 1, static_cast<int>(n_expert), shape.data, stride, slot_of};
    const dim3 grid(static_cast<unsigned>(ceil_div(N, kBN)), static_cast<unsigned>(tiles));
    dispatch_type(shape.type, [&]<GgmlType T>() {
        moe_gemm_kernel<T, SlotGroups><<<grid, kThreads, 0, s>>>(g, shape.row_bytes, N, K, a, lda, out, ldo);
    });
    NITRO_CUDA_LAUNCH_CHECK();
}

}  // namespace nitro::cuda
