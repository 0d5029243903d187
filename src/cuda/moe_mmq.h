// Integer grouped MoE GEMM for prompts (llama.cpp's MMQ class): the products of many experts,
// each on its own group of rows, in one launch, on 8-bit activations and weights unpacked to int8.
//
// The activations are quantized once by the CPU engine's own quantizer (quantize_q8, mmvq.h: the
// weight's vec-dot type, Q8_0 or Q8_K, as int8 values with one f32 scale per 32 values); each weight
// block is unpacked to int8 as src/quant decodes it (q8dot.cuh: value = d * q - m per 32 values, per
// 16 for Q6_K); the tensor cores compute the exact int32 dot product of every 32-value block
// (mma.sync .s8, m16n8k32 / m16n8k16), which is then scaled in f32 by the weight's and the
// activation's block scales (and the K-quants' min term through the block's activation sum) and
// summed in f32 over the blocks in K order. That is the arithmetic of the CPU engine's vec-dot
// kernels (ggml's): the same integer block sums, the same scales; GPU and CPU products differ only
// in the order and rounding of the f32 sums of scaled blocks, as the decode kernels (mmvq.h) do.
//
// Weight types: q8_supported's (Q8_0, Q4_0, MXFP4, Q4_K, Q5_K, Q6_K, IQ4_XS). A row's result depends
// only on its own activations, its expert's weights and K, never on which rows or experts share
// its tile or launch, so the host-table and slot forms, and one expert per launch (the hybrid's
// staged experts), give the same bits.
#pragma once

#include "cuda/mmvq.h"
#include "cuda/moe_gemm.h"
#include "cuda/ops.h"

#include <cstdint>
#include <span>

namespace nitro::cuda {

/// out[(g.row0 + m) * ldo + n] = sum over the 32-value blocks b of K of the scaled integer block dot
/// products of weight row n of W_g (W_g = shape with data = g.w) and activation row
/// a_row[g.row0 + m] of a (row g.row0 + m when a_row is null), for every group g, m < g.rows,
/// n < shape.n_rows. a: quantize_q8 output for shape.type with a.ne0 == shape.ne0 (device);
/// a_row: int32 [grouped rows] on the device or null; out: f32 [grouped rows, ldo] (device).
/// shape.type must be q8_supported and ne0 whole blocks of its vec-dot type (32 or 256 values); a
/// bad type or K fails with a message naming it. Groups with rows == 0 are skipped; any number of
/// groups (launched in batches).
/// bias (optional, device [shape.n_rows]) is added to each product, and with accumulate the result
/// is added to out instead of overwriting it (y = product + bias; out = accumulate ? out + y : y,
/// mmvq's order): the epilogue of a dense prompt product (matmul), one group of every row.
void moe_mmq(cudaStream_t s, const DWeight& shape, std::span<const MoeGemmGroup> groups, const Q8Acts& a,
             const int32_t* a_row, float* out, int64_t ldo, const float* bias = nullptr, bool accumulate = false);

/// moe_mmq over the grouping moe_group left on the device (group_off: offsets, then 64-row tile
/// starts; moe_gemm.h): expert e's grouped rows from the weights in its slot (shape.data +
/// slot_of[e] * stride), resident experts only (slot_of[e] >= 0). rows: the grouped rows of the
/// chunk (n * K), which bounds the grid (moe_max_tiles).
void moe_mmq_slots(cudaStream_t s, const DWeight& shape, size_t stride, const int32_t* slot_of, int64_t n_expert,
                   const int32_t* group_off, int64_t rows, const Q8Acts& a, const int32_t* a_row, float* out,
                   int64_t ldo);

}  // namespace nitro::cuda
