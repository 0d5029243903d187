#include "runtime/bench.h"

#include "runtime/sampler.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>

namespace nitro {

namespace {
using Clock = std::chrono::steady_clock;
double secs(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }
}  // namespace

double measure_read_bandwidth(cpu::ThreadPool& pool, size_t bytes, int reps) {
    const size_t n = bytes / sizeof(uint64_t);
    std::unique_ptr<uint64_t[]> buf(new uint64_t[n]);
    // First touch in parallel so pages spread like the engine's would.
    pool.parallel_for(static_cast<int64_t>(n), 1 << 20, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) buf[static_cast<size_t>(i)] = static_cast<uint64_t>(i);
    });
    double best = 0;
    std::vector<uint64_t> sums(static_cast<size_t>(pool.size()) * 8, 0);
    for (int r = 0; r < reps; ++r) {
        const auto t = Clock::now();
        pool.parallel_for(static_cast<int64_t>(n), 1 << 18, [&](int64_t b, int64_t e, int th) {
            uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            int64_t i = b;
            for (; i + 4 <= e; i += 4) {
                s0 += buf[static_cast<size_t>(i)];
                s1 += buf[static_cast<size_t>(i) + 1];
                s2 += buf[static_cast<size_t>(i) + 2];
                s3 += buf[static_cast<size_t>(i) + 3];
            }
            for (; i < e; ++i) s0 += buf[static_cast<size_t>(i)];
            sums[static_cast<size_t>(th) * 8] += s0 + s1 + s2 + s3;
        });
        best = std::max(best, static_cast<double>(bytes) / secs(t));
    }
    volatile uint64_t sink = 0;
    for (auto s : sums) sink = sink + s;
    return best;
}

PhaseTimes decode_weight_bytes(const Model& model) {
    PhaseTimes b{};
    const auto add = [&](Phase p, const GgufTensorInfo* t, double share = 1.0) {
        if (t) b[static_cast<size_t>(p)] += share * static_cast<double>(t->n_bytes);
    };
    const double used = static_cast<double>(model.hp().n_expert_used) / static_cast<double>(model.hp().n_expert);
    for (const LayerWeights& L : model.layers()) {
        add(Phase::AttnProj, L.wq);
        add(Phase::AttnProj, L.wk);
        add(Phase::AttnProj, L.wv);
        add(Phase::AttnOut, L.wo);
        add(Phase::Router, L.gate_inp);
        add(Phase::ExpertGateUp, L.gate_exps, used);
        add(Phase::ExpertGateUp, L.up_exps, used);
        add(Phase::ExpertDown, L.down_exps, used);
    }
    add(Phase::LmHead, &model.output());
    return b;
}

EngineBench bench_engine(const Model& model, const SessionOptions& so, int64_t n_prompt, int64_t n_gen) {
    EngineBench b;
    b.n_prompt = n_prompt;
    b.n_gen = n_gen;
    Session s(model, so);
    std::mt19937 rng(1);
    std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(std::min<int64_t>(model.n_vocab(), 1000)));
    std::vector<float> logits;
    s.reset_phase_times();
    auto t = Clock::now();
    s.eval(prompt, false, logits);
    b.prompt_tok_s = static_cast<double>(n_prompt) / secs(t);
    for (size_t p = 0; p < b.prompt_ms.size(); ++p) b.prompt_ms[p] = 1000.0 * s.phase_times()[p];
    s.reset_phase_times();
    t = Clock::now();
    for (int64_t i = 0; i < n_gen; ++i) {
        const int32_t tok[1] = {argmax(logits)};
        s.eval(tok, false, logits);
    }
    b.decode_tok_s = static_cast<double>(n_gen) / secs(t);
    for (size_t p = 0; p < b.decode_ms.size(); ++p) b.decode_ms[p] = 1000.0 * s.phase_times()[p] / static_cast<double>(n_gen);
    b.decode_bytes = decode_weight_bytes(model);
    return b;
}

ExpertGemvBench bench_expert_gemv(const Model& model, cpu::ThreadPool& pool, int tokens) {
    const ModelHparams& hp = model.hp();
    const int64_t E = hp.n_embd, F = hp.n_ff_exp, K = hp.n_expert_used, X = hp.n_expert;
    std::vector<float> x(static_cast<size_t>(E), 0.01f), act(static_cast<size_t>(F), 0.01f);
    std::vector<float> out(static_cast<size_t>(K * std::max(E, F)) * 2);
    std::vector<cpu::ActBuffer> acts(model.layers().size() * 2);
    double bytes = 0;
    for (const auto& L : model.layers())
        bytes += static_cast<double>(K) * (L.gate_exps->n_bytes + L.up_exps->n_bytes + L.down_exps->n_bytes) / static_cast<double>(X);
    std::vector<cpu::MatmulJob> jobs;
    auto run_token = [&](int tok) {
        for (size_t il = 0; il < model.layers().size(); ++il) {
            const LayerWeights& L = model.layers()[il];
            cpu::ActBuffer& a = acts[il * 2];
            cpu::ActBuffer& d = acts[il * 2 + 1];
            cpu::quantize_acts(x.data(), 1, E, L.gate_exps->type, a);
            cpu::quantize_acts(act.data(), 1, F, L.down_exps->type, d);
            jobs.clear();
            for (int64_t j = 0; j < K; ++j) {
                const int64_t e = (static_cast<int64_t>(tok) * K + j) % X;  // cycle: no cache reuse across tokens
                jobs.push_back({cpu::expert_view(*L.gate_exps, e), &a, nullptr, 1, out.data() + j * F, F});
                jobs.push_back({cpu::expert_view(*L.up_exps, e), &a, nullptr, 1, out.data() + (K + j) * F, F});
            }
            cpu::matmul_batch(pool, jobs);
            jobs.clear();
            for (int64_t j = 0; j < K; ++j) {
                const int64_t e = (static_cast<int64_t>(tok) * K + j) % X;
                jobs.push_back({cpu::expert_view(*L.down_exps, e), &d, nullptr, 1, out.data() + j * E, E});
            }
            cpu::matmul_batch(pool, jobs);
        }
    };
    run_token(0);  // warm-up
    const auto t = Clock::now();
    for (int i = 1; i <= tokens; ++i) run_token(i);
    const double s = secs(t);
    ExpertGemvBench r;
    r.bytes_per_token = bytes;
    r.ms_per_token = 1000.0 * s / tokens;
    r.gb_s = bytes * tokens / s / 1e9;
    return r;
}

}  // namespace nitro
