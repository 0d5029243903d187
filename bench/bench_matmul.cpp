// Matmul bandwidth benchmarks: how close the CPU expert kernels get to DRAM read bandwidth.
//
// Decode is a GEMV that streams every weight byte of the selected experts once, so the figure
// of merit is weight bytes per second, compared with BM_MemoryRead (a plain sum over 1 GiB on
// the same threads). Weights are a pool of ~1 GiB of experts (far above the last-level cache)
// and each iteration takes the next expert, as MoE decode does, so bytes really come from DRAM.
//
//   ./build/bench/bench_matmul                         # all
//   ./build/bench/bench_matmul --benchmark_filter=Mxfp4
//   NITRO_ISA=avx2 ./build/bench/bench_matmul          # force a lower ISA
//
// Counters: weight_GB/s (weight bytes streamed / wall time), tok/s for the prefill variants.
// Argument: threads (1 and all hardware threads).
#include "core/fp16.h"
#include "cpu/matmul.h"
#include "cpu/thread_pool.h"
#include "quant/types.h"
#include "bench/bench.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <ctime>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

namespace {

using nitro::GgmlType;

/// CPU seconds used by the whole process so far (all threads).
double process_cpu_seconds() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

/// Adds "GB/s_per_cpu": bytes / (process CPU seconds) -- the rate per core while actually
/// running. On a shared machine (other jobs competing for the cores) the wall-clock rates
/// undercount what the code does; this one does not (it still shares memory bandwidth).
void set_cpu_rate(benchmark::State& state, double bytes, double cpu_s) {
    state.counters["GB/s_per_cpu"] = benchmark::Counter(bytes / 1e9 / cpu_s);
}
using namespace nitro::cpu;

constexpr size_t kPoolBytes = size_t{1} << 30;

int hw_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

/// Random block bytes with sane scales (bench/bench.h fill_random_blocks), so the kernels do
/// the arithmetic they do on real weights. Filled once per type, reused by later benchmarks.
const std::vector<uint8_t>& weight_pool(GgmlType t) {
    static GgmlType cached_type = GgmlType::I8;
    static std::vector<uint8_t> pool;
    if (cached_type == t && !pool.empty()) return pool;
    pool.assign(kPoolBytes, 0);
    ThreadPool fill(hw_threads());
    nitro::fill_random_blocks(fill, t, pool.data(), pool.size(), 1);
    cached_type = t;
    return pool;
}

std::vector<float> random_acts(int64_t n) {
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = nd(rng);
    return x;
}

/// One MoE expert FFN: gate and up [n_embd -> n_ff] in one region, then down [n_ff -> n_embd].
struct ExpertShape {
    GgmlType type;
    int64_t n_embd, n_ff;
};

void run_experts(benchmark::State& state, ExpertShape sh, int64_t n_tokens) {
    const int threads = static_cast<int>(state.range(0));
    ThreadPool pool(threads);
    const auto& w = weight_pool(sh.type);
    const size_t up_bytes = nitro::row_size(sh.type, sh.n_embd) * static_cast<size_t>(sh.n_ff);
    const size_t down_bytes = nitro::row_size(sh.type, sh.n_ff) * static_cast<size_t>(sh.n_embd);
    const size_t expert_bytes = 2 * up_bytes + down_bytes;
    const int64_t n_experts = static_cast<int64_t>(w.size() / expert_bytes);
    const std::vector<float> x = random_acts(n_tokens * sh.n_embd);
    std::vector<float> gate(static_cast<size_t>(n_tokens * sh.n_ff)), up(gate.size());
    std::vector<float> h(gate.size()), out(static_cast<size_t>(n_tokens * sh.n_embd));
    for (size_t i = 0; i < h.size(); ++i) h[i] = 0.01f * static_cast<float>(i % 101) - 0.5f;
    ActBuffer ax, ah;
    int64_t e = 0;
    size_t bytes = 0;
    const double cpu0 = process_cpu_seconds();
    for (auto _ : state) {
        const uint8_t* base = w.data() + static_cast<size_t>(e) * expert_bytes;
        e = (e + 1) % n_experts;
        quantize_acts(x.data(), n_tokens, sh.n_embd, sh.type, ax);
        const size_t rb_up = nitro::row_size(sh.type, sh.n_embd);
        MatmulJob jobs[2];
        jobs[0].w = WeightView{sh.type, base, sh.n_embd, sh.n_ff, rb_up};
        jobs[1].w = WeightView{sh.type, base + up_bytes, sh.n_embd, sh.n_ff, rb_up};
        for (int k = 0; k < 2; ++k) {
            jobs[k].acts = &ax;
            jobs[k].n_tokens = n_tokens;
            jobs[k].out_stride = sh.n_ff;
        }
        jobs[0].out = gate.data();
        jobs[1].out = up.data();
        matmul_batch(pool, jobs);
        // (the SwiGLU between gate/up and down is not the subject here: h is fixed input)
        quantize_acts(h.data(), n_tokens, sh.n_ff, sh.type, ah);
        const WeightView down{sh.type, base + 2 * up_bytes, sh.n_ff, sh.n_embd, nitro::row_size(sh.type, sh.n_ff)};
        matmul(pool, down, ah, out.data());
        benchmark::DoNotOptimize(out.data());
        bytes += expert_bytes;
    }
    set_cpu_rate(state, static_cast<double>(bytes), process_cpu_seconds() - cpu0);
    state.counters["weight_GB/s"] = benchmark::Counter(static_cast<double>(bytes) / 1e9, benchmark::Counter::kIsRate);
    state.counters["tok/s"] = benchmark::Counter(static_cast<double>(state.iterations() * n_tokens), benchmark::Counter::kIsRate);
    state.SetLabel(std::string(kernel_isa()) + ", " + std::to_string(n_experts) + " experts of " +
                   std::to_string(expert_bytes >> 10) + " KiB rotated");
}

/// gpt-oss-20b expert: MXFP4, n_embd 2880, n_ff 2880 (gate, up, down: 3 x 2880x2880).
constexpr ExpertShape kGptOss{GgmlType::MXFP4, 2880, 2880};
/// Qwen3-30B-A3B expert shape (n_embd 2048, n_ff 768), both multiples of 256 (K-quants).
constexpr ExpertShape kQwenQ8{GgmlType::Q8_0, 2048, 768};
constexpr ExpertShape kQwenQ4K{GgmlType::Q4_K, 2048, 768};
constexpr ExpertShape kQwenQ6K{GgmlType::Q6_K, 2048, 768};

void BM_ExpertGemv_Mxfp4_GptOss20b(benchmark::State& s) { run_experts(s, kGptOss, 1); }
void BM_ExpertGemv_Q8_0_Qwen3(benchmark::State& s) { run_experts(s, kQwenQ8, 1); }
void BM_ExpertGemv_Q4_K_Qwen3(benchmark::State& s) { run_experts(s, kQwenQ4K, 1); }
void BM_ExpertGemv_Q6_K_Qwen3(benchmark::State& s) { run_experts(s, kQwenQ6K, 1); }
/// Multi-token (prefill, a non-resident expert with <= 16 tokens): weights read once per tile.
void BM_ExpertGemm16_Mxfp4_GptOss20b(benchmark::State& s) { run_experts(s, kGptOss, 16); }
void BM_ExpertGemm16_Q4_K_Qwen3(benchmark::State& s) { run_experts(s, kQwenQ4K, 16); }

/// Compute ceiling of one kernel: one thread, a 256-row matrix that stays in L2 (<= ~1 MiB),
/// so no DRAM traffic; weight_GB/s here above DRAM bandwidth means the GEMV is memory-bound.
void run_hot(benchmark::State& state, GgmlType t, int64_t ne0, int64_t n_tokens) {
    ThreadPool pool(1);
    const int64_t rows = 256;
    const size_t rb = nitro::row_size(t, ne0);
    const auto& w = weight_pool(t);
    const WeightView view{t, w.data(), ne0, rows, rb};
    ActBuffer ax;
    quantize_acts(random_acts(n_tokens * ne0).data(), n_tokens, ne0, t, ax);
    std::vector<float> out(static_cast<size_t>(rows * n_tokens));
    for (auto _ : state) {
        matmul(pool, view, ax, out.data());
        benchmark::DoNotOptimize(out.data());
    }
    state.counters["weight_GB/s"] = benchmark::Counter(static_cast<double>(state.iterations()) * rb * rows / 1e9,
                                                       benchmark::Counter::kIsRate);
    state.counters["row_dots/s"] = benchmark::Counter(static_cast<double>(state.iterations()) * rows * n_tokens,
                                                      benchmark::Counter::kIsRate);
    state.SetLabel(kernel_isa());
}

void BM_HotKernel(benchmark::State& s) {
    const auto t = static_cast<GgmlType>(s.range(0));
    run_hot(s, t, nitro::type_traits(t).block_size == 256 ? 2048 : 2880, s.range(1));
}

/// Plain read bandwidth: sum of 64-bit words over a 1 GiB buffer, split across the pool like
/// the kernels (chunks of 1 MiB), four independent accumulators per thread.
void BM_MemoryRead(benchmark::State& state) {
    const int threads = static_cast<int>(state.range(0));
    ThreadPool pool(threads);
    static std::unique_ptr<uint64_t[]> buf;
    const size_t n = kPoolBytes / 8;
    if (!buf) {
        buf.reset(new uint64_t[n]);
        for (size_t i = 0; i < n; ++i) buf[i] = i * 0x9E3779B97F4A7C15ull;
    }
    constexpr int64_t kChunk = (1 << 20) / 8;
    std::vector<uint64_t> partial(static_cast<size_t>(threads) * 8);
    const double cpu0 = process_cpu_seconds();
    for (auto _ : state) {
        pool.parallel_for(static_cast<int64_t>(n), kChunk, [&](int64_t b, int64_t e, int ti) {
            uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            for (int64_t i = b; i < e; i += 4) {
                s0 += buf[i];
                s1 += buf[i + 1];
                s2 += buf[i + 2];
                s3 += buf[i + 3];
            }
            partial[static_cast<size_t>(ti) * 8] += s0 + s1 + s2 + s3;
        });
        benchmark::DoNotOptimize(partial.data());
    }
    set_cpu_rate(state, static_cast<double>(state.iterations()) * kPoolBytes, process_cpu_seconds() - cpu0);
    state.counters["read_GB/s"] =
        benchmark::Counter(static_cast<double>(state.iterations()) * kPoolBytes / 1e9, benchmark::Counter::kIsRate);
}

void thread_args(benchmark::internal::Benchmark* b) {
    b->ArgName("threads")->Arg(1);
    if (hw_threads() > 1) b->Arg(hw_threads());
    b->UseRealTime();
}

BENCHMARK(BM_HotKernel)
    ->ArgNames({"type", "tokens"})
    ->ArgsProduct({{static_cast<int>(GgmlType::MXFP4), static_cast<int>(GgmlType::Q8_0), static_cast<int>(GgmlType::Q4_0),
                    static_cast<int>(GgmlType::Q4_1), static_cast<int>(GgmlType::Q5_0), static_cast<int>(GgmlType::Q5_1),
                    static_cast<int>(GgmlType::IQ4_NL), static_cast<int>(GgmlType::Q2_K), static_cast<int>(GgmlType::Q3_K),
                    static_cast<int>(GgmlType::Q4_K), static_cast<int>(GgmlType::Q5_K), static_cast<int>(GgmlType::Q6_K),
                    static_cast<int>(GgmlType::IQ4_XS), static_cast<int>(GgmlType::F16)},
                   {1, 4, 16}})
    ->MinTime(0.2)
    // On a shared machine the fastest repetition is the least disturbed one.
    ->ComputeStatistics("min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); });
BENCHMARK(BM_MemoryRead)->Apply(thread_args)->MinTime(1.0);
BENCHMARK(BM_ExpertGemv_Mxfp4_GptOss20b)->Apply(thread_args)->MinTime(1.0);
BENCHMARK(BM_ExpertGemm16_Mxfp4_GptOss20b)->Apply(thread_args)->MinTime(1.0);
BENCHMARK(BM_ExpertGemv_Q8_0_Qwen3)->Apply(thread_args)->MinTime(1.0);
BENCHMARK(BM_ExpertGemv_Q4_K_Qwen3)->Apply(thread_args)->MinTime(1.0);
BENCHMARK(BM_ExpertGemm16_Q4_K_Qwen3)->Apply(thread_args)->MinTime(1.0);
BENCHMARK(BM_ExpertGemv_Q6_K_Qwen3)->Apply(thread_args)->MinTime(1.0);

}  // namespace
BENCHMARK_MAIN();
