// The GPU engine's copy backend for adaptive residency (cache/expert_cache.h CopyBackend): a
// bounded set of pinned, write-combined staging buffers (one expert each; never the whole model:
// pinning tens of GB fails on real machines, ollama #11772) that the CPU fills while it computes an
// admitted expert (cpu::moe_ffn's copy-on-compute), each copied into its VRAM slot on the copy
// stream with an event per buffer; the ExpertCache flips the slot only once that event completed.
#pragma once

#include "cache/expert_cache.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace nitro::cuda {

/// Device destinations of one expert in its slot: gate, up and down slices (in that order in the
/// staging buffer, see cpu::moe_ffn).
struct SlotDst {
    uint8_t* part[3] = {nullptr, nullptr, nullptr};
    size_t bytes[3] = {0, 0, 0};
};

class SlotCopier final : public CopyBackend {
public:
    /// Pins up to `want` buffers of `buffer_bytes` (fewer, with a warning on stderr, when
    /// cudaHostAlloc fails or `max_pinned` >= 0 caps them: fault injection); copies go on `stream`.
    /// `dst(layer, slot)` gives a slot's device destinations. `fail_every` > 0 makes every N-th copy
    /// report failure (fault injection for tests).
    SlotCopier(cudaStream_t stream, int want, size_t buffer_bytes, int max_pinned, int fail_every,
               std::function<SlotDst(int layer, int slot)> dst);
    ~SlotCopier() override;
    SlotCopier(const SlotCopier&) = delete;
    SlotCopier& operator=(const SlotCopier&) = delete;

    int n_buffers() const override { return static_cast<int>(buf_.size()); }
    uint8_t* buffer_data(int buffer) override { return buf_.at(static_cast<size_t>(buffer)); }
    bool submit(int buffer, int layer, int slot, ExpertId expert) override;
    State poll(int buffer) override;
    /// Copies started so far.
    uint64_t copies() const { return copies_; }

private:
    cudaStream_t stream_;
    size_t bytes_;
    int fail_every_;
    std::function<SlotDst(int, int)> dst_;
    std::vector<uint8_t*> buf_;
    std::vector<cudaEvent_t> ev_;
    std::vector<uint8_t> injected_failure_;
    uint64_t copies_ = 0;
};

}  // namespace nitro::cuda
