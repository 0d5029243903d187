#include "runtime/session.h"

#include "core/error.h"
#include "core/fp16.h"

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
    std::vector<int32_t> group_rows;                    // grouped (expert-major) order -> t*n_used+j
    std::vector<int32_t> group_tok;                     // grouped order -> token index
    std::vector<int32_t> row_of;                        // t*n_used+j -> grouped row
    std::vector<int32_t> iota;
    std::vector<float> gate, up, down;                  // [n*n_used, F], [n*n_used, F], [n*n_used, E]
    std::vector<float> rope_cache;                      // [n, n_rot]
    cpu::ActBuffer acts, acts2;
    std::vector<cpu::MatmulJob> jobs;
};

Session::Session(const Model& model, const SessionOptions& opt) : model_(model) {
    const ModelHparams& hp = model.hp();
    if (opt.n_ctx <= 0) fail("context length must be positive (got {})", opt.n_ctx);
    if (opt.n_ubatch <= 0) fail("ubatch size must be positive (got {})", opt.n_ubatch);
    n_ctx_ = hp.n_ctx_train > 0 ? std::min(opt.n_ctx, hp.n_ctx_train) : opt.n_ctx;
    n_ubatch_ = std::min(opt.n_ubatch, n_ctx_);
    const int threads = opt.n_threads > 0 ? opt.n_threads : std::max(1u, std::thread::hardware_concurrency());
    pool_ = std::make_unique<cpu::ThreadPool>(threads);
    std::vector<int64_t> windows;
    for (const auto& L : model.layers()) windows.push_back(L.swa ? hp.sliding_window : 0);
    kv_ = std::make_unique<KvCache>(n_ctx_, n_ubatch_, hp.n_head_kv * hp.head_dim, hp.n_head_kv * hp.head_dim_v, windows);
    s_ = std::make_unique<Scratch>();

    rope_.n_rot = static_cast<int>(hp.rope_dim);
    rope_.freq_base = static_cast<float>(hp.rope_freq_base);
    rope_.n_ctx_orig = static_cast<int>(hp.rope_orig_ctx > 0 ? hp.rope_orig_ctx : hp.n_ctx_train);
    if ((hp.rope_scaling == "yarn" || hp.rope_scaling == "linear") && hp.rope_scaling_factor > 0)
        rope_.freq_scale = static_cast<float>(1.0 / hp.rope_scaling_factor);
    rope_.ext_factor = hp.rope_scaling == "yarn" ? 1.0f : 0.0f;
    rope_.beta_fast = static_cast<float>(hp.rope_yarn_beta_fast);
    rope_.beta_slow = static_cast<float>(hp.rope_yarn_beta_slow);
}

Session::~Session() = default;

void Session::mark(Phase p) {
    const auto now = std::chrono::steady_clock::now();
    phase_s_[static_cast<size_t>(p)] += std::chrono::duration<double>(now - phase_t_).count();
    phase_t_ = now;
}

void Session::truncate(int64_t n) {
    if (n < 0 || n > n_past_) fail("cannot truncate a session of {} tokens to {}", n_past_, n);
    n_past_ = n;
}

void Session::eval(std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    if (n == 0) fail("eval: no tokens");
    if (n_past_ + n > n_ctx_)
        fail("the prompt and generated tokens need {} positions but the context holds {} (n_ctx)", n_past_ + n, n_ctx_);
    for (int32_t t : tokens)
        if (t < 0 || t >= model_.n_vocab()) fail("token id {} is out of range (vocabulary has {} tokens)", t, model_.n_vocab());
    const int64_t n_vocab = model_.n_vocab();
    logits.resize(static_cast<size_t>((all_logits ? n : 1) * n_vocab));
    for (int64_t i = 0; i < n; i += n_ubatch_) {
        const int64_t k = std::min(n_ubatch_, n - i);
        const bool last = i + k == n;
        float* out = all_logits ? logits.data() + i * n_vocab : (last ? logits.data() : nullptr);
        forward_chunk(tokens.subspan(static_cast<size_t>(i), static_cast<size_t>(k)), all_logits, out);
    }
}

