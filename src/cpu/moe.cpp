#include "cpu/moe.h"

#include "core/error.h"
#include "cpu/ops.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

namespace nitro::cpu {

uint64_t ExpertWeights::expert_bytes() const {
    auto one = [](const GgufTensorInfo* t) { return t ? t->n_bytes / static_cast<uint64_t>(t->ne[2]) : 0; };
    return one(gate) + one(up) + one(down);
}

void route(float* logits, const float* bias, int64_t n, int64_t X, int K, MoeGating gating, int32_t* ids, float* weights,
           float* margin) {
    for (int64_t i = 0; i < n; ++i) {
        float* lg = logits + i * X;
        if (bias) add(lg, bias, X);
        int32_t* sel = ids + i * K;
        float* w = weights + i * K;
        float m;
        if (gating == MoeGating::SoftmaxSelected) {
            top_k(lg, X, K, sel);
            m = top_k_margin(lg, X, K, sel);
            for (int j = 0; j < K; ++j) w[j] = lg[sel[j]];
            softmax(w, K);
        } else {
            softmax(lg, X);
            top_k(lg, X, K, sel);
            // in logit units: log(p_k / p_best_unselected)
            const float pm = top_k_margin(lg, X, K, sel);
            m = std::isinf(pm) ? pm : std::log(lg[sel[K - 1]]) - std::log(lg[sel[K - 1]] - pm);
            float sum = 0.f;
            for (int j = 0; j < K; ++j) sum += (w[j] = lg[sel[j]]);
            for (int j = 0; j < K; ++j) w[j] /= sum;
        }
        if (margin) margin[i] = m;
    }
}

MoeStats moe_ffn(ThreadPool& pool, const ExpertWeights& ex, const float* h, int64_t n, int K, const int32_t* ids,
                 const float* weights, const uint8_t* skip, float* out, MoeScratch& s) {
    const int64_t E = ex.n_embd(), F = ex.n_ff(), X = ex.n_expert();
    MoeStats st;
    using Clock = std::chrono::steady_clock;
    auto t = Clock::now();
    auto lap = [&t](double& acc) {
        const auto now = Clock::now();
        acc += std::chrono::duration<double>(now - t).count();
        t = now;
    };
    // Group the computed (token, j) pairs by expert: MUL_MAT_ID runs each selected expert once
    // over all tokens that chose it. Grouped row g -> pair r = t*K + j.
    const int64_t R = n * K;
    s.count.assign(static_cast<size_t>(X) + 1, 0);
    int64_t rows = 0;
    for (int64_t r = 0; r < R; ++r) {
        const int32_t e = ids[r];
        if (e < 0 || e >= X) fail("moe_ffn: expert id {} out of range [0, {})", e, X);
        if (skip && skip[e]) continue;
        ++s.count[static_cast<size_t>(e) + 1];
        ++rows;
    }
    for (int64_t e = 0; e < X; ++e) s.count[static_cast<size_t>(e) + 1] += s.count[static_cast<size_t>(e)];
    s.fill.assign(s.count.begin(), s.count.end() - 1);
    s.group_rows.resize(static_cast<size_t>(rows));
    s.group_tok.resize(static_cast<size_t>(rows));
    s.row_of.assign(static_cast<size_t>(R), -1);
    for (int64_t r = 0; r < R; ++r) {
        const int32_t e = ids[r];
        if (skip && skip[e]) continue;
        const int64_t g = s.fill[static_cast<size_t>(e)]++;
        s.group_rows[static_cast<size_t>(g)] = static_cast<int32_t>(r);
        s.group_tok[static_cast<size_t>(g)] = static_cast<int32_t>(r / K);
        s.row_of[static_cast<size_t>(r)] = static_cast<int32_t>(g);
    }
    s.iota.resize(static_cast<size_t>(rows));
    std::iota(s.iota.begin(), s.iota.end(), 0);
    const uint64_t per_expert = ex.expert_bytes();
    for (int64_t e = 0; e < X; ++e)
        if (s.count[static_cast<size_t>(e) + 1] > s.count[static_cast<size_t>(e)]) {
            ++st.experts;
            st.bytes += per_expert;
        }
    st.rows = rows;

    if (rows > 0) {
        // gate and up for every computed expert in one parallel region.
        s.gate.resize(static_cast<size_t>(rows * F));
        s.up.resize(static_cast<size_t>(rows * F));
        quantize_acts(pool, h, n, E, ex.gate->type, s.acts);
        const bool same_up = ex.up->type == ex.gate->type;
        if (!same_up) quantize_acts(pool, h, n, E, ex.up->type, s.acts2);
        s.jobs.clear();
        for (int64_t e = 0; e < X; ++e) {
            const int64_t b = s.count[static_cast<size_t>(e)], c = s.count[static_cast<size_t>(e) + 1] - b;
            if (c == 0) continue;
            const int32_t* tok = &s.group_tok[static_cast<size_t>(b)];
            s.jobs.push_back({expert_view(*ex.gate, e), &s.acts, tok, c, &s.gate[b * F], F});
            s.jobs.push_back({expert_view(*ex.up, e), same_up ? &s.acts : &s.acts2, tok, c, &s.up[b * F], F});
        }
        matmul_batch(pool, s.jobs);
        lap(st.gate_up_s);

        // Biases and activation in grouped order, in slices of 256 values so decode's few rows
        // still spread over the pool (element-wise: the slicing does not change any value).
        const int64_t slices = (F + 255) / 256;
        pool.parallel_for(rows * slices, 1, [&](int64_t b, int64_t e, int) {
            for (int64_t task = b; task < e; ++task) {
                const int64_t g = task / slices, c0 = (task % slices) * 256, c = std::min<int64_t>(256, F - c0);
                const int64_t x = ids[s.group_rows[static_cast<size_t>(g)]];
                float* gr = &s.gate[g * F + c0];
                float* ur = &s.up[g * F + c0];
                if (ex.gate_b) add(gr, ex.gate_b + x * F + c0, c);
                if (ex.up_b) add(ur, ex.up_b + x * F + c0, c);
                if (ex.act == FfnAct::SwigluOai) swiglu_oai(gr, ur, c, 1.702f, 7.0f, gr);
                else swiglu(gr, ur, c, gr);
            }
        });

        // down for every computed expert.
        s.down.resize(static_cast<size_t>(rows * E));
        quantize_acts(pool, s.gate.data(), rows, F, ex.down->type, s.acts);
        s.jobs.clear();
        for (int64_t e = 0; e < X; ++e) {
            const int64_t b = s.count[static_cast<size_t>(e)], c = s.count[static_cast<size_t>(e) + 1] - b;
            if (c == 0) continue;
            s.jobs.push_back({expert_view(*ex.down, e), &s.acts, &s.iota[static_cast<size_t>(b)], c, &s.down[b * E], E});
        }
        matmul_batch(pool, s.jobs);
    }
    lap(rows > 0 ? st.down_s : st.gate_up_s);

    // Weighted sum over the token's computed experts in router order (fixed order); tokens in
    // parallel.
    pool.parallel_for(n, 1, [&](int64_t b, int64_t e_, int) {
        for (int64_t i = b; i < e_; ++i) {
            float* o = out + i * E;
            std::fill(o, o + E, 0.f);
            for (int64_t j = 0; j < K; ++j) {
                const int64_t r = i * K + j;
                const int32_t g = s.row_of[static_cast<size_t>(r)];
                if (g < 0) continue;
                const int64_t x = ids[r];
                float* d = &s.down[static_cast<int64_t>(g) * E];
                if (ex.down_b) add(d, ex.down_b + x * E, E);
                const float w = weights[r];
                for (int64_t c = 0; c < E; ++c) o[c] += w * d[c];
            }
        }
    });
    lap(st.sum_s);
    return st;
}

}  // namespace nitro::cpu
