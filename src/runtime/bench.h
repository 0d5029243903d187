// Measurements behind `nitro bench`: host memory read bandwidth, prompt/decode tok/s of the CPU
// engine, and the achieved bandwidth of the expert matrix-vector products (the decode floor is
// bytes of the selected experts per token / memory read bandwidth; DESIGN.md point 5).
#pragma once

#include "runtime/session.h"

#include <cstdint>
#include <string>

namespace nitro {

/// Read bandwidth of host memory in bytes/s: `threads` threads sum a `bytes` buffer (best of
/// `reps`). The buffer must be much larger than the last-level cache (default 1 GiB).
double measure_read_bandwidth(cpu::ThreadPool& pool, size_t bytes = size_t{1} << 30, int reps = 3);

struct EngineBench {
    int64_t n_prompt = 0, n_gen = 0;
    double prompt_tok_s = 0, decode_tok_s = 0;
    PhaseTimes prompt_ms{};     ///< prompt (prefill) time in each phase, ms for the whole prompt
    PhaseTimes decode_ms{};     ///< decode time per token in each phase, ms (Session::phase_times)
    PhaseTimes decode_bytes{};  ///< weight bytes one decode token reads in each phase (0: none)
};
/// Weight bytes one decode token reads per phase: q/k/v, attn_output, router, the
/// n_expert_used selected experts' gate+up and down (share n_expert_used / n_expert of each
/// expert tensor), LM head. Activations and the KV cache are not counted.
PhaseTimes decode_weight_bytes(const Model& model);
/// Prefills `n_prompt` pseudo-random tokens, then decodes `n_gen` tokens greedily.
EngineBench bench_engine(const Model& model, const SessionOptions& so, int64_t n_prompt, int64_t n_gen);

struct ExpertGemvBench {
    double bytes_per_token = 0;  ///< expert weight bytes one decode token reads (all layers)
    double gb_s = 0;             ///< achieved weight-streaming rate of the expert GEMVs, GB/s
    double ms_per_token = 0;     ///< time of all layers' expert products for one token
};
/// Times the MoE expert products of one decode token (gate, up, down of n_expert_used experts in
/// every layer), cycling through experts so weights come from DRAM, not cache.
ExpertGemvBench bench_expert_gemv(const Model& model, cpu::ThreadPool& pool, int tokens = 16);

}  // namespace nitro
