#include "runtime/session.h"

#include "core/error.h"
#include "core/fp16.h"
#include "core/text.h"
#include "cpu/cpu_features.h"
#include "cpu/delta_net.h"
#include "cpu/moe.h"
#include "runtime/forward.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <thread>

namespace nitro {

namespace {

using T = TensorId;

const float* f32(const GgufTensorInfo* t) { return t ? reinterpret_cast<const float*>(t->data) : nullptr; }

}  // namespace

const char* phase_name(Phase p) {
    switch (p) {
        case Phase::Embed: return "embedding";
        case Phase::AttnProj: return "attn q/k/v";
        case Phase::Attention: return "attention (KV cache)";
        case Phase::AttnOut: return "attn output";
        case Phase::SsmProj: return "linear attn in";
        case Phase::DeltaNet: return "delta rule";
        case Phase::SsmOut: return "linear attn out";
        case Phase::Router: return "router";
        case Phase::ExpertGateUp: return "expert gate/up";
        case Phase::ExpertDown: return "expert down";
        case Phase::MoeSum: return "expert sum";
        case Phase::SharedExpert: return "shared expert";
        case Phase::DenseFfn: return "dense FFN";
        case Phase::LmHead: return "LM head";
        case Phase::Count: break;
    }
    return "?";
}

/// Per-chunk working memory, sized once for n_ubatch tokens (no allocation on the token path
/// beyond first use).
struct Session::Scratch {
    std::vector<float> x, h, q, k, v, attn, proj;      // [n, *]
    std::vector<float> router;                          // [n, n_expert]
    std::vector<int32_t> sel;                           // [n, n_used] selected experts
    std::vector<float> sel_w;                           // [n, n_used] their weights
    std::vector<float> margin;                          // [n] router margins
    cpu::MoeScratch moe;
    std::vector<float> rope_cache;                      // [n, n_rot]
    cpu::ActBuffer acts, acts2;
    std::vector<cpu::MatmulJob> jobs;
    // Gated attention: [n, 2 nq] projection, split into q and the output gate [n, nq].
    std::vector<float> qg, gate;
    // Gated DeltaNet: q|k|v [n, conv_dim], z [n, value_dim], beta/alpha [n, 2 n_v], beta and log
    // decay [n, n_v], conv output [n, conv_dim], core output [n, value_dim], legacy ssm_in [n, conv_dim + value_dim].
    std::vector<float> ssm_qkv, ssm_z, ssm_ba, ssm_beta, ssm_g, ssm_conv, ssm_core, ssm_tmp;
    // Shared expert: gate and up [n, n_ff_shexp].
    std::vector<float> sh_gate, sh_up;
    std::vector<cpu::ActBuffer> proj_acts;              // project(): one per weight type
    std::vector<GgmlType> proj_types;
};

Session::Session(const Model& model, const SessionOptions& opt)
    : SequenceEngine(make_model_spec(model, opt), opt, SnapshotPolicy::EveryChunk), model_(model) {
    const int threads = opt.n_threads > 0 ? opt.n_threads : std::max(1u, std::thread::hardware_concurrency());
    pool_ = std::make_unique<cpu::ThreadPool>(threads);
    kv_ = std::make_unique<KvCache>(spec_, opt.n_seq);
    if (spec_.has_recurrent()) {
        if (spec_.ssm.d_conv > 64) fail("ssm.conv_kernel = {} is larger than the 64 this engine supports", spec_.ssm.d_conv);
        rs_ = std::make_unique<RecurrentState>(spec_, opt.n_seq);
    }
    s_ = std::make_unique<Scratch>();
    for (const auto& L : model.layers()) experts_.push_back(layer_experts(L, spec_.act));
}

Session::~Session() = default;

void Session::mark(Phase p) {
    const auto now = std::chrono::steady_clock::now();
    phase_s_[static_cast<size_t>(p)] += std::chrono::duration<double>(now - phase_t_).count();
    phase_t_ = now;
}

std::string Session::describe() const {
    std::string d = fmt::format("cpu ({}, {} kernels)", count_noun(pool_->size(), "thread"), cpu::kernel_isa());
    return d + replay_note();
}

uint64_t Session::recurrent_bytes() const { return rs_ ? rs_->bytes() + snapshot_bytes() : 0; }

void Session::state_reset(int seq) { rs_->reset(seq); }
void Session::state_save(int seq, std::vector<float>& out) { rs_->save(seq, out); }
void Session::state_restore(int seq, const std::vector<float>& in) { rs_->restore(seq, in); }

void Session::exec_chunk(const ChunkArgs& c, float* out) {
    logits_out_ = out;
    // The recurrent ops take each sequence's rows as a list of row indices.
    group_seq_.clear();
    group_off_.assign(1, 0);
    if (rs_) {
        for (const SeqGroup& g : c.groups) {
            group_seq_.push_back(g.seq);
            group_off_.push_back(g.off + g.n);
        }
        group_rows_.resize(static_cast<size_t>(c.n));
        std::iota(group_rows_.begin(), group_rows_.end(), 0);
    }
    phase_t_ = std::chrono::steady_clock::now();
    forward_chunk(*this, spec_, c);
}

// ---- the ops of forward_chunk (runtime/forward.h) on the CPU

void Session::embed(const ChunkArgs& c) {
    Scratch& s = *s_;
    const int64_t n = c.n, E = spec_.n_embd;
    s.x.resize(static_cast<size_t>(n * E));
    s.h.resize(static_cast<size_t>(n * E));
    // Token embeddings: rows of token_embd dequantized (ggml_get_rows).
    const GgufTensorInfo& te = model_.token_embd();
    const size_t te_row = row_size(te.type, E);
    for (int64_t i = 0; i < n; ++i) dequantize(te.type, te.data + static_cast<size_t>(c.tokens[static_cast<size_t>(i)]) * te_row, &s.x[i * E], E);
    // RoPE tables for the chunk's positions.
    const int n_rot = spec_.rope.n_rot;
    s.rope_cache.resize(static_cast<size_t>(n * n_rot));
    for (int64_t i = 0; i < n; ++i) cpu::rope_cache(spec_.rope, c.pos_of(i), &s.rope_cache[i * n_rot]);
    mark(Phase::Embed);
}

void Session::norm_rows(const GgufTensorInfo* w, int64_t n) {
    Scratch& s = *s_;
    const int64_t E = spec_.n_embd;
    pool_->parallel_for(n, 1, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) cpu::rms_norm(&s.x[i * E], f32(w), E, spec_.rms_eps, &s.h[i * E]);
    });
}