void Session::forward_chunk(std::span<const int32_t> tokens, bool all_logits, float* logits_out) {
    const ModelHparams& hp = model_.hp();
    const int64_t n = static_cast<int64_t>(tokens.size());
    const int64_t E = hp.n_embd;
    Scratch& s = *s_;
    phase_t_ = std::chrono::steady_clock::now();
    s.x.resize(static_cast<size_t>(n * E));
    s.h.resize(static_cast<size_t>(n * E));

    // Token embeddings: rows of token_embd dequantized (ggml_get_rows).
    const GgufTensorInfo& te = model_.token_embd();
    const size_t te_row = row_size(te.type, E);
    for (int64_t i = 0; i < n; ++i) dequantize(te.type, te.data + static_cast<size_t>(tokens[i]) * te_row, &s.x[i * E], E);

    // RoPE tables for the chunk's positions.
    s.rope_cache.resize(static_cast<size_t>(n * rope_.n_rot));
    for (int64_t i = 0; i < n; ++i) cpu::rope_cache(rope_, n_past_ + i, &s.rope_cache[i * rope_.n_rot]);
    mark(Phase::Embed);

    for (int il = 0; il < static_cast<int>(hp.n_layer); ++il) {
        attention_block(il, n, n_past_);
        moe_block(il, n, n_past_);
    }

    if (logits_out) {
        // Final norm and LM head, for every token or only the last one.
        const int64_t first = all_logits ? 0 : n - 1;
        const int64_t n_out = n - first;
        for (int64_t i = first; i < n; ++i)
            cpu::rms_norm(&s.x[i * E], f32(&model_.output_norm()), E, static_cast<float>(hp.rms_eps), &s.h[(i - first) * E]);
        cpu::quantize_acts(*pool_, s.h.data(), n_out, E, model_.output().type, s.acts);
        cpu::matmul(*pool_, cpu::weight_view(model_.output()), s.acts, logits_out);
    }
    mark(Phase::LmHead);
    n_past_ += n;
}

