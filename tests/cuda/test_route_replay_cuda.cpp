// Routing replay on the GPU engine (label cuda; runtime/route_replay.h, nitro bench --routing
// replay:TRACE): GPU-all and hybrid (half the layers' experts on the CPU) report, for every token
// and layer, the experts and weights the CPU reference reports under the same replay (which the
// unit tests check against the trace), across prompt chunks, the decode graph and a replay
// switched on after the graph was captured; the hybrid's expert counters add up to every
// replayed selection.
#include "core/error.h"
#include "gpu/gpu_session.h"
#include "runtime/route_replay.h"
#include "runtime/session.h"
#include "trace/trace.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace nitro;

namespace {

std::string shared_dir() {
    const char* e = std::getenv("NITRO_SHARED_DIR");
    return e ? e : NITRO_SHARED_DIR;
}

/// A random trace of the model's shape (distinct experts, decreasing weights summing to 1).
Trace random_trace(const Model& m, int prefill, int decode, uint32_t seed) {
    Trace t;
    t.header.n_layer = static_cast<uint32_t>(m.hp().n_layer);
    t.header.n_expert = static_cast<uint32_t>(m.hp().n_expert);
    t.header.n_expert_used = static_cast<uint32_t>(m.hp().n_expert_used);
    t.header.has_weights = true;
    std::mt19937 rng(seed);
    const int K = static_cast<int>(m.hp().n_expert_used), X = static_cast<int>(m.hp().n_expert);
    std::vector<ExpertId> ids(static_cast<size_t>(K));
    std::vector<float> w(static_cast<size_t>(K));
    for (int p = 0; p < prefill + decode; ++p)
        for (int l = 0; l < static_cast<int>(m.hp().n_layer); ++l) {
            std::vector<int> all(static_cast<size_t>(X));
            for (int e = 0; e < X; ++e) all[static_cast<size_t>(e)] = e;
            std::shuffle(all.begin(), all.end(), rng);
            float sum = 0;
            for (int j = 0; j < K; ++j) {
                ids[static_cast<size_t>(j)] = static_cast<ExpertId>(all[static_cast<size_t>(j)]);
                sum += w[static_cast<size_t>(j)] = 0.05f + static_cast<float>(rng() % 1000) / 1000.f;
            }
            std::sort(w.begin(), w.end(), std::greater<>());
            for (float& v : w) v /= sum;
            TraceRecordIn r;
            r.pos = static_cast<uint32_t>(p);
            r.phase = p < prefill ? TracePhase::Prefill : TracePhase::Decode;
            r.layer = static_cast<uint32_t>(l);
            r.ids = ids;
            r.weights = w;
            t.append(r);
        }
    return t;
}

struct Event {
    int64_t pos;
    int layer;
    bool prefill;
    std::vector<int32_t> ids;
    std::vector<float> w;
};

/// Route events of a 13-token prompt (chunks of 4) and 8 decode steps under the replay.
template <class E>
std::vector<Event> run(E& engine, const std::function<void(std::function<void(const RouteEvent&)>)>& set_cb,
                       int64_t* n_selected) {
    std::vector<Event> ev;
    set_cb([&](const RouteEvent& e) {
        ev.push_back({e.pos, e.layer, e.prefill, {e.experts.begin(), e.experts.end()}, {e.weights.begin(), e.weights.end()}});
    });
    std::vector<int32_t> prompt(13);
    for (int i = 0; i < 13; ++i) prompt[static_cast<size_t>(i)] = 10 + i;
    std::vector<float> logits;
    engine.eval(prompt, false, logits);
    for (int i = 0; i < 8; ++i) {
        const int32_t tok[1] = {20 + i};
        engine.eval(tok, false, logits);
        for (float v : logits) EXPECT_TRUE(std::isfinite(v));
    }
    *n_selected = static_cast<int64_t>(ev.size()) * static_cast<int64_t>(ev.empty() ? 0 : ev[0].ids.size());
    return ev;
}

void gpu_replay_matches_cpu(const std::string& fixture) {
    Model m(shared_dir() + "/fixtures/" + fixture + ".gguf");
    const Trace t = random_trace(m, 10, 6, 5);
    SessionOptions so;
    so.n_ctx = 64;
    so.n_ubatch = 4;
    so.n_threads = 4;
    Session cpu(m, so);
    cpu.set_route_replay(std::make_shared<RouteReplay>(t, m, "trace"));
    int64_t n = 0;
    const auto want = run(cpu, [&](auto cb) { cpu.set_route_callback(cb); }, &n);
    ASSERT_EQ(want.size(), static_cast<size_t>(21 * m.hp().n_layer));
    for (int placement = 0; placement < 2; ++placement) {
        GpuOptions go;
        go.progress = false;
        go.mode = placement == 0 ? EngineMode::Gpu : EngineMode::Hybrid;
        go.n_cpu_moe = placement == 0 ? 0 : static_cast<int>(m.hp().n_layer / 2);
        go.vram_budget_gib = 4;
        cuda::GpuSession gpu(m, so, go);
        // Capture the decode graph first without the replay: switching it on must take effect.
        std::vector<float> l;
        const int32_t warm[1] = {5};
        gpu.eval(warm, false, l);
        gpu.eval(warm, false, l);
        gpu.truncate(0);
        ASSERT_TRUE(gpu.set_route_replay(std::make_shared<RouteReplay>(t, m, "trace")));
        EXPECT_NE(gpu.describe().find("routing replayed from trace"), std::string::npos);
        const auto c0 = gpu.expert_counters()->total();
        int64_t sel = 0;
        const auto got = run(gpu, [&](auto cb) { gpu.set_route_callback(cb); }, &sel);
        ASSERT_EQ(got.size(), want.size()) << fixture << " placement " << placement;
        // Events come in the same order from both engines (layer-major chunks, then decode steps).
        for (size_t i = 0; i < got.size(); ++i) {
            EXPECT_EQ(got[i].pos, want[i].pos);
            EXPECT_EQ(got[i].layer, want[i].layer);
            EXPECT_EQ(got[i].prefill, want[i].prefill);
            EXPECT_EQ(got[i].ids, want[i].ids) << fixture << " placement " << placement << " pos " << got[i].pos << " layer "
                                               << got[i].layer;
            for (size_t j = 0; j < got[i].w.size(); ++j) EXPECT_NEAR(got[i].w[j], want[i].w[j], 1e-3f);
        }
        if (placement == 1) {
            const auto c = gpu.expert_counters()->total();
            EXPECT_EQ(static_cast<int64_t>((c.gpu_pairs - c0.gpu_pairs) + (c.cpu_pairs - c0.cpu_pairs)), sel);
            EXPECT_GT(c.cpu_pairs - c0.cpu_pairs, 0u);
            EXPECT_GT(c.gpu_pairs - c0.gpu_pairs, 0u);
        }
    }
}

}  // namespace

TEST(CudaRouteReplay, GptOssReplaysTheTraceLikeTheCpu) { gpu_replay_matches_cpu("tiny-gptoss-mxfp4"); }
TEST(CudaRouteReplay, Qwen3MoeReplaysTheTraceLikeTheCpu) { gpu_replay_matches_cpu("tiny-qwen3moe-q8"); }
