// Integer decode products (llama.cpp's MMVQ class; kernels in mmvq.cu, block decoding in
// q8dot.cuh): for 1-8 tokens, activations are quantized once to 8-bit blocks of 32 with the CPU
// engine's own quantizer (the weight's vec-dot type, Q8_0 or Q8_K), and each weight row is read
// once, unpacked to int8 lanes in registers and multiplied with __dp4a. The CPU engine computes the
// same integer block sums (src/cpu's vec-dot kernels, like ggml's), so GPU and CPU products differ
// only in f32 summation order. matmul and moe_experts take this path when their scratch holds
// rounded activations (GemmScratch::xr) and GemmScratch::int8_dot is set (the engine's default).
#pragma once

#include "cuda/ops.h"
#include "ops/gpu_limits.h"

#include <cstddef>
#include <cstdint>
#include <span>

namespace nitro::cuda {

/// Rows of activations in 8-bit blocks of 32: q [rows, ne0] int8, d [rows, ne0 / 32] f32 (a Q8_K
/// block of 256 gives its 8 blocks of 32 its one scale); value = q * d, equal to round_acts's.
/// Laid out as q8_act_bytes (ops/gpu_limits.h) says.
struct Q8Acts {
    const int8_t* q = nullptr;
    const float* d = nullptr;
    int64_t ne0 = 0;
};

/// An input's rows already in 8-bit blocks, made with the f32 rows in one launch (rms_norm_q8):
/// acts holds the quantization of x's `rows` rows (row stride ldx) for weights whose vec-dot type
/// is vdt, exactly the bytes quantize_q8 would write. x = null: none. Whoever rewrites x must
/// clear it (GpuSession does so in every op that writes h).
struct Q8Input {
    const float* x = nullptr;
    int64_t ldx = 0, rows = 0;
    GgmlType vdt = GgmlType::F32;
    Q8Acts acts;
};
/// &in->acts if `in` holds x's n_tok rows (row stride ldx) quantized for the vec-dot type of
/// `weight`, else null (the caller quantizes x itself).
const Q8Acts* q8_ready(const Q8Input* in, const float* x, int64_t ldx, int64_t n_tok, GgmlType weight);

/// out = rms_norm(x) * w as rms_norm computes it (the same bits; host_out as rms_norm's), and the
/// same rows quantized to the 8-bit blocks of cpu::vec_dot_type(weight) into buf as quantize_q8
/// would (the same bytes), in one launch (one block per row) instead of two; q describes the
/// result (q.x = out). Decode only: returns false and launches nothing (q cleared) unless
/// n_rows <= kGemvMaxTokens, weight is q8_supported, n is whole blocks of the vec-dot type and
/// buf holds q8_act_bytes(n_rows, n); the caller then runs rms_norm (and later quantize_q8).
bool rms_norm_q8(cudaStream_t s, const float* x, const float* w, int64_t n_rows, int64_t n, int64_t ld_x, float eps,
                 float* out, int64_t ld_out, float* host_out, GgmlType weight, void* buf, size_t buf_bytes, Q8Input& q);

/// The Q8Acts of `rows` rows of `ne0` values laid out in buf as q8_act_bytes says (the quants,
/// then the scales at q8_act_scales_offset). Only a view: nothing is checked or written.
inline Q8Acts q8_acts_view(const void* buf, int64_t rows, int64_t ne0) {
    Q8Acts a;
    a.q = static_cast<const int8_t*>(buf);
    a.d = reinterpret_cast<const float*>(static_cast<const uint8_t*>(buf) + q8_act_scales_offset(rows, ne0));
    a.ne0 = ne0;
    return a;
}

/// Chunks (16 values of a row; for Q4_K / Q5_K units of two, mmvq_pairs) each lane of the integer
/// decode kernels loads before it multiplies them: 1, 2 or 4 (more loads in flight per lane), or 0
/// for the defaults (the MoE gate/up kernel 1 of each of its two rows, the fused down + combine 1
/// of each of 4 rows, the others 2). It applies to the MoE kernels and to one-token mmvq
/// (chunks of 2-8 tokens keep 2). Every setting sums the chunks in the same order, so the
/// results are the same bits; only the speed differs (a tuning knob for nitro_cuda_bench). The
/// environment's NITRO_MMVQ_CHUNKS sets it at the first launch; set_mmvq_chunks overrides it and
/// must run before a decode graph is captured (a graph keeps the kernels it captured). Fails with
/// a message for any other value.
void set_mmvq_chunks(int n);
int mmvq_chunks();

/// Whether the lanes of the integer decode kernels take Q4_K and Q5_K rows in units of two chunks
/// that share their quant bytes (sub-blocks 2j and 2j + 1, low and high nibbles: one 16-byte
/// load and one scale decode for both; q8dot.cuh load_pair) instead of one chunk at a time. On by
/// default; NITRO_MMVQ_PAIRS=0 turns it off (read at the first launch; set_mmvq_pairs overrides it
/// and, like set_mmvq_chunks, must run before a decode graph is captured). The two settings sum a
/// row's chunks in different orders: their results differ in the last bits (both are the CPU's
/// integer block sums in another f32 order); within one setting, every U and every kernel gives
/// the same bits. A knob for comparing the two in one build (nitro_cuda_bench).
void set_mmvq_pairs(bool on);
bool mmvq_pairs();

/// True for the weight types with an integer decode path: Q8_0, Q4_0, MXFP4, Q4_K, Q5_K, Q6_K,
/// IQ4_XS (F32, F16 and BF16 keep the f32 kernels of matmul.cu).
bool q8_supported(GgmlType t);

/// Rows x [rows, ne0] (row stride ldx) quantized to the 8-bit blocks of cpu::vec_dot_type(weight)
/// into buf (device, 256-byte aligned, buf_bytes >= q8_act_bytes(rows, ne0); fails with a message
/// naming the sizes otherwise). ne0 must be whole blocks (32, or 256 for Q8_K).
Q8Acts quantize_q8(cudaStream_t s, GgmlType weight, const float* x, int64_t ldx, int64_t rows, int64_t ne0, void* buf,
                   size_t buf_bytes);

/// quantize_q8 of rows [row0, row0 + rows) of a layout of total_rows rows in buf: x points to row
/// row0's values; the other rows of the layout are left as they are. Returns the whole layout (the
/// prompt MoE quantizes one expert's grouped rows at a time into the chunk's layout).
Q8Acts quantize_q8_part(cudaStream_t s, GgmlType weight, const float* x, int64_t ldx, int64_t row0, int64_t rows,
                        int64_t total_rows, int64_t ne0, void* buf, size_t buf_bytes);

/// out[t * ldo + r] (+)= dot(w.row(r), x.row(t)) + bias[r] for t < n_tok (<= kGemvMaxTokens),
/// r < w.n_rows; w.type must be q8_supported and x quantized for it.
void mmvq(cudaStream_t s, const DWeight& w, const Q8Acts& x, int64_t n_tok, float* out, int64_t ldo, const float* bias,
          bool accumulate);

/// mmvq of each of outs (up to 4 matrices of one weight type, overwriting their outputs) on the same
/// activations in one launch: the same arithmetic per row as mmvq (the same bits).
void mmvq_multi(cudaStream_t s, std::span<const MatmulTo> outs, const Q8Acts& x, int64_t n_tok);

/// Bytes of scratch (GemmScratch::xr) moe_decode_q8 needs for n tokens of K experts each.
size_t moe_decode_q8_bytes(int64_t n, int64_t E, int K, int64_t F);

/// moe_experts' decode path with integer products: the expert input h [n, E] is quantized once
/// (for gate and up), each resident expert's gate and up rows of pair r = t*K + j give
/// act[r, f] = glu(gate + gate_b, up + up_b) (f32, in scratch.act), which is quantized for down,
/// whose rows go to scratch.down [r, E] (down_b is added by moe_combine). Pairs whose expert has
/// slot_of < 0 are skipped. scratch.gemm.xr must hold moe_decode_q8_bytes.
/// hq: h's rows already quantized (rms_norm_q8), or null. With scratch.fuse_down (and K <=
/// kMaxFusedDownK) the down product is left to moe_down_combine_q8 (scratch.pending_q/d set).
void moe_decode_q8(cudaStream_t s, const ExpertSlots& ex, const float* h, int64_t n, int64_t E, int K, const int32_t* ids,
                   MoeScratch& scratch, const Q8Input* hq = nullptr);

/// Experts per token the fused down + combine handles (shared memory of its CTA).
inline constexpr int kMaxFusedDownK = 32;

/// The down product of moe_decode_q8 and moe_combine in one launch: for token t and output column
/// c, the down row c of each resident expert of t's K pairs (8-bit GLU output `act` [n*K, F] from
/// moe_decode_q8) and x[t, c] += partial[t, c] (if given) + sum_j w[t,j] * (down + down_b[e]) in
/// router order, pairs with slot_of < 0 skipped: the same arithmetic as moe_down_q8 followed by
/// moe_combine, so the same bits. A warp takes one column of one token (8 a CTA) and the K down
/// rows of that column, 4 at a time with their loads in flight together.
void moe_down_combine_q8(cudaStream_t s, const ExpertSlots& ex, int64_t n, int64_t E, int K, const int32_t* ids,
                         const float* w, const Q8Acts& act, const float* partial, float* x);

}  // namespace nitro::cuda
