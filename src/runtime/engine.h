// The engine a front end drives: the CPU reference (runtime/session.h) or the GPU-all CUDA
// session (src/gpu/gpu_session.h), chosen by --mode. Both evaluate tokens the same way:
// eval(tokens, all_logits, logits) appends `tokens` to the sequence and returns logits. Both
// also hold several sequences (SessionOptions::n_seq) and evaluate rows of all of them in one
// batch (eval_batch: the server's --parallel).
//
// nitro_lib has no CUDA code: a CUDA build registers its factory at start-up
// (nitro::cuda::register_engine(), called from the CLI's main), and --mode gpu in a build
// without CUDA is a clear error.
#pragma once

#include "cache/expert_cache.h"
#include "runtime/model.h"
#include "runtime/placement.h"
#include "runtime/prefill_cost.h"
#include "runtime/engine_types.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace nitro {

class RouteReplay;

/// Where the model runs (--mode): the CPU reference; the GPU with every expert resident (fails if
/// the budget cannot hold them); hybrid (the dense core and the experts that fit on the GPU, the
/// other experts computed by the CPU at the same time); auto: gpu when everything fits the
/// budget, hybrid when it does not, cpu when there is no GPU (or no CUDA build).
enum class EngineMode { Cpu, Gpu, Hybrid, Auto };

/// Options of the GPU engine (ignored in CPU mode).
struct GpuOptions {
    int device = 0;                 ///< --gpu N
    double vram_budget_gib = 0;     ///< --vram-budget GiB; 0 = free memory minus a margin
    bool graphs = true;             ///< capture decode steps as CUDA graphs
    bool progress = true;           ///< load progress bar on stderr
    EngineMode mode = EngineMode::Gpu;  ///< Gpu or Hybrid (make_engine resolves Auto)
    // Placement (runtime/placement.h), llama.cpp's flags:
    bool cpu_moe = false;                    ///< --cpu-moe
    int n_cpu_moe = 0;                       ///< --n-cpu-moe N
    std::vector<std::string> override_tensor;  ///< -ot REGEX=DEVICE, in order
    std::string hot_set;                     ///< --hot-set FILE
    std::string residency = "auto";          ///< --residency auto|hot-set|even|layers
    /// Adaptive residency of the hybrid (cache/expert_cache.h): --cache-policy, --static-slots,
    /// --refresh-every, --admit-per-token, --prefill-weight, --staging-buffers.
    ResidencyOptions adapt;
    bool verbose = false;                    ///< per-layer plan and counters on stderr
    /// Fault injection for tests (no command-line flag): at most this many staging buffers can be
    /// pinned (< 0: no limit); every N-th copy of an admitted expert fails (0: none).
    int test_max_pinned_buffers = -1;
    int test_fail_copy_every = 0;
    /// Prompt chunks in hybrid placement (runtime/prefill_cost.h, docs/hybrid.md "Prompts"):
    /// --prefill-cost-model, --prefill-stage-slots (VRAM scratch slots, 0 = never stage),
    /// --prefill-stage-buffers (pinned host buffers), --prefill-stage-threads (fill team).
    PrefillCostMode prefill_mode = PrefillCostMode::Auto;
    int prefill_stage_slots = 4;
    int prefill_stage_buffers = 6;
    int prefill_stage_threads = 0;  ///< 0 = the engine's threads (-t); half of them beside a CPU share
    /// --prefill-group: tokens of a layer-major prompt group (PlacementOptions::prefill_group;
    /// -1 auto, 0 off)
    int64_t prefill_group = -1;
    /// --prefill-pin: GiB of the off-GPU experts' pages in the mapped model file registered with
    /// CUDA in place (page-locked, read-only), so prompts copy those experts by DMA straight from
    /// the file instead of through the CPU-filled ring (gpu/prefill_stager.h); bounded, never
    /// the whole model unless asked. -1 = auto (default: prefill_pin_auto_bytes, a quarter of RAM at
    /// most), 0 = none.
    double prefill_pin_gib = -1;
    int test_max_pinned_stage_buffers = -1;  ///< fault injection (no flag): pinned staging buffers at most
};

