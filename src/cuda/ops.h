// CUDA kernels of the forward pass, with the same names as src/cpu (ops.h, matmul.h). Each
// launcher takes the stream (or the device context) it runs on; nothing here is global.
// All tensors are device pointers, row-major, f32 unless said otherwise.
#pragma once

#include "cpu/ops.h"
#include "ops/moe.h"
#include "ops/gpu_limits.h"
#include "quant/types.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

typedef struct cublasContext* cublasHandle_t;

namespace nitro::cuda {

struct Q8Input;  // mmvq.h: an input's rows already quantized to 8-bit blocks (rms_norm_q8)

/// True for the weight types the CUDA matmul handles (F32, F16, BF16, Q8_0, Q4_0, MXFP4, Q4_K, Q5_K,
/// Q6_K, IQ4_XS).
bool supported_weight_type(GgmlType t);

/// A weight matrix on the device: n_rows rows of ne0 values, rows row_bytes apart.
struct DWeight {
    GgmlType type = GgmlType::F32;
    const uint8_t* data = nullptr;
    int64_t ne0 = 0, n_rows = 0;
    size_t row_bytes = 0;
};

/// out[r, :] = rms_norm(x[r, :]) * w for n_rows rows of n values (rows ld_x / ld_out apart).
/// host_out (optional, mapped pinned memory): the result is also written there.
void rms_norm(cudaStream_t s, const float* x, const float* w, int64_t n_rows, int64_t n, int64_t ld_x,
              float eps, float* out, int64_t ld_out, float* host_out = nullptr);

/// x[i] += y[i] (+ b[i % n] if b) for i < n_rows * n.
void add(cudaStream_t s, float* x, const float* y, const float* b, int64_t n_rows, int64_t n);

/// NEOX RoPE in place on n_tok tokens of n_heads heads (head stride head_dim, token stride ld),
/// token i at position *pos0 + i (pos0 in device memory, so graphs can replay it). The cos/sin
/// are computed exactly as cpu::rope_cache does (same float operation order).
void rope_neox(cudaStream_t s, float* x, int64_t n_tok, int64_t n_heads, int64_t head_dim, int64_t ld,
               const RopeParams& p, const int32_t* pos0);

/// K/V of n_tok tokens (f32 [n_tok, dim]) into an F16 cache ring of `capacity` rows at slots
/// (*pos0 + i) % capacity.
void kv_store(cudaStream_t s, const float* k, const float* v, int64_t n_tok, int64_t dim_k, int64_t dim_v,
              uint16_t* k_cache, uint16_t* v_cache, int64_t capacity, const int32_t* pos0);

/// rms_norm of each q and k head (q_norm / k_norm [head_dim], both or neither), rope_neox of q
/// and k, then kv_store of k and v, in one launch with the same arithmetic (the same bits as
/// those ops in sequence). q [n_tok, n_head * head_dim], k [n_tok, n_head_kv * head_dim] (in
/// place), v [n_tok, dim_v]; the caches as kv_store's (k rows of n_head_kv * head_dim values).
void qk_norm_rope_kv_store(cudaStream_t s, float* q, float* k, const float* v, int64_t n_tok, int64_t n_head,
                           int64_t n_head_kv, int64_t head_dim, int64_t dim_v, const float* q_norm, const float* k_norm,
                           float eps, const RopeParams& p, const int32_t* pos0, uint16_t* k_cache, uint16_t* v_cache,
                           int64_t capacity);

/// Attention of n_q queries (token i at position *pos0 + i) over the F16 cache (causal; window
/// > 0: the last `window` positions; sinks: per-head logits in the softmax denominator; GQA:
/// n_head / n_head_kv query heads per KV head). q [n_q, n_head*hd], out [n_q, n_head*hd].
/// n_split > 1 splits each query's keys over that many blocks (flash-decoding) and needs
/// `partial` of attention_partial_floats() floats. Chunks of kFlashMinQueries (flash_attn.h) or
/// more queries at head_dim 64 / 128 (n_split 1) take the tensor-core flash-attention kernel
/// (probabilities rounded to f16 for the PV product), and so do one-query steps with `flash_decode`
/// (any n_split); `flash = false` keeps the per-query kernel.
struct AttnArgs {
    const float* q = nullptr;
    const uint16_t* k_cache = nullptr;
    const uint16_t* v_cache = nullptr;
    int64_t capacity = 0;
    int64_t n_q = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
    int64_t window = 0;
    const float* sinks = nullptr;
    float scale = 1.f;
    const int32_t* pos0 = nullptr;
    int n_split = 1;
    float* partial = nullptr;
    float* out = nullptr;
    bool flash = true;  ///< false: always the per-query kernel (comparisons, the sandbox)
    /// Query heads per block of the per-query kernel at most (a power of two; 0: the default,
    /// heads x head_dim <= 128, see attention.cu). Fewer heads per block: more blocks, shorter chains.
    int heads_per_block = 0;
    /// One query (a decode step, any n_split) at head_dim 64 / 128 on the tensor-core kernel of
    /// flash_attn.h: a KV head's whole group of query heads as the rows of one warp's products,
    /// its K/V tiles read once, splits of whole 64-key tiles; probabilities rounded to f16 as in
    /// prompt chunks. False (the default, the engine's unless attn_decode_flash()): the per-query
    /// kernel. Needs `flash`.
    bool flash_decode = false;
};
size_t attention_partial_floats(int64_t n_q, int64_t n_head, int64_t head_dim, int n_split);
void attention(cudaStream_t s, const AttnArgs& a);

/// Whether the engine's decode steps set AttnArgs::flash_decode: NITRO_ATTN_DECODE=flash, or
/// per-query (the default; anything else is an error naming the variable), read once, before a
/// decode graph is captured. Not yet the default: its speed against the per-query kernel is to be
/// MEASURED on the device (dev/kernels/attention_decode.cu, docs/cuda.md).
bool attn_decode_flash();
/// Overrides NITRO_ATTN_DECODE for the sessions made after it: 1 on, 0 off, -1 back to the
/// environment. For tests and benchmarks.
void set_attn_decode_flash(int on);

/// Decode attention in two depth classes (the engine captures a decode graph for each): below
/// kAttnLongKeys keys the per-query kernel's default blocks (1 query head a block at head_dim 128,
/// 2 at 64: short chains), from there the whole group of a KV head in one block (its K/V rows read
/// once for the group, not once per head). MEASURED on the H200 (dev_attention_decode, us per
/// layer): qwen3-30b-a3b at depth 4,096 23.2 (1 head) against 24.1 (group), at 8,192 41.1 against
/// 28.8, at 32,768 147.8 against 78.2; gpt-oss-20b at 8,192 30.4 (2 heads) against 20.0.
inline constexpr int64_t kAttnLongKeys = 4096;
inline int attention_depth_class(int64_t pos) { return pos + 1 >= kAttnLongKeys ? 1 : 0; }
/// AttnArgs::heads_per_block for one query at position pos of a layer with this window (0 = none):
/// 0 (the default) in the short class or a window layer, else the group n_head / n_head_kv.
inline int attention_decode_heads(int64_t n_head, int64_t n_head_kv, int64_t window, int64_t pos) {
    return window == 0 && attention_depth_class(pos) == 1 ? static_cast<int>(n_head / n_head_kv) : 0;
}

/// Flash-decoding splits for a decode step over at most `keys` keys (n_ctx, or the window): one
/// split per 128 keys (a 32-key tile for each of a block's 4 warps), within [1, max_split] (the
/// partial buffer's room). A split that holds no keys yet costs one block that returns at once.
/// MEASURED (dev_attention_decode's sweep): more splits win at every depth up to 4,096, e.g.
/// qwen3-30b-a3b at depth 4,096, 1 head a block: 35.8 us at 16 splits, 23.2 at 32.
int attention_decode_splits(int64_t keys, int max_split);

/// Rows of an embedding matrix for token ids (device) -> f32 [n, ne0].
void get_rows(cudaStream_t s, const DWeight& w, const int32_t* ids, int64_t n, float* out);

/// Scratch of matmul and moe_experts: f16 copies of activations and of a weight chunk for the
/// matrix-matrix path (prefill, needs cublas), and the activations rounded to the weight's vec-dot
/// type (xr; see matmul).
struct GemmScratch {
    cublasHandle_t cublas = nullptr;  ///< null: every product takes the GEMV path
    uint16_t* act = nullptr;     ///< f16
    size_t act_elems = 0;
    uint16_t* w = nullptr;       ///< f16
    size_t w_elems = 0;
    float* xr = nullptr;         ///< [n_tok, ne0] f32; null: activations are used unrounded
    size_t xr_elems = 0;
    /// With xr: decode products of 8-bit-block weight types as integer dot products on 8-bit
    /// activations (cuda/mmvq.h; xr then holds them); false: the f32 kernels on rounded
    /// activations (the same values; kept for comparisons).
    bool int8_dot = true;
};

/// Rows of x [n_rows, n] (row stride ldx; row r read from row idx[r] when idx is given) rounded to
/// the values of cpu::vec_dot_type(weight) (Q8_0 and Q8_K 8-bit blocks, F16, BF16; F32 unchanged),
/// exactly as cpu::quantize_acts rounds them (bit for bit: same scales and rounding rules), into
/// out [n_rows, n] (row stride ldo; f32, or f16 for the GEMM input). x may equal out. n must be
/// whole blocks of that type (32 or 256 values).
void round_acts(cudaStream_t s, GgmlType weight, const float* x, int64_t ldx, const int32_t* idx, int64_t n_rows,
                int64_t n, float* out, int64_t ldo);

/// out[t*ldo + r] (+)= dot(w.row(r), x[t*ldx ..]) + bias[r] for t < n_tok, r < w.n_rows.
/// Activations: with scratch->xr, first rounded to the weight's vec-dot type (round_acts), so the
/// products are the CPU engine's (which computes scale x integer dot products on 8-bit blocks, as
/// llama.cpp's CPU and CUDA backends do) up to float summation order; without it, f32 as given
/// (exact products: for tests and callers that want them).
/// n_tok <= kGemvMaxTokens (or no cuBLAS): matrix-vector kernel, weights decoded in registers
/// (with xr and int8_dot, for 8-bit-block types: integer products on 8-bit activations, mmvq.h).
/// Otherwise, with xr and int8_dot, for 8-bit-block types (q8_supported): the integer GEMM of the
/// prompt MoE (moe_mmq.h) with one group of all n_tok rows, on activations quantized by the CPU's
/// quantizer, so prompt products are the CPU's integer block sums too. Otherwise: weights
/// dequantized to f16 in row chunks (F16 used as stored), activations to f16, cuBLAS GEMM with f32
/// accumulation (tensor cores). accumulate: add to out instead of overwriting.
/// pre (optional): x's rows already quantized (rms_norm_q8); the integer path takes them instead of
/// quantizing x again when they are x's n_tok rows for w's vec-dot type (q8_ready), the same bytes.
void matmul(cudaStream_t s, const DWeight& w, const float* x, int64_t n_tok, int64_t ldx, float* out, int64_t ldo,
            const float* bias, bool accumulate, const GemmScratch* scratch, const Q8Input* pre = nullptr);

/// One product of matmul_same_input: out[t*ldo + r] = dot(w.row(r), x[t]) + bias[r].
struct MatmulTo {
    const DWeight* w = nullptr;
    float* out = nullptr;
    int64_t ldo = 0;
    const float* bias = nullptr;
};
/// matmul of each of `outs` with the same input x (q, k and v; a shared expert's gate and up), with
/// the same results; for up to kGemvMaxTokens tokens the input is rounded or quantized once for
/// all of them when their weights share a vec-dot type (fewer launches per decode step).
/// pre: as matmul's.
void matmul_same_input(cudaStream_t s, std::initializer_list<MatmulTo> outs, const float* x, int64_t n_tok, int64_t ldx,
                       const GemmScratch* scratch, const Q8Input* pre = nullptr);

/// f16 copy of rows [r0, r0 + n) of w into out (n * ne0 values).
void dequantize_f16(cudaStream_t s, const DWeight& w, int64_t r0, int64_t n, uint16_t* out);
/// f32 copy of rows [r0, r0 + n) of w into out.
void dequantize_f32(cudaStream_t s, const DWeight& w, int64_t r0, int64_t n, float* out);

/// The router (llama.cpp build_moe_ffn), cpu::route's arithmetic on the device: a.logits (device
/// [n, X]) -> a.ids, a.weights, a.margin (device; ops/moe.h RouteArgs says what they hold).
/// host (optional, mapped pinned memory): the results are also written there, then a system fence,
/// then *host->ready = *host->step (so a CPU thread polling ready sees complete ids and weights
/// without a copy or a stream synchronisation); host->t_ns (optional): the GPU's %globaltimer (ns)
/// when the flag was set.
struct RouterHostOut {
    int32_t* ids = nullptr;
    float* w = nullptr;
    float* margin = nullptr;
    volatile uint32_t* ready = nullptr;
    const uint32_t* step = nullptr;  ///< device
    uint64_t* t_ns = nullptr;
};
void route(cudaStream_t s, const RouteArgs& a, const RouterHostOut* host);

/// One decode token's router: a.logits [X] = x W^T (w: the f32 router matrix, X rows of x's length,
/// the block-per-row GEMV of matmul: the same logits bits), then route's selection (the same
/// arithmetic, route.cuh) in the grid's last block to finish, so the two are one launch. counter:
/// a device uint32, 0 between launches (the last block sets it back). Returns false and launches
/// nothing unless w is F32 with at most 1,024 rows of at most 512 experts and a.n is 1 (the caller
/// then runs matmul and route).
bool router_top_k(cudaStream_t s, const DWeight& w, const float* x, const RouteArgs& a, const RouterHostOut* host,
                  uint32_t* counter);

/// A device-side wait: one thread spins until *flag (mapped pinned host memory, written by a CPU
/// thread) reaches *step (device), so the kernels after it see what the CPU wrote before setting
/// the flag. Captured into CUDA graphs like any kernel; never a host synchronisation.
/// t_ns (optional, mapped host memory, 2 values): %globaltimer at the start and the end of the wait.
void wait_flag(cudaStream_t s, const volatile uint32_t* flag, const uint32_t* step, uint64_t* t_ns);

/// The experts of one MoE layer, addressed through a slot table: expert e is resident in slot
/// slot_of[e] (device array, -1 = not on the GPU), and slot s's matrices start at
/// gate + s * gate_stride (likewise up, down). Biases are per expert id.
struct ExpertSlots {
    DWeight gate, up, down;        ///< one expert's matrix (data = slot 0's)
    size_t gate_stride = 0, up_stride = 0, down_stride = 0;  ///< bytes between slots
    const int32_t* slot_of = nullptr;  ///< [n_expert] device
    const float* gate_b = nullptr;     ///< [n_expert, F] or null
    const float* up_b = nullptr;
    const float* down_b = nullptr;     ///< [n_expert, E] or null
    int64_t n_expert = 0;
    bool oai_act = false;              ///< swiglu_oai (gpt-oss) instead of swiglu
};

/// Work buffers of moe_ffn for up to n_max tokens.
struct MoeScratch {
    float* act = nullptr;       ///< [n*K, F] f32 (decode) / f16 (prefill, as uint16)
    /// Bytes act holds: at least n*K*F floats and q8_act_bytes(n*K, F) (the integer prefill path
    /// quantizes the GLU output of n*K rows into it; for a few short rows the layout's 256-byte
    /// alignment is larger than the rows' floats).
    size_t act_bytes = 0;
    float* gate = nullptr;      ///< [n*K, F] (prefill)
    float* up = nullptr;        ///< [n*K, F] (prefill)
    float* down = nullptr;      ///< [n*K, E]
    int32_t* group_tok = nullptr;   ///< [n*K] device (prefill)
    int32_t* row_of = nullptr;      ///< [n*K] device (prefill)
    int32_t* group_exp = nullptr;   ///< [n*K] device (prefill)
    /// [2 (n_expert + 1)] device: offsets of the experts' grouped rows, then their first 64-row
    /// tiles (prefill grouped on the device, moe_gemm.h)
    int32_t* group_off = nullptr;
    int32_t* host_idx = nullptr;    ///< pinned [3 * n*K + n*K] (prefill grouping)
    GemmScratch gemm;
    /// Decode with integer products (moe_decode_q8): moe_experts leaves the down product to
    /// moe_combine, which computes each token's down rows and their router-weighted sum in one
    /// launch (moe_down_combine_q8, the same bits) instead of writing them to `down` first.
    /// false: moe_experts writes `down` (a caller that reads it, tests, the benchmark).
    bool fuse_down = false;
    /// Set by moe_experts when it left the down product to moe_combine (fuse_down): the GLU output
    /// of the n*K pairs in 8-bit blocks (Q8Acts layout, in gemm.xr; ne0 = n_ff_exp); moe_combine
    /// consumes and clears it. Nothing may write gemm.xr between the two.
    const int8_t* pending_q = nullptr;
    const float* pending_d = nullptr;
    /// Prefill grouped on the host (moe_prefill_*): gate, up and act hold at most this many grouped
    /// rows, and the experts' rows are computed in pieces of that many (0: they hold every row). The
    /// pair-sized buffers (down, group_tok, row_of, group_exp, host_idx, gemm.act) hold them all.
    int64_t piece_rows = 0;
};

/// The MoE FFN for n tokens in two launches-worth of work, so a caller can wait for a partial sum
/// computed elsewhere (the CPU's non-resident experts) between them:
///   moe_experts: every selected expert that is resident (slot_of >= 0) on its tokens, from its
///     slot, into scratch.down (nothing is written to x);
///   moe_combine: x[t] += partial[t] (if given) + sum_j w[t,j] * (down[t,j] + down_b) over the
///     resident experts, in router order (results do not depend on launch order).
/// host_ids: the same ids already on the host (the hybrid's prompt chunks have them there): chunks
/// above kGemvMaxTokens are then grouped by expert on the host; null: grouped on the device
/// (moe_gemm.h moe_group), with no host round trip. Chunks up to kGemvMaxTokens read the device ids.
/// hq (optional): h's rows already quantized (rms_norm_q8); the integer decode path takes them
/// instead of quantizing h (when q8_ready says they are h's for the gate's vec-dot type).
void moe_experts(cudaStream_t s, const ExpertSlots& ex, const float* h, int64_t n, int64_t E, int K, const int32_t* ids,
                 const int32_t* host_ids, const int32_t* host_slot_of, MoeScratch& scratch, const Q8Input* hq = nullptr);
void moe_combine(cudaStream_t s, const ExpertSlots& ex, int64_t n, int64_t E, int K, const int32_t* ids, const float* w,
                 const int32_t* host_ids, const float* partial, float* x, MoeScratch& scratch);
/// The prefill path of moe_experts in pieces, for a caller that computes some experts from
/// elsewhere than their slot (the hybrid's staged experts, gpu/prefill_stager.h).
/// Grouping of one chunk's (token, j) pairs by expert: expert e's pairs are the grouped rows
/// [off[e], off[e + 1]) of scratch.gate / up / act / down, in token order.
struct MoePrefillGroups {
    std::vector<int64_t> off;  ///< [n_expert + 1]
    int64_t R = 0, F = 0, E = 0;  ///< pairs (n * K), n_ff_exp, n_embd
    int64_t n = 0;                ///< tokens
};
/// Groups the pairs by expert (host_ids: [n, K] on the host), uploads the grouping and rounds every
/// pair's expert input h[token] ([n, E] device) to f16 grouped rows (as moe_experts), or, on the
/// integer path (moe_mmq.h), quantizes each token's input once to 8-bit blocks.
void moe_prefill_begin(cudaStream_t s, const ExpertSlots& ex, const float* h, int64_t n, int64_t E, int K,
                       const int32_t* host_ids, MoeScratch& scratch, MoePrefillGroups& g);
/// Every expert with host_slot_of[e] >= 0, from its slot (ex.slot_of on the device must agree),
/// into its grouped rows of scratch.down.
void moe_prefill_resident(cudaStream_t s, const ExpertSlots& ex, const MoePrefillGroups& g, const int32_t* host_slot_of,
                          MoeScratch& scratch);
/// Expert e alone from weights at gate / up / down (device; the layout of one slot of ex's pools,
/// e.g. a staging scratch slot) into its grouped rows of scratch.down: the same arithmetic as
/// moe_prefill_resident (every step is row-wise), so a row's result does not depend on the path.
void moe_prefill_expert(cudaStream_t s, const ExpertSlots& ex, const MoePrefillGroups& g, int e, const uint8_t* gate,
                        const uint8_t* up, const uint8_t* down, MoeScratch& scratch);
/// moe_experts then moe_combine.
void moe_ffn(cudaStream_t s, const ExpertSlots& ex, const float* h, int64_t n, int64_t E, int K, const int32_t* ids,
             const float* w, const int32_t* host_ids, const int32_t* host_slot_of, const float* partial, float* x,
             MoeScratch& scratch);

}  // namespace nitro::cuda
