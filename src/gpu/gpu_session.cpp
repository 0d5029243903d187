// The GPU engine (gpu_session.h): upload per the plan, the ops of runtime/forward.h on CUDA, the
// hybrid's CPU side and the decode graph. docs/hybrid.md describes the protocol.
#include "gpu/gpu_session.h"
#include "gpu/gpu_session_impl.h"

#include "core/error.h"
#include "cpu/moe.h"
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/delta_net.h"
#include "cuda/ops.h"
#include "gpu/slot_copier.h"
#include "runtime/forward.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include <unistd.h>

namespace nitro::cuda {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;

using detail::Clock;
using detail::ms_since;

/// Load progress on stderr: a bar redrawn in place on a terminal, a few lines otherwise.
class Progress {
public:
    Progress(bool on, uint64_t total) : on_(on), total_(std::max<uint64_t>(total, 1)), tty_(::isatty(2)) {}
    void add(uint64_t bytes) {
        done_ += bytes;
        if (!on_) return;
        const int pct = static_cast<int>(100 * done_ / total_);
        if (pct == last_ || (!tty_ && pct % 25 != 0 && pct != 100)) return;
        last_ = pct;
        const int w = 30, fillw = w * pct / 100;
        std::fprintf(stderr, "%sloading to GPU [%.*s%*s] %3d%% (%.2f / %.2f GiB)%s", tty_ ? "\r" : "", fillw,
                     "##############################", w - fillw, "", pct, done_ / kGiB, total_ / kGiB, tty_ ? "" : "\n");
        if (tty_ && pct == 100) std::fprintf(stderr, "\n");
    }

private:
    bool on_;
    uint64_t total_, done_ = 0;
    bool tty_;
    int last_ = -1;
};

/// Placement options from the engine options, the budget and the runtime overhead measured by ctx.
PlacementOptions placement_options(const GpuOptions& go, const DeviceContext& ctx, const HotSet* hot) {
    // the runtime + the cuBLAS workspace so far (the final plan adds what the warm-up measured)
    return nitro::placement_options(go, static_cast<double>(ctx.total_budget()) / kGiB, ctx.runtime_overhead() + ctx.alloc().used(), hot);
}

}  // namespace


namespace {

/// A vector (norm, bias, sinks, ...): F32, as a one-row DWeight.
DWeight upload_vector(DeviceContext& ctx, StagingRing& ring, Progress& pr, const GgufTensorInfo& t) {
    if (t.type != GgmlType::F32) fail("tensor '{}' must be F32 for the GPU engine (is {})", t.name, type_display_name(t.type));
    void* d = ctx.alloc().alloc(t.n_bytes, "tensor " + t.name);
    ring.upload(d, t.data, t.n_bytes);
    pr.add(t.n_bytes);
    DWeight w;
    w.type = GgmlType::F32;
    w.data = static_cast<const uint8_t*>(d);
    w.ne0 = t.ne[0];
    w.n_rows = t.n_elements() / t.ne[0];
    w.row_bytes = static_cast<size_t>(t.ne[0]) * 4;
    return w;
}

void check_gpu_type(const GgufTensorInfo& t) {
    if (!supported_weight_type(t.type))
        fail("tensor '{}' has type {}, which the GPU engine does not support (F32, F16, BF16, Q8_0, Q4_0, MXFP4, Q4_K, Q5_K, "
             "Q6_K, IQ4_XS)",
             t.name, type_display_name(t.type));
}

DWeight upload_matrix(DeviceContext& ctx, StagingRing& ring, Progress& pr, const GgufTensorInfo& t) {
    check_gpu_type(t);
    void* d = ctx.alloc().alloc(t.n_bytes, "tensor " + t.name);
    ring.upload(d, t.data, t.n_bytes);
    pr.add(t.n_bytes);
    DWeight w;
    w.type = t.type;
    w.data = static_cast<const uint8_t*>(d);
    w.ne0 = t.ne[0];
    w.n_rows = t.ne[1];
    w.row_bytes = row_size(t.type, t.ne[0]);
    return w;
}

/// A slot pool of `resident.size()` experts of expert tensor t ([ne0, ne1, X]) at `dst` (device,
/// inside the slot arena): slot s holds expert resident[s]. *stride receives the bytes between slots.
DWeight upload_slots(StagingRing& ring, Progress& pr, const GgufTensorInfo& t, const std::vector<int32_t>& resident,
                     uint8_t* dst, size_t* stride) {
    check_gpu_type(t);
    DWeight w;
    w.type = t.type;
    w.ne0 = t.ne[0];
    w.n_rows = t.ne[1];
    w.row_bytes = row_size(t.type, t.ne[0]);
    *stride = w.row_bytes * static_cast<size_t>(t.ne[1]);
    if (resident.empty()) return w;
    for (size_t sl = 0; sl < resident.size(); ++sl) {
        ring.upload(dst + sl * *stride, t.data + static_cast<size_t>(resident[sl]) * *stride, *stride);
        pr.add(*stride);
    }
    w.data = dst;
    return w;
}

/// Bytes of one expert tensor's slot pool for n experts, 256-byte aligned inside the arena.
size_t pool_bytes(const GgufTensorInfo& t, size_t n) {
    return (row_size(t.type, t.ne[0]) * static_cast<size_t>(t.ne[1]) * n + 255) / 256 * 256;
}

}  // namespace

