// Grouped MoE GEMM (moe_gemm.h): the launchers and the grouping kernel; the GEMM kernel is in
// moe_gemm.cuh.
#include "cuda/moe_gemm.cuh"

#include <algorithm>

namespace nitro::cuda {

using namespace moe_gemm_detail;

namespace {

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
