// GpuSession's state and the ops of the forward pass it supplies (runtime/forward.h): private to
// src/cuda (gpu_session.cpp: construction, chunks and decode steps; gpu_session_prompt.cpp: the
// hybrid's prompt chunks with staged experts and the start-up measurements they are planned by).
#pragma once

#include "cpu/moe.h"
#include "cpu/thread_pool.h"
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/delta_net.h"
#include "cuda/mmvq.h"
#include "gpu/gpu_session.h"
#include "gpu/op_profile.h"
#include "cuda/ops.h"
#include "gpu/prefill_stager.h"
#include "gpu/slot_copier.h"
#include "runtime/forward.h"
#include "runtime/prefill_cost.h"
#include "runtime/sequence_engine.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <vector>

namespace nitro::cuda {

using T = TensorId;

namespace detail {
using Clock = std::chrono::steady_clock;
inline double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }
}  // namespace detail

struct GpuSession::Impl {
    using Clock = detail::Clock;
    static double ms_since(Clock::time_point t) { return detail::ms_since(t); }
    const Model& model;
    ModelSpec spec;
    Plan plan;
    GpuScratchSizes z;
    bool hybrid = false;  ///< some selected experts may be computed by the CPU
    bool use_graphs = true;
    bool verbose = false;
    int64_t E = 0, X = 0, K = 0, F = 0, V = 0;

    struct Layer {
        /// The layer's tensors by id, as uploaded (vectors as F32 DWeights; empty where the layer
        /// has none): the rows of the model's table (Model::tensors()) but the routed experts.
        std::array<DWeight, kTensorIds> w{};
        const DWeight& operator[](TensorId id) const { return w[static_cast<size_t>(id)]; }
        const float* f32(TensorId id) const { return reinterpret_cast<const float*>(w[static_cast<size_t>(id)].data); }
        ExpertSlots ex;
        int32_t* d_slot_of = nullptr;    ///< [X] device: this layer's row of d_slot_tables
        std::vector<int32_t> h_slot_of;  ///< [X] slot of each expert in the current step, -1 = on the CPU
        std::vector<uint8_t> on_gpu;     ///< [X] 1 = resident (cpu::moe_ffn skips it; layers without a cache)
        /// [X] 1 = the expert's pages of the file are page-locked (--prefill-pin): staged by DMA from
        /// the file, no fill (the cost model's in_place); empty = none
        std::vector<uint8_t> in_place;
        int64_t n_slots = 0;
        bool cpu_part = false;           ///< some experts of this layer are on the CPU
        uint16_t *kc = nullptr, *vc = nullptr;
        int64_t capacity = 0, window = 0;
        int n_split_decode = 1;
        // Decode-step exchange in mapped pinned host memory (h* host view, d* device alias).
        float *rh_h = nullptr, *rd_h = nullptr;        // router input (normalised hidden state) [E]
        int32_t *rh_ids = nullptr, *rd_ids = nullptr;  // [K]
        float *rh_w = nullptr, *rd_w = nullptr;        // [K]
        float *rh_margin = nullptr, *rd_margin = nullptr;
        uint32_t *rh_ready = nullptr, *rd_ready = nullptr;  // GPU -> CPU: router result of step N is there
        float *ph_partial = nullptr, *pd_partial = nullptr;  // CPU -> GPU: sum of the CPU's experts [E]
        uint32_t *ph_done = nullptr, *pd_done = nullptr;     // CPU -> GPU: partial of step N is there
        uint64_t *th_route = nullptr, *td_route = nullptr;   // GPU clock when the router flag was set
        uint64_t *th_wait = nullptr, *td_wait = nullptr;     // GPU clock at the start / end of the wait
        // Gated DeltaNet layers (qwen3next): the sequence's recurrent state.
        bool recurrent = false;
        float *conv_state = nullptr, *delta_state = nullptr;  // [conv_dim, d_conv - 1], [n_v, d, d]
    };
    std::vector<Layer> layers;
    DWeight token_embd, output;
    const float* output_norm = nullptr;

