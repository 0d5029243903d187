// The recurrent state of Gated DeltaNet layers (qwen3next), per sequence: what a DeltaNet layer
// carries from one token to the next instead of a K/V cache (llama.cpp llama_memory_recurrent:
// its r (conv) and s (ssm) tensors, F32).
//
// Per DeltaNet layer and sequence:
//   conv state  [conv_dim, d_conv - 1]  the last d_conv - 1 inputs of the causal conv1d (oldest first per channel)
//   delta state [n_v_heads, d, d]       the gated delta rule's S per value head, stored transposed (cpu/delta_net.h)
// A sequence's state of all layers is one contiguous block, so a snapshot (a checkpoint for prefix
// reuse) is one copy. Unlike K/V entries, a recurrent state cannot be cut back to an earlier
// position: Session keeps snapshots at some positions and recomputes from the nearest one
// (runtime/session.h seq_truncate).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace nitro {

struct ModelSpec;

class RecurrentState {
public:
    /// Zeroed state for n_seq >= 1 sequences of the DeltaNet layers of `spec` (none: an empty state).
    RecurrentState(const ModelSpec& spec, int n_seq);

    /// Conv state [conv_dim, d_conv - 1] of DeltaNet layer il of sequence seq (il must be a DeltaNet layer).
    float* conv(int il, int seq) { return data(seq) + conv_off_[static_cast<size_t>(il)]; }
    /// Delta-rule state [n_v_heads, d, d] of DeltaNet layer il of sequence seq.
    float* delta(int il, int seq) { return data(seq) + delta_off_[static_cast<size_t>(il)]; }

    /// Floats of one sequence's state (all layers).
    int64_t seq_floats() const { return seq_floats_; }
    /// The initial (zero) state of sequence seq.
    void reset(int seq);
    /// Copies sequence seq's state into `out` (resized) / from `in` (seq_floats() values).
    void save(int seq, std::vector<float>& out) const;
    void restore(int seq, const std::vector<float>& in);
    /// Bytes held (all sequences).
    uint64_t bytes() const { return static_cast<uint64_t>(state_.size()) * sizeof(float); }

private:
    float* data(int seq) { return state_.data() + static_cast<size_t>(seq) * static_cast<size_t>(seq_floats_); }
    std::vector<int64_t> conv_off_, delta_off_;  ///< [n_layer] offsets in a sequence's block (-1: not a DeltaNet layer)
    int64_t seq_floats_ = 0;
    std::vector<float> state_;                   ///< [n_seq, seq_floats]
};

}  // namespace nitro
