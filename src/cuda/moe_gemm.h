// Grouped MoE GEMM for prompts (prefill): the products of many experts, each on its own group of
// rows, in one launch, with the weights decoded to f16 inside the GEMM's main loop (no f16 copy of
// the expert in memory) and multiplied on the tensor cores (f16 x f16, f32 accumulation).
//
// It replaces "dequantize the whole expert to f16, then one cuBLAS GEMM", run per expert and per
// matrix (6 launches per expert per layer: 768 per layer for qwen3-30b-a3b's 128 experts). The
// operands are the same f16 values as that path's (weights decoded exactly as src/quant and
// rounded to nearest f16, activations as given), so only the f32 summation order differs.
// A row's result depends only on its own activations, the expert's weights and K, never on which
// other rows or experts share the launch: the hybrid's staged experts (one per launch) and the
// resident ones (all in one) give the same bits.
#pragma once

#include "cuda/ops.h"

#include <cuda_fp16.h>

#include <cstdint>
#include <span>

namespace nitro::cuda {

/// One expert's share of a grouped product: weights at `w` (one slot's matrix: n_rows rows of ne0
/// values, row_bytes apart, as the DWeight passed with it says), rows [row0, row0 + rows) of the
/// grouped activations and output.
struct MoeGemmGroup {
    const uint8_t* w = nullptr;
    int64_t row0 = 0;
    int64_t rows = 0;
};

/// out[(g.row0 + m) * ldo + n] = sum_k a[(g.row0 + m) * lda + k] * W_g[n, k] for every group g,
/// m < g.rows, n < shape.n_rows, k < shape.ne0; W_g = shape with data = g.w.
/// a: f16 [.., lda] (lda a multiple of 8, 16-byte aligned rows); out: f32. shape.ne0 must be whole
/// blocks of 32 values and its type one of supported_weight_type's. Groups with rows == 0 are
/// skipped. Any number of groups (launched in batches).
void moe_gemm_f16(cudaStream_t s, const DWeight& shape, std::span<const MoeGemmGroup> groups, const __half* a, int64_t lda,
                  float* out, int64_t ldo);

/// Groups the (token, j) pairs of ids [n, K] (device) by expert on the device, with no host
/// round trip: scratch.group_off gets each expert's row offsets [n_expert + 1] and then its first
/// 64-row tile [n_expert + 1] (experts with slot_of[e] < 0 get no tiles), and scratch.group_tok,
/// group_exp and row_of the grouping as moe_prefill_begin's (rows of one expert in any order).
void moe_group(cudaStream_t s, const int32_t* ids, int64_t n, int K, const int32_t* slot_of, int64_t n_expert,
               MoeScratch& scratch);

/// The grid rows moe_gemm_f16_slots launches for `rows` grouped rows: every expert's tiles, at most.
int64_t moe_max_tiles(int64_t rows, int64_t n_expert);

/// moe_gemm_f16 over the grouping moe_group left on the device (group_off): expert e's rows from
/// the weights in its slot (shape.data + slot_of[e] * stride), resident experts only.
void moe_gemm_f16_slots(cudaStream_t s, const DWeight& shape, size_t stride, const int32_t* slot_of, int64_t n_expert,
                        const int32_t* group_off, int64_t rows, const __half* a, int64_t lda, float* out, int64_t ldo);

}  // namespace nitro::cuda