    // activations (device)
    float *x = nullptr, *h = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *attn = nullptr, *router = nullptr;
    int32_t* d_ids = nullptr;
    float *d_w = nullptr, *d_margin = nullptr, *logits = nullptr, *attn_partial = nullptr, *partial = nullptr;
    uint32_t* d_route_counter = nullptr;  ///< router_top_k's count of finished blocks (ops.h)
    int32_t *d_tok = nullptr, *d_pos = nullptr;
    uint32_t* d_step = nullptr;
    // qwen3next: attention output gate, DeltaNet and shared-expert activations (runtime/placement.h)
    float *qg = nullptr, *gate = nullptr, *ssm_qkv = nullptr, *ssm_z = nullptr, *ssm_ba = nullptr, *ssm_beta = nullptr,
          *ssm_g = nullptr, *ssm_convout = nullptr, *ssm_core = nullptr, *ssm_fused = nullptr;
    float *sh_gate = nullptr, *sh_up = nullptr, *sh_down = nullptr;
    /// Every DeltaNet layer's state, one block of rstate_floats per sequence (a snapshot copies a
    /// sequence's block whole): [n_seq, rstate_floats]. Layer::conv_state / delta_state point into
    /// sequence 0's block; sequence q's are rstate_floats * q further.
    float* rstate = nullptr;
    int64_t rstate_floats = 0;
    int n_seq = 1;
    cudaStream_t compute = nullptr;  ///< the compute stream (non-blocking: state copies are ordered on it)
    float* seq_state(int q) const { return rstate + static_cast<int64_t>(q) * rstate_floats; }
    /// Sequence q's recurrent state zeroed (a fresh sequence).
    void reset_recurrent(int q) {
        if (!rstate) return;
        NITRO_CUDA_CHECK(cudaMemsetAsync(seq_state(q), 0, static_cast<size_t>(rstate_floats) * 4, compute));
        NITRO_CUDA_CHECK(cudaStreamSynchronize(compute));
    }
    /// Copies sequence q's recurrent state to / from host memory (stream-ordered, then synchronised).
    void state_to_host(int q, std::vector<float>& out) {
        out.resize(static_cast<size_t>(rstate_floats));
        NITRO_CUDA_CHECK(cudaMemcpyAsync(out.data(), seq_state(q), out.size() * 4, cudaMemcpyDeviceToHost, compute));
        NITRO_CUDA_CHECK(cudaStreamSynchronize(compute));
    }
    void state_from_host(int q, const std::vector<float>& in) {
        NITRO_CUDA_CHECK(cudaMemcpyAsync(seq_state(q), in.data(), in.size() * 4, cudaMemcpyHostToDevice, compute));
        NITRO_CUDA_CHECK(cudaStreamSynchronize(compute));
    }
    /// The chunk's rows grouped by sequence: group g is rows [off, off + n) of the chunk, all of
    /// sequence seq at positions pos0 .. pos0 + n - 1 (d_pos[g] holds pos0 on the device). Attention,
    /// the K/V store, RoPE and the DeltaNet recurrence run per group; every other op over all rows.
    using Group = SeqGroup;
    std::vector<Group> groups;
    std::vector<int64_t> row_pos;  ///< [n] position of each row of the chunk (route events)
    std::vector<int32_t> row_seq;  ///< [n] sequence of each row
    std::vector<uint8_t> row_prefill;  ///< [n] its sequence has several rows in the chunk
    // pinned host
    int32_t *h_tok = nullptr, *h_pos = nullptr;  ///< [n_ubatch] token ids, [n_seq] each group's first position
    uint32_t* h_step = nullptr;
    float* h_logits = nullptr;
    int32_t* h_ids = nullptr;          ///< [ub, K] router ids of a multi-token chunk
    float *h_w = nullptr, *h_margin = nullptr, *h_hidden = nullptr, *h_partial = nullptr;
    MoeScratch moe_sc;
    GemmScratch gemm;
    // Kernel fusions of decode steps (issue 15), each the same bits as the separate ops; a switch
    // each, to compare or to rule one out:
    //  - fuse_norm_q8: attn_norm and ffn_norm also write h in 8-bit blocks (rms_norm_q8) for the
    //    products that read h next (q/k/v or the DeltaNet projections; the routed and shared
    //    experts), which then skip their own quantization;
    //  - fuse_moe_down: the decode MoE's down product and the combine in one launch
    //    (MoeScratch::fuse_down, moe_down_combine_q8).
    bool fuse_norm_q8 = true;
    bool fuse_moe_down = true;
    float* hq_buf = nullptr;  ///< GpuScratchSizes::hq: h's 8-bit blocks
    size_t hq_bytes = 0;
    /// What hq_buf holds: h's rows quantized by the last norm that wrote h, or nothing (hq.x null).
    /// Every op that writes h sets it (norm_h) or clears it, so it never describes an older h.
    Q8Input hq;
    uint8_t* slot_arena = nullptr;  ///< every layer's expert slot pools (install_slots)
    // Slot tables of every layer: the device copy the kernels read and its pinned host mirror,
    // refreshed from the expert cache's snapshot before each step (in the decode graph too).
    int32_t* d_slot_tables = nullptr;  ///< [n_layer, X] device
    int32_t* h_slot_tables = nullptr;  ///< [n_layer, X] pinned host
    // Adaptive residency (hybrid): the expert cache and its copy backend; copy_to[e] = the
    // staging buffer admitted expert e is written to while the CPU computes it (copy-on-compute).
    std::unique_ptr<SlotCopier> copier;
    std::unique_ptr<ExpertCache> cache;
    std::vector<uint8_t*> copy_to;
    ResidencyOptions adapt;
    int test_max_pinned = -1, test_fail_copy_every = 0;

    // The decode step of each sequence, captured on its first single-row chunk (its K/V and state
    // pointers are baked in): [n_seq].
    std::vector<cudaGraph_t> graph;
    std::vector<cudaGraphExec_t> graph_exec;
    bool graph_host_router = false;  ///< the captured graphs write router results to the host
    // Per-op timing of decode steps (op_profile.h; GpuSession::set_op_profile): the marks captured
    // into each sequence's graph and the kernels between them.
    bool op_profile_on = false;
    std::vector<std::vector<OpMark>> op_marks;
    std::vector<std::vector<int64_t>> op_kernels;
    OpProfile op_prof;