void Session::attn_norm(int il, const ChunkArgs& c) { norm_rows(model_.layers()[static_cast<size_t>(il)][T::attn_norm], c.n); }

void Session::ffn_norm(int il, const ChunkArgs& c) { norm_rows(model_.layers()[static_cast<size_t>(il)][T::ffn_norm], c.n); }

void Session::qkv(int il, const ChunkArgs& c) {
    const LayerWeights& L = model_.layers()[static_cast<size_t>(il)];
    Scratch& s = *s_;
    const int64_t n = c.n, E = spec_.n_embd, nq = spec_.n_q(), nk = spec_.n_k(), nv = spec_.n_v();
    // q, k, v projections in one parallel region (they share the quantized input when the
    // weight types agree, which they do in practice; otherwise quantize per type).
    // Gated attention: W_q gives [q, gate] per head; split below.
    const int64_t nq_w = spec_.attn_gate ? 2 * nq : nq;
    s.q.resize(static_cast<size_t>(n * nq));
    if (spec_.attn_gate) s.qg.resize(static_cast<size_t>(n * nq_w));
    float* qout = spec_.attn_gate ? s.qg.data() : s.q.data();
    s.k.resize(static_cast<size_t>(n * nk));
    s.v.resize(static_cast<size_t>(n * nv));
    cpu::quantize_acts(*pool_, s.h.data(), n, E, L[T::attn_q]->type, s.acts);
    const bool same = L[T::attn_k]->type == L[T::attn_q]->type && L[T::attn_v]->type == L[T::attn_q]->type;
    if (!same) cpu::quantize_acts(*pool_, s.h.data(), n, E, L[T::attn_k]->type, s.acts2);
    s.jobs.clear();
    s.jobs.push_back({cpu::weight_view(*L[T::attn_q]), &s.acts, nullptr, n, qout, nq_w});
    s.jobs.push_back({cpu::weight_view(*L[T::attn_k]), same ? &s.acts : &s.acts2, nullptr, n, s.k.data(), nk});
    if (!same) {
        cpu::matmul_batch(*pool_, s.jobs);
        cpu::quantize_acts(*pool_, s.h.data(), n, E, L[T::attn_v]->type, s.acts2);
        s.jobs.clear();
    }
    s.jobs.push_back({cpu::weight_view(*L[T::attn_v]), same ? &s.acts : &s.acts2, nullptr, n, s.v.data(), nv});
    cpu::matmul_batch(*pool_, s.jobs);
    if (spec_.attn_gate) {
        // llama.cpp qwen3next build_layer_attn: views [head_dim, n_head] at offsets 0 (q) and head_dim (gate).
        const int64_t hd = spec_.head_dim;
        s.gate.resize(static_cast<size_t>(n * nq));
        for (int64_t i = 0; i < n; ++i)
            for (int64_t h = 0; h < spec_.n_head; ++h) {
                const float* src = &s.qg[i * nq_w + h * 2 * hd];
                std::copy(src, src + hd, &s.q[i * nq + h * hd]);
                std::copy(src + hd, src + 2 * hd, &s.gate[i * nq + h * hd]);
            }
    }
}

