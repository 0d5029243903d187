// The benchmark protocol of `nitro bench -o DIR` (docs/bench.md): a ladder of engine modes x
// VRAM budgets x context depths, each step measured as prefill of a prompt filling the KV cache
// to the depth (prompt tok/s, TTFT) then decode at that depth (decode tok/s); runs mirrored
// against a peer command (A B B A ...) so slow drift of the machine cancels in the ratio. The
// pieces here are the pure parts (ladder, order, rate arithmetic, peer output) and one measured
// step over the Engine interface (the same forward pass `nitro run` uses).
#pragma once

#include "runtime/engine.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace nitro {

/// "4096", "4k" (4096), "128K" (131072): a context length in tokens. Throws nitro::Error for
/// anything else (empty, non-numeric, zero, negative).
int64_t parse_ctx_tokens(const std::string& s);

/// One step of the ladder: where it runs and how deep the context is.
struct SweepStep {
    EngineMode mode = EngineMode::Cpu;
    std::optional<double> budget_gib;  ///< --vram-budget of this step (none for cpu)
    int64_t ctx_requested = 0;         ///< the depth asked for, tokens
    int64_t ctx = 0;                   ///< the depth run (capped to fit the model), tokens
    std::string note;                  ///< why ctx differs from ctx_requested ("" if it does not)
    std::string skip_reason;           ///< non-empty: the step is not run, and this says why
    std::string routing;               ///< routing scenario (route_replay.h; set by the caller, "" = not named)
};

/// The ladder in run order: for each mode, each budget (one step without a budget for cpu, and
/// for gpu/hybrid/auto when `budgets` is empty), each context. A depth d needs d + n_gen
/// positions; a depth above n_ctx_train - n_gen is capped to it (note says so), and a capped
/// depth equal to one already in the ladder of that mode and budget is kept as a skipped step
/// with the reason. n_ctx_train <= 0 means unknown (no cap).
std::vector<SweepStep> plan_sweep(const std::vector<EngineMode>& modes, const std::vector<double>& budgets,
                                  const std::vector<int64_t>& ctxs, int64_t n_ctx_train, int64_t n_gen);

/// One run in the schedule: step index, repetition, and whether the peer runs it.
struct SweepRun {
    size_t step = 0;
    int rep = 0;
    bool peer = false;
    bool operator==(const SweepRun&) const = default;
};
/// The run order: step by step; within a step, `repeat` repetitions, mirrored when there is a
/// peer: rep 0 nitro then peer, rep 1 peer then nitro, ... (A B B A), so a linear drift over the
/// step affects both sides equally in the sums. Steps with a skip reason get no runs.
std::vector<SweepRun> mirrored_order(const std::vector<SweepStep>& steps, int repeat, bool with_peer);

/// Tokens processed in one timed interval.
struct RateSample {
    int64_t tokens = 0;
    double seconds = 0;
};
/// Tokens per second over several intervals: total tokens / total seconds (not the mean of the
/// per-interval rates, which over-weights short, fast intervals). 0 when no time was timed.
double weighted_rate(const std::vector<RateSample>& samples);

/// What one measured step of the nitro engine gives (all MEASURED in the run).
struct StepMeasurement {
    int64_t prompt_tokens = 0, decode_tokens = 0;
    double prompt_seconds = 0;  ///< wall time of the prefill eval
    double ttft_seconds = 0;    ///< prefill eval + choosing the first token (greedy)
    double decode_seconds = 0;  ///< wall time of all decode steps
    int64_t minor_faults = 0, major_faults = 0;
    int64_t peak_rss_bytes = 0;  ///< VmHWM of the process after the run (reset before it where the kernel allows)
    /// GPU memory of the process after the run (Engine::process_vram_bytes; 0: no GPU engine or no
    /// NVML). The GPU engine allocates its memory when it is made, so this is the run's peak but for
    /// memory the CUDA libraries take and free within a step.
    uint64_t process_vram_bytes = 0;
    bool peak_rss_reset = false; ///< true when the peak was reset at the start of the run
    /// (token, expert) selections computed by each device; empty when the engine does not count
    /// them (GPU-all leaves its placement counters at zero).
    std::optional<uint64_t> expert_pairs_gpu, expert_pairs_cpu;
};
/// Prefills `depth` pseudo-random tokens (the KV cache then holds `depth` positions), takes the
/// greedy first token, then decodes `n_gen` tokens one at a time. The engine must be fresh
/// (n_past() == 0) with n_ctx() >= depth + n_gen.
StepMeasurement measure_step(Engine& engine, const Model& model, int64_t depth, int64_t n_gen);

/// A figure of a record: {"value", "unit", "kind"} with kind MEASURED or CALCULATED.
nlohmann::json figure(double value, const char* unit, bool measured);

/// Model facts for records: path, file bytes, XXH3-64 of the file (hex, as in trace headers),
/// n_ctx_train, architecture, and the quant mix (tensors and bytes per weight type, largest first).
nlohmann::json model_facts(const Model& model);

/// Machine facts for records: CPU model and cores (/proc/cpuinfo), kernel ISA level, RAM
/// (/proc/meminfo), GPU names and NVIDIA driver (/proc/driver/nvidia, "none" when absent).
nlohmann::json machine_facts();

/// Rates a peer printed for one step. Accepts llama-bench `-o json` (an array of tests: the
/// prompt test is the one with n_gen 0 and the smallest n_depth, the decode test the one with
/// n_prompt 0 and the largest n_depth; avg_ts of each) or an object with prompt_tok_s and
/// decode_tok_s (nitro bench --json, bench/llama_cpp_bench). Throws nitro::Error saying what is
/// missing.
struct PeerRates {
    double prompt_tok_s = 0, decode_tok_s = 0;
    int64_t prompt_tokens = 0, decode_tokens = 0;  ///< as the peer reported them (0: not reported)
    int64_t decode_depth = 0;                      ///< n_depth of the peer's decode test (llama-bench)
};
PeerRates parse_peer_output(const std::string& text);

/// `tmpl` with {model} {ctx} {n_prompt} (both the step's depth) {n_gen} {threads} {mode}
/// {budget} (GiB, 0 without one) replaced; the model path is shell-quoted. A placeholder is '{',
/// lower-case letters or '_', '}' (not after '$'); other braces are kept as text. Throws
/// nitro::Error for an unknown {placeholder}.
std::string expand_peer_command(const std::string& tmpl, const std::string& model, int64_t ctx, int64_t n_gen,
                                int threads, const std::string& mode = "cpu", double budget_gib = 0);

/// The result of a command run with a time limit.
struct CommandResult {
    int exit_code = -1;      ///< exit status; -1 when killed or not started
    bool timed_out = false;  ///< killed (with its process group) after the limit
    std::string out, err;    ///< standard output; the last 4 KiB of standard error
    double seconds = 0;
};
/// Runs `cmd` with /bin/sh -c in its own process group, collecting output; kills the group after
/// `timeout_s` seconds. Never blocks longer than the limit plus a moment.
CommandResult run_command_with_timeout(const std::string& cmd, double timeout_s);

}  // namespace nitro