    // CPU side of the hybrid
    std::unique_ptr<cpu::ThreadPool> pool;
    std::vector<cpu::ExpertWeights> experts;
    cpu::MoeScratch cpu_scratch;
    std::function<void(const RouteEvent&)> on_route;
    ExpertCounters counters;
    // Benchmark-only routing replay (runtime/route_replay.h): eval() fills h_replay with the
    // replay's router logits [n_layer, rows, X] before it launches a chunk; route() copies layer
    // il's rows over the router's own logits (a memcpy node in the decode graph).
    const SequenceEngine* replay = nullptr;  ///< the engine while it replays routing (its replay_logits), else null
    float* h_replay = nullptr;

    // Prompt chunks of the hybrid (gpu_session_prompt.cpp, docs/hybrid.md "Prompts"): experts
    // staged to VRAM scratch slots, placed per expert by the cost model on measured rates.
    std::unique_ptr<PrefillStager> stager;
    PrefillCostMode prefill_mode = PrefillCostMode::Auto;
    PrefillRates rates;
    bool rates_measured = false;
    /// A layer with both a CPU share and staged experts splits the cores: fill_split_threads of the
    /// stager's team fill, the CPU share runs on prompt_pool (the engine's threads minus those);
    /// a layer with everything staged fills with the whole team (runtime/prefill_cost.h).
    int fill_split_threads = 0;
    std::unique_ptr<cpu::ThreadPool> prompt_pool;
    int32_t* d_gpu_of = nullptr;    ///< [X] device: a prompt chunk layer's experts computed on the GPU (>= 0) or not (-1)
    int32_t* h_gpu_of = nullptr;    ///< [n_layer, X] pinned host sources, one row per layer (no reuse within a chunk)
    // GPU idle time of the last prompt layer (read once its events completed, flush_prompt_idle)
    cudaEvent_t ev_gpu_done = nullptr, ev_partial = nullptr;
    int idle_layer = -1;
    bool idle_cpu_pair = false;
    /// Creates the stager for the plan's staging slots and measures the rates the cost model uses
    /// (gpu_session_prompt.cpp). No-op without staging slots.
    void setup_prompt_staging(DeviceContext& ctx, const GpuOptions& go);
    /// Layer il's experts for a multi-token hybrid chunk of more than kGemvMaxTokens rows:
    /// resident ones from their slots, the others staged or on the CPU as the cost model says,
    /// staged and CPU shares at the same time; then the combine. sc: moe_sc for one block, moe_sg
    /// for a layer-major group.
    void moe_prompt(int il, const ChunkArgs& c, MoeScratch& sc);

    // Layer-major prompt groups (docs/hybrid.md "Layer-major groups", runtime/forward.h
    // forward_blocks): up to plan.group_tokens prompt tokens in blocks of n_ubatch; each layer runs
    // every block, and the layer's routed experts run once for the whole group (moe_prompt with
    // moe_sg) at its last block. The group's buffers hold what lives from a layer's first block to
    // that step (runtime/placement.h PrefillGroupSizes); select_block points the ops at a block's
    // rows of them.
    struct GroupBufs {
        float *x = nullptr, *h = nullptr, *w = nullptr, *margin = nullptr, *partial = nullptr;
        int32_t *ids = nullptr, *tok = nullptr, *pos = nullptr;
        int32_t *h_ids = nullptr, *h_tok = nullptr, *h_pos = nullptr;  // pinned host
        float *h_w = nullptr, *h_margin = nullptr, *h_hidden = nullptr, *h_partial = nullptr;
    };
    GroupBufs grp;
    MoeScratch moe_sg;  ///< the group's MoE scratch: pair-sized buffers for the group, gate/up/act pieces of moe_sc's
    int64_t group_tokens = 0;  ///< 0: no groups (blocks run alone)
    struct Block {
        int64_t off = 0, n = 0, pos0 = 0;
    };
    std::vector<Block> blocks;  ///< the group being run (empty: none)
    size_t cur_block = 0;
    int group_seq = 0;              ///< the sequence of the group
    float* group_logits = nullptr;  ///< host destination of the group's logits (all rows, or the last)
    bool group_all_logits = false;
    /// The ub-sized activation pointers a group replaces while it runs (restored after it).
    struct ChunkPtrs {
        float *x, *h, *d_w, *d_margin, *partial, *h_w, *h_margin, *h_hidden, *h_partial;
        int32_t *d_ids, *d_tok, *d_pos, *h_ids;
    };
    ChunkPtrs save_chunk_ptrs() const {
        return {x, h, d_w, d_margin, partial, h_w, h_margin, h_hidden, h_partial, d_ids, d_tok, d_pos, h_ids};
    }
    void restore_chunk_ptrs(const ChunkPtrs& p) {
        x = p.x, h = p.h, d_w = p.d_w, d_margin = p.d_margin, partial = p.partial, h_w = p.h_w, h_margin = p.h_margin;
        h_hidden = p.h_hidden, h_partial = p.h_partial, d_ids = p.d_ids, d_tok = p.d_tok, d_pos = p.d_pos, h_ids = p.h_ids;
    }
    /// Allocates the group buffers of plan.group_tokens tokens (gpu_session_prompt.cpp).
    void setup_prompt_groups(DeviceContext& ctx);
    /// --prefill-pin: registers up to `gib` GiB of the off-GPU experts' file pages with the stager
    /// (PrefillStager::pin_in_place) and says how many experts that covers (gpu_session_prompt.cpp).
    void pin_in_place(double gib);
    /// The ops of forward_blocks on block i of the group: its rows of the group's buffers, its
    /// position, its route-event rows and logits destination.
    void select_block(size_t i) {
        const Block& b = blocks[i];
        cur_block = i;
        x = grp.x + b.off * E;
        h = grp.h + b.off * E;
        d_ids = grp.ids + b.off * K;
        d_w = grp.w + b.off * K;
        d_margin = grp.margin + b.off;
        partial = grp.partial + b.off * E;
        h_ids = grp.h_ids + b.off * K;
        h_w = grp.h_w + b.off * K;
        h_margin = grp.h_margin + b.off;
        h_hidden = grp.h_hidden + b.off * E;
        h_partial = grp.h_partial + b.off * E;
        d_tok = grp.tok + b.off;
        d_pos = grp.pos + i;
        groups.assign(1, Group{group_seq, 0, b.n, b.pos0});
        row_seq.assign(static_cast<size_t>(b.n), group_seq);
        row_pos.resize(static_cast<size_t>(b.n));
        for (int64_t r = 0; r < b.n; ++r) row_pos[static_cast<size_t>(r)] = b.pos0 + r;
        row_prefill.assign(static_cast<size_t>(b.n), 1);
        logits_dst = group_logits && group_all_logits ? group_logits + b.off * V : group_logits;
    }
    /// Layer il's routed experts for every block of the group at once (at its last block): the
    /// ops pointed at the whole group, moe_prompt, then back to the block.
    void moe_group(int il) {
        const Block& last = blocks.back();
        x = grp.x, h = grp.h, d_ids = grp.ids, d_w = grp.w, partial = grp.partial;
        h_ids = grp.h_ids, h_w = grp.h_w, h_hidden = grp.h_hidden, h_partial = grp.h_partial;
        ChunkArgs cg;
        cg.n = last.off + last.n;
        cg.pos0 = blocks.front().pos0;
        cg.logits = ChunkArgs::Logits::None;
        moe_prompt(il, cg, moe_sg);
        select_block(cur_block);
    }
    /// Adds the GPU idle time of the last prompt layer to its counters (its events must have
    /// completed: after a synchronisation of the compute stream).
    void flush_prompt_idle();