void Session::rope_kv_store(int il, const ChunkArgs& c) {
    const LayerWeights& L = model_.layers()[static_cast<size_t>(il)];
    Scratch& s = *s_;
    const int64_t hd = spec_.head_dim, nq = spec_.n_q(), nk = spec_.n_k(), nv = spec_.n_v();
    const int n_rot = spec_.rope.n_rot;
    const float eps = spec_.rms_eps;
    // Per token: biases, q/k norm, RoPE, append K and V to the cache in F16 (tokens independent).
    pool_->parallel_for(c.n, 1, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) {
            float* q = &s.q[i * nq];
            float* k = &s.k[i * nk];
            float* v = &s.v[i * nv];
            if (L[T::attn_q_bias]) cpu::add(q, f32(L[T::attn_q_bias]), nq);
            if (L[T::attn_k_bias]) cpu::add(k, f32(L[T::attn_k_bias]), nk);
            if (L[T::attn_v_bias]) cpu::add(v, f32(L[T::attn_v_bias]), nv);
            if (L[T::attn_q_norm]) {
                for (int64_t h = 0; h < spec_.n_head; ++h) cpu::rms_norm(q + h * hd, f32(L[T::attn_q_norm]), hd, eps, q + h * hd);
                for (int64_t h = 0; h < spec_.n_head_kv; ++h) cpu::rms_norm(k + h * hd, f32(L[T::attn_k_norm]), hd, eps, k + h * hd);
            }
            const float* rc = &s.rope_cache[i * n_rot];
            cpu::rope_neox(q, spec_.n_head, hd, n_rot, rc);
            cpu::rope_neox(k, spec_.n_head_kv, hd, n_rot, rc);
            uint16_t* kc = kv_->k(il, c.seq_of(i), c.pos_of(i));
            uint16_t* vc = kv_->v(il, c.seq_of(i), c.pos_of(i));
            for (int64_t d = 0; d < nk; ++d) kc[d] = f32_to_fp16(k[d]);
            for (int64_t d = 0; d < nv; ++d) vc[d] = f32_to_fp16(v[d]);
        }
    });
    mark(Phase::AttnProj);
}