/// The placement options (runtime/placement.h) that the engine options ask for: llama.cpp's flags,
/// the residency source, the prompt staging slots (none with --prefill-cost-model cpu), at a budget
/// of budget_gib whole-process GiB with runtime_overhead_bytes taken by the CUDA runtime. `hot` is
/// the hot set read from go.hot_set (may be null). Throws nitro::Error for a bad -ot pattern or
/// --residency value. One function for `nitro plan` and the GPU engine, so both plan alike.
PlacementOptions placement_options(const GpuOptions& go, double budget_gib, uint64_t runtime_overhead_bytes, const HotSet* hot);

/// What each layer's routed experts cost, counted by an engine that places experts (the GPU
/// engine; zero-filled for GPU-all). Pairs are (token, selected expert); ms are wall-clock.
struct ExpertLayerCounters {
    uint64_t gpu_pairs = 0;   ///< selections computed by the GPU (resident experts)
    uint64_t cpu_pairs = 0;   ///< selections computed by the CPU
    uint64_t cpu_experts = 0; ///< distinct experts the CPU computed (summed over steps)
    uint64_t cpu_bytes = 0;   ///< expert weight bytes the CPU read
    double cpu_ms = 0;        ///< CPU time computing this layer's experts
    double cpu_decode_ms = 0; ///< the part of cpu_ms spent in decode steps
    double gpu_ms = 0;        ///< GPU time from the router's result to the wait for the CPU (decode steps)
    double wait_ms = 0;       ///< GPU time waiting for the CPU's partial sum (decode steps)
    // Prompt chunks of the hybrid (docs/hybrid.md "Prompts"): experts by path, summed over chunks.
    uint64_t prompt_resident_experts = 0;  ///< distinct resident experts a prompt chunk used
    uint64_t prompt_cpu_experts = 0;       ///< distinct experts the CPU computed for a prompt chunk
    uint64_t staged_experts = 0;  ///< experts staged to a GPU scratch slot for a prompt chunk
    uint64_t staged_pairs = 0;    ///< selections computed by the GPU from a staging slot (not in gpu_pairs)
    uint64_t staged_bytes = 0;    ///< bytes those experts sent host -> device
    uint64_t staged_in_place = 0; ///< of the staged experts, those copied straight from pinned file pages (--prefill-pin)
    double stage_ms = 0;          ///< host time staging them (filling pinned buffers, enqueueing copies)
    double prompt_cpu_ms = 0;     ///< the part of cpu_ms spent in prompt chunks
    double prompt_idle_ms = 0;    ///< prompt chunks: GPU time waiting for staged copies and for the CPU's partial sum
    CacheCounters cache;      ///< the expert cache's counters (hybrid placement; zeros otherwise)
    void add(const ExpertLayerCounters& o);
};
struct ExpertCounters {
    std::vector<ExpertLayerCounters> layers;
    uint64_t decode_steps = 0;    ///< single-token steps
    uint64_t prefill_tokens = 0;  ///< tokens evaluated in multi-token chunks
    /// Layer-major prompt groups run (docs/hybrid.md "Layer-major groups") and their tokens (also
    /// in prefill_tokens).
    uint64_t prompt_groups = 0;
    uint64_t prompt_group_tokens = 0;
    ExpertLayerCounters total() const;
};

class Engine {
public:
    virtual ~Engine() = default;
    /// As Session::eval.
    virtual void eval(std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits) = 0;
    virtual int64_t n_past() const = 0;
    virtual int64_t n_ctx() const = 0;
    virtual void truncate(int64_t n) = 0;

    // Several sequences (continuous batching in the server). An engine holds n_seq() sequences,
    // each with its own positions and K/V; eval/n_past/truncate above are sequence 0. The CPU and
    // GPU engines hold SessionOptions::n_seq of them; the defaults below serve an engine of one.