GpuSession::GpuSession(const Model& model, const SessionOptions& so, const GpuOptions& go)
    : SequenceEngine(make_model_spec(model, so), so, SnapshotPolicy::EndOfEval) {
    ctx_ = std::make_unique<DeviceContext>(go.device, go.vram_budget_gib);
    DeviceContext& ctx = *ctx_;
    m_ = std::make_unique<Impl>(model);
    Impl& m = *m_;
    m.spec = spec_;
    const ModelSpec& sp = m.spec;
    if (sp.head_dim_v != sp.head_dim) fail("the GPU engine needs key and value heads of one size ({} vs {})", sp.head_dim, sp.head_dim_v);
    m.use_graphs = go.graphs;
    m.verbose = go.verbose;
    go.adapt.validate();
    m.adapt = go.adapt;
    m.test_max_pinned = go.test_max_pinned_buffers;
    m.test_fail_copy_every = go.test_fail_copy_every;
    m.E = sp.n_embd;
    m.X = sp.n_expert;
    m.K = sp.n_expert_used;
    m.F = sp.n_ff_exp;
    m.V = sp.n_vocab;
    m.z = gpu_scratch_sizes(sp);
    m.compute = ctx.compute();
    m.n_seq = static_cast<int>(sp.n_seq);  // make_model_spec checked it is positive
    // one decode graph per sequence and attention depth class (ops.h attention_depth_class)
    m.graph.assign(static_cast<size_t>(m.n_seq) * Impl::kAttnClasses, nullptr);
    m.graph_exec.assign(static_cast<size_t>(m.n_seq) * Impl::kAttnClasses, nullptr);
    if (sp.has_recurrent() && (sp.ssm.head_dim % 32 != 0 || sp.ssm.head_dim > 256 || sp.ssm.d_conv > 64))
        fail("the GPU engine's Gated DeltaNet kernels need a head dim that is a multiple of 32 up to 256 (got {}) and a conv "
             "kernel up to 64 (got {})",
             sp.ssm.head_dim, sp.ssm.d_conv);

    // ---- the plan, first with the runtime overhead measured so far plus an ASSUMED margin for
    // kernel modules the driver loads lazily on first use: fails early (before any upload) if the
    // budget cannot hold the dense core. The final plan is made after the warm-up below has
    // loaded those modules and their real size is measured.
    HotSet hot;
    if (!go.hot_set.empty()) hot = read_hot_set(go.hot_set, sp.n_layer, sp.n_expert);
    const ModelLayout layout = model_layout(model, sp);
    PlacementOptions po = placement_options(go, ctx, go.hot_set.empty() ? nullptr : &hot);
    constexpr uint64_t kAssumedLazyModules = 320ull << 20;  // when NVML cannot measure them
    m.plan = plan_placement(layout, po);  // throws with the shortfall when the fixed part does not fit

    // ---- weights: every row of the architecture's table the file holds (Model::tensors()) but the
    // routed experts' matrices, which go to the slot pools with the plan (install_slots), through
    // the pinned staging ring into one arena (one allocation: a small budget would lose hundreds of
    // MiB to the driver's 2 MiB rounding of each tensor).
    uint64_t total = 0, arena = 0;
    std::vector<std::pair<const TensorSpec*, const GgufTensorInfo*>> uploads;
    for (const TensorSpec& t : model.tensors()) {
        if (t.kind == TensorKind::Expert) continue;
        const GgufTensorInfo& g = model.gguf().get(t.name);
        uploads.emplace_back(&t, &g);
        total += g.n_bytes;
        arena += (g.n_bytes + 255) / 256 * 256;
    }
    Progress pr(go.progress, total);
    m.layers.resize(model.layers().size());
    std::array<DWeight, kTensorIds> globals{};
    ctx.alloc().begin_arena(arena, "dense core");
    {
        StagingRing ring(ctx.copy(), 64ull << 20, 4);
        for (const auto& [t, g] : uploads)
            (t->layer < 0 ? globals : m.layers[static_cast<size_t>(t->layer)].w)[static_cast<size_t>(t->id)] =
                tensor_kind_is_f32(t->kind) ? upload_vector(ctx, ring, pr, *g) : upload_matrix(ctx, ring, pr, *g);
        ring.finish();
    }
    ctx.alloc().end_arena();
    m.token_embd = globals[static_cast<size_t>(TensorId::token_embd)];
    m.output = globals[static_cast<size_t>(TensorId::output)].data ? globals[static_cast<size_t>(TensorId::output)]
                                                                    : m.token_embd;  // tied LM head
    m.output_norm = reinterpret_cast<const float*>(globals[static_cast<size_t>(TensorId::output_norm)].data);
    for (size_t il = 0; il < m.layers.size(); ++il) {
        Impl::Layer& D = m.layers[il];
        D.recurrent = model.layers()[il].recurrent();
        // Experts: biases of every expert with the dense core; the slot pools come with the plan.
        D.ex.gate_b = D.f32(TensorId::ffn_gate_exps_bias);
        D.ex.up_b = D.f32(TensorId::ffn_up_exps_bias);
        D.ex.down_b = D.f32(TensorId::ffn_down_exps_bias);
        D.ex.n_expert = m.X;
        D.ex.oai_act = sp.act == FfnAct::SwigluOai;
    }

    // ---- slot tables, KV cache (one arena), decode-step exchange buffers. Every sequence has its
    // own K/V region of kv_capacity positions per layer (sequence q's at q * capacity) and its own
    // recurrent state block.
    const int64_t ub = sp.n_ubatch;
    const uint64_t n_seq = static_cast<uint64_t>(m.n_seq);
    uint64_t kv_arena = 0;
    for (const LayerSpec& ls : sp.layers) {
        kv_arena += (n_seq * static_cast<uint64_t>(ls.kv_capacity * sp.n_k()) * 2 + 255) / 256 * 256 +
                    (n_seq * static_cast<uint64_t>(ls.kv_capacity * sp.n_v()) * 2 + 255) / 256 * 256 +
                    (static_cast<uint64_t>(m.X) * 4 + 255) / 256 * 256;
        if (ls.kind == LayerKind::DeltaNet) {  // its recurrent state, as runtime/placement.cpp counts it
            kv_arena += (n_seq * static_cast<uint64_t>(sp.ssm.conv_state_size()) * 4 + 255) / 256 * 256 +
                        (n_seq * static_cast<uint64_t>(sp.ssm.delta_state_size()) * 4 + 255) / 256 * 256;
            m.rstate_floats += sp.ssm.conv_state_size() + sp.ssm.delta_state_size();
        }
    }
    ctx.alloc().begin_arena(kv_arena, "K/V cache, recurrent state and slot tables");
    // The recurrent state of all DeltaNet layers: one block per sequence, so a snapshot is one
    // copy; each layer's conv and delta state at 256-byte aligned offsets inside it
    // (conv_state_size() and delta_state_size() are multiples of 64 floats in every real model;
    // the arena counted each piece's alignment separately, which covers these blocks).
    if (m.rstate_floats > 0) {
        int64_t floats = 0;
        auto al = [](int64_t f) { return (f + 63) / 64 * 64; };
        for (const LayerSpec& ls : sp.layers)
            if (ls.kind == LayerKind::DeltaNet) floats += al(sp.ssm.conv_state_size()) + al(sp.ssm.delta_state_size());
        m.rstate_floats = floats;
        m.rstate = ctx.alloc_n<float>(static_cast<size_t>(floats) * n_seq, "recurrent state");
        NITRO_CUDA_CHECK(cudaMemsetAsync(m.rstate, 0, static_cast<size_t>(floats) * n_seq * 4, ctx.compute()));
        NITRO_CUDA_CHECK(cudaStreamSynchronize(ctx.compute()));
        float* at = m.rstate;
        for (size_t il = 0; il < m.layers.size(); ++il) {
            if (sp.layers[il].kind != LayerKind::DeltaNet) continue;
            m.layers[il].conv_state = at;
            at += al(sp.ssm.conv_state_size());
            m.layers[il].delta_state = at;
            at += al(sp.ssm.delta_state_size());
        }
    }
    // One slot table for all layers (no more than the plan counted: one rounding instead of n_layer).
    const size_t table = m.layers.size() * static_cast<size_t>(m.X);
    m.d_slot_tables = ctx.alloc_n<int32_t>(table, "slot tables");
    {
        void* unused = nullptr;
        m.h_slot_tables = static_cast<int32_t*>(ctx.host_mapped(table * 4, &unused));
    }
    for (size_t il = 0; il < m.layers.size(); ++il) {
        Impl::Layer& D = m.layers[il];
        D.d_slot_of = m.d_slot_tables + il * static_cast<size_t>(m.X);
        D.ex.slot_of = D.d_slot_of;
        D.window = sp.layers[il].window;
        D.capacity = sp.layers[il].kv_capacity;
        if (D.capacity > 0) {  // DeltaNet layers have none
            D.kc = ctx.alloc_n<uint16_t>(n_seq * static_cast<size_t>(D.capacity * sp.n_k()), fmt::format("K cache of layer {}", il));
            D.vc = ctx.alloc_n<uint16_t>(n_seq * static_cast<size_t>(D.capacity * sp.n_v()), fmt::format("V cache of layer {}", il));
        }
        const int64_t keys = D.window > 0 ? std::min(D.window, sp.n_ctx) : sp.n_ctx;
        D.n_split_decode = attention_decode_splits(keys, m.z.max_split);
        // [h E][ids K][w K][margin 1][ready 1][partial E][done 1][t_route 1 u64][t_wait 2 u64], 64-byte aligned parts
        auto al = [](size_t b) { return (b + 63) / 64 * 64; };
        const size_t o_ids = al(static_cast<size_t>(m.E) * 4), o_w = o_ids + al(static_cast<size_t>(m.K) * 4),
                     o_mg = o_w + al(static_cast<size_t>(m.K) * 4), o_rd = o_mg + 64, o_p = o_rd + 64,
                     o_dn = o_p + al(static_cast<size_t>(m.E) * 4), o_tr = o_dn + 64, o_tw = o_tr + 64, bytes = o_tw + 64;
        void* dev = nullptr;
        auto* host = static_cast<uint8_t*>(ctx.host_mapped(bytes, &dev));
        auto* devb = static_cast<uint8_t*>(dev);
        auto bind = [&](auto*& hp, auto*& dp, size_t off) {
            using T = std::remove_pointer_t<std::remove_reference_t<decltype(hp)>>;
            hp = reinterpret_cast<T*>(host + off);
            dp = reinterpret_cast<T*>(devb + off);
        };
        bind(D.rh_h, D.rd_h, 0);
        bind(D.rh_ids, D.rd_ids, o_ids);
        bind(D.rh_w, D.rd_w, o_w);
        bind(D.rh_margin, D.rd_margin, o_mg);
        bind(D.rh_ready, D.rd_ready, o_rd);
        bind(D.ph_partial, D.pd_partial, o_p);
        bind(D.ph_done, D.pd_done, o_dn);
        bind(D.th_route, D.td_route, o_tr);
        bind(D.th_wait, D.td_wait, o_tw);
    }

    ctx.alloc().end_arena();

    // ---- activations and scratch: exactly runtime/placement.h's GpuScratchSizes (the plan counted
    // them), in one arena
    const GpuScratchSizes& z = m.z;
    ctx.alloc().begin_arena(z.bytes(), "activations and scratch");
    auto A = [&](int64_t n, const char* what) { return n > 0 ? ctx.alloc_n<float>(static_cast<size_t>(n), what) : nullptr; };
    m.x = A(z.x, "hidden state");
    m.h = A(z.h, "normed hidden state");
    m.q = A(z.q, "q");
    m.k = A(z.k, "k");
    m.v = A(z.v, "v");
    m.attn = A(z.attn, "attention output");
    m.router = A(z.router, "router logits");
    m.d_ids = ctx.alloc_n<int32_t>(static_cast<size_t>(z.ids), "expert ids");
    m.d_w = A(z.weights, "expert weights");
    m.d_margin = A(z.margin, "router margins");
    m.logits = A(z.logits, "logits");
    m.attn_partial = A(z.attn_partial, "attention partials");
    m.d_tok = ctx.alloc_n<int32_t>(static_cast<size_t>(z.tok), "token ids");
    m.d_pos = ctx.alloc_n<int32_t>(static_cast<size_t>(z.pos), "positions");
    m.d_step = ctx.alloc_n<uint32_t>(1, "step counter");
    m.d_route_counter = ctx.alloc_n<uint32_t>(1, "router counter");  // router_top_k's blocks done (0 between launches)
    NITRO_CUDA_CHECK(cudaMemset(m.d_route_counter, 0, 4));
    m.moe_sc.act = A(z.moe_act, "expert activations");
    m.moe_sc.act_bytes = static_cast<size_t>(z.moe_act) * sizeof(float);
    m.moe_sc.down = A(z.moe_down, "expert outputs");
    m.partial = A(z.partial, "CPU experts' partial sums");
    m.qg = A(z.qg, "q and output gate");
    m.gate = A(z.gate, "attention output gate");
    m.ssm_qkv = A(z.ssm_qkv, "DeltaNet q|k|v");
    m.ssm_z = A(z.ssm_z, "DeltaNet z");
    m.ssm_ba = A(z.ssm_ba, "DeltaNet beta/alpha");
    m.ssm_beta = A(z.ssm_beta, "DeltaNet beta");
    m.ssm_g = A(z.ssm_g, "DeltaNet decay");
    m.ssm_convout = A(z.ssm_conv, "DeltaNet conv output");
    m.ssm_core = A(z.ssm_core, "DeltaNet output");
    m.ssm_fused = A(z.ssm_in, "DeltaNet fused projection");
    m.sh_gate = A(z.sh_gate, "shared expert gate");
    m.sh_up = A(z.sh_up, "shared expert up");
    m.sh_down = A(z.sh_down, "shared expert output");
    m.gemm.xr = A(z.xr, "activations rounded to the vec-dot type");
    m.gemm.xr_elems = static_cast<size_t>(z.xr);
    m.moe_sc.gemm = m.gemm;
    m.hq_buf = A(z.hq, "normed hidden state in 8-bit blocks");
    m.hq_bytes = static_cast<size_t>(z.hq) * 4;
    m.moe_sc.fuse_down = m.fuse_moe_down;
    const int64_t R = ub * m.K;
    if (z.moe_gate > 0) {
        m.moe_sc.gate = A(z.moe_gate, "expert gate outputs");
        m.moe_sc.up = A(z.moe_up, "expert up outputs");
        m.moe_sc.group_tok = ctx.alloc_n<int32_t>(static_cast<size_t>(z.group), "expert grouping");
        m.moe_sc.row_of = ctx.alloc_n<int32_t>(static_cast<size_t>(z.group), "expert grouping");
        m.moe_sc.group_exp = ctx.alloc_n<int32_t>(static_cast<size_t>(z.group), "expert grouping");
        m.moe_sc.group_off = ctx.alloc_n<int32_t>(static_cast<size_t>(z.group_off), "expert grouping");
        m.gemm.act_elems = static_cast<size_t>(z.gemm_act);
        m.gemm.act = ctx.alloc_n<uint16_t>(m.gemm.act_elems, "f16 activations (prefill)");
        m.gemm.w_elems = static_cast<size_t>(z.gemm_w);
        m.gemm.w = ctx.alloc_n<uint16_t>(m.gemm.w_elems, "f16 weight scratch (prefill)");
        m.gemm.cublas = ctx.cublas();
        m.moe_sc.gemm = m.gemm;
    }
    ctx.alloc().end_arena();
    void* dummy = nullptr;
    const size_t pin_ints = static_cast<size_t>(ub) + 2 + static_cast<size_t>(R) + 3 * static_cast<size_t>(R);
    // (+ the hidden-state and partial-sum exchange of multi-token chunks in hybrid placement)
    const size_t pin_floats = static_cast<size_t>(m.V) + 2 * static_cast<size_t>(R) + static_cast<size_t>(ub) +
                              2 * static_cast<size_t>(ub * m.E);
    auto* pin = static_cast<int32_t*>(ctx.host_mapped((pin_ints + pin_floats) * 4, &dummy));
    m.h_tok = pin;
    m.h_pos = static_cast<int32_t*>(ctx.host_mapped(static_cast<size_t>(m.n_seq) * 4, &dummy));  // one per group
    m.h_step = reinterpret_cast<uint32_t*>(pin + ub + 1);
    m.h_ids = pin + ub + 2;
    m.moe_sc.host_idx = pin + ub + 2 + R;
    float* pf = reinterpret_cast<float*>(pin + pin_ints);
    m.h_logits = pf;
    m.h_w = pf + m.V;
    m.h_margin = m.h_w + R;
    m.h_hidden = m.h_margin + ub;
    m.h_partial = m.h_hidden + ub * m.E;
    NITRO_CUDA_CHECK(cudaStreamSynchronize(ctx.compute()));

    // ---- the CPU side: experts straight from the mmap'd file
    m.counters.layers.resize(m.layers.size());
    const int threads = so.n_threads > 0 ? so.n_threads : std::max(1u, std::thread::hardware_concurrency());
    m.pool = std::make_unique<cpu::ThreadPool>(threads);
    for (const auto& L : model.layers())
        m.experts.push_back(layer_experts(L, sp.act));

    // ---- warm-up: one slot per layer, a prompt chunk and a decode step on dummy tokens, so every
    // kernel (ours and cuBLAS's) has been loaded; then the process's GPU memory is measured and
    // the final plan made with what the runtime really takes.
    {
        Plan warm = m.plan;  // one slot per layer if the budget has room for them, else none
        for (auto& lp : warm.layers) lp.resident.assign(m.plan.n_resident() >= sp.n_layer ? 1 : 0, 0);
        install_slots(warm, false);
        const int64_t n = std::min<int64_t>(sp.n_ubatch, kGemvMaxTokens + 8);
        std::vector<int32_t> dummy(static_cast<size_t>(n), 0);
        std::vector<float> l;
        if (n + 1 <= sp.n_ctx) {
            eval(dummy, false, l);
            eval(std::span<const int32_t>(dummy.data(), 1), false, l);
        }
        reset_sequences();
        m.drop_graph();
        m.counters = ExpertCounters{};
        m.counters.layers.resize(m.layers.size());
        install_slots(Plan{}, false);  // frees the warm-up slots
    }
    uint64_t lazy = kAssumedLazyModules;
    bool measured = false;
    if (const uint64_t used = ctx.process_used(); used > 0) {
        const uint64_t known = ctx.runtime_overhead() + ctx.alloc().used();
        // Modules are loaded once per process: the largest measurement so far stands for it.
        static std::atomic<uint64_t> process_lazy{0};
        uint64_t seen = used > known ? used - known : 0, prev = process_lazy.load();
        while (seen > prev && !process_lazy.compare_exchange_weak(prev, seen)) {
        }
        lazy = std::max(seen, prev);
        measured = ctx.runtime_overhead_measured();
    }
    constexpr uint64_t kModuleMargin = 64ull << 20;  // kernels the warm-up may not have touched
    po.runtime_overhead_bytes = ctx.runtime_overhead() + lazy + kModuleMargin + DeviceContext::kCublasWorkspace;
    runtime_bytes_ = po.runtime_overhead_bytes;
    runtime_measured_ = measured;
    m.plan = plan_placement(layout, po);
    const Plan& plan = m.plan;
    if (go.mode == EngineMode::Gpu && plan.n_resident() < plan.n_experts())
        fail("--mode gpu: the {:.2f} GiB budget holds {} of the {} experts ({}); use --mode hybrid or auto to compute the "
             "others on the CPU, or raise --vram-budget",
             ctx.total_budget() / kGiB, plan.n_resident(), plan.n_experts(), plan_summary_line(plan));
    // The allocator may not hand out what the runtime's modules took.
    ctx.alloc().set_budget(std::max(ctx.alloc().used(), ctx.total_budget() - ctx.runtime_overhead() - lazy - kModuleMargin));
    install_slots(plan, go.progress);
    m.setup_prompt_staging(ctx, go);
    for (const std::string& w : plan.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
    if (go.progress || go.verbose) std::fprintf(stderr, "%s\n", plan_summary_line(plan).c_str());
    if (go.verbose)
        for (size_t il = 0; il < plan.layers.size(); ++il)
            std::fprintf(stderr, "  layer %2zu: %3zu of %lld experts resident (%s)\n", il, plan.layers[il].resident.size(),
                         static_cast<long long>(sp.n_expert), plan.layers[il].why.c_str());
}

void GpuSession::install_slots(const Plan& plan, bool progress) {
    Impl& m = *m_;
    DeviceContext& ctx = *ctx_;
    const Model& model = m.model;
    m.drop_graph();  // a captured graph has the old pools and flags baked in
    // Copies of admissions still in flight write into the old pools: let them land first.
    m.cache.reset();
    m.copier.reset();
    uint64_t total = 0;
    for (const auto& lp : plan.layers) total += lp.resident.size() * plan.expert_bytes;
    Progress pr(progress && total > 0, total);
    StagingRing ring(ctx.copy(), 64ull << 20, 4);
    // Every slot pool of every layer lives in one arena: one allocation, one rounding to the
    // driver's pages (runtime/placement.h vram_alloc_size), exactly what the plan counted.
    if (m.slot_arena) ctx.alloc().free(m.slot_arena);
    m.slot_arena = nullptr;
    static const std::vector<int32_t> none;
    auto resident_of = [&](size_t il) -> const std::vector<int32_t>& {
        return il < plan.layers.size() ? plan.layers[il].resident : none;
    };
    size_t arena = 0;
    for (size_t il = 0; il < m.layers.size(); ++il) {
        const LayerWeights& L = model.layers()[il];
        if (!L.moe()) continue;  // a dense FFN layer: no experts, no slots
        const size_t n = resident_of(il).size();
        for (TensorId t : {TensorId::ffn_gate_exps, TensorId::ffn_up_exps, TensorId::ffn_down_exps}) arena += pool_bytes(*L[t], n);
    }
    if (arena > 0) m.slot_arena = static_cast<uint8_t*>(ctx.alloc().alloc(arena, "expert slots"));
    uint8_t* at = m.slot_arena;
    bool any_cpu = false;
    for (size_t il = 0; il < m.layers.size(); ++il) {
        Impl::Layer& D = m.layers[il];
        const LayerWeights& L = model.layers()[il];
        const std::vector<int32_t>& res = resident_of(il);
        D.h_slot_of.assign(static_cast<size_t>(m.X), -1);
        D.on_gpu.assign(static_cast<size_t>(m.X), 0);
        if (!L.moe()) {  // a dense FFN layer: nothing on the GPU, nothing on the CPU
            D.n_slots = 0;
            D.cpu_part = false;
            std::copy(D.h_slot_of.begin(), D.h_slot_of.end(), m.h_slot_tables + il * static_cast<size_t>(m.X));
            continue;
        }
        // slot s holds expert res[s]; slot_of maps expert -> slot (-1: computed by the CPU)
        D.ex.gate = upload_slots(ring, pr, *L[TensorId::ffn_gate_exps], res, at, &D.ex.gate_stride);
        at += pool_bytes(*L[TensorId::ffn_gate_exps], res.size());
        D.ex.up = upload_slots(ring, pr, *L[TensorId::ffn_up_exps], res, at, &D.ex.up_stride);
        at += pool_bytes(*L[TensorId::ffn_up_exps], res.size());
        D.ex.down = upload_slots(ring, pr, *L[TensorId::ffn_down_exps], res, at, &D.ex.down_stride);
        at += pool_bytes(*L[TensorId::ffn_down_exps], res.size());
        D.n_slots = static_cast<int64_t>(res.size());
        for (size_t sl = 0; sl < res.size(); ++sl) {
            D.h_slot_of[static_cast<size_t>(res[sl])] = static_cast<int32_t>(sl);
            D.on_gpu[static_cast<size_t>(res[sl])] = 1;
        }
        D.cpu_part = D.n_slots < m.X;
        any_cpu |= D.cpu_part;
        std::copy(D.h_slot_of.begin(), D.h_slot_of.end(), m.h_slot_tables + il * static_cast<size_t>(m.X));
    }
    ring.finish();
    m.hybrid = any_cpu;
    NITRO_CUDA_CHECK(cudaMemcpy(m.d_slot_tables, m.h_slot_tables, m.layers.size() * static_cast<size_t>(m.X) * 4,
                                cudaMemcpyHostToDevice));
    if (!m.hybrid) return;

    // The expert cache over the plan's residents: the first static_share of each layer's slots are
    // static (the plan lists hot-set experts most selected first), the rest adapt to the routing.
    CacheSetup setup;
    setup.opt = m.adapt;
    size_t buffer_bytes = 0;
    for (size_t il = 0; il < m.layers.size(); ++il) {
        LayerSlots ls;
        if (!model.layers()[il].moe()) {  // a dense FFN layer: no experts
            ls.n_expert = 0;
            setup.layers.push_back(std::move(ls));
            continue;
        }
        ls.resident = resident_of(il);
        ls.capacity = static_cast<int>(ls.resident.size());
        ls.n_static = static_cast<int>(std::floor(ls.capacity * m.adapt.static_share + 1e-9));
        ls.expert_bytes = m.experts[il].expert_bytes();
        buffer_bytes = std::max<size_t>(buffer_bytes, ls.expert_bytes);
        setup.layers.push_back(std::move(ls));
    }
    if (!setup.opt.frozen()) {
        m.copier = std::make_unique<SlotCopier>(
            ctx.copy(), m.adapt.staging_buffers, buffer_bytes, m.test_max_pinned, m.test_fail_copy_every,
            [&m](int layer, int slot) {
                const Impl::Layer& D = m.layers[static_cast<size_t>(layer)];
                SlotDst d;
                const ExpertSlots& e = D.ex;
                d.part[0] = const_cast<uint8_t*>(e.gate.data) + static_cast<size_t>(slot) * e.gate_stride;
                d.part[1] = const_cast<uint8_t*>(e.up.data) + static_cast<size_t>(slot) * e.up_stride;
                d.part[2] = const_cast<uint8_t*>(e.down.data) + static_cast<size_t>(slot) * e.down_stride;
                d.bytes[0] = e.gate_stride;
                d.bytes[1] = e.up_stride;
                d.bytes[2] = e.down_stride;
                return d;
            });
        if (m.copier->n_buffers() == 0) {  // nothing could be pinned: frozen (the copier warned)
            m.copier.reset();
            setup.opt.refresh_every = 0;
        } else {
            setup.opt.staging_buffers = m.copier->n_buffers();
        }
    }
    m.cache = std::make_unique<ExpertCache>(setup, static_cast<int>(m.X), static_cast<int>(m.K), m.copier.get());
    m.copy_to.assign(static_cast<size_t>(m.X), nullptr);
}

GpuSession::~GpuSession() {
    if (!m_) return;
    m_->drop_graph();
    if (m_->ev_gpu_done) cudaEventDestroy(m_->ev_gpu_done);
    if (m_->ev_partial) cudaEventDestroy(m_->ev_partial);
}

void GpuSession::state_reset(int seq) { m_->reset_recurrent(seq); }
void GpuSession::state_save(int seq, std::vector<float>& out) { m_->state_to_host(seq, out); }
void GpuSession::state_restore(int seq, const std::vector<float>& in) { m_->state_from_host(seq, in); }

const Plan& GpuSession::plan() const { return m_->plan; }
uint64_t GpuSession::vram_used() const { return ctx_->alloc().used(); }
uint64_t GpuSession::vram_budget() const { return ctx_->alloc().budget(); }
uint64_t GpuSession::process_vram() const { return ctx_->process_used(); }
const ExpertCounters* GpuSession::expert_counters() const { return &m_->counters; }
const ExpertCache* GpuSession::expert_cache() const { return m_->cache.get(); }

std::vector<uint8_t> GpuSession::slot_bytes(int layer, int slot) const {
    const Impl::Layer& D = m_->layers.at(static_cast<size_t>(layer));
    if (slot < 0 || slot >= D.n_slots) fail("layer {} has {} slots, not slot {}", layer, D.n_slots, slot);
    NITRO_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint8_t> out(D.ex.gate_stride + D.ex.up_stride + D.ex.down_stride);
    NITRO_CUDA_CHECK(cudaMemcpy(out.data(), D.ex.gate.data + static_cast<size_t>(slot) * D.ex.gate_stride, D.ex.gate_stride,
                                cudaMemcpyDeviceToHost));
    NITRO_CUDA_CHECK(cudaMemcpy(out.data() + D.ex.gate_stride, D.ex.up.data + static_cast<size_t>(slot) * D.ex.up_stride,
                                D.ex.up_stride, cudaMemcpyDeviceToHost));
    NITRO_CUDA_CHECK(cudaMemcpy(out.data() + D.ex.gate_stride + D.ex.up_stride,
                                D.ex.down.data + static_cast<size_t>(slot) * D.ex.down_stride, D.ex.down_stride,
                                cudaMemcpyDeviceToHost));
    return out;
}

void GpuSession::routing_changed() {
    Impl& m = *m_;
    m.on_route = route_callback();
    m.replay = replaying() ? this : nullptr;
    if (m.replay && !m.h_replay) {
        void* dev = nullptr;
        m.h_replay = static_cast<float*>(
            ctx_->host_mapped(static_cast<size_t>(m.spec.n_layer * m.spec.n_ubatch * m.X) * 4, &dev));
    }
    m.drop_graph();  // a captured decode graph has (or lacks) the router's host copies and the replay's copies
}

std::string GpuSession::describe() const {
    const Plan& p = m_->plan;
    std::string s = fmt::format("{}: {}, {:.2f} GiB in use", m_->hybrid ? "hybrid" : "gpu", ctx_->describe(),
                                (vram_used() + runtime_bytes_ - DeviceContext::kCublasWorkspace) / kGiB);
    if (m_->hybrid)
        s += fmt::format(", {} of {} experts resident, CPU {} threads ({} kernels)", p.n_resident(), p.n_experts(),
                         m_->pool->size(), cpu::kernel_isa());
    if (n_seq() > 1) s += fmt::format(", {} sequences (K/V of {} positions each)", n_seq(), m_->spec.n_ctx);
    if (launches_per_token_ > 0)
        s += fmt::format(", {} launches per decode step (CUDA graph, {} programmatic edges)", launches_per_token_,
                         pdl_edges_per_token_);
    return s + replay_note();
}

void GpuSession::set_op_profile(bool on) {
    Impl& m = *m_;
    m.drop_graph();  // recaptured with (or without) the marks at the next decode step
    m.op_profile_on = on;
    m.op_marks.assign(m.graph.size(), {});
    m.op_kernels.assign(m.graph.size(), {});
    m.op_prof = OpProfile{};
}

const OpProfile& GpuSession::op_profile() const { return m_->op_prof; }

RouterHostView GpuSession::router_host(int layer) const {
    const auto& D = m_->layers.at(static_cast<size_t>(layer));
    return {D.rh_h, D.rh_ids, D.rh_w, D.rh_ready};
}

namespace {

/// Spins until a flag written by the GPU reaches `want`; checks the stream now and then so a GPU
/// fault ends the wait (NITRO_CUDA_CHECK aborts with the error) instead of hanging.
void wait_host_flag(const volatile uint32_t* flag, uint32_t want, cudaStream_t s) {
    for (uint64_t spin = 0;; ++spin) {
        if (static_cast<int32_t>(__atomic_load_n(flag, __ATOMIC_ACQUIRE) - want) >= 0) return;
        if ((spin & 0xFFFFF) == 0xFFFFF) {
            const cudaError_t e = cudaStreamQuery(s);
            if (e != cudaSuccess && e != cudaErrorNotReady) NITRO_CUDA_CHECK(e);
        }
    }
}

}  // namespace

void GpuSession::exec_chunk(const ChunkArgs& chunk, float* logits_out) {
    Impl& m = *m_;
    cudaStream_t s = ctx_->compute();
    m.s = s;
    const int64_t k = chunk.n;
    // The rows, grouped by sequence, into the pinned buffers the launches read: token ids, each
    // group's first position; and the rows' sequences, positions and phases (route events).
    std::memcpy(m.h_tok, chunk.tokens.data(), static_cast<size_t>(k) * 4);
    m.groups.assign(chunk.groups.begin(), chunk.groups.end());
    for (size_t g = 0; g < m.groups.size(); ++g) m.h_pos[g] = static_cast<int32_t>(m.groups[g].pos0);
    m.row_seq.resize(static_cast<size_t>(k));
    m.row_pos.resize(static_cast<size_t>(k));
    m.row_prefill.resize(static_cast<size_t>(k));
    for (int64_t r = 0; r < k; ++r) {
        m.row_seq[static_cast<size_t>(r)] = chunk.seq_of(r);
        m.row_pos[static_cast<size_t>(r)] = chunk.pos_of(r);
        m.row_prefill[static_cast<size_t>(r)] = chunk.prefill_of(r);
    }
    m.tokens = chunk.tokens;
    // One row whose logits are the last row's (or none): a decode step, replayed from the
    // sequence's captured graph, which always computes them.
    const bool decode = k == 1 && chunk.logits != ChunkArgs::Logits::All && m.use_graphs;
    ChunkArgs c = chunk;
    if (decode) c.logits = ChunkArgs::Logits::Last;
    m.single = decode;
    m.begin_cache_step(k);  // residency of this step: the slot tables' host mirror
    const size_t table_bytes = m.layers.size() * static_cast<size_t>(m.X) * 4;
    if (m.replay)  // the replayed router logits of every layer, before the chunk is launched
        for (int il = 0; il < static_cast<int>(m.layers.size()); ++il) m.replay->replay_logits(il, m.h_replay + il * k * m.X);
    if (decode) {
        // A decode step of one sequence: one CUDA graph per sequence (its K/V and state pointers
        // are baked in); in hybrid placement the CPU computes its experts here, layer by layer, as
        // the GPU's router results arrive.
        const int q = m.groups[0].seq;
        *m.h_step = ++step_;
        m.logits_dst = m.h_logits;
        // the graph of this sequence for the depth class of this position (its attention launches differ)
        const size_t gi = static_cast<size_t>(q) * Impl::kAttnClasses + static_cast<size_t>(attention_depth_class(m.groups[0].pos0));
        cudaGraphExec_t& exec = m.graph_exec[gi];
        if (!exec) {
            cudaGraph_t& graph = m.graph[gi];
            NITRO_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
            NITRO_CUDA_CHECK(cudaMemcpyAsync(m.d_tok, m.h_tok, 4, cudaMemcpyHostToDevice, s));
            NITRO_CUDA_CHECK(cudaMemcpyAsync(m.d_pos, m.h_pos, 4, cudaMemcpyHostToDevice, s));
            NITRO_CUDA_CHECK(cudaMemcpyAsync(m.d_step, m.h_step, 4, cudaMemcpyHostToDevice, s));
            if (m.cache)  // every launch reads the mirror as begin_cache_step left it
                NITRO_CUDA_CHECK(cudaMemcpyAsync(m.d_slot_tables, m.h_slot_tables, table_bytes, cudaMemcpyHostToDevice, s));
            if (m.op_profile_on) {  // the same ops with a timing mark before each (op_profile.h)
                std::vector<OpMark>& marks = m.op_marks[gi];
                TimedOps<Impl> timed{m, s, marks};
                forward_chunk(timed, m.spec, c);
                op_mark(s, marks, nullptr);
            } else {
                forward_chunk(m, m.spec, c);
            }
            NITRO_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
            NITRO_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
            if (m.op_profile_on) m.op_kernels[gi] = op_kernel_counts(graph, m.op_marks[gi]);
            m.graph_host_router = m.host_router();
            size_t nn = 0;
            NITRO_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nn));
            std::vector<cudaGraphNode_t> nodes(nn);
            NITRO_CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &nn));
            int kernels = 0;
            for (auto node : nodes) {
                cudaGraphNodeType t;
                NITRO_CUDA_CHECK(cudaGraphNodeGetType(node, &t));
                kernels += t == cudaGraphNodeTypeKernel;
            }
            launches_per_token_ = kernels;
            size_t ne = 0;
            NITRO_CUDA_CHECK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &ne));
            std::vector<cudaGraphNode_t> from(ne), to(ne);
            std::vector<cudaGraphEdgeData> ed(ne);
            if (ne > 0) NITRO_CUDA_CHECK(cudaGraphGetEdges(graph, from.data(), to.data(), ed.data(), &ne));
            pdl_edges_per_token_ = static_cast<int>(std::count_if(
                ed.begin(), ed.end(), [](const cudaGraphEdgeData& e) { return e.type == cudaGraphDependencyTypeProgrammatic; }));
        }
        NITRO_CUDA_CHECK(cudaGraphLaunch(exec, s));
        if (m.hybrid) cpu_decode_step();
        NITRO_CUDA_CHECK(cudaStreamSynchronize(s));
        if (m.op_profile_on) op_accumulate(m.op_prof, m.op_marks[gi], m.op_kernels[gi]);
        if (logits_out) std::memcpy(logits_out, m.h_logits, static_cast<size_t>(m.V) * 4);
        after_decode_step(q, m.groups[0].pos0);
        return;
    }
    m.logits_dst = logits_out;
    NITRO_CUDA_CHECK(cudaMemcpyAsync(m.d_tok, m.h_tok, static_cast<size_t>(k) * 4, cudaMemcpyHostToDevice, s));
    NITRO_CUDA_CHECK(cudaMemcpyAsync(m.d_pos, m.h_pos, m.groups.size() * 4, cudaMemcpyHostToDevice, s));
    if (m.cache) NITRO_CUDA_CHECK(cudaMemcpyAsync(m.d_slot_tables, m.h_slot_tables, table_bytes, cudaMemcpyHostToDevice, s));
    forward_chunk(m, m.spec, c);
    NITRO_CUDA_CHECK(cudaStreamSynchronize(s));
    m.flush_prompt_idle();
    m.counters.prefill_tokens += static_cast<uint64_t>(k);
    m.sync_cache_counters();
}