void Session::attention_block(int il, int64_t n, int64_t pos0) {
    const ModelHparams& hp = model_.hp();
    const LayerWeights& L = model_.layers()[static_cast<size_t>(il)];
    Scratch& s = *s_;
    const int64_t E = hp.n_embd, hd = hp.head_dim, hdv = hp.head_dim_v;
    const int64_t nq = hp.n_head * hd, nk = hp.n_head_kv * hd, nv = hp.n_head_kv * hdv, no = hp.n_head * hdv;
    const float eps = static_cast<float>(hp.rms_eps);

    pool_->parallel_for(n, 1, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) cpu::rms_norm(&s.x[i * E], f32(L.attn_norm), E, eps, &s.h[i * E]);
    });

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

    // Per token: biases, q/k norm, RoPE, append K and V to the cache in F16 (tokens independent).
    pool_->parallel_for(n, 1, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) {
            float* q = &s.q[i * nq];
            float* k = &s.k[i * nk];
            float* v = &s.v[i * nv];
            if (L.bq) cpu::add(q, f32(L.bq), nq);
            if (L.bk) cpu::add(k, f32(L.bk), nk);
            if (L.bv) cpu::add(v, f32(L.bv), nv);
            if (L.q_norm) {
                for (int64_t h = 0; h < hp.n_head; ++h) cpu::rms_norm(q + h * hd, f32(L.q_norm), hd, eps, q + h * hd);
                for (int64_t h = 0; h < hp.n_head_kv; ++h) cpu::rms_norm(k + h * hd, f32(L.k_norm), hd, eps, k + h * hd);
            }
            const float* rc = &s.rope_cache[i * rope_.n_rot];
            cpu::rope_neox(q, hp.n_head, hd, rope_.n_rot, rc);
            cpu::rope_neox(k, hp.n_head_kv, hd, rope_.n_rot, rc);
            // Append K and V to the cache in F16.
            uint16_t* kc = kv_->k(il, pos0 + i);
            uint16_t* vc = kv_->v(il, pos0 + i);
            for (int64_t d = 0; d < nk; ++d) kc[d] = f32_to_fp16(k[d]);
            for (int64_t d = 0; d < nv; ++d) vc[d] = f32_to_fp16(v[d]);
        }
    });
    mark(Phase::AttnProj);

    // Attention: one task per (token, head). Query rounded to F16 like llama.cpp's CPU flash
    // attention (Q is converted to the K cache's type before the dot products); scores, softmax
    // (with the sink logit in the denominator) and the V sum in F32, with the F16 SIMD kernels
    // of src/cpu (cpu::dot_f16, cpu::axpy_f16).
    s.attn.resize(static_cast<size_t>(n * no));
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const int64_t group = hp.n_head / hp.n_head_kv;
    const int64_t window = L.swa ? hp.sliding_window : 0;
    const float* sinks = f32(L.sinks);
    KvCache& kv = *kv_;
    pool_->parallel_for(n * hp.n_head, 1, [&](int64_t b, int64_t e, int) {
        thread_local std::vector<float> scores, acc;
        thread_local std::vector<uint16_t> qh;
        qh.resize(static_cast<size_t>(hd));
        acc.resize(static_cast<size_t>(hdv));
        for (int64_t task = b; task < e; ++task) {
            const int64_t i = task / hp.n_head, h = task % hp.n_head, kvh = h / group;
            const int64_t p = pos0 + i;
            const int64_t lo = window > 0 ? std::max<int64_t>(0, p - window + 1) : 0;
            const float* q = &s.q[i * nq + h * hd];
            for (int64_t d = 0; d < hd; ++d) qh[static_cast<size_t>(d)] = f32_to_fp16(q[d]);
            scores.resize(static_cast<size_t>(p - lo + 1));
            float m = sinks ? sinks[h] : -INFINITY;
            for (int64_t j = lo; j <= p; ++j) {
                const float sc = cpu::dot_f16(hd, kv.k(il, j) + kvh * hd, qh.data()) * scale;
                scores[static_cast<size_t>(j - lo)] = sc;
                m = std::max(m, sc);
            }
            double denom = sinks ? std::exp(static_cast<double>(sinks[h] - m)) : 0.0;
            std::fill(acc.begin(), acc.end(), 0.f);
            for (int64_t j = lo; j <= p; ++j) {
                const float w = std::exp(scores[static_cast<size_t>(j - lo)] - m);
                denom += w;
                cpu::axpy_f16(hdv, w, kv.v(il, j) + kvh * hdv, acc.data());
            }
            const float inv = static_cast<float>(1.0 / denom);
            float* out = &s.attn[i * no + h * hdv];
            for (int64_t d = 0; d < hdv; ++d) out[d] = acc[static_cast<size_t>(d)] * inv;
        }
    });
    mark(Phase::Attention);

    // Output projection and residual.
    s.proj.resize(static_cast<size_t>(n * E));
    cpu::quantize_acts(*pool_, s.attn.data(), n, no, L.wo->type, s.acts);
    cpu::matmul(*pool_, cpu::weight_view(*L.wo), s.acts, s.proj.data());
    for (int64_t i = 0; i < n; ++i) {
        float* o = &s.proj[i * E];
        if (L.bo) cpu::add(o, f32(L.bo), E);
        cpu::add(&s.x[i * E], o, E);
    }
    mark(Phase::AttnOut);
}

