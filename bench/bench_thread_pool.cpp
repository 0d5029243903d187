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

void Threads(benchmark::internal::Benchmark* b) {
    const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    for (int t : {2, 4, 8, 16})
        if (t <= hw) b->Arg(t);
}

}  // namespace

BENCHMARK(BM_EmptyRegion)->Apply(Threads)->UseRealTime();

BENCHMARK_MAIN();