int64_t GpuSession::exec_group_tokens() const { return m_->group_tokens; }

void GpuSession::exec_group(const ChunkArgs& chunk, float* logits_out) {
    Impl& m = *m_;
    cudaStream_t s = ctx_->compute();
    m.s = s;
    m.single = false;
    const std::span<const int32_t> tokens = chunk.tokens;
    const ChunkArgs::Logits logits = chunk.logits;
    const int seq = chunk.seq_of(0);
    const int64_t g = chunk.n, ub = m.spec.n_ubatch;
    const int64_t pos0 = chunk.pos0;
    NITRO_CUDA_ASSERT(g > ub && g <= m.group_tokens && logits != ChunkArgs::Logits::Rows);
    m.begin_cache_step(g);
    std::vector<ChunkArgs> cs;
    m.blocks.clear();
    for (int64_t off = 0; off < g; off += ub) {
        const int64_t n = std::min(ub, g - off);
        m.grp.h_pos[m.blocks.size()] = static_cast<int32_t>(pos0 + off);
        m.blocks.push_back({off, n, pos0 + off});
        ChunkArgs c;
        c.n = n;
        c.pos0 = pos0 + off;
        c.logits = logits == ChunkArgs::Logits::All ? ChunkArgs::Logits::All
                   : logits == ChunkArgs::Logits::Last && off + n == g ? ChunkArgs::Logits::Last
                                                                       : ChunkArgs::Logits::None;
        cs.push_back(c);
    }
    std::memcpy(m.grp.h_tok, tokens.data(), static_cast<size_t>(g) * 4);
    NITRO_CUDA_CHECK(cudaMemcpyAsync(m.grp.tok, m.grp.h_tok, static_cast<size_t>(g) * 4, cudaMemcpyHostToDevice, s));
    NITRO_CUDA_CHECK(cudaMemcpyAsync(m.grp.pos, m.grp.h_pos, m.blocks.size() * 4, cudaMemcpyHostToDevice, s));
    if (m.cache)
        NITRO_CUDA_CHECK(cudaMemcpyAsync(m.d_slot_tables, m.h_slot_tables, m.layers.size() * static_cast<size_t>(m.X) * 4,
                                         cudaMemcpyHostToDevice, s));
    m.group_seq = seq;
    m.group_logits = logits_out;
    m.group_all_logits = logits == ChunkArgs::Logits::All;
    m.tokens = tokens;
    // The ops point at the group's buffers while it runs; the block-sized ones come back after.
    struct Restore {
        Impl& m;
        Impl::ChunkPtrs p;
        ~Restore() {
            m.restore_chunk_ptrs(p);
            m.blocks.clear();
        }
    } restore{m, m.save_chunk_ptrs()};
    forward_blocks(m, m.spec, std::span<const ChunkArgs>(cs));
    NITRO_CUDA_CHECK(cudaStreamSynchronize(s));
    m.flush_prompt_idle();
    m.counters.prefill_tokens += static_cast<uint64_t>(g);
    ++m.counters.prompt_groups;
    m.counters.prompt_group_tokens += static_cast<uint64_t>(g);
    m.sync_cache_counters();
}