    // the chunk being run
    std::span<const int32_t> tokens;
    float* logits_dst = nullptr;  ///< host destination of the chunk's logits rows
    bool single = false;          ///< a captured single-token decode step
    cudaStream_t s = nullptr;

    explicit Impl(const Model& m) : model(m) {}

    /// Decode graphs per sequence: one per attention depth class (ops.h attention_depth_class).
    static constexpr int kAttnClasses = 2;

    void drop_graph() {
        for (auto& g : graph_exec)
            if (g) cudaGraphExecDestroy(g), g = nullptr;
        for (auto& g : graph)
            if (g) cudaGraphDestroy(g), g = nullptr;
        for (auto& mk : op_marks) op_marks_clear(mk);
    }
    bool any_graph() const {
        return std::any_of(graph_exec.begin(), graph_exec.end(), [](cudaGraphExec_t g) { return g != nullptr; });
    }
    /// Router results go to the host in decode steps when the CPU needs them or someone listens.
    bool host_router() const { return hybrid || static_cast<bool>(on_route); }

    /// Starts a step of n tokens in the expert cache (copies that landed flip their slots) and
    /// mirrors the changed slot tables to the host copies the step uses: the pinned table the
    /// device copy is refreshed from, and h_slot_of (prefill grouping).
    void begin_cache_step(int64_t n) {
        if (!cache) return;
        cache->begin_step(n);
        for (size_t il = 0; il < layers.size(); ++il) {
            if (!cache->take_changed(static_cast<int>(il))) continue;
            const std::span<const int32_t> t = cache->slot_of(static_cast<int>(il));
            std::copy(t.begin(), t.end(), h_slot_tables + il * static_cast<size_t>(X));
            std::copy(t.begin(), t.end(), layers[il].h_slot_of.begin());
        }
    }
    /// The cache's counters into the engine's.
    void sync_cache_counters() {
        if (!cache) return;
        for (size_t il = 0; il < layers.size(); ++il) counters.layers[il].cache = cache->counters(static_cast<int>(il));
    }
    /// Layer il's experts on the CPU for n tokens (h: [n, E] host, ids/w: [n, K] host) into
    /// `partial`: the cache decides which are resident in this step and which missed experts are
    /// admitted (their bytes go to staging buffers as the CPU reads them, then to their slots).
    cpu::MoeStats cpu_experts(int il, const float* hidden, int64_t n, const int32_t* ids, const float* w, float* partial,
                              const std::function<void()>& computed) {
        Layer& D = layers[static_cast<size_t>(il)];
        if (!cache) {
            const cpu::MoeStats st = cpu::moe_ffn(*pool, experts[static_cast<size_t>(il)], hidden, n, static_cast<int>(K), ids,
                                                  w, D.on_gpu.data(), partial, cpu_scratch);
            computed();
            return st;
        }
        const ExpertCache::LayerStep step = cache->access(il, std::span<const int32_t>(ids, static_cast<size_t>(n * K)));
        for (const Admission& a : step.admissions) copy_to[a.expert] = copier->buffer_data(a.buffer);
        cpu::MoeStats st;
        try {
            st = cpu::moe_ffn(*pool, experts[static_cast<size_t>(il)], hidden, n, static_cast<int>(K), ids, w,
                              step.resident.data(), partial, cpu_scratch, step.admissions.empty() ? nullptr : copy_to.data());
        } catch (...) {
            for (const Admission& a : step.admissions) copy_to[a.expert] = nullptr;
            cache->abandon(il);  // their buffers were not filled: never copy them
            throw;
        }
        computed();
        for (const Admission& a : step.admissions) copy_to[a.expert] = nullptr;
        cache->commit(il);
        return st;
    }

