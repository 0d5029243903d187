#include "runtime/session.h"

#include "core/error.h"
#include "core/fp16.h"
#include "cpu/moe.h"
#include "runtime/forward.h"
#include "runtime/route_replay.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <thread>

namespace nitro {

namespace {

const float* f32(const GgufTensorInfo* t) { return t ? reinterpret_cast<const float*>(t->data) : nullptr; }

}  // namespace

const char* phase_name(Phase p) {
    switch (p) {
        case Phase::Embed: return "embedding";
        case Phase::AttnProj: return "attn q/k/v";
        case Phase::Attention: return "attention (KV cache)";
        case Phase::AttnOut: return "attn output";
        case Phase::Router: return "router";
        case Phase::ExpertGateUp: return "expert gate/up";
        case Phase::ExpertDown: return "expert down";
        case Phase::MoeSum: return "expert sum";
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
};

Session::Session(const Model& model, const SessionOptions& opt)
    : model_(model), spec_(make_model_spec(model, opt)) {
    const int threads = opt.n_threads > 0 ? opt.n_threads : std::max(1u, std::thread::hardware_concurrency());
    pool_ = std::make_unique<cpu::ThreadPool>(threads);
    if (opt.n_seq < 1) fail("the number of sequences must be positive (got {})", opt.n_seq);
    n_past_.assign(static_cast<size_t>(opt.n_seq), 0);
    kv_ = std::make_unique<KvCache>(spec_, opt.n_seq);
    s_ = std::make_unique<Scratch>();
    for (const auto& L : model.layers())
        experts_.push_back({L.gate_exps, L.up_exps, L.down_exps, f32(L.gate_exps_b), f32(L.up_exps_b), f32(L.down_exps_b),
                            spec_.act});
}

Session::~Session() = default;

void Session::mark(Phase p) {
    const auto now = std::chrono::steady_clock::now();
    phase_s_[static_cast<size_t>(p)] += std::chrono::duration<double>(now - phase_t_).count();
    phase_t_ = now;
}

int64_t Session::seq_n_past(int seq) const {
    if (seq < 0 || seq >= n_seq()) fail("sequence {} does not exist (the session holds {})", seq, n_seq());
    return n_past_[static_cast<size_t>(seq)];
}

void Session::seq_truncate(int seq, int64_t n) {
    const int64_t have = seq_n_past(seq);
    if (n < 0 || n > have) fail("cannot truncate sequence {} of {} tokens to {}", seq, have, n);
    n_past_[static_cast<size_t>(seq)] = n;
}

void Session::run_chunk(std::span<const int32_t> seq, std::span<const int64_t> pos, ChunkArgs::Logits lg,
                        std::span<const int64_t> logit_rows) {
    const int64_t n = static_cast<int64_t>(tokens_.size());
    // A row is "prefill" (route events, traces) when its sequence has several rows in the chunk.
    row_prefill_.assign(static_cast<size_t>(n), 0);
    if (n > 1) {
        std::vector<int64_t> rows_of(static_cast<size_t>(n_seq()), 0);
        for (int32_t q : seq) rows_of[static_cast<size_t>(q)]++;
        for (int64_t i = 0; i < n; ++i) row_prefill_[static_cast<size_t>(i)] = rows_of[static_cast<size_t>(seq[static_cast<size_t>(i)])] > 1;
    }
    ChunkArgs c;
    c.n = n;
    c.pos0 = pos[0];
    c.seq = seq;
    c.pos = pos;
    c.logits = lg;
    c.logit_rows = logit_rows;
    phase_t_ = std::chrono::steady_clock::now();
    forward_chunk(*this, spec_, c);
}

void Session::eval(std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits) {
    check_eval(spec_, n_past_[0], tokens);
    const int64_t n = static_cast<int64_t>(tokens.size());
    const int64_t n_vocab = spec_.n_vocab;
    logits.resize(static_cast<size_t>((all_logits ? n : 1) * n_vocab));
    for (int64_t i = 0; i < n; i += spec_.n_ubatch) {
        const int64_t k = std::min(spec_.n_ubatch, n - i);
        const bool last = i + k == n;
        tokens_ = tokens.subspan(static_cast<size_t>(i), static_cast<size_t>(k));
        logits_out_ = all_logits ? logits.data() + i * n_vocab : (last ? logits.data() : nullptr);
        chunk_seq_.assign(static_cast<size_t>(k), 0);
        chunk_pos_.resize(static_cast<size_t>(k));
        std::iota(chunk_pos_.begin(), chunk_pos_.end(), n_past_[0]);
        run_chunk(chunk_seq_, chunk_pos_,
                  all_logits ? ChunkArgs::Logits::All : (last ? ChunkArgs::Logits::Last : ChunkArgs::Logits::None), {});
        n_past_[0] += k;
    }
}

void Session::eval_batch(const SeqBatch& b, std::vector<float>& logits) {
    // Check everything before touching the cache, so a bad batch leaves the session unchanged.
    const int64_t n = static_cast<int64_t>(b.tokens.size());
    if (n == 0) fail("eval_batch: no rows");
    if (b.seq.size() != b.tokens.size()) fail("eval_batch: {} tokens but {} sequence ids", b.tokens.size(), b.seq.size());
    if (!b.logits.empty() && b.logits.size() != b.tokens.size())
        fail("eval_batch: {} tokens but {} logits flags", b.tokens.size(), b.logits.size());
    std::vector<int64_t> next(n_past_);  // each sequence's next position
    int64_t n_out = 0;
    for (int64_t i = 0; i < n; ++i) {
        const int32_t q = b.seq[static_cast<size_t>(i)], t = b.tokens[static_cast<size_t>(i)];
        if (q < 0 || q >= n_seq()) fail("eval_batch: row {} names sequence {} but the session holds {}", i, q, n_seq());
        if (t < 0 || t >= spec_.n_vocab)
            fail("token id {} is out of range (vocabulary has {} tokens)", t, spec_.n_vocab);
        if (++next[static_cast<size_t>(q)] > spec_.n_ctx)
            fail("sequence {} needs {} positions but the context holds {} (n_ctx)", q, next[static_cast<size_t>(q)], spec_.n_ctx);
        if (!b.logits.empty() && b.logits[static_cast<size_t>(i)]) ++n_out;
    }
    const int64_t n_vocab = spec_.n_vocab;
    logits.resize(static_cast<size_t>(n_out * n_vocab));
    float* out = logits.data();
    for (int64_t i = 0; i < n; i += spec_.n_ubatch) {
        const int64_t k = std::min(spec_.n_ubatch, n - i);
        tokens_ = b.tokens.subspan(static_cast<size_t>(i), static_cast<size_t>(k));
        chunk_seq_.assign(b.seq.begin() + i, b.seq.begin() + i + k);
        chunk_pos_.resize(static_cast<size_t>(k));
        chunk_logit_rows_.clear();
        next = n_past_;
        for (int64_t r = 0; r < k; ++r) {
            chunk_pos_[static_cast<size_t>(r)] = next[static_cast<size_t>(chunk_seq_[static_cast<size_t>(r)])]++;
            if (!b.logits.empty() && b.logits[static_cast<size_t>(i + r)]) chunk_logit_rows_.push_back(r);
        }
        logits_out_ = chunk_logit_rows_.empty() ? nullptr : out;
        out += static_cast<int64_t>(chunk_logit_rows_.size()) * n_vocab;
        run_chunk(chunk_seq_, chunk_pos_, chunk_logit_rows_.empty() ? ChunkArgs::Logits::None : ChunkArgs::Logits::Rows,
                  chunk_logit_rows_);
        n_past_ = next;
    }
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
    for (int64_t i = 0; i < n; ++i) dequantize(te.type, te.data + static_cast<size_t>(tokens_[i]) * te_row, &s.x[i * E], E);
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

void Session::attn_norm(int il, const ChunkArgs& c) { norm_rows(model_.layers()[static_cast<size_t>(il)].attn_norm, c.n); }

void Session::ffn_norm(int il, const ChunkArgs& c) { norm_rows(model_.layers()[static_cast<size_t>(il)].ffn_norm, c.n); }

void Session::qkv(int il, const ChunkArgs& c) {
    const LayerWeights& L = model_.layers()[static_cast<size_t>(il)];
    Scratch& s = *s_;
    const int64_t n = c.n, E = spec_.n_embd, nq = spec_.n_q(), nk = spec_.n_k(), nv = spec_.n_v();
    // q, k, v projections in one parallel region (they share the quantized input when the
    // weight types agree, which they do in practice; otherwise quantize per type).
    s.q.resize(static_cast<size_t>(n * nq));
    s.k.resize(static_cast<size_t>(n * nk));
    s.v.resize(static_cast<size_t>(n * nv));
    cpu::quantize_acts(*pool_, s.h.data(), n, E, L.wq->type, s.acts);
    const bool same = L.wk->type == L.wq->type && L.wv->type == L.wq->type;
    if (!same) cpu::quantize_acts(*pool_, s.h.data(), n, E, L.wk->type, s.acts2);
    s.jobs.clear();
    s.jobs.push_back({cpu::weight_view(*L.wq), &s.acts, nullptr, n, s.q.data(), nq});
    s.jobs.push_back({cpu::weight_view(*L.wk), same ? &s.acts : &s.acts2, nullptr, n, s.k.data(), nk});
    if (!same) {
        cpu::matmul_batch(*pool_, s.jobs);
        cpu::quantize_acts(*pool_, s.h.data(), n, E, L.wv->type, s.acts2);
        s.jobs.clear();
    }
    s.jobs.push_back({cpu::weight_view(*L.wv), same ? &s.acts : &s.acts2, nullptr, n, s.v.data(), nv});
    cpu::matmul_batch(*pool_, s.jobs);
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
            if (L.bq) cpu::add(q, f32(L.bq), nq);
            if (L.bk) cpu::add(k, f32(L.bk), nk);
            if (L.bv) cpu::add(v, f32(L.bv), nv);
            if (L.q_norm) {
                for (int64_t h = 0; h < spec_.n_head; ++h) cpu::rms_norm(q + h * hd, f32(L.q_norm), hd, eps, q + h * hd);
                for (int64_t h = 0; h < spec_.n_head_kv; ++h) cpu::rms_norm(k + h * hd, f32(L.k_norm), hd, eps, k + h * hd);
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
    const float* sinks = f32(L.sinks);
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
    cpu::quantize_acts(*pool_, s.attn.data(), c.n, spec_.n_o(), L.wo->type, s.acts);
    cpu::matmul(*pool_, cpu::weight_view(*L.wo), s.acts, s.proj.data());
    for (int64_t i = 0; i < c.n; ++i) {
        float* o = &s.proj[i * E];
        if (L.bo) cpu::add(o, f32(L.bo), E);
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
    cpu::quantize_acts(*pool_, s.h.data(), n, E, L.gate_inp->type, s.acts);
    cpu::matmul(*pool_, cpu::weight_view(*L.gate_inp), s.acts, s.router.data());
    if (route_replay) {  // benchmark-only: the trace's choices, through the same top-k below
        if (il == 0) route_replay->next_chunk(row_prefill_);
        route_replay->fill_logits(il, s.router.data());
    }
    s.sel.resize(static_cast<size_t>(n * K));
    s.sel_w.resize(static_cast<size_t>(n * K));
    s.margin.resize(static_cast<size_t>(n));
    cpu::route(s.router.data(), f32(L.gate_inp_b), n, X, static_cast<int>(K), spec_.gating, s.sel.data(), s.sel_w.data(),
               s.margin.data());
    if (on_route)
        for (int64_t i = 0; i < n; ++i)
            on_route(RouteEvent{c.pos_of(i), il, row_prefill_[static_cast<size_t>(i)] != 0,
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