void GpuSession::cpu_decode_step() {
    Impl& m = *m_;
    const uint32_t step = step_;
    size_t il = 0;
    // The team's regions come once per layer, between GPU work of a few hundred microseconds:
    // longer than the workers' spin, so without a hold they would sleep and be woken per layer
    // (MEASURED with bench_thread_pool BM_RegionAfterGap, 2 threads, 500 us gap: 45 us per region
    // against 3-4 us held).
    struct Hold {
        cpu::ThreadPool& p;
        explicit Hold(cpu::ThreadPool& pool) : p(pool) { p.hold(true); }
        ~Hold() { p.hold(false); }
    } hold(*m.pool);
    try {
        for (; il < m.layers.size(); ++il) {
            Impl::Layer& D = m.layers[il];
            if (!D.cpu_part) continue;
            wait_host_flag(D.rh_ready, step, m.s);
            const auto t0 = Clock::now();
            // The GPU continues as soon as the partial sum is in; the admissions' copies start after.
            const cpu::MoeStats st = m.cpu_experts(static_cast<int>(il), D.rh_h, 1, D.rh_ids, D.rh_w, D.ph_partial,
                                                   [&] { __atomic_store_n(D.ph_done, step, __ATOMIC_RELEASE); });
            ExpertLayerCounters& L = m.counters.layers[il];
            const double ms = ms_since(t0);
            L.cpu_ms += ms;
            L.cpu_decode_ms += ms;
            L.cpu_pairs += static_cast<uint64_t>(st.rows);
            L.gpu_pairs += static_cast<uint64_t>(m.K - st.rows);
            L.cpu_experts += static_cast<uint64_t>(st.experts);
            L.cpu_bytes += st.bytes;
        }
    } catch (...) {
        // Release the GPU (it waits on these flags), let the step finish, then report.
        for (; il < m.layers.size(); ++il) __atomic_store_n(m.layers[il].ph_done, step, __ATOMIC_RELEASE);
        cudaStreamSynchronize(m.s);
        throw;
    }
}