void Session::attention(int il, const ChunkArgs& c) {
    const LayerWeights& L = model_.layers()[static_cast<size_t>(il)];
    Scratch& s = *s_;
    const int64_t hd = spec_.head_dim, hdv = spec_.head_dim_v, nq = spec_.n_q(), no = spec_.n_o();
    const int64_t n_head = spec_.n_head;
    // One task per (row, head), over the row's own sequence only. Query rounded to F16 like llama.cpp's CPU flash attention (Q is
    // converted to the K cache's type before the dot products); scores, softmax (with the sink
    // logit in the denominator) and the V sum in F32, with the F16 SIMD kernels of src/cpu
    // (cpu::dot_f16, cpu::axpy_f16).
    s.attn.resize(static_cast<size_t>(c.n * no));
    const float scale = spec_.attn_scale;
    const int64_t group = n_head / spec_.n_head_kv;
    const int64_t window = spec_.layers[static_cast<size_t>(il)].window;
    const float* sinks = f32(L[T::attn_sinks]);
    KvCache& kv = *kv_;
    pool_->parallel_for(c.n * n_head, 1, [&](int64_t b, int64_t e, int) {
        thread_local std::vector<float> scores, acc;
        thread_local std::vector<uint16_t> qh;
        qh.resize(static_cast<size_t>(hd));
        acc.resize(static_cast<size_t>(hdv));
        for (int64_t task = b; task < e; ++task) {
            const int64_t i = task / n_head, h = task % n_head, kvh = h / group;
            const int64_t p = c.pos_of(i);
            const int sq = c.seq_of(i);
            const int64_t lo = window > 0 ? std::max<int64_t>(0, p - window + 1) : 0;
            const float* q = &s.q[i * nq + h * hd];
            for (int64_t d = 0; d < hd; ++d) qh[static_cast<size_t>(d)] = f32_to_fp16(q[d]);
            scores.resize(static_cast<size_t>(p - lo + 1));
            float m = sinks ? sinks[h] : -INFINITY;
            for (int64_t j = lo; j <= p; ++j) {
                const float sc = cpu::dot_f16(hd, kv.k(il, sq, j) + kvh * hd, qh.data()) * scale;
                scores[static_cast<size_t>(j - lo)] = sc;
                m = std::max(m, sc);
            }
            double denom = sinks ? std::exp(static_cast<double>(sinks[h] - m)) : 0.0;
            std::fill(acc.begin(), acc.end(), 0.f);
            for (int64_t j = lo; j <= p; ++j) {
                const float w = std::exp(scores[static_cast<size_t>(j - lo)] - m);
                denom += w;
                cpu::axpy_f16(hdv, w, kv.v(il, sq, j) + kvh * hdv, acc.data());
            }
            const float inv = static_cast<float>(1.0 / denom);
            float* out = &s.attn[i * no + h * hdv];
            for (int64_t d = 0; d < hdv; ++d) out[d] = acc[static_cast<size_t>(d)] * inv;
        }
    });
    mark(Phase::Attention);
}

void Session::attn_out(int il, const ChunkArgs& c) {
    const LayerWeights& L = model_.layers()[static_cast<size_t>(il)];
    Scratch& s = *s_;
    const int64_t E = spec_.n_embd;
    // Output projection and residual.
    s.proj.resize(static_cast<size_t>(c.n * E));
    if (spec_.attn_gate) {  // attn *= sigmoid(gate) (head_dim_v == head_dim here, llama.cpp asserts it)
        const int64_t no = spec_.n_o();
        for (int64_t i = 0; i < c.n * no; ++i) s.attn[static_cast<size_t>(i)] *= cpu::sigmoid(s.gate[static_cast<size_t>(i)]);
    }
    cpu::quantize_acts(*pool_, s.attn.data(), c.n, spec_.n_o(), L[T::attn_output]->type, s.acts);
    cpu::matmul(*pool_, cpu::weight_view(*L[T::attn_output]), s.acts, s.proj.data());
    for (int64_t i = 0; i < c.n; ++i) {
        float* o = &s.proj[i * E];
        if (L[T::attn_output_bias]) cpu::add(o, f32(L[T::attn_output_bias]), E);
        cpu::add(&s.x[i * E], o, E);
    }
    mark(Phase::AttnOut);
}