void Session::moe_block(int il, int64_t n, int64_t pos0) {
    const ModelHparams& hp = model_.hp();
    const ArchConfig& cfg = model_.config();
    const LayerWeights& L = model_.layers()[static_cast<size_t>(il)];
    Scratch& s = *s_;
    const int64_t E = hp.n_embd, X = hp.n_expert, K = hp.n_expert_used, F = hp.n_ff_exp;
    const float eps = static_cast<float>(hp.rms_eps);

    pool_->parallel_for(n, 1, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) cpu::rms_norm(&s.x[i * E], f32(L.ffn_norm), E, eps, &s.h[i * E]);
    });

    // Router (llama.cpp build_moe_ffn): logits, expert selection and weights per token.
    s.router.resize(static_cast<size_t>(n * X));
    cpu::quantize_acts(*pool_, s.h.data(), n, E, L.gate_inp->type, s.acts);
    cpu::matmul(*pool_, cpu::weight_view(*L.gate_inp), s.acts, s.router.data());
    s.sel.resize(static_cast<size_t>(n * K));
    s.sel_w.resize(static_cast<size_t>(n * K));
    for (int64_t i = 0; i < n; ++i) {
        float* lg = &s.router[i * X];
        if (L.gate_inp_b) cpu::add(lg, f32(L.gate_inp_b), X);
        int32_t* sel = &s.sel[i * K];
        float* w = &s.sel_w[i * K];
        float margin;
        if (cfg.gating == MoeGating::SoftmaxSelected) {
            cpu::top_k(lg, X, static_cast<int>(K), sel);
            margin = cpu::top_k_margin(lg, X, static_cast<int>(K), sel);
            for (int64_t j = 0; j < K; ++j) w[j] = lg[sel[j]];
            cpu::softmax(w, K);
        } else {
            cpu::softmax(lg, X);
            cpu::top_k(lg, X, static_cast<int>(K), sel);
            // in logit units: log(p_k / p_best_unselected)
            const float pm = cpu::top_k_margin(lg, X, static_cast<int>(K), sel);
            margin = std::isinf(pm) ? pm : std::log(lg[sel[K - 1]]) - std::log(lg[sel[K - 1]] - pm);
            float sum = 0.f;
            for (int64_t j = 0; j < K; ++j) sum += (w[j] = lg[sel[j]]);
            for (int64_t j = 0; j < K; ++j) w[j] /= sum;
        }
        if (on_route)
            on_route(RouteEvent{pos0 + i, il, n > 1, std::span<const int32_t>(sel, static_cast<size_t>(K)),
                                std::span<const float>(w, static_cast<size_t>(K)), margin});
    }

    mark(Phase::Router);

    // Group the (token, slot) pairs by expert: MUL_MAT_ID runs each selected expert once over
    // all tokens that chose it.
    const int64_t R = n * K;
    s.group_rows.resize(static_cast<size_t>(R));
    s.group_tok.resize(static_cast<size_t>(R));
    s.row_of.resize(static_cast<size_t>(R));
    std::vector<int64_t> count(static_cast<size_t>(X) + 1, 0);
    for (int64_t r = 0; r < R; ++r) ++count[static_cast<size_t>(s.sel[r]) + 1];
    for (int64_t e = 0; e < X; ++e) count[static_cast<size_t>(e) + 1] += count[static_cast<size_t>(e)];
    std::vector<int64_t> fill(count.begin(), count.end() - 1);
    for (int64_t r = 0; r < R; ++r) {
        const int64_t g = fill[static_cast<size_t>(s.sel[r])]++;
        s.group_rows[static_cast<size_t>(g)] = static_cast<int32_t>(r);
        s.group_tok[static_cast<size_t>(g)] = static_cast<int32_t>(r / K);
        s.row_of[static_cast<size_t>(r)] = static_cast<int32_t>(g);
    }
    s.iota.resize(static_cast<size_t>(R));
    std::iota(s.iota.begin(), s.iota.end(), 0);

    // gate and up for every selected expert in one parallel region.
    s.gate.resize(static_cast<size_t>(R * F));
    s.up.resize(static_cast<size_t>(R * F));
    cpu::quantize_acts(*pool_, s.h.data(), n, E, L.gate_exps->type, s.acts);
    const bool same_up = L.up_exps->type == L.gate_exps->type;
    if (!same_up) cpu::quantize_acts(*pool_, s.h.data(), n, E, L.up_exps->type, s.acts2);
    s.jobs.clear();
    for (int64_t e = 0; e < X; ++e) {
        const int64_t b = count[static_cast<size_t>(e)], c = count[static_cast<size_t>(e) + 1] - b;
        if (c == 0) continue;
        s.jobs.push_back({cpu::expert_view(*L.gate_exps, e), &s.acts, &s.group_tok[static_cast<size_t>(b)], c, &s.gate[b * F], F});
        s.jobs.push_back({cpu::expert_view(*L.up_exps, e), same_up ? &s.acts : &s.acts2, &s.group_tok[static_cast<size_t>(b)], c,
                          &s.up[b * F], F});
    }
    cpu::matmul_batch(*pool_, s.jobs);
    mark(Phase::ExpertGateUp);

    // Biases and activation in grouped order, in slices of 256 values so decode's few rows still
    // spread over the pool (element-wise: the slicing does not change any value).
    const int64_t slices = (F + 255) / 256;
    pool_->parallel_for(R * slices, 1, [&](int64_t b, int64_t e, int) {
        for (int64_t task = b; task < e; ++task) {
            const int64_t g = task / slices, c0 = (task % slices) * 256, c = std::min<int64_t>(256, F - c0);
            const int64_t ex = s.sel[static_cast<size_t>(s.group_rows[static_cast<size_t>(g)])];
            float* gr = &s.gate[g * F + c0];
            float* ur = &s.up[g * F + c0];
            if (L.gate_exps_b) cpu::add(gr, f32(L.gate_exps_b) + ex * F + c0, c);
            if (L.up_exps_b) cpu::add(ur, f32(L.up_exps_b) + ex * F + c0, c);
            if (cfg.act == FfnAct::SwigluOai) cpu::swiglu_oai(gr, ur, c, 1.702f, 7.0f, gr);
            else cpu::swiglu(gr, ur, c, gr);
        }
    });

    // down for every selected expert.
    s.down.resize(static_cast<size_t>(R * E));
    cpu::quantize_acts(*pool_, s.gate.data(), R, F, L.down_exps->type, s.acts);
    s.jobs.clear();
    for (int64_t e = 0; e < X; ++e) {
        const int64_t b = count[static_cast<size_t>(e)], c = count[static_cast<size_t>(e) + 1] - b;
        if (c == 0) continue;
        s.jobs.push_back({cpu::expert_view(*L.down_exps, e), &s.acts, &s.iota[static_cast<size_t>(b)], c, &s.down[b * E], E});
    }
    cpu::matmul_batch(*pool_, s.jobs);
    mark(Phase::ExpertDown);

    // Weighted sum over the token's experts in router order (fixed order), plus residual; tokens
    // in parallel.
    pool_->parallel_for(n, 1, [&](int64_t b, int64_t e_, int) {
        for (int64_t i = b; i < e_; ++i) {
            float* x = &s.x[i * E];
            for (int64_t j = 0; j < K; ++j) {
                const int64_t r = i * K + j;
                const int64_t e = s.sel[static_cast<size_t>(r)];
                float* d = &s.down[static_cast<int64_t>(s.row_of[static_cast<size_t>(r)]) * E];
                if (L.down_exps_b) cpu::add(d, f32(L.down_exps_b) + e * E, E);
                const float w = s.sel_w[static_cast<size_t>(r)];
                for (int64_t c = 0; c < E; ++c) s.h[i * E + c] = (j == 0 ? 0.f : s.h[i * E + c]) + w * d[c];
            }
            cpu::add(x, &s.h[i * E], E);
        }
    });
    mark(Phase::MoeSum);
}

}  // namespace nitro
