#include "cuda/gpu_session.h"

#include "core/error.h"
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <thread>

#include <unistd.h>

namespace nitro::cuda {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

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

}  // namespace

struct GpuSession::Impl {
    const Model& model;
    ModelHparams hp;
    ArchConfig cfg;
    cpu::RopeParams rope;
    int64_t n_ubatch = 0, E = 0, nq = 0, nk = 0, nv = 0, no = 0, X = 0, K = 0, F = 0, V = 0;
    bool use_graphs = true;

    struct Layer {
        DWeight wq, wk, wv, wo, gate_inp;
        const float *attn_norm = nullptr, *bq = nullptr, *bk = nullptr, *bv = nullptr, *bo = nullptr;
        const float *q_norm = nullptr, *k_norm = nullptr, *sinks = nullptr, *ffn_norm = nullptr, *gate_inp_b = nullptr;
        ExpertSlots ex;
        int32_t* d_slot_of = nullptr;
        std::vector<int32_t> h_slot_of;
        uint16_t *kc = nullptr, *vc = nullptr;
        int64_t capacity = 0, window = 0;
        int n_split_decode = 1;
        const float* partial = nullptr;
        // router results of single-token steps, mapped pinned host memory (host / device alias)
        float *rh_h = nullptr, *rd_h = nullptr;
        int32_t *rh_ids = nullptr, *rd_ids = nullptr;
        float *rh_w = nullptr, *rd_w = nullptr;
        uint32_t *rh_ready = nullptr, *rd_ready = nullptr;
    };
    std::vector<Layer> layers;
    DWeight token_embd, output;
    const float* output_norm = nullptr;

    // activations
    float *x = nullptr, *h = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *attn = nullptr, *router = nullptr;
    int32_t* d_ids = nullptr;
    float* d_w = nullptr;
    float* logits = nullptr;
    int64_t logits_rows = 0;
    float* attn_partial = nullptr;
    int32_t *d_tok = nullptr, *d_pos = nullptr;
    uint32_t* d_step = nullptr;
    // pinned host
    int32_t *h_tok = nullptr, *h_pos = nullptr, *h_ids = nullptr;
    uint32_t* h_step = nullptr;
    float* h_logits = nullptr;
    MoeScratch moe;
    GemmScratch gemm;

    cudaGraph_t graph = nullptr;
    cudaGraphExec_t graph_exec = nullptr;

    explicit Impl(const Model& m) : model(m) {}
};

