// The GPU engine: the forward pass of runtime/forward.h on one CUDA device, in the placement a
// plan (runtime/placement.h) gives it.
//
//   - GPU-all: every routed expert resident (slot s of a layer holds expert s);
//   - hybrid: the dense core, the K/V cache and the experts the plan makes resident live in VRAM;
//     every other expert is computed by the CPU straight from the mmap'd file while the GPU
//     computes the resident ones. docs/hybrid.md has the protocol; in short, for a decode step
//     (one CUDA graph): per MoE layer the GPU writes the router result (normalised hidden state,
//     expert ids, weights) into pinned host memory and sets a per-layer flag; a CPU thread team
//     waiting on that flag computes the non-resident experts (cpu::moe_ffn with the resident mask)
//     into a pinned partial-sum buffer and sets a second flag; meanwhile the GPU runs the resident
//     experts, then waits on the device for the second flag (a one-thread spin kernel, no host
//     synchronisation) and adds both. Multi-token chunks run the same split with a host
//     synchronisation per layer.
//   - a device context (cuda/context.h) owns streams, allocator and budget.
#pragma once

#include "runtime/engine.h"
#include "runtime/model.h"
#include "runtime/placement.h"
#include "runtime/sequence_engine.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace nitro::cuda {

struct OpProfile;  // gpu/op_profile.h

class DeviceContext;

/// One layer's router result of the latest single-token step, in pinned host memory written by
/// the GPU. Valid once *ready equals the step number returned by GpuSession::step().
struct RouterHostView {
    const float* h = nullptr;        ///< [n_embd] normalised hidden state (input of the experts)
    const int32_t* ids = nullptr;    ///< [n_expert_used]
    const float* weights = nullptr;  ///< [n_expert_used]
    const volatile uint32_t* ready = nullptr;
};

class GpuSession final : public SequenceEngine {
public:
    /// Plans the placement (go.mode: Gpu = every expert resident or a clear error; Hybrid / Auto =
    /// what the budget holds), uploads the dense core and the resident experts (progress bar on
    /// stderr when go.progress) and prints the plan's summary line. Throws nitro::Error when a
    /// tensor type is not supported on the GPU or the budget cannot hold the dense core.
    /// Sequences (runtime/sequence_engine.h): SessionOptions::n_seq, each with its own K/V region of
    /// n_ctx positions (and, with DeltaNet layers, its own recurrent state) in VRAM; recurrent-state
    /// snapshots at the end of each multi-token evaluation (SnapshotPolicy::EndOfEval). Within a
    /// chunk every op but attention and the DeltaNet recurrence runs over all rows at once, those
    /// two per sequence. A chunk of one row is a decode step of its sequence (a CUDA graph per
    /// sequence). A row's logits equal those of the same token evaluated alone in its sequence bit
    /// for bit when the chunk, and the chunks of that sequence evaluated alone, have at most
    /// kGemvMaxTokens (8) rows (the same GEMV arithmetic per row); above that the matmuls take the
    /// GEMM path (activations rounded to f16), whose rounding differs with the row count.
    GpuSession(const Model& model, const SessionOptions& so, const GpuOptions& go);
    ~GpuSession() override;

    std::string describe() const override;
    const ExpertCounters* expert_counters() const override;
    const ExpertCache* expert_cache() const override;

    DeviceContext& context() { return *ctx_; }
    const Plan& plan() const;
    /// Kernel launches of one single-token step (nodes of the captured decode graph). 0 before the
    /// first decode step.
    int launches_per_token() const { return launches_per_token_; }
    /// Programmatic (PDL, cuda/pdl.cuh) edges between the kernels of that graph: a kernel scheduled
    /// while the one before it still runs. 0 where PDL is off or the device lacks it.
    int pdl_edges_per_token() const { return pdl_edges_per_token_; }
    /// Per-op GPU time of single-token steps (gpu/op_profile.h): on = the decode graphs are
    /// captured again with a timing mark before each op of the forward pass and a new profile
    /// starts; off = plain graphs again. For benchmarks (nitro_cuda_bench --ops).
    void set_op_profile(bool on);
    /// The profile of the decode steps run since set_op_profile(true).
    const OpProfile& op_profile() const;
    /// Bytes of device memory the engine's allocator holds / its budget (the plan's budget minus
    /// the CUDA runtime's own measured overhead).
    uint64_t vram_used() const;
    uint64_t vram_budget() const;
    /// GPU memory the whole process uses now (device used minus what was used before it started,
    /// NVML; 0 when NVML is unavailable). What `--vram-budget` promises to bound.
    uint64_t process_vram() const;
    uint64_t process_vram_bytes() const override { return process_vram(); }

    /// The bytes of VRAM slot `slot` of layer `layer` (gate, up and down slices, the layout of
    /// cpu::moe_ffn's copy-on-compute), read back from the device: for tests and diagnostics.
    std::vector<uint8_t> slot_bytes(int layer, int slot) const;

    /// Number of single-token steps run so far (the value the ready flags take).
    uint32_t step() const { return step_; }
    RouterHostView router_host(int layer) const;

    struct Impl;  ///< implementation detail (gpu_session.cpp)

protected:
    // The executor of the SequenceEngine.
    /// One forward chunk: a captured decode step of one sequence (one row, when graphs are on and
    /// not every row's logits are asked for), else a plain chunk.
    void exec_chunk(const ChunkArgs& c, float* out) override;
    /// The plan's group_tokens (docs/hybrid.md "Layer-major groups").
    int64_t exec_group_tokens() const override;
    /// c's rows (one sequence, more than n_ubatch) as one layer-major group of n_ubatch blocks
    /// (runtime/forward.h forward_blocks).
    void exec_group(const ChunkArgs& c, float* out) override;
    void state_reset(int seq) override;
    void state_save(int seq, std::vector<float>& out) override;
    void state_restore(int seq, const std::vector<float>& in) override;
    /// A captured decode graph has the route callback's host copies and the replay's copies baked in.
    void routing_changed() override;

private:
    /// Hybrid decode step: the CPU's experts of every layer, as the GPU's router results arrive.
    void cpu_decode_step();
    /// Counters, GPU timestamps and route events of the decode step that just finished (sequence
    /// `seq`, at position `pos`).
    void after_decode_step(int seq, int64_t pos);
    /// (Re)allocates every layer's slot pools for `plan`'s resident experts, uploads them, and sets
    /// the slot tables (an empty plan frees the pools).
    void install_slots(const Plan& plan, bool progress);

    std::unique_ptr<DeviceContext> ctx_;
    std::unique_ptr<Impl> m_;
    int launches_per_token_ = 0;
    int pdl_edges_per_token_ = 0;
    uint32_t step_ = 0;
    uint64_t runtime_bytes_ = 0;    ///< GPU memory of the CUDA runtime + its modules + cuBLAS workspace
    bool runtime_measured_ = false;
};

/// Installs the GPU engine factory (runtime/engine.h).
void register_engine();

}  // namespace nitro::cuda
