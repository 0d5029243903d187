// The MoE step on the CPU: the router (logits -> top-k experts and weights) and the routed
// experts' FFN over any subset of the selected experts (MUL_MAT_ID in llama.cpp's terms).
//
// moe_ffn takes "which experts are resident elsewhere" as input and returns the partial sum of
// the others, so CPU-only (nothing resident) and hybrid (the GPU holds some experts) are the same
// code. Math: llama.cpp build_moe_ffn (src/llama-graph.cpp) with the gating and activation of the
// architecture (ops/moe.h GatingSpec, RouteArgs, FfnAct).
#pragma once

#include "cpu/matmul.h"
#include "cpu/thread_pool.h"
#include "gguf/gguf.h"
#include "ops/moe.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace nitro::cpu {

/// The routed experts of one layer, straight from the (mmap'd) file.
struct ExpertWeights {
    const GgufTensorInfo* gate = nullptr;  ///< ffn_gate_exps [n_embd, n_ff_exp, n_expert]
    const GgufTensorInfo* up = nullptr;    ///< ffn_up_exps   [n_embd, n_ff_exp, n_expert]
    const GgufTensorInfo* down = nullptr;  ///< ffn_down_exps [n_ff_exp, n_embd, n_expert]
    const float* gate_b = nullptr;         ///< ffn_gate_exps.bias [n_ff_exp, n_expert] or null
    const float* up_b = nullptr;           ///< ffn_up_exps.bias   [n_ff_exp, n_expert] or null
    const float* down_b = nullptr;         ///< ffn_down_exps.bias [n_embd, n_expert] or null
    FfnAct act = FfnAct::Swiglu;
    int64_t n_embd() const { return gate->ne[0]; }
    int64_t n_ff() const { return gate->ne[1]; }
    int64_t n_expert() const { return gate->ne[2]; }
    /// Bytes of one expert's three matrices (what computing it reads from RAM).
    uint64_t expert_bytes() const;
};

/// The router of a.n tokens (ops/moe.h RouteArgs says what it computes); a.logits are used as
/// scratch. The reference cuda::route is tested against.
void route(const RouteArgs& a);

/// Counters of one moe_ffn call.
struct MoeStats {
    int64_t experts = 0;     ///< distinct experts computed
    int64_t rows = 0;        ///< (token, expert) pairs computed
    uint64_t bytes = 0;      ///< expert weight bytes read (each computed expert once)
    double gate_up_s = 0;    ///< wall-clock seconds: grouping, activations, gate/up products and SwiGLU
    double down_s = 0;       ///< down products and the weighted sum (one pass, see moe_ffn)
    double sum_s = 0;        ///< what is left after the region (0: the sum is fused into the down pass)
};

/// Working memory of moe_ffn (grows to the largest call, then reused).
struct MoeScratch {
    MoeScratch();
    ~MoeScratch();
    MoeScratch(MoeScratch&&) noexcept;
    MoeScratch& operator=(MoeScratch&&) noexcept;
    std::vector<int32_t> group_rows, group_tok, row_of, iota;
    std::vector<int32_t> used_tok;  ///< tokens with at least one computed pair, increasing (only their inputs are quantized)
    std::vector<int64_t> count, fill;
    std::vector<float, Aligned64<float>> gate, up, down;
    ActBuffer acts, acts2, acts_down;
    /// Per computed expert: id, first grouped row, rows; the three products as jobs.
    std::vector<int32_t> xs;
    std::vector<int64_t> xb, xc, unit_base, split;
    std::vector<MatmulJob> jg, ju, jd;
    struct Sync;  ///< region counters (moe.cpp)
    std::unique_ptr<Sync> sync;
};

/// out[t, :] = sum over j in router order of w[t, j] * expert_{ids[t, j]}(h[t, :]), taken only over
/// the selected experts with skip == nullptr or skip[id] == 0 (skip: [n_expert], nonzero = computed
/// elsewhere, e.g. resident on the GPU); a token whose experts are all skipped gets zeros.
/// h: [n, n_embd]; out: [n, n_embd], overwritten (may not alias h). expert(x) = down(act(gate(x) +
/// gate_b, up(x) + up_b)) + down_b. Each computed expert is read once for all its tokens.
///
/// One parallel region for the whole layer, in three passes separated by spin barriers: the
/// activations quantized in 256-value pieces; gate and up of every computed expert in units of 32
/// rows (both matrices, then bias and SwiGLU of those rows right away; the thread that completes a
/// 256-row group quantizes it for the down product); down in units of 16 output columns over all
/// computed experts, each followed by the weighted sum of those columns. Units are cut into one
/// contiguous range per thread (each thread streams contiguous rows of each matrix) with work
/// stealing at the end. Every output value is computed by one kernel call, one SwiGLU and one
/// sum in router order whatever the thread that runs it: results do not depend on the thread count.
///
/// Copy-on-compute (cache/expert_cache.h): copy_to, if given, is [n_expert] destinations (null =
/// none); for every computed expert x with copy_to[x] set, each unit also copies the weight rows it
/// has just read (from cache, not a second read of RAM) to copy_to[x], laid out as the expert's
/// gate bytes, then up, then down (ExpertWeights::expert_bytes() in all), the layout of a VRAM slot.
/// A destination of an expert that is skipped or not selected is not written.
MoeStats moe_ffn(ThreadPool& pool, const ExpertWeights& ex, const float* h, int64_t n, int k, const int32_t* ids,
                 const float* weights, const uint8_t* skip, float* out, MoeScratch& s, uint8_t* const* copy_to = nullptr);

}  // namespace nitro::cpu
