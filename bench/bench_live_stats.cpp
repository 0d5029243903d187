// What the web page's live statistics (src/server/live_stats.h) cost the engine: counting one
// token's routing at every layer (LiveStats::on_route, called n_layer times per token), and one
// snapshot (LiveStats::publish, at most every 250 ms and once per request), at the shapes of
// gpt-oss-120b (36 layers, 128 experts, 4 used) and Qwen3-Next-80B (48 layers, 512 experts, 10 used).
//
//   ./build/bench/bench_live_stats
//
// Reported: wall time per token (BM_CountToken) and per snapshot (BM_Publish). MEASURED on the
// machine it runs on; docs/server.md quotes a run.
#include "server/live_stats.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

namespace {

using nitro::server::LiveShape;
using nitro::server::LiveStats;

LiveShape shape_of(int64_t preset) {
    LiveShape s;
    s.n_layer = preset == 0 ? 36 : 48;
    s.n_expert = preset == 0 ? 128 : 512;
    s.n_expert_used = preset == 0 ? 4 : 10;
    s.moe_layer.assign(static_cast<size_t>(s.n_layer), 1);
    return s;
}

/// An engine that answers what publish() asks: the CPU engine's view (no counters, no cache).
class IdleEngine final : public nitro::Engine {
public:
    void eval(std::span<const int32_t>, bool, std::vector<float>&) override {}
    int64_t n_past() const override { return 0; }
    int64_t n_ctx() const override { return 4096; }
    void truncate(int64_t) override {}
    std::string describe() const override { return "bench"; }
};

/// Random routing of 1024 tokens (distinct experts per token), replayed round robin.
std::vector<std::vector<int32_t>> routing(const LiveShape& s) {
    std::mt19937 rng(7);
    std::vector<std::vector<int32_t>> out(1024);
    for (auto& ids : out) {
        std::vector<int32_t> all(static_cast<size_t>(s.n_expert));
        for (int32_t e = 0; e < s.n_expert; ++e) all[static_cast<size_t>(e)] = e;
        std::shuffle(all.begin(), all.end(), rng);
        ids.assign(all.begin(), all.begin() + s.n_expert_used);
    }
    return out;
}

void BM_CountToken(benchmark::State& state) {
    const LiveShape s = shape_of(state.range(0));
    LiveStats live(s);
    const auto ids = routing(s);
    const std::vector<float> w(static_cast<size_t>(s.n_expert_used), 0.1f);
    size_t t = 0;
    for (auto _ : state) {
        const auto& tok = ids[t++ % ids.size()];
        for (int il = 0; il < s.n_layer; ++il) live.on_route(nitro::RouteEvent{0, il, false, tok, w});
    }
    state.SetLabel(state.range(0) == 0 ? "gpt-oss-120b shape, per token" : "qwen3-next shape, per token");
}

void BM_Publish(benchmark::State& state) {
    const LiveShape s = shape_of(state.range(0));
    LiveStats live(s);
    IdleEngine engine;
    const std::vector<nitro::server::SlotLoad> slots(4);
    for (auto _ : state) live.publish(engine, slots, 4096);
    state.SetLabel(state.range(0) == 0 ? "gpt-oss-120b shape" : "qwen3-next shape");
}

}  // namespace

BENCHMARK(BM_CountToken)->Arg(0)->Arg(1);
BENCHMARK(BM_Publish)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