    // ---- the ops of forward_chunk (runtime/forward.h)
    void embed(const ChunkArgs& c) { get_rows(s, token_embd, d_tok, c.n, x); }
    /// h = rms_norm(x) * w, and in decode chunks also h in 8-bit blocks for the next products on h,
    /// whose weights are of type `next` (rms_norm_q8, one launch); hq says which (or none).
    void norm_h(const float* w, int64_t n, float* host_out, GgmlType next) {
        hq = Q8Input{};
        if (fuse_norm_q8 && gemm.xr && gemm.int8_dot &&
            rms_norm_q8(s, x, w, n, E, E, spec.rms_eps, h, E, host_out, next, hq_buf, hq_bytes, hq))
            return;
        rms_norm(s, x, w, n, E, E, spec.rms_eps, h, E, host_out);
    }
    void attn_norm(int il, const ChunkArgs& c) {
        const Layer& D = layers[static_cast<size_t>(il)];
        const DWeight& next = D.recurrent ? (D[T::attn_qkv].data ? D[T::attn_qkv] : D[T::ssm_in]) : D[T::attn_q];
        norm_h(D.f32(T::attn_norm), c.n, nullptr, next.type);
    }
    void qkv(int il, const ChunkArgs& c) {
        const Layer& D = layers[static_cast<size_t>(il)];
        const GemmScratch* gs = &gemm;
        // (one rounding of h for the three products in decode)
        if (spec.attn_gate) {  // attn_q gives [q, gate] per head, split into q and gate
            matmul_same_input(s, {{&D[T::attn_q], qg, 2 * spec.n_q(), D.f32(T::attn_q_bias)}, {&D[T::attn_k], k, spec.n_k(), D.f32(T::attn_k_bias)}, {&D[T::attn_v], v, spec.n_v(), D.f32(T::attn_v_bias)}},
                              h, c.n, E, gs, &hq);
            split_q_gate(s, qg, c.n, spec.n_head, spec.head_dim, q, gate);
        } else {
            matmul_same_input(s, {{&D[T::attn_q], q, spec.n_q(), D.f32(T::attn_q_bias)}, {&D[T::attn_k], k, spec.n_k(), D.f32(T::attn_k_bias)}, {&D[T::attn_v], v, spec.n_v(), D.f32(T::attn_v_bias)}},
                              h, c.n, E, gs, &hq);
        }
    }
    void rope_kv_store(int il, const ChunkArgs& c) {
        const Layer& D = layers[static_cast<size_t>(il)];
        const int64_t nq = spec.n_q(), nk = spec.n_k(), nv = spec.n_v();
        // q/k norms (qwen3), RoPE and the K/V store in one launch per sequence (ops.h)
        for (size_t g = 0; g < groups.size(); ++g) {  // each sequence at its positions, into its own K/V
            const Group& G = groups[g];
            qk_norm_rope_kv_store(s, q + G.off * nq, k + G.off * nk, v + G.off * nv, G.n, spec.n_head, spec.n_head_kv,
                                  spec.head_dim, nv, D.f32(T::attn_q_norm), D.f32(T::attn_k_norm), spec.rms_eps, spec.rope, d_pos + g,
                                  D.kc + G.seq * D.capacity * nk, D.vc + G.seq * D.capacity * nv, D.capacity);
        }
    }
    void attention(int il, const ChunkArgs& c) {
        const Layer& D = layers[static_cast<size_t>(il)];
        for (size_t g = 0; g < groups.size(); ++g) {  // each sequence against its own K/V
            const Group& G = groups[g];
            AttnArgs a;
            a.q = q + G.off * spec.n_q();
            a.k_cache = D.kc + G.seq * D.capacity * spec.n_k();
            a.v_cache = D.vc + G.seq * D.capacity * spec.n_v();
            a.capacity = D.capacity;
            a.n_q = G.n;
            a.n_head = spec.n_head;
            a.n_head_kv = spec.n_head_kv;
            a.head_dim = spec.head_dim;
            a.window = D.window;
            a.sinks = D.f32(T::attn_sinks);
            a.scale = spec.attn_scale;
            a.pos0 = d_pos + g;
            a.n_split = G.n == 1 ? D.n_split_decode : 1;  // as a decode step of that sequence alone
            // decode: the depth class's blocks (ops.h attention_decode_heads); a prompt chunk: a KV
            // head's whole group a block
            a.heads_per_block = G.n > 1 ? static_cast<int>(spec.n_head / spec.n_head_kv)
                                        : attention_decode_heads(spec.n_head, spec.n_head_kv, D.window, G.pos0);
            a.flash_decode = G.n == 1 && attn_decode_flash();  // NITRO_ATTN_DECODE (ops.h)
            a.partial = attn_partial;
            a.out = attn + G.off * spec.n_o();
            cuda::attention(s, a);
        }
    }
    void attn_out(int il, const ChunkArgs& c) {
        const Layer& D = layers[static_cast<size_t>(il)];
        if (spec.attn_gate) mul_sigmoid(s, attn, gate, c.n * spec.n_o());  // attn *= sigmoid(gate)
        matmul(s, D[T::attn_output], attn, c.n, spec.n_o(), x, E, D.f32(T::attn_output_bias), true, &gemm);  // x += attn W_o + b_o
    }
    // Gated DeltaNet (llama.cpp qwen3next build_layer_attn_linear; CPU: runtime/session.cpp).
    void ssm_in(int il, const ChunkArgs& c) {
        const Layer& D = layers[static_cast<size_t>(il)];
        const SsmSpec& ss = spec.ssm;
        const GemmScratch* gs = &gemm;
        const int64_t cd = ss.conv_dim(), vd = ss.value_dim(), nv = ss.n_v_heads, r = nv / ss.n_k_heads;
        if (D[T::attn_qkv].data) {
            matmul(s, D[T::attn_qkv], h, c.n, E, ssm_qkv, cd, nullptr, false, gs, &hq);
            matmul(s, D[T::attn_gate], h, c.n, E, ssm_z, vd, nullptr, false, gs, &hq);
        } else {
            matmul(s, D[T::ssm_in], h, c.n, E, ssm_fused, cd + vd, nullptr, false, gs, &hq);
            ssm_in_regroup(s, ssm_fused, c.n, ss.n_k_heads, ss.head_dim, r, ssm_qkv, ssm_z);
        }
        if (D[T::ssm_ba].data) {
            matmul(s, D[T::ssm_ba], h, c.n, E, ssm_ba, 2 * nv, nullptr, false, gs, &hq);
        } else {  // qwen35moe: beta rows then alpha rows
            matmul(s, D[T::ssm_beta], h, c.n, E, ssm_ba, nv, nullptr, false, gs, &hq);
            matmul(s, D[T::ssm_alpha], h, c.n, E, ssm_ba + c.n * nv, nv, nullptr, false, gs, &hq);
        }
        ssm_beta_decay(s, ssm_ba, D.f32(T::ssm_dt), D.f32(T::ssm_a), c.n, nv, r, !D[T::ssm_ba].data, ssm_beta, ssm_g);
    }
    void ssm_conv(int il, const ChunkArgs& c) {
        const Layer& D = layers[static_cast<size_t>(il)];
        const int64_t cd = spec.ssm.conv_dim();
        for (const Group& G : groups)  // each sequence's rows through its own conv state
            ssm_conv_silu(s, ssm_qkv + G.off * cd, G.n, cd, D.f32(T::ssm_conv1d), spec.ssm.d_conv,
                          D.conv_state + G.seq * rstate_floats, ssm_convout + G.off * cd);
    }
    void delta_net(int il, const ChunkArgs& c) {
        const Layer& D = layers[static_cast<size_t>(il)];
        const SsmSpec& ss = spec.ssm;
        l2_norm_heads(s, ssm_convout, c.n, 2 * ss.n_k_heads, ss.head_dim, ss.conv_dim(), spec.rms_eps);
        for (const Group& G : groups) {  // each sequence's rows through its own state, in order
            DeltaArgs a;
            a.qkv = ssm_convout + G.off * ss.conv_dim();
            a.ld = ss.conv_dim();
            a.key_dim = ss.key_dim();
            a.n_k_heads = ss.n_k_heads;
            a.n_v_heads = ss.n_v_heads;
            a.d = ss.head_dim;
            a.tiled = ss.head_map == SsmHeadMap::Tiled;
            a.g = ssm_g + G.off * ss.n_v_heads;
            a.beta = ssm_beta + G.off * ss.n_v_heads;
            a.n = G.n;
            a.M = D.delta_state + G.seq * rstate_floats;
            a.out = ssm_core + G.off * ss.value_dim();
            a.ld_out = ss.value_dim();
            gated_delta_rule(s, a);
        }
    }
    void ssm_out(int il, const ChunkArgs& c) {
        const Layer& D = layers[static_cast<size_t>(il)];
        const SsmSpec& ss = spec.ssm;
        const int64_t hd = ss.head_dim, vd = ss.value_dim();
        // Gated RMSNorm per value head, then x += core W_out.
        rms_norm(s, ssm_core, D.f32(T::ssm_norm), c.n * ss.n_v_heads, hd, hd, spec.rms_eps, ssm_core, hd);
        mul_silu(s, ssm_core, ssm_z, c.n * vd);
        matmul(s, D[T::ssm_out], ssm_core, c.n, vd, x, E, nullptr, true, &gemm);
    }
    /// down(silu(h gate) * h up) of the chunk's rows into `out` [n, E], or added to it (accumulate):
    /// the shared expert's and a dense layer's FFN.
    void swiglu_ffn(const DWeight& gate, const DWeight& up, const DWeight& down, int64_t n, int64_t F, float* out,
                    bool accumulate) {
        const GemmScratch* gs = &gemm;
        matmul_same_input(s, {{&gate, sh_gate, F, nullptr}, {&up, sh_up, F, nullptr}}, h, n, E, gs, &hq);
        swiglu(s, sh_gate, sh_up, n * F, sh_gate);
        matmul(s, down, sh_gate, n, F, out, E, nullptr, accumulate, gs);
    }
    void shared_expert(int il, const ChunkArgs& c) {
        const Layer& D = layers[static_cast<size_t>(il)];
        swiglu_ffn(D[T::ffn_gate_shexp], D[T::ffn_up_shexp], D[T::ffn_down_shexp], c.n, spec.n_ff_shexp, sh_down, false);
        shexp_gate_add(s, x, h, D.f32(T::ffn_gate_inp_shexp), sh_down, c.n, E);  // x += sigmoid(h . g) * ffn_shexp(h)
    }
    void ffn_dense(int il, const ChunkArgs& c) {  // x += down(silu(h gate) * h up)
        const Layer& D = layers[static_cast<size_t>(il)];
        swiglu_ffn(D[T::ffn_gate], D[T::ffn_up], D[T::ffn_down], c.n, spec.n_ff, x, true);
    }
    void ffn_norm(int il, const ChunkArgs& c) {
        Layer& D = layers[static_cast<size_t>(il)];
        // h in 8-bit blocks for the routed experts (the shared expert's, if no expert is resident)
        const GgmlType next = spec.layers[static_cast<size_t>(il)].ffn == FfnKind::Dense ? D[T::ffn_gate].type
                              : D.n_slots > 0 || !spec.shared_expert                   ? D.ex.gate.type
                                                                                       : D[T::ffn_gate_shexp].type;
        norm_h(D.f32(T::ffn_norm), c.n, single && D.cpu_part ? D.rd_h : nullptr, next);
    }
    void route(int il, const ChunkArgs& c) {
        Layer& D = layers[static_cast<size_t>(il)];
        RouteArgs ra;
        ra.logits = router;
        ra.logit_bias = D.f32(T::ffn_gate_inp_bias);
        ra.score_bias = D.f32(T::ffn_exp_probs_b);
        ra.n = c.n;
        ra.n_expert = X;
        ra.k = static_cast<int>(K);
        ra.gating = spec.gating;
        ra.ids = d_ids;
        ra.weights = d_w;
        ra.margin = d_margin;
        RouterHostOut ho;
        if (single && host_router()) {
            ho.ids = D.rd_ids;
            ho.w = D.rd_w;
            ho.margin = D.rd_margin;
            ho.ready = D.rd_ready;
            ho.step = d_step;
            ho.t_ns = D.td_route;
        }
        // A decode step: the router product and its top-k in one launch (router_top_k), where it applies
        if (single && !replay && router_top_k(s, D[T::ffn_gate_inp], h, ra, host_router() ? &ho : nullptr, d_route_counter))
            return;
        matmul(s, D[T::ffn_gate_inp], h, c.n, E, router, X, nullptr, false, &gemm);
        if (replay)
            NITRO_CUDA_CHECK(cudaMemcpyAsync(router, h_replay + il * c.n * X, static_cast<size_t>(c.n * X) * 4,
                                             cudaMemcpyHostToDevice, s));
        cuda::route(s, ra, single && host_router() ? &ho : nullptr);
        if (single) return;
        // Multi-token chunk: ids to the host when the CPU computes some experts or for route events
        // (one host synchronisation per layer); GPU-only layers group by expert on the device.
        const bool need = D.cpu_part || on_route;
        if (!need) return;
        NITRO_CUDA_CHECK(cudaMemcpyAsync(h_ids, d_ids, static_cast<size_t>(c.n * K) * 4, cudaMemcpyDeviceToHost, s));
        if (D.cpu_part || on_route) {
            NITRO_CUDA_CHECK(cudaMemcpyAsync(h_w, d_w, static_cast<size_t>(c.n * K) * 4, cudaMemcpyDeviceToHost, s));
            NITRO_CUDA_CHECK(cudaMemcpyAsync(h_margin, d_margin, static_cast<size_t>(c.n) * 4, cudaMemcpyDeviceToHost, s));
        }
        if (D.cpu_part)
            NITRO_CUDA_CHECK(cudaMemcpyAsync(h_hidden, h, static_cast<size_t>(c.n * E) * 4, cudaMemcpyDeviceToHost, s));
        NITRO_CUDA_CHECK(cudaStreamSynchronize(s));
        if (on_route)
            for (int64_t i = 0; i < c.n; ++i)
                on_route(RouteEvent{row_pos[static_cast<size_t>(i)], il, row_prefill[static_cast<size_t>(i)] != 0,
                                    std::span<const int32_t>(h_ids + i * K, static_cast<size_t>(K)),
                                    std::span<const float>(h_w + i * K, static_cast<size_t>(K)), h_margin[i],
                                    row_seq[static_cast<size_t>(i)]});
    }
    void moe(int il, const ChunkArgs& c) {
        Layer& D = layers[static_cast<size_t>(il)];
        if (!blocks.empty() && D.cpu_part) {  // a layer-major group: every block's experts at the last block
            if (cur_block + 1 == blocks.size()) moe_group(il);
            return;
        }
        if (!single && D.cpu_part && c.n > kGemvMaxTokens) return moe_prompt(il, c, moe_sc);
        const int32_t* hid = !single && D.cpu_part ? h_ids : nullptr;  // (chunks above the GEMV size went to moe_prompt)
        moe_sc.pending_q = nullptr;  // (moe_experts sets it again where it leaves the down product to moe_combine)
        moe_sc.pending_d = nullptr;
        // Down + combine fused only where no expert is on the CPU: in a hybrid layer the resident
        // experts' down product runs while the CPU computes its experts, not after the wait.
        moe_sc.fuse_down = fuse_moe_down && !D.cpu_part;
        if (D.n_slots > 0)
            moe_experts(s, D.ex, h, c.n, E, static_cast<int>(K), d_ids, hid, D.h_slot_of.data(), moe_sc, &hq);
        if (!D.cpu_part) {
            moe_combine(s, D.ex, c.n, E, static_cast<int>(K), d_ids, d_w, hid, nullptr, x, moe_sc);
            if (!single) count_gpu_only(il, c.n);
            return;
        }
        if (single) {  // the CPU thread of eval() computes the rest; wait for it on the device
            wait_flag(s, D.pd_done, d_step, D.td_wait);
            moe_combine(s, D.ex, c.n, E, static_cast<int>(K), d_ids, d_w, nullptr, D.pd_partial, x, moe_sc);
            return;
        }
        // Multi-token chunk: the CPU's experts now, while the GPU runs the resident ones.
        const auto t0 = Clock::now();
        const cpu::MoeStats st = cpu_experts(il, h_hidden, c.n, h_ids, h_w, h_partial, [] {});
        ExpertLayerCounters& L = counters.layers[static_cast<size_t>(il)];
        L.cpu_ms += ms_since(t0);
        L.cpu_pairs += static_cast<uint64_t>(st.rows);
        L.gpu_pairs += static_cast<uint64_t>(c.n * K - st.rows);
        L.cpu_experts += static_cast<uint64_t>(st.experts);
        L.cpu_bytes += st.bytes;
        NITRO_CUDA_CHECK(cudaMemcpyAsync(partial, h_partial, static_cast<size_t>(c.n * E) * 4, cudaMemcpyHostToDevice, s));
        moe_combine(s, D.ex, c.n, E, static_cast<int>(K), d_ids, d_w, hid, partial, x, moe_sc);
    }
    void count_gpu_only(int il, int64_t n) { counters.layers[static_cast<size_t>(il)].gpu_pairs += static_cast<uint64_t>(n * K); }
    void lm_head(const ChunkArgs& c) {
        const GemmScratch* gs = &gemm;
        hq = Q8Input{};  // h is rewritten below
        if (c.logits == ChunkArgs::Logits::Rows) {
            // The listed rows (in the order the caller wants their logits; eval_batch lists them in
            // batch order, which need not be increasing here), gathered into h, normed in place.
            const int64_t n_out = static_cast<int64_t>(c.logit_rows.size());
            for (int64_t j0 = 0; j0 < n_out; j0 += z.logits_rows) {
                const int64_t rows = std::min<int64_t>(z.logits_rows, n_out - j0);
                for (int64_t j = 0; j < rows; ++j)
                    NITRO_CUDA_CHECK(cudaMemcpyAsync(h + j * E, x + c.logit_rows[static_cast<size_t>(j0 + j)] * E,
                                                     static_cast<size_t>(E) * 4, cudaMemcpyDeviceToDevice, s));
                rms_norm(s, h, output_norm, rows, E, E, spec.rms_eps, h, E);
                matmul(s, output, h, rows, E, logits, V, nullptr, false, gs);
                NITRO_CUDA_CHECK(cudaMemcpyAsync(logits_dst + j0 * V, logits, static_cast<size_t>(rows * V) * 4,
                                                 cudaMemcpyDeviceToHost, s));
            }
            return;
        }
        const int64_t first = c.logits == ChunkArgs::Logits::All ? 0 : c.n - 1;
        // At most z.logits_rows rows at a time (the logits of a whole prompt chunk would not fit
        // a small budget: 512 x 201,088 floats are 412 MB).
        for (int64_t r0 = first; r0 < c.n; r0 += z.logits_rows) {
            const int64_t rows = std::min<int64_t>(z.logits_rows, c.n - r0);
            rms_norm(s, x + r0 * E, output_norm, rows, E, E, spec.rms_eps, h, E);
            matmul(s, output, h, rows, E, logits, V, nullptr, false, gs);
            NITRO_CUDA_CHECK(cudaMemcpyAsync(logits_dst + (r0 - first) * V, logits, static_cast<size_t>(rows * V) * 4,
                                             cudaMemcpyDeviceToHost, s));
        }
    }
};

}  // namespace nitro::cuda
