// Thread-pool hand-off cost: one parallel region with one tiny task per thread, as in decode,
// where a token runs ~8 regions per layer (q/k/v, attention, output, router, gate/up, down...)
// whose work is only tens of microseconds, so the hand-off is a visible share of a token.
//
//   ./build/bench/bench_thread_pool                      # 2, 4, 8, 16 threads (capped at the CPUs)
//
// Reported: wall time per region (the Time column, real time). MEASURED on the machine it runs on.
#include "cpu/thread_pool.h"

#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace {

void BM_EmptyRegion(benchmark::State& state) {
    nitro::cpu::ThreadPool pool(static_cast<int>(state.range(0)));
    std::atomic<int64_t> sink{0};
    for (auto _ : state) {
        pool.parallel_for(pool.size(), 1, [&](int64_t b, int64_t e, int) { sink.fetch_add(e - b, std::memory_order_relaxed); });
    }
    benchmark::DoNotOptimize(sink.load());
}

// A region after a serial gap longer than the workers' spin (the hybrid's CPU experts: one region
// per layer while the GPU runs the rest of the layer, hundreds of microseconds): sleeping workers
// are woken, or, with hold, still spinning. Time per iteration includes the gap (range(1) us).
void BM_RegionAfterGap(benchmark::State& state) {
    nitro::cpu::ThreadPool pool(static_cast<int>(state.range(0)));
    const bool held = state.range(2) != 0;
    pool.hold(held);
    std::atomic<int64_t> sink{0};
    const auto gap = std::chrono::microseconds(state.range(1));
    double region_s = 0;
    for (auto _ : state) {
        const auto until = std::chrono::steady_clock::now() + gap;
        while (std::chrono::steady_clock::now() < until) {}  // the serial gap, busy like the caller's flag wait
        const auto t0 = std::chrono::steady_clock::now();
        pool.parallel_for(pool.size(), 1, [&](int64_t b, int64_t e, int) { sink.fetch_add(e - b, std::memory_order_relaxed); });
        region_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    pool.hold(false);
    state.counters["region_us"] = 1e6 * region_s / static_cast<double>(state.iterations());
    benchmark::DoNotOptimize(sink.load());
}

void Threads(benchmark::internal::Benchmark* b) {
    const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    for (int t : {2, 4, 8, 16})
        if (t <= hw) b->Arg(t);
}

void GapArgs(benchmark::internal::Benchmark* b) {
    const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    for (int t : {2, 4, 8, 16})
        if (t <= hw)
            for (int hold : {0, 1}) b->Args({t, 500, hold});
}

}  // namespace

BENCHMARK(BM_EmptyRegion)->Apply(Threads)->UseRealTime();
BENCHMARK(BM_RegionAfterGap)->Apply(GapArgs)->ArgNames({"threads", "gap_us", "hold"})->UseRealTime();

BENCHMARK_MAIN();
