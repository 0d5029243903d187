// Integer grouped MoE GEMM (moe_mmq.h): the launchers; the kernel is in moe_mmq.cuh.
#include "cuda/moe_mmq.cuh"

#include "cpu/matmul.h"

namespace nitro::cuda {

using namespace moe_mmq_detail;

namespace {

void check_shape(const DWeight& shape, const Q8Acts& a) {
    if (!q8_supported(shape.type))
        cfail("CUDA moe_mmq: weight type {} has no integer product (q8_supported)", type_display_name(shape.type));
    const int64_t block = cpu::vec_dot_type(shape.type) == GgmlType::Q8_K ? 256 : 32;
    if (shape.ne0 % block != 0)
        cfail("CUDA moe_mmq: K = {} must be whole blocks of {} for {} weights", shape.ne0, block,
              type_display_name(shape.type));
    if (a.ne0 != shape.ne0) cfail("CUDA moe_mmq: activations of {} values for weights of {}", a.ne0, shape.ne0);
    if (shape.ne0 >= (int64_t{1} << 31) || shape.n_rows >= (int64_t{1} << 31))
        cfail("CUDA moe_mmq: a {} x {} matrix is too large", shape.n_rows, shape.ne0);
}

}  // namespace

void moe_mmq(cudaStream_t s, const DWeight& shape, std::span<const MoeGemmGroup> groups, const Q8Acts& a,
             const int32_t* a_row, float* out, int64_t ldo, const float* bias, bool accumulate) {
    check_shape(shape, a);
    const int N = static_cast<int>(shape.n_rows), K = static_cast<int>(shape.ne0);
    GroupTable tab{};
    auto flush = [&]() {
        if (tab.n == 0) return;
        const dim3 grid(static_cast<unsigned>(ceil_div(N, kBN)), static_cast<unsigned>(tab.tile0[tab.n]));
        launch<true>(s, shape.type, HostGroups{tab}, grid, shape.row_bytes, N, K, a, a_row, out, ldo, bias, accumulate);
        NITRO_CUDA_LAUNCH_CHECK();
        tab.n = 0;
        tab.tile0[0] = 0;
    };
    for (const MoeGemmGroup& g : groups) {
        if (g.rows <= 0) continue;
        if (tab.tile0[tab.n] + ceil_div(g.rows, kBM) > 65535) flush();
        tab.w[tab.n] = g.w;
        tab.row0[tab.n] = g.row0;
        tab.rows[tab.n] = static_cast<int32_t>(g.rows);
        tab.tile0[tab.n + 1] = tab.tile0[tab.n] + static_cast<int32_t>(ceil_div(g.rows, kBM));
        if (++tab.n == kMaxGroups) flush();
    }
    flush();
}

void moe_mmq_slots(cudaStream_t s, const DWeight& shape, size_t stride, const int32_t* slot_of, int64_t n_expert,
                   const int32_t* group_off, int64_t rows, const Q8Acts& a, const int32_t* a_row, float* out,
                   int64_t ldo) {
    check_shape(shape, a);
    const int64_t tiles = moe_max_tiles(rows, n_expert);
    if (tiles == 0) return;
    if (tiles > 65535) cfail("CUDA moe_mmq: {} row tiles exceed a launch's 65535", tiles);
    const int N = static_cast<int>(shape.n_rows), K = static_cast<int>(shape.ne0);
    const SlotGroups g{group_off, group_off + n_expert + 1, static_cast<int>(n_expert), shape.data, stride, slot_of};
    const dim3 grid(static_cast<unsigned>(ceil_div(N, kBN)), static_cast<unsigned>(tiles));
    launch<true>(s, shape.type, g, grid, shape.row_bytes, N, K, a, a_row, out, ldo);
    NITRO_CUDA_LAUNCH_CHECK();
}

}  // namespace nitro::cuda
