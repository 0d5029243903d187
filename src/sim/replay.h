// Trace replay. Online policies run through the runtime's ExpertCache (cache/expert_cache.h),
// step by step as the engine drives it: a decode token is one step, consecutive prompt tokens of
// a sequence form chunks of up to `ubatch` tokens (the engine's prompt chunks), each one step.
// Belady's OPT, which reads the future, replays each layer's records one by one (replay()).
#pragma once

#include "cache/expert_cache.h"
#include "cache/expert_cache_policy.h"
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

/// One step of the cache: `n` consecutive steps (tokens) from `first`, one prompt chunk or one
/// decode token.
struct CacheStepRange {
    uint32_t first = 0;
    uint32_t n = 1;
};

/// A trace regrouped by layer for replay.
struct ReplayTrace {
    TraceHeader header;
    uint32_t k = 0;                 ///< n_expert_used
    size_t n_tokens = 0;            ///< distinct (sequence, position) steps
    std::vector<LayerStream> layers;
    std::vector<uint32_t> step_seq, step_pos;  ///< [n_tokens] of each step
    std::vector<TracePhase> step_phase;        ///< [n_tokens] phase of the step's first record
    uint64_t accesses() const;      ///< expert requests over all layers
};

/// Groups the steps of `trace` into cache steps: each decode step alone; consecutive prefill
/// steps of one sequence at consecutive positions in chunks of up to `ubatch` tokens, counted
/// from the first position of the run (how the engines cut a prompt into chunks).
std::vector<CacheStepRange> make_cache_steps(const ReplayTrace& trace, int64_t ubatch);

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
    CacheCounters cache;          ///< the ExpertCache's own counters (replay_cache only)
    double ws_coverage_sum = 0;  ///< sum over steps of |cache ∩ W| / |W| (see ReplayOptions)
};

/// Options of a replay.
struct ReplayOptions {
    /// Working-set window in layer steps: W = distinct experts of the last `ws_window` requests of
    /// the layer (the current one included); 0 turns the coverage metric off.
    uint32_t ws_window = 32;
    /// Tokens per prompt chunk (the engine's -u / --ubatch): consecutive prefill records form
    /// chunks of this size (replay_cache).
    int64_t ubatch = 512;
};



/// Result of replaying all layers with one policy at one capacity.
struct ReplayResult {
    std::vector<LayerCounts> layers;
    LayerCounts total;
    double seconds = 0;   ///< wall time of the replay, s (MEASURED)
};

/// Replays every layer record by record: a fresh policy per layer from `factory`, then access()
/// per request (the classical model; used for OPT, whose policy reads the layer's future).
ReplayResult replay(const ReplayTrace& trace, const PolicyFactory& factory, int capacity,
                    const ReplayOptions& opt = {});

/// Replays the trace step by step (make_cache_steps) through one ExpertCache built from `setup`
/// with a copy backend that lands every copy at once and `setup.opt.staging_buffers` buffers
/// (< 0: unlimited). Throws nitro::Error if the setup's layer count or a layer's records are out
/// of step order.
ReplayResult replay_cache(const ReplayTrace& trace, const CacheSetup& setup, const ReplayOptions& opt = {});

}  // namespace nitro