void Session::route(int il, const ChunkArgs& c) {
    const LayerWeights& L = model_.layers()[static_cast<size_t>(il)];
    Scratch& s = *s_;
    const int64_t n = c.n, E = spec_.n_embd, X = spec_.n_expert, K = spec_.n_expert_used;
    // Router (llama.cpp build_moe_ffn): logits, expert selection and weights per token.
    s.router.resize(static_cast<size_t>(n * X));
    cpu::quantize_acts(*pool_, s.h.data(), n, E, L[T::ffn_gate_inp]->type, s.acts);
    cpu::matmul(*pool_, cpu::weight_view(*L[T::ffn_gate_inp]), s.acts, s.router.data());
    if (replaying()) replay_logits(il, s.router.data());  // benchmark-only: the trace's choices, through the same top-k below
    s.sel.resize(static_cast<size_t>(n * K));
    s.sel_w.resize(static_cast<size_t>(n * K));
    s.margin.resize(static_cast<size_t>(n));
    RouteArgs ra;
    ra.logits = s.router.data();
    ra.logit_bias = f32(L[T::ffn_gate_inp_bias]);
    ra.score_bias = f32(L[T::ffn_exp_probs_b]);
    ra.n = n;
    ra.n_expert = X;
    ra.k = static_cast<int>(K);
    ra.gating = spec_.gating;
    ra.ids = s.sel.data();
    ra.weights = s.sel_w.data();
    ra.margin = s.margin.data();
    cpu::route(ra);
    if (has_route_callback())
        for (int64_t i = 0; i < n; ++i)
            route_event(RouteEvent{c.pos_of(i), il, c.prefill_of(i),
                                std::span<const int32_t>(&s.sel[i * K], static_cast<size_t>(K)),
                                std::span<const float>(&s.sel_w[i * K], static_cast<size_t>(K)), s.margin[i], c.seq_of(i)});
    mark(Phase::Router);
}

void Session::moe(int il, const ChunkArgs& c) {
    Scratch& s = *s_;
    const int64_t E = spec_.n_embd;
    // The routed experts (every selected expert is resident here, on the CPU), then the residual.
    s.proj.resize(static_cast<size_t>(c.n * E));
    const cpu::MoeStats st = cpu::moe_ffn(*pool_, experts_[static_cast<size_t>(il)], s.h.data(), c.n,
                                          static_cast<int>(spec_.n_expert_used), s.sel.data(), s.sel_w.data(), nullptr,
                                          s.proj.data(), s.moe);
    for (int64_t i = 0; i < c.n; ++i) cpu::add(&s.x[i * E], &s.proj[i * E], E);
    moe_work_.experts += static_cast<uint64_t>(st.experts);
    moe_work_.rows += static_cast<uint64_t>(st.rows);
    moe_work_.bytes += st.bytes;
    mark(Phase::MoeSum);
    // moe_ffn timed its own parts: move them from the sum to their phases.
    phase_s_[static_cast<size_t>(Phase::ExpertGateUp)] += st.gate_up_s;
    phase_s_[static_cast<size_t>(Phase::ExpertDown)] += st.down_s;
    phase_s_[static_cast<size_t>(Phase::MoeSum)] -= st.gate_up_s + st.down_s;
}

void Session::project(const float* x, int64_t n, int64_t ne0, std::span<const Proj> ps) {
    Scratch& s = *s_;
    s.proj_types.clear();
    s.jobs.clear();
    if (s.proj_acts.size() < ps.size()) s.proj_acts.resize(ps.size());
    for (const Proj& p : ps) {
        size_t k = 0;
        while (k < s.proj_types.size() && s.proj_types[k] != p.w->type) ++k;
        if (k == s.proj_types.size()) {
            s.proj_types.push_back(p.w->type);
            cpu::quantize_acts(*pool_, x, n, ne0, p.w->type, s.proj_acts[k]);
        }
        s.jobs.push_back({cpu::weight_view(*p.w), &s.proj_acts[k], nullptr, n, p.out, p.w->ne[1]});
    }
    cpu::matmul_batch(*pool_, s.jobs);
}

// ---- Gated DeltaNet (llama.cpp src/models/qwen3next.cpp build_layer_attn_linear)

