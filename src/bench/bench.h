// Measurements behind `nitro bench`: host memory read bandwidth, prompt/decode tok/s of the CPU
// engine, the achieved bandwidth of the expert products (the decode floor is bytes of the
// selected experts per token / memory read bandwidth; docs/architecture.md, "Principles"), the expert kernels per
// weight type and ISA level against the read probe, and page faults.
#pragma once

#include "runtime/session.h"

#include <cstdint>
#include <string>
#include <vector>

namespace nitro {

/// Anonymous memory for benchmarks, 2 MiB aligned with the transparent-huge-page hint, first
/// touched in parallel by `pool` (so pages spread over the threads as the engine's do).
class BenchBuffer {
public:
    BenchBuffer(cpu::ThreadPool& pool, size_t bytes);
    ~BenchBuffer();
    BenchBuffer(const BenchBuffer&) = delete;
    BenchBuffer& operator=(const BenchBuffer&) = delete;
    uint8_t* data() const { return data_; }
    size_t size() const { return size_; }

private:
    void* base_ = nullptr;  ///< the mapping (data_ is its first 2 MiB boundary)
    uint8_t* data_ = nullptr;
    size_t size_ = 0, map_ = 0;
};

/// Read bandwidth of host memory in bytes/s: `threads` threads sum a `bytes` buffer (best of
/// `reps`). The buffer must be much larger than the last-level cache (default 1 GiB).
double measure_read_bandwidth(cpu::ThreadPool& pool, size_t bytes = size_t{1} << 30, int reps = 3);
/// Read bandwidth over existing memory: the best of `reps` parallel sums of `bytes` at `data`
/// (8-byte aligned), bytes / s.
double read_rate(cpu::ThreadPool& pool, const uint8_t* data, size_t bytes, int reps = 2);

/// Page faults of this process so far (getrusage): minor (page already in RAM, e.g. the page
/// cache) and major (read from disk).
struct PageFaults {
    int64_t minor = 0, major = 0;
};
PageFaults page_faults();
PageFaults operator-(const PageFaults& a, const PageFaults& b);

struct EngineBench {
    int64_t n_prompt = 0, n_gen = 0;
    double prompt_tok_s = 0, decode_tok_s = 0;
    PhaseTimes prompt_ms{};     ///< prompt (prefill) time in each phase, ms for the whole prompt
    PhaseTimes decode_ms{};     ///< decode time per token in each phase, ms (Session::phase_times)
    PhaseTimes decode_bytes{};  ///< weight bytes one decode token reads in each phase (0: none)
    PageFaults prompt_faults, decode_faults;  ///< during the prompt; during all decode steps
};
/// Weight bytes one decode token reads per phase: q/k/v, attn_output, router, the
/// n_expert_used selected experts' gate+up and down (share n_expert_used / n_expert of each
/// expert tensor), LM head. Activations and the KV cache are not counted.
PhaseTimes decode_weight_bytes(const Model& model);
/// Prefills `n_prompt` pseudo-random tokens, then decodes `n_gen` tokens greedily.
EngineBench bench_engine(const Model& model, const SessionOptions& so, int64_t n_prompt, int64_t n_gen);

struct ExpertGemvBench {
    double bytes_per_token = 0;  ///< expert weight bytes one step reads (all layers)
    double gb_s = 0;             ///< achieved weight-streaming rate of the expert products, GB/s
    double ms_per_token = 0;     ///< time of all layers' MoE steps for one step
};
/// Times the MoE step (cpu::moe_ffn: gate, up, down of n_expert_used experts and the weighted sum)
/// of every layer of the model for `steps` steps of `tokens` tokens that all chose the same
/// experts (each expert read once per step), cycling through experts so weights come from DRAM.
ExpertGemvBench bench_expert_gemv(const Model& model, cpu::ThreadPool& pool, int steps = 16, int tokens = 1);

/// The expert kernels per weight type and ISA level on random experts in anonymous memory.
struct KernelBenchOptions {
    int64_t n_embd = 2880, n_ff = 2880;  ///< expert shape (rounded down to whole blocks per type, at least one)
    int n_used = 4;                      ///< experts per step
    std::vector<GgmlType> types;
    std::vector<std::string> isas;   ///< levels to run (cpu::available_isas())
    std::vector<int> tokens{1, 4, 16};
    size_t pool_bytes = size_t{1} << 30;  ///< experts rotated through (far above the LLC)
    double seconds = 0.3;                 ///< per measurement, after one warm-up step
};
struct KernelBenchRow {
    GgmlType type;
    std::string isa;
    int tokens = 1;
    int64_t n_embd = 0, n_ff = 0;
    double gb_s = 0;         ///< weight bytes read / wall time
    double ms_per_step = 0;  ///< one moe_ffn of n_used experts x tokens
    double bytes_per_step = 0;
    double read_gb_s = 0;    ///< read probe made just before this cell over the same memory, GB/s
};
/// Runs cpu::moe_ffn on `n_used` experts per step (all tokens choosing the same ones), rotating
/// through pool_bytes of random experts of each type, at each level and token count. Leaves the
/// kernel level as it found it.
std::vector<KernelBenchRow> bench_expert_kernels(cpu::ThreadPool& pool, const KernelBenchOptions& o);

/// Fills `n` bytes with blocks of type `t` holding random quants and moderate, finite scales
/// (what kernels meet in real weights), in parallel; same seed, same bytes.
void fill_random_blocks(cpu::ThreadPool& pool, GgmlType t, uint8_t* data, size_t n, uint64_t seed);

}  // namespace nitro