void GpuSession::after_decode_step(int seq, int64_t pos) {
    Impl& m = *m_;
    ++m.counters.decode_steps;
    m.sync_cache_counters();
    for (size_t il = 0; il < m.layers.size(); ++il) {
        Impl::Layer& D = m.layers[il];
        ExpertLayerCounters& L = m.counters.layers[il];
        if (!D.cpu_part) L.gpu_pairs += static_cast<uint64_t>(m.K);
        if (D.cpu_part) {
            const uint64_t route = *D.th_route, w0 = D.th_wait[0], w1 = D.th_wait[1];
            if (w0 >= route) L.gpu_ms += static_cast<double>(w0 - route) / 1e6;
            if (w1 >= w0) L.wait_ms += static_cast<double>(w1 - w0) / 1e6;
        }
        if (m.on_route)
            m.on_route(RouteEvent{pos, static_cast<int>(il), false,
                                  std::span<const int32_t>(D.rh_ids, static_cast<size_t>(m.K)),
                                  std::span<const float>(D.rh_w, static_cast<size_t>(m.K)), *D.rh_margin, seq});
    }
}

void register_engine() {
    set_gpu_engine_factory(
        [](const Model& model, const SessionOptions& so, const GpuOptions& go) -> std::unique_ptr<Engine> {
            return std::make_unique<GpuSession>(model, so, go);
        },
        [] { return device_count(); }, [](uint64_t bytes) { return h2d_gb_s(bytes); });
}

}  // namespace nitro::cuda
