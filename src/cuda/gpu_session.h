// GPU-all session: the whole model on one CUDA device, mirroring runtime/session.h's API
// (eval(tokens, all_logits, logits)). The forward pass is the CPU reference's, op for op
// (src/runtime/session.cpp), built from the kernels of cuda/ops.h.
//
// Built for the hybrid executor:
//   - each layer's experts live in a slot pool addressed through a slot table (expert -> slot,
//     -1 = not on the GPU); GPU-all is the special case "every expert has a slot";
//   - the MoE op adds an optional partial sum computed elsewhere (set_moe_partial);
//   - a single-token step writes each layer's router result (normalised hidden state, expert
//     ids, weights) straight into pinned host memory and then a per-layer ready flag
//     (router_host), so CPU workers can start without a copy or a stream synchronisation;
//   - a device context (cuda/context.h) owns streams, events, allocator, graphs.
#pragma once

#include "runtime/engine.h"
#include "runtime/model.h"
#include "runtime/session.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace nitro::cuda {

class DeviceContext;

/// One layer's router result of the latest single-token step, in pinned host memory written by
/// the GPU. Valid once *ready equals the step number returned by GpuSession::step().
struct RouterHostView {
    const float* h = nullptr;        ///< [n_embd] normalised hidden state (input of the experts)
    const int32_t* ids = nullptr;    ///< [n_expert_used]
    const float* weights = nullptr;  ///< [n_expert_used]
    const volatile uint32_t* ready = nullptr;
};

class GpuSession final : public Engine {
public:
    /// Uploads the model (progress bar on stderr when opt.progress). Throws nitro::Error when a
    /// tensor type is not supported on the GPU or the budget cannot hold the model.
    GpuSession(const Model& model, const SessionOptions& so, const GpuOptions& go);
    ~GpuSession() override;

    void eval(std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits) override;
    int64_t n_past() const override { return n_past_; }
    int64_t n_ctx() const override { return n_ctx_; }
    void truncate(int64_t n) override;
    std::string describe() const override;

    DeviceContext& context() { return *ctx_; }
    /// Kernel launches of one single-token step (nodes of the captured decode graph, or counted
    /// launches without graphs). 0 before the first decode step.
    int launches_per_token() const { return launches_per_token_; }
    /// Bytes of device memory in use / the budget.
    uint64_t vram_used() const;
    uint64_t vram_budget() const;

    /// Number of single-token steps run so far (the value the ready flags take).
    uint32_t step() const { return step_; }
    RouterHostView router_host(int layer) const;

    /// Slot table of a layer: slot_of[e] = slot holding expert e, or -1 (not resident; its
    /// contribution must come through set_moe_partial). In GPU-all every expert is resident.
    void set_slot_table(int layer, std::span<const int32_t> slot_of);
    /// Device buffer [n_ubatch, n_embd] f32 that the MoE op of `layer` adds before the residual
    /// (nullptr to stop). The caller fills it for the tokens of the next eval.
    void set_moe_partial(int layer, const float* device_partial);

    struct Impl;  ///< implementation detail (gpu_session.cu)

private:
    std::unique_ptr<Impl> m_;
    std::unique_ptr<DeviceContext> ctx_;
    int64_t n_ctx_ = 0, n_past_ = 0;
    int launches_per_token_ = 0;
    uint32_t step_ = 0;
};

/// Installs the GPU engine factory (runtime/engine.h).
void register_engine();

}  // namespace nitro::cuda