void Session::ssm_in(int il, const ChunkArgs& c) {
    const LayerWeights& L = model_.layers()[static_cast<size_t>(il)];
    Scratch& s = *s_;
    const SsmSpec& ss = spec_.ssm;
    const int64_t n = c.n, E = spec_.n_embd, cd = ss.conv_dim(), vd = ss.value_dim(), nv = ss.n_v_heads;
    const int64_t kd = ss.key_dim(), hd = ss.head_dim, nk = ss.n_k_heads, r = nv / nk;
    s.ssm_qkv.resize(static_cast<size_t>(n * cd));
    s.ssm_z.resize(static_cast<size_t>(n * vd));
    s.ssm_ba.resize(static_cast<size_t>(n * 2 * nv));
    // beta/alpha: one ssm_ba ([b x r, a x r] per key head, [n, 2 n_v]) or ssm_beta and ssm_alpha
    // (qwen35moe: [n, n_v] each, stored one after the other).
    std::vector<Proj> ps;
    if (L[T::ssm_ba]) ps.push_back({L[T::ssm_ba], s.ssm_ba.data()});
    else ps.insert(ps.end(), {{L[T::ssm_beta], s.ssm_ba.data()}, {L[T::ssm_alpha], s.ssm_ba.data() + n * nv}});
    if (L[T::attn_qkv] && L[T::attn_gate]) {
        ps.insert(ps.end(), {{L[T::attn_qkv], s.ssm_qkv.data()}, {L[T::attn_gate], s.ssm_z.data()}});
        project(s.h.data(), n, E, ps);
    } else {
        // Older files: ssm_in holds [q (hd), k (hd), v (r hd), z (r hd)] per key head; regroup it
        // as q of all key heads, k of all key heads, v of all value heads, and z (build_qkvz's legacy path).
        s.ssm_tmp.resize(static_cast<size_t>(n * (cd + vd)));
        ps.push_back({L[T::ssm_in], s.ssm_tmp.data()});
        project(s.h.data(), n, E, ps);
        const int64_t grp = 2 * hd + 2 * r * hd;
        for (int64_t i = 0; i < n; ++i)
            for (int64_t g = 0; g < nk; ++g) {
                const float* src = &s.ssm_tmp[i * (cd + vd) + g * grp];
                float* qkv = &s.ssm_qkv[i * cd];
                std::copy(src, src + hd, qkv + g * hd);
                std::copy(src + hd, src + 2 * hd, qkv + kd + g * hd);
                std::copy(src + 2 * hd, src + 2 * hd + r * hd, qkv + 2 * kd + g * r * hd);
                std::copy(src + 2 * hd + r * hd, src + grp, &s.ssm_z[i * vd + g * r * hd]);
            }
    }
    // beta = sigmoid(b), log decay g = softplus(a + dt_bias) * A, A = -exp(A_log); ssm_ba holds
    // [b x r, a x r] per key head (value head h = key head * r + j).
    s.ssm_beta.resize(static_cast<size_t>(n * nv));
    s.ssm_g.resize(static_cast<size_t>(n * nv));
    const float* dt = f32(L[T::ssm_dt]);
    const float* A = f32(L[T::ssm_a]);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t h = 0; h < nv; ++h) {
            float b, a;
            if (L[T::ssm_ba]) {
                const float* ba = &s.ssm_ba[i * 2 * nv + (h / r) * 2 * r];
                b = ba[h % r];
                a = ba[r + h % r];
            } else {
                b = s.ssm_ba[i * nv + h];
                a = s.ssm_ba[n * nv + i * nv + h];
            }
            s.ssm_beta[i * nv + h] = cpu::sigmoid(b);
            s.ssm_g[i * nv + h] = cpu::softplus(a + dt[h]) * A[h];
        }
    mark(Phase::SsmProj);
}

void Session::ssm_conv(int il, const ChunkArgs& c) {
    const LayerWeights& L = model_.layers()[static_cast<size_t>(il)];
    Scratch& s = *s_;
    const int64_t cd = spec_.ssm.conv_dim();
    s.ssm_conv.resize(static_cast<size_t>(c.n * cd));
    // Tasks: (sequence group, block of 64 channels); each runs its rows in order.
    constexpr int64_t kBlock = 64;
    const int64_t n_blocks = (cd + kBlock - 1) / kBlock;
    const int64_t n_groups = static_cast<int64_t>(group_seq_.size());
    pool_->parallel_for(n_groups * n_blocks, 1, [&](int64_t b, int64_t e, int) {
        for (int64_t task = b; task < e; ++task) {
            const int64_t g = task / n_blocks, blk = task % n_blocks;
            cpu::ConvArgs a;
            a.x = s.ssm_qkv.data();
            a.x_stride = cd;
            a.rows = &group_rows_[static_cast<size_t>(group_off_[static_cast<size_t>(g)])];
            a.n = group_off_[static_cast<size_t>(g) + 1] - group_off_[static_cast<size_t>(g)];
            a.w = f32(L[T::ssm_conv1d]);
            a.d_conv = spec_.ssm.d_conv;
            a.state = rs_->conv(il, group_seq_[static_cast<size_t>(g)]);
            a.out = s.ssm_conv.data();
            a.out_stride = cd;
            cpu::ssm_conv_silu(a, blk * kBlock, std::min(cd, (blk + 1) * kBlock));
        }
    });
    mark(Phase::DeltaNet);
}