    /// Sequences held (>= 1).
    virtual int n_seq() const { return 1; }
    /// As Session::eval_batch. The default (one sequence) takes rows of sequence 0 only and
    /// runs them through eval(); any other sequence id is a nitro::Error.
    virtual void eval_batch(const SeqBatch& b, std::vector<float>& logits);
    /// Positions held by sequence `seq`. Default: n_past() for sequence 0.
    virtual int64_t seq_n_past(int seq) const;
    /// Forgets positions >= n of sequence `seq`. Default: truncate(n) for sequence 0.
    virtual void seq_truncate(int seq, int64_t n);
    /// One line saying what runs where (printed by `nitro run`).
    virtual std::string describe() const = 0;
    /// Installs a callback for every (token, layer) routing decision once it is final (router
    /// traces). Returns false if this engine cannot report routing.
    virtual bool set_route_callback(std::function<void(const RouteEvent&)> cb) { return false; }
    /// BENCHMARK ONLY: takes every expert choice from `replay` (runtime/route_replay.h) instead of
    /// the router, from the next eval on (null: the router again); the outputs are then not the
    /// model's. Returns false if this engine cannot replay routing.
    virtual bool set_route_replay(std::shared_ptr<RouteReplay> replay) { return false; }
    /// Bytes of host memory held by the K/V cache (0 when it lives on the GPU).
    virtual uint64_t kv_host_bytes() const { return 0; }
    /// GPU memory this process uses now, bytes (NVML; 0 for the CPU engine or without NVML).
    virtual uint64_t process_vram_bytes() const { return 0; }
    /// Expert placement counters since construction (null when the engine does not place experts).
    virtual const ExpertCounters* expert_counters() const { return nullptr; }
    /// The expert cache of an engine with adaptive residency (the hybrid), else null.
    virtual const ExpertCache* expert_cache() const { return nullptr; }
    /// Routed-expert work of the CPU MoE step since construction (distinct experts per layer per
    /// forward chunk, (token, expert) rows, weight bytes); null when the engine does not count it
    /// (the GPU engines).
    virtual const MoeWork* moe_work() const { return nullptr; }
    /// Tokens eval_batch runs as one layer-major group (docs/hybrid.md "Layer-major groups") when
    /// a batch is rows of one sequence only and longer than n_ubatch: each off-GPU expert then
    /// crosses PCIe once per layer for the whole group instead of once per n_ubatch block. 0: no
    /// groups (every batch runs in n_ubatch chunks). The server's scheduler hands a lone prompt to
    /// the engine in batches of this size.
    virtual int64_t prompt_group_tokens() const { return 0; }
};

using GpuEngineFactory =
    std::function<std::unique_ptr<Engine>(const Model&, const SessionOptions&, const GpuOptions&)>;

/// Installs the GPU engine factory, the function that counts usable CUDA devices and the
/// host-to-device bandwidth probe (a CUDA build does this once at start-up).
void set_gpu_engine_factory(GpuEngineFactory f, std::function<int()> device_count,
                            std::function<double(uint64_t)> h2d_gb_s = {});
/// True when a GPU engine factory is installed.
bool gpu_engine_available();
/// Throws nitro::Error naming the missing CUDA backend when `mode` (gpu or hybrid) needs a GPU
/// engine and this binary has none; does nothing for cpu and auto.
void require_gpu_engine(EngineMode mode);
/// CUDA devices usable by the GPU engine (0 without a CUDA build, a driver or a device).
int gpu_device_count();
/// Host-to-device copy bandwidth of device 0 over PCIe (or the link it has), GB/s (1e9 bytes/s):
/// the best of three copies of `bytes` from pinned host memory, MEASURED now; 0 without a GPU.
double gpu_h2d_gb_s(uint64_t bytes);

/// Parses "cpu", "gpu", "hybrid", "auto". Throws nitro::Error otherwise.
EngineMode parse_engine_mode(const std::string& s);
const char* engine_mode_name(EngineMode m);

/// Makes the engine for `mode` (Auto: the GPU engine in gpu-or-hybrid placement when a device
/// exists, else the CPU). Throws nitro::Error for --mode gpu/hybrid in a build without CUDA or on
/// a machine without a GPU.
std::unique_ptr<Engine> make_engine(EngineMode mode, const Model& model, const SessionOptions& so,
                                    const GpuOptions& go);

}  // namespace nitro
