// Replay speed of every cache policy: expert requests per second through ExpertCachePolicy::access,
// on a synthetic gpt-oss-120b-shaped trace (128 experts, top-4) and a Qwen3-Next-shaped one (512
// experts, top-10). The counter `accesses/s` is what docs/sim.md quotes (MEASURED).
//
//   ./build/bench/nitro_bench --benchmark_filter=Replay
#include "sim/policy_spec.h"
#include "sim/replay.h"
#include "trace/trace_synth.h"

#include <benchmark/benchmark.h>

#include <map>
#include <memory>

namespace {

using namespace nitro;

struct Shape {
    uint32_t n_expert, k;
};

// One layer's stream, large enough that setup is negligible: 4 layers x 64 sequences x 512 tokens.
const ReplayTrace& trace_for(const Shape& s) {
    static std::map<std::pair<uint32_t, uint32_t>, std::unique_ptr<ReplayTrace>> cache;
    auto& slot = cache[{s.n_expert, s.k}];
    if (!slot) {
        TraceHeader h;
        h.model_name = "bench";
        h.n_layer = 4;
        h.n_expert = s.n_expert;
        h.n_expert_used = s.k;
        SynthOptions o;
        o.n_sequences = 64;
        o.prompt_tokens = 0;
        o.decode_tokens = 512;
        o.zipf_s = 0.8;
        o.locality = 0.3;
        o.drift = 0.2;
        o.weights = false;
        slot = std::make_unique<ReplayTrace>(make_replay_trace(synth_trace(h, o)));
    }
    return *slot;
}

void replay_bench(benchmark::State& state, const char* policy, Shape shape) {
    const ReplayTrace& t = trace_for(shape);
    const int capacity = static_cast<int>(state.range(0));
    const PolicySpec spec = parse_policy_list(policy).front();
    const RoutingProfile prof = make_profile(t);
    uint64_t accesses = 0, hits = 0;
    for (auto _ : state) {
        const ReplayResult r = replay_policy(t, spec, prof, capacity, ReplayOptions{0});
        accesses += r.total.accesses;
        hits += r.total.hits;
        benchmark::DoNotOptimize(hits);
    }
    state.counters["accesses/s"] = benchmark::Counter(static_cast<double>(accesses), benchmark::Counter::kIsRate);
    state.counters["hit_rate"] = accesses ? static_cast<double>(hits) / accesses : 0;
}

#define NITRO_REPLAY_BENCH(tag, policy, E, K, ...)                                               \
    BENCHMARK_CAPTURE(replay_bench, tag##_E##E##_k##K, policy, Shape{E, K})->Arg(__VA_ARGS__)     \
        ->Unit(benchmark::kMillisecond)

// gpt-oss-120b shape: 128 experts, top-4, 16 slots per layer (12.5 %) and 48.
NITRO_REPLAY_BENCH(lru, "lru", 128, 4, 16);
NITRO_REPLAY_BENCH(lru48, "lru", 128, 4, 48);
NITRO_REPLAY_BENCH(lfu, "lfu", 128, 4, 16);
NITRO_REPLAY_BENCH(lru_freq, "lru-freq", 128, 4, 16);
NITRO_REPLAY_BENCH(freq_decay, "freq-decay", 128, 4, 16);
NITRO_REPLAY_BENCH(static_topn, "static", 128, 4, 16);
NITRO_REPLAY_BENCH(static_lru, "static+lru", 128, 4, 16);
NITRO_REPLAY_BENCH(rate, "rate", 128, 4, 16);
NITRO_REPLAY_BENCH(opt, "opt", 128, 4, 16);
// Qwen3-Next shape: 512 experts, top-10, 64 slots per layer.
NITRO_REPLAY_BENCH(lru, "lru", 512, 10, 64);
NITRO_REPLAY_BENCH(lfu, "lfu", 512, 10, 64);
NITRO_REPLAY_BENCH(lru_freq, "lru-freq", 512, 10, 64);
NITRO_REPLAY_BENCH(freq_decay, "freq-decay", 512, 10, 64);
NITRO_REPLAY_BENCH(static_lru, "static+lru", 512, 10, 64);
NITRO_REPLAY_BENCH(rate, "rate", 512, 10, 64);
NITRO_REPLAY_BENCH(opt, "opt", 512, 10, 64);

}  // namespace

BENCHMARK_MAIN();