void Session::delta_net(int il, const ChunkArgs& c) {
    Scratch& s = *s_;
    const SsmSpec& ss = spec_.ssm;
    const int64_t cd = ss.conv_dim(), kd = ss.key_dim(), vd = ss.value_dim(), hd = ss.head_dim, nk = ss.n_k_heads,
                  nv = ss.n_v_heads;
    const float eps = spec_.rms_eps;
    // q, k = l2_norm per key head (ggml_l2_norm with the model's RMS eps, as llama.cpp).
    pool_->parallel_for(c.n, 1, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i)
            for (int64_t h = 0; h < 2 * nk; ++h) cpu::l2_norm(&s.ssm_conv[i * cd + h * hd], hd, eps);
    });
    s.ssm_core.resize(static_cast<size_t>(c.n * vd));
    const int64_t n_groups = static_cast<int64_t>(group_seq_.size());
    pool_->parallel_for(n_groups * nv, 1, [&](int64_t b, int64_t e, int) {
        thread_local cpu::DeltaScratch scratch;
        for (int64_t task = b; task < e; ++task) {
            const int64_t g = task / nv, h = task % nv, kh = ss.k_head(h);
            cpu::DeltaHeadArgs a;
            a.q = s.ssm_conv.data() + kh * hd;
            a.k = s.ssm_conv.data() + kd + kh * hd;
            a.v = s.ssm_conv.data() + 2 * kd + h * hd;
            a.q_stride = a.k_stride = a.v_stride = cd;
            a.g = s.ssm_g.data() + h;
            a.beta = s.ssm_beta.data() + h;
            a.gb_stride = nv;
            a.rows = &group_rows_[static_cast<size_t>(group_off_[static_cast<size_t>(g)])];
            a.n = group_off_[static_cast<size_t>(g) + 1] - group_off_[static_cast<size_t>(g)];
            a.d = hd;
            a.M = rs_->delta(il, group_seq_[static_cast<size_t>(g)]) + h * hd * hd;
            a.out = s.ssm_core.data() + h * hd;
            a.out_stride = vd;
            // Decode steps run the recurrence; a prompt's rows run the chunked form.
            if (a.n == 1) cpu::gated_delta_rule_steps(a);
            else cpu::gated_delta_rule_chunked(a, scratch);
        }
    });
    mark(Phase::DeltaNet);
}

void Session::ssm_out(int il, const ChunkArgs& c) {
    const LayerWeights& L = model_.layers()[static_cast<size_t>(il)];
    Scratch& s = *s_;
    const SsmSpec& ss = spec_.ssm;
    const int64_t E = spec_.n_embd, vd = ss.value_dim(), hd = ss.head_dim, nv = ss.n_v_heads;
    // Gated RMSNorm per value head: rms_norm(o) * ssm_norm * silu(z) (build_norm_gated).
    const float* w = f32(L[T::ssm_norm]);
    pool_->parallel_for(c.n, 1, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i)
            for (int64_t h = 0; h < nv; ++h) {
                float* o = &s.ssm_core[i * vd + h * hd];
                const float* z = &s.ssm_z[i * vd + h * hd];
                cpu::rms_norm(o, w, hd, spec_.rms_eps, o);
                for (int64_t d = 0; d < hd; ++d) o[d] *= cpu::silu(z[d]);
            }
    });
    s.proj.resize(static_cast<size_t>(c.n * E));
    const Proj ps[] = {{L[T::ssm_out], s.proj.data()}};
    project(s.ssm_core.data(), c.n, vd, ps);
    for (int64_t i = 0; i < c.n; ++i) cpu::add(&s.x[i * E], &s.proj[i * E], E);
    mark(Phase::SsmOut);
}