namespace {

const float* upload_f32(DeviceContext& ctx, StagingRing& ring, Progress& pr, const GgufTensorInfo* t) {
    if (!t) return nullptr;
    if (t->type != GgmlType::F32) fail("tensor '{}' must be F32 for the GPU engine (is {})", t->name, type_display_name(t->type));
    void* d = ctx.alloc().alloc(t->n_bytes, "tensor " + t->name);
    ring.upload(d, t->data, t->n_bytes);
    pr.add(t->n_bytes);
    return static_cast<const float*>(d);
}

DWeight upload_matrix(DeviceContext& ctx, StagingRing& ring, Progress& pr, const GgufTensorInfo& t) {
    if (!supported_weight_type(t.type))
        fail("tensor '{}' has type {}, which the GPU engine does not support (F32, F16, BF16, Q8_0, Q4_0, MXFP4, Q4_K, Q5_K, "
             "Q6_K, IQ4_XS)",
             t.name, type_display_name(t.type));
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

}  // namespace

GpuSession::GpuSession(const Model& model, const SessionOptions& so, const GpuOptions& go)
    : m_(std::make_unique<Impl>(model)) {
    Impl& m = *m_;
    m.hp = model.hp();
    m.cfg = model.config();
    const ModelHparams& hp = m.hp;
    if (so.n_ctx <= 0) fail("context length must be positive (got {})", so.n_ctx);
    if (so.n_ubatch <= 0) fail("ubatch size must be positive (got {})", so.n_ubatch);
    if (hp.head_dim_v != hp.head_dim) fail("the GPU engine needs key and value heads of one size ({} vs {})", hp.head_dim, hp.head_dim_v);
    n_ctx_ = hp.n_ctx_train > 0 ? std::min(so.n_ctx, hp.n_ctx_train) : so.n_ctx;
    m.n_ubatch = std::min(so.n_ubatch, n_ctx_);
    m.use_graphs = go.graphs;
    m.E = hp.n_embd;
    m.nq = hp.n_head * hp.head_dim;
    m.nk = hp.n_head_kv * hp.head_dim;
    m.nv = hp.n_head_kv * hp.head_dim_v;
    m.no = hp.n_head * hp.head_dim_v;
    m.X = hp.n_expert;
    m.K = hp.n_expert_used;
    m.F = hp.n_ff_exp;
    m.V = model.n_vocab();

    m.rope.n_rot = static_cast<int>(hp.rope_dim);
    m.rope.freq_base = static_cast<float>(hp.rope_freq_base);
    m.rope.n_ctx_orig = static_cast<int>(hp.rope_orig_ctx > 0 ? hp.rope_orig_ctx : hp.n_ctx_train);
    if ((hp.rope_scaling == "yarn" || hp.rope_scaling == "linear") && hp.rope_scaling_factor > 0)
        m.rope.freq_scale = static_cast<float>(1.0 / hp.rope_scaling_factor);
    m.rope.ext_factor = hp.rope_scaling == "yarn" ? 1.0f : 0.0f;
    m.rope.beta_fast = static_cast<float>(hp.rope_yarn_beta_fast);
    m.rope.beta_slow = static_cast<float>(hp.rope_yarn_beta_slow);

    ctx_ = std::make_unique<DeviceContext>(go.device, go.vram_budget_gib);
    DeviceContext& ctx = *ctx_;

    // ---- weights, through the pinned staging ring
    uint64_t total = model.token_embd().n_bytes + model.output_norm().n_bytes;
    if (&model.output() != &model.token_embd()) total += model.output().n_bytes;
    for (const auto& L : model.layers())
        for (const GgufTensorInfo* t : {L.attn_norm, L.wq, L.bq, L.wk, L.bk, L.wv, L.bv, L.wo, L.bo, L.q_norm, L.k_norm,
                                        L.sinks, L.ffn_norm, L.gate_inp, L.gate_inp_b, L.gate_exps, L.up_exps, L.down_exps,
                                        L.gate_exps_b, L.up_exps_b, L.down_exps_b})
            if (t) total += t->n_bytes;
    Progress pr(go.progress, total);
    {
        StagingRing ring(ctx.copy(), 64ull << 20, 4);
        m.token_embd = upload_matrix(ctx, ring, pr, model.token_embd());
        m.output = &model.output() == &model.token_embd() ? m.token_embd : upload_matrix(ctx, ring, pr, model.output());
        m.output_norm = upload_f32(ctx, ring, pr, &model.output_norm());
        for (const auto& L : model.layers()) {
            Impl::Layer D;
            D.attn_norm = upload_f32(ctx, ring, pr, L.attn_norm);
            D.wq = upload_matrix(ctx, ring, pr, *L.wq);
            D.wk = upload_matrix(ctx, ring, pr, *L.wk);
            D.wv = upload_matrix(ctx, ring, pr, *L.wv);
            D.wo = upload_matrix(ctx, ring, pr, *L.wo);
            D.bq = upload_f32(ctx, ring, pr, L.bq);
            D.bk = upload_f32(ctx, ring, pr, L.bk);
            D.bv = upload_f32(ctx, ring, pr, L.bv);
            D.bo = upload_f32(ctx, ring, pr, L.bo);
            D.q_norm = upload_f32(ctx, ring, pr, L.q_norm);
            D.k_norm = upload_f32(ctx, ring, pr, L.k_norm);
            D.sinks = upload_f32(ctx, ring, pr, L.sinks);
            D.ffn_norm = upload_f32(ctx, ring, pr, L.ffn_norm);
            D.gate_inp = upload_matrix(ctx, ring, pr, *L.gate_inp);
            D.gate_inp_b = upload_f32(ctx, ring, pr, L.gate_inp_b);
            // Experts: a slot pool; in GPU-all slot s holds expert s.
            auto pool = [&](const GgufTensorInfo& t, size_t& stride) {
                DWeight w = upload_matrix(ctx, ring, pr, t);
                stride = w.row_bytes * static_cast<size_t>(t.ne[1]);
                return w;
            };
            D.ex.gate = pool(*L.gate_exps, D.ex.gate_stride);
            D.ex.up = pool(*L.up_exps, D.ex.up_stride);
            D.ex.down = pool(*L.down_exps, D.ex.down_stride);
            D.ex.gate_b = upload_f32(ctx, ring, pr, L.gate_exps_b);
            D.ex.up_b = upload_f32(ctx, ring, pr, L.up_exps_b);
            D.ex.down_b = upload_f32(ctx, ring, pr, L.down_exps_b);
            D.ex.n_expert = m.X;
            D.ex.oai_act = m.cfg.act == FfnAct::SwigluOai;
            m.layers.push_back(std::move(D));
        }
        ring.finish();
    }

    // ---- slot tables, KV cache, router outputs
    const int64_t ub = m.n_ubatch;
    std::vector<int32_t> identity(static_cast<size_t>(m.X));
    for (int64_t e = 0; e < m.X; ++e) identity[static_cast<size_t>(e)] = static_cast<int32_t>(e);
    for (size_t il = 0; il < m.layers.size(); ++il) {
        Impl::Layer& D = m.layers[il];
        D.d_slot_of = ctx.alloc_n<int32_t>(static_cast<size_t>(m.X), fmt::format("slot table of layer {}", il));
        D.ex.slot_of = D.d_slot_of;
        set_slot_table(static_cast<int>(il), identity);
        D.window = model.layers()[il].swa ? hp.sliding_window : 0;
        D.capacity = D.window > 0 ? std::min(n_ctx_, D.window + ub - 1) : n_ctx_;
        D.kc = ctx.alloc_n<uint16_t>(static_cast<size_t>(D.capacity * m.nk), fmt::format("K cache of layer {}", il));
        D.vc = ctx.alloc_n<uint16_t>(static_cast<size_t>(D.capacity * m.nv), fmt::format("V cache of layer {}", il));
        const int64_t keys = D.window > 0 ? std::min(D.window, n_ctx_) : n_ctx_;
        D.n_split_decode = static_cast<int>(std::clamp<int64_t>((keys + 255) / 256, 1, 32));
        const size_t rbytes = static_cast<size_t>(m.E) * 4 + static_cast<size_t>(m.K) * 8 + 64;
        void* dev = nullptr;
        auto* host = static_cast<uint8_t*>(ctx.host_mapped(rbytes, &dev));
        auto* devb = static_cast<uint8_t*>(dev);
        D.rh_h = reinterpret_cast<float*>(host);
        D.rd_h = reinterpret_cast<float*>(devb);
        D.rh_ids = reinterpret_cast<int32_t*>(host + m.E * 4);
        D.rd_ids = reinterpret_cast<int32_t*>(devb + m.E * 4);
        D.rh_w = reinterpret_cast<float*>(host + m.E * 4 + m.K * 4);
        D.rd_w = reinterpret_cast<float*>(devb + m.E * 4 + m.K * 4);
        D.rh_ready = reinterpret_cast<uint32_t*>(host + m.E * 4 + m.K * 8);
        D.rd_ready = reinterpret_cast<uint32_t*>(devb + m.E * 4 + m.K * 8);
    }

    // ---- activations and scratch (sized once for n_ubatch tokens)
    auto A = [&](int64_t n, const char* what) { return ctx.alloc_n<float>(static_cast<size_t>(n), what); };
    m.x = A(ub * m.E, "hidden state");
    m.h = A(ub * std::max(m.E, m.no), "normed hidden state");
    m.q = A(ub * m.nq, "q");
    m.k = A(ub * m.nk, "k");
    m.v = A(ub * m.nv, "v");
    m.attn = A(ub * m.no, "attention output");
    m.router = A(ub * m.X, "router logits");
    m.d_ids = ctx.alloc_n<int32_t>(static_cast<size_t>(ub * m.K), "expert ids");
    m.d_w = A(ub * m.K, "expert weights");
    m.logits = A(m.V, "logits");
    m.logits_rows = 1;
    int max_split = 1;
    for (const auto& D : m.layers) max_split = std::max(max_split, D.n_split_decode);
    m.attn_partial = A(static_cast<int64_t>(attention_partial_floats(1, hp.n_head, hp.head_dim, max_split)) + 1,
                       "attention partials");
    m.d_tok = ctx.alloc_n<int32_t>(static_cast<size_t>(ub), "token ids");
    m.d_pos = ctx.alloc_n<int32_t>(1, "position");
    m.d_step = ctx.alloc_n<uint32_t>(1, "step counter");
    const int64_t R = ub * m.K;
    m.moe.act = A(R * m.F, "expert activations");
    m.moe.down = A(R * m.E, "expert outputs");
    if (ub > kGemvMaxTokens) {
        m.moe.gate = A(R * m.F, "expert gate outputs");
        m.moe.up = A(R * m.F, "expert up outputs");
        m.moe.group_tok = ctx.alloc_n<int32_t>(static_cast<size_t>(R), "expert grouping");
        m.moe.row_of = ctx.alloc_n<int32_t>(static_cast<size_t>(R), "expert grouping");
        m.moe.group_exp = ctx.alloc_n<int32_t>(static_cast<size_t>(R), "expert grouping");
        int64_t max_ne0 = std::max({m.E, m.no, m.F});
        m.gemm.act_elems = static_cast<size_t>(std::max(R * m.E, ub * max_ne0));
        m.gemm.act = ctx.alloc_n<uint16_t>(m.gemm.act_elems, "f16 activations (prefill)");
        m.gemm.w_elems = static_cast<size_t>(std::max<int64_t>(32ll << 20, m.F * m.E));
        m.gemm.w = ctx.alloc_n<uint16_t>(m.gemm.w_elems, "f16 weight scratch (prefill)");
        m.gemm.cublas = ctx.cublas();
        m.moe.gemm = m.gemm;
    }
    void* dummy = nullptr;
    const size_t pin_ints = static_cast<size_t>(ub) + 2 + static_cast<size_t>(R) + 3 * static_cast<size_t>(R);
    auto* pin = static_cast<int32_t*>(ctx.host_mapped(pin_ints * 4 + static_cast<size_t>(m.V) * 4, &dummy));
    m.h_tok = pin;
    m.h_pos = pin + ub;
    m.h_step = reinterpret_cast<uint32_t*>(pin + ub + 1);
    m.h_ids = pin + ub + 2;
    m.moe.host_idx = pin + ub + 2 + R;
    m.h_logits = reinterpret_cast<float*>(pin + pin_ints);
    NITRO_CUDA_CHECK(cudaStreamSynchronize(ctx.compute()));
}

GpuSession::~GpuSession() {
    if (m_ && m_->graph_exec) cudaGraphExecDestroy(m_->graph_exec);
    if (m_ && m_->graph) cudaGraphDestroy(m_->graph);
}

void GpuSession::truncate(int64_t n) {
    if (n < 0 || n > n_past_) fail("cannot truncate a session of {} tokens to {}", n_past_, n);
    n_past_ = n;
}

uint64_t GpuSession::vram_used() const { return ctx_->alloc().used(); }
uint64_t GpuSession::vram_budget() const { return ctx_->alloc().budget(); }

std::string GpuSession::describe() const {
    return fmt::format("gpu: {}, {:.2f} GiB in use{}", ctx_->describe(), vram_used() / kGiB,
                       launches_per_token_ > 0 ? fmt::format(", {} launches per decode step (CUDA graph)", launches_per_token_)
                                               : std::string());
}

RouterHostView GpuSession::router_host(int layer) const {
    const auto& D = m_->layers.at(static_cast<size_t>(layer));
    return {D.rh_h, D.rh_ids, D.rh_w, D.rh_ready};
}

void GpuSession::set_slot_table(int layer, std::span<const int32_t> slot_of) {
    Impl& m = *m_;
    auto& D = m.layers.at(static_cast<size_t>(layer));
    if (static_cast<int64_t>(slot_of.size()) != m.X) fail("slot table of layer {} needs {} entries, got {}", layer, m.X, slot_of.size());
    for (int32_t s : slot_of)
        if (s >= m.X) fail("slot {} does not exist (the pool of layer {} has {} slots)", s, layer, m.X);
    D.h_slot_of.assign(slot_of.begin(), slot_of.end());
    NITRO_CUDA_CHECK(cudaMemcpyAsync(D.d_slot_of, D.h_slot_of.data(), slot_of.size() * 4, cudaMemcpyHostToDevice, ctx_->compute()));
    NITRO_CUDA_CHECK(cudaStreamSynchronize(ctx_->compute()));
}

void GpuSession::set_moe_partial(int layer, const float* device_partial) {
    m_->layers.at(static_cast<size_t>(layer)).partial = device_partial;
    // a captured graph has the old pointer baked in
    if (m_->graph_exec) {
        cudaGraphExecDestroy(m_->graph_exec);
        cudaGraphDestroy(m_->graph);
        m_->graph_exec = nullptr;
        m_->graph = nullptr;
    }
}

namespace {

/// The forward pass of n tokens whose ids and position are already in d_tok / d_pos.
/// Enqueued on the compute stream only (so it can be captured), except the prefill MoE, which
/// reads the router's ids on the host.
void enqueue_forward(GpuSession::Impl& m, cudaStream_t s, int64_t n, bool all_logits, bool want_logits, bool single) {
    const ModelHparams& hp = m.hp;
    const float eps = static_cast<float>(hp.rms_eps);
    const int64_t E = m.E;
    const GemmScratch* gs = m.gemm.cublas ? &m.gemm : nullptr;
    get_rows(s, m.token_embd, m.d_tok, n, m.x);
    for (size_t il = 0; il < m.layers.size(); ++il) {
        auto& D = m.layers[il];
        // attention block
        rms_norm(s, m.x, D.attn_norm, n, E, E, eps, m.h, E);
        matmul(s, D.wq, m.h, n, E, m.q, m.nq, D.bq, false, gs);
        matmul(s, D.wk, m.h, n, E, m.k, m.nk, D.bk, false, gs);
        matmul(s, D.wv, m.h, n, E, m.v, m.nv, D.bv, false, gs);
        if (D.q_norm) {
            rms_norm(s, m.q, D.q_norm, n * hp.n_head, hp.head_dim, hp.head_dim, eps, m.q, hp.head_dim);
            rms_norm(s, m.k, D.k_norm, n * hp.n_head_kv, hp.head_dim, hp.head_dim, eps, m.k, hp.head_dim);
        }
        rope_neox(s, m.q, n, hp.n_head, hp.head_dim, m.nq, m.rope, m.d_pos);
        rope_neox(s, m.k, n, hp.n_head_kv, hp.head_dim, m.nk, m.rope, m.d_pos);
        kv_store(s, m.k, m.v, n, m.nk, m.nv, D.kc, D.vc, D.capacity, m.d_pos);
        AttnArgs a;
        a.q = m.q;
        a.k_cache = D.kc;
        a.v_cache = D.vc;
        a.capacity = D.capacity;
        a.n_q = n;
        a.n_head = hp.n_head;
        a.n_head_kv = hp.n_head_kv;
        a.head_dim = hp.head_dim;
        a.window = D.window;
        a.sinks = D.sinks;
        a.scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
        a.pos0 = m.d_pos;
        a.n_split = n == 1 ? D.n_split_decode : 1;
        a.partial = m.attn_partial;
        a.out = m.attn;
        attention(s, a);
        matmul(s, D.wo, m.attn, n, m.no, m.x, E, D.bo, true, gs);  // x += attn W_o + b_o
        // MoE block
        rms_norm(s, m.x, D.ffn_norm, n, E, E, eps, m.h, E, single ? D.rd_h : nullptr);
        matmul(s, D.gate_inp, m.h, n, E, m.router, m.X, nullptr, false, gs);
        RouterHostOut ho{D.rd_ids, D.rd_w, D.rd_ready, m.d_step};
        top_k_route(s, m.router, D.gate_inp_b, n, m.X, static_cast<int>(m.K), m.cfg.gating == MoeGating::SoftmaxAll,
                    m.d_ids, m.d_w, single ? &ho : nullptr);
        const int32_t* host_ids = nullptr;
        if (n > kGemvMaxTokens) {
            NITRO_CUDA_CHECK(cudaMemcpyAsync(m.h_ids, m.d_ids, static_cast<size_t>(n * m.K) * 4, cudaMemcpyDeviceToHost, s));
            NITRO_CUDA_CHECK(cudaStreamSynchronize(s));
            host_ids = m.h_ids;
        }
        moe_ffn(s, D.ex, m.h, n, E, static_cast<int>(m.K), m.d_ids, m.d_w, host_ids, D.h_slot_of.data(), D.partial, m.x, m.moe);
    }
    if (want_logits) {
        const int64_t first = all_logits ? 0 : n - 1;
        const int64_t n_out = n - first;
        rms_norm(s, m.x + first * E, m.output_norm, n_out, E, E, eps, m.h, E);
        matmul(s, m.output, m.h, n_out, E, m.logits, m.V, nullptr, false, gs);
    }
}

}  // namespace

void GpuSession::eval(std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits) {
    Impl& m = *m_;
    const int64_t n = static_cast<int64_t>(tokens.size());
    if (n == 0) fail("eval: no tokens");
    if (n_past_ + n > n_ctx_)
        fail("the prompt and generated tokens need {} positions but the context holds {} (n_ctx)", n_past_ + n, n_ctx_);
    for (int32_t t : tokens)
        if (t < 0 || t >= m.V) fail("token id {} is out of range (vocabulary has {} tokens)", t, m.V);
    const int64_t V = m.V;
    logits.resize(static_cast<size_t>((all_logits ? n : 1) * V));
    cudaStream_t s = ctx_->compute();
    if (all_logits && m.logits_rows < m.n_ubatch) {
        ctx_->alloc().free(m.logits);
        m.logits = ctx_->alloc_n<float>(static_cast<size_t>(m.n_ubatch * V), "logits of a prompt chunk");
        m.logits_rows = m.n_ubatch;
        if (m.graph_exec) {  // the captured decode step wrote the old logits buffer
            cudaGraphExecDestroy(m.graph_exec);
            cudaGraphDestroy(m.graph);
            m.graph_exec = nullptr;
            m.graph = nullptr;
        }
    }

    for (int64_t i = 0; i < n; i += m.n_ubatch) {
        const int64_t k = std::min(m.n_ubatch, n - i);
        const bool last = i + k == n;
        const bool want = all_logits || last;
        std::memcpy(m.h_tok, tokens.data() + i, static_cast<size_t>(k) * 4);
        *m.h_pos = static_cast<int32_t>(n_past_);
        const bool single = k == 1;
        if (single) *m.h_step = ++step_;
        auto body = [&]() {
            NITRO_CUDA_CHECK(cudaMemcpyAsync(m.d_tok, m.h_tok, static_cast<size_t>(k) * 4, cudaMemcpyHostToDevice, s));
            NITRO_CUDA_CHECK(cudaMemcpyAsync(m.d_pos, m.h_pos, 4, cudaMemcpyHostToDevice, s));
            if (single) NITRO_CUDA_CHECK(cudaMemcpyAsync(m.d_step, m.h_step, 4, cudaMemcpyHostToDevice, s));
            enqueue_forward(m, s, k, all_logits, want, single);
        };
        if (single && !all_logits && m.use_graphs) {
            if (!m.graph_exec) {
                NITRO_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
                body();
                NITRO_CUDA_CHECK(cudaMemcpyAsync(m.h_logits, m.logits, static_cast<size_t>(V) * 4, cudaMemcpyDeviceToHost, s));
                NITRO_CUDA_CHECK(cudaStreamEndCapture(s, &m.graph));
                NITRO_CUDA_CHECK(cudaGraphInstantiate(&m.graph_exec, m.graph, 0));
                size_t nn = 0;
                NITRO_CUDA_CHECK(cudaGraphGetNodes(m.graph, nullptr, &nn));
                std::vector<cudaGraphNode_t> nodes(nn);
                NITRO_CUDA_CHECK(cudaGraphGetNodes(m.graph, nodes.data(), &nn));
                int kernels = 0;
                for (auto node : nodes) {
                    cudaGraphNodeType t;
                    NITRO_CUDA_CHECK(cudaGraphNodeGetType(node, &t));
                    kernels += t == cudaGraphNodeTypeKernel;
                }
                launches_per_token_ = kernels;
            }
            NITRO_CUDA_CHECK(cudaGraphLaunch(m.graph_exec, s));
            NITRO_CUDA_CHECK(cudaStreamSynchronize(s));
            std::memcpy(logits.data(), m.h_logits, static_cast<size_t>(V) * 4);
        } else {
            body();
            if (want) {
                const int64_t rows = all_logits ? k : 1;
                float* dst = all_logits ? logits.data() + i * V : logits.data();
                NITRO_CUDA_CHECK(cudaMemcpyAsync(dst, m.logits, static_cast<size_t>(rows * V) * 4, cudaMemcpyDeviceToHost, s));
            }
            NITRO_CUDA_CHECK(cudaStreamSynchronize(s));
        }
        n_past_ += k;
    }
}

void register_engine() {
    set_gpu_engine_factory([](const Model& model, const SessionOptions& so, const GpuOptions& go) -> std::unique_ptr<Engine> {
        return std::make_unique<GpuSession>(model, so, go);
    });
}

}  // namespace nitro::cuda
