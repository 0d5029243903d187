// Trace replay: each layer's requests in file order through one policy object per layer.
#pragma once

#include "runtime/expert_cache_policy.h"
#include "trace/trace.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace nitro {

/// One layer's request stream, in the order the trace holds it.
struct LayerStream {
    std::vector<ExpertId> ids;     ///< [n_steps * k] selected experts, router order
    std::vector<uint32_t> token;   ///< [n_steps] global step (token) index of each request
    std::vector<uint32_t> seq;     ///< [n_steps] sequence id
    std::vector<uint32_t> pos;     ///< [n_steps] token position
    size_t n_steps() const { return token.size(); }
};

/// A trace regrouped by layer for replay.
struct ReplayTrace {
    TraceHeader header;
    uint32_t k = 0;                 ///< n_expert_used
    size_t n_tokens = 0;            ///< distinct (sequence, position) steps
    std::vector<LayerStream> layers;
    uint64_t accesses() const;      ///< expert requests over all layers
};

/// Regroups `trace` by layer; steps are numbered by first appearance of (seq, pos).
ReplayTrace make_replay_trace(const Trace& trace);

/// Builds the policy of one layer for a capacity (slots).
using PolicyFactory = std::function<std::unique_ptr<ExpertCachePolicy>(uint32_t layer, int capacity)>;

/// Counts of one layer.
struct LayerCounts {
    uint64_t hits = 0;
    uint64_t accesses = 0;
    uint64_t admissions = 0;
    uint64_t preloaded = 0;
    double ws_coverage_sum = 0;  ///< sum over steps of |cache ∩ W| / |W| (see ReplayOptions)
};

/// Options of a replay.
struct ReplayOptions {
    /// Working-set window in layer steps: W = distinct experts of the last `ws_window` requests of
    /// the layer (the current one included); 0 turns the coverage metric off.
    uint32_t ws_window = 32;
};

/// Result of replaying all layers with one policy at one capacity.
struct ReplayResult {
    std::vector<LayerCounts> layers;
    LayerCounts total;
    double seconds = 0;   ///< wall time of the replay, s (MEASURED)
};

/// Replays every layer: a fresh policy per layer from `factory`, then access() per request.
ReplayResult replay(const ReplayTrace& trace, const PolicyFactory& factory, int capacity,
                    const ReplayOptions& opt = {});

}  // namespace nitro