void Session::swiglu_ffn(const GgufTensorInfo* gate, const GgufTensorInfo* up, const GgufTensorInfo* down, int64_t n, int64_t F,
                         float* out) {
    Scratch& s = *s_;
    s.sh_gate.resize(static_cast<size_t>(n * F));
    s.sh_up.resize(static_cast<size_t>(n * F));
    const Proj gu[] = {{gate, s.sh_gate.data()}, {up, s.sh_up.data()}};
    project(s.h.data(), n, spec_.n_embd, gu);
    cpu::swiglu(s.sh_gate.data(), s.sh_up.data(), n * F, s.sh_gate.data());
    const Proj dn[] = {{down, out}};
    project(s.sh_gate.data(), n, F, dn);
}

void Session::ffn_dense(int il, const ChunkArgs& c) {
    const LayerWeights& L = model_.layers()[static_cast<size_t>(il)];
    Scratch& s = *s_;
    const int64_t E = spec_.n_embd;
    // llama.cpp build_ffn(LLM_FFN_SILU, LLM_FFN_PAR): x += down(silu(h W_gate) * h W_up).
    s.proj.resize(static_cast<size_t>(c.n * E));
    swiglu_ffn(L[T::ffn_gate], L[T::ffn_up], L[T::ffn_down], c.n, spec_.n_ff, s.proj.data());
    for (int64_t i = 0; i < c.n; ++i) cpu::add(&s.x[i * E], &s.proj[i * E], E);
    mark(Phase::DenseFfn);
}

void Session::shared_expert(int il, const ChunkArgs& c) {
    const LayerWeights& L = model_.layers()[static_cast<size_t>(il)];
    Scratch& s = *s_;
    const int64_t n = c.n, E = spec_.n_embd, F = spec_.n_ff_shexp;
    // llama.cpp qwen3next build_layer_ffn: ffn_shexp = down(silu(h W_gate) * h W_up), scaled by
    // sigmoid(h . ffn_gate_inp_shexp), added to the routed experts' output.
    s.proj.resize(static_cast<size_t>(n * E));
    swiglu_ffn(L[T::ffn_gate_shexp], L[T::ffn_up_shexp], L[T::ffn_down_shexp], n, F, s.proj.data());
    const float* wg = f32(L[T::ffn_gate_inp_shexp]);
    for (int64_t i = 0; i < n; ++i) {
        const float* h = &s.h[i * E];
        double dot = 0.0;
        for (int64_t d = 0; d < E; ++d) dot += static_cast<double>(h[d]) * wg[d];
        const float gate = cpu::sigmoid(static_cast<float>(dot));
        float* x = &s.x[i * E];
        const float* o = &s.proj[i * E];
        for (int64_t d = 0; d < E; ++d) x[d] += gate * o[d];
    }
    mark(Phase::SharedExpert);
}

void Session::lm_head(const ChunkArgs& c) {
    Scratch& s = *s_;
    const int64_t E = spec_.n_embd;
    // Final norm and LM head, for every row, the last one, or the listed rows (packed in order).
    auto row = [&](int64_t j) {
        if (c.logits == ChunkArgs::Logits::Rows) return c.logit_rows[static_cast<size_t>(j)];
        return c.logits == ChunkArgs::Logits::All ? j : c.n - 1;
    };
    const int64_t n_out = c.logits == ChunkArgs::Logits::Rows ? static_cast<int64_t>(c.logit_rows.size())
                          : c.logits == ChunkArgs::Logits::All ? c.n : 1;
    for (int64_t j = 0; j < n_out; ++j)
        cpu::rms_norm(&s.x[row(j) * E], f32(&model_.output_norm()), E, spec_.rms_eps, &s.h[j * E]);
    cpu::quantize_acts(*pool_, s.h.data(), n_out, E, model_.output().type, s.acts);
    cpu::matmul(*pool_, cpu::weight_view(model_.output()), s.acts, logits_out_);
    mark(Phase::LmHead);
}

}  // namespace nitro
