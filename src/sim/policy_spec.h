// Policy names on the command line and the factories that build one policy object per layer.
//
//   lru | lfu | lru-freq | freq-decay[:HALF_LIFE_TOKENS] (default 32)
//   static            top-C experts of each layer's profile, preloaded, never evicted
//   static-global     top-C expert ids over all layers' profiles combined, the same ids in every layer
//   static+lru[:SHARE] floor(C*SHARE) static slots (default 0.5), the rest LRU
//   rate[:M/R]        LRU with at most M admissions per layer every R tokens (default 1/4)
//   opt               Belady (offline upper bound)
//   all               every policy above with its defaults
#pragma once

#include "sim/replay.h"

#include <string>
#include <vector>

namespace nitro {

enum class PolicyKind { Lru, Lfu, LruFreq, FreqDecay, Static, StaticGlobal, StaticLru, Rate, Opt };

/// One parsed policy name with its parameters.
struct PolicySpec {
    PolicyKind kind = PolicyKind::Lru;
    double half_life = 32;       ///< freq-decay, tokens (> 0)
    double static_share = 0.5;   ///< static+lru, share of slots that are static, [0, 1]
    int rate_admissions = 1;     ///< rate: M >= 0
    int rate_window = 4;         ///< rate: R >= 1 tokens
    /// Canonical text ("rate:1/4"), used as the policy's name in every output.
    std::string name() const;
    /// Whether it needs a profile (the static kinds).
    bool needs_profile() const;
};

/// Parses a comma-separated list ("lru,lfu,opt,rate:2/8"). Throws nitro::Error naming the entry
/// and the accepted forms. Duplicates are removed, order kept.
std::vector<PolicySpec> parse_policy_list(const std::string& text);

/// Experts ranked by selection count (most first; ties by lower id), per layer and over all
/// layers combined: what the static policies preload.
struct RoutingProfile {
    std::vector<std::vector<ExpertId>> per_layer;  ///< [n_layer][n_expert]
    std::vector<ExpertId> global;                  ///< [n_expert]
};

/// Counts selections of `trace` (every layer, every record).
RoutingProfile make_profile(const ReplayTrace& trace);

/// How the simulator models the engine beyond the policy (docs/sim.md): prompt chunks' weight
/// and the staging buffers (cache/expert_cache.h ResidencyOptions).
struct SimModel {
    double prefill_weight = 1.0;  ///< a prompt chunk requests its round(W x k) most selected experts
    int staging_buffers = -1;     ///< admissions one step can start; < 0 = unlimited
};

/// The ExpertCache setup of an online policy (every kind but opt) at `capacity` slots per layer:
///   lru, lfu, lru-freq, freq-decay: that eviction policy, slots empty at first, no rate limit;
///   static, static-global: the profile's top-C experts pinned, frozen (no admission);
///   static+lru:S: floor(C x S) pinned from the profile, the rest LRU (empty at first);
///   rate:M/R: LRU with at most M admissions per layer every R tokens (M = 0: frozen).
/// `profile` must match the trace's n_layer / n_expert for the static kinds (nitro::Error).
CacheSetup cache_setup(const PolicySpec& spec, const ReplayTrace& trace, const RoutingProfile& profile, int capacity,
                       const SimModel& model = {});

/// The per-layer policy factory of opt (Belady: it reads the layer's own stream) for replay().
/// Throws nitro::Error for any other kind (they run through cache_setup / replay_cache).
PolicyFactory make_policy_factory(const PolicySpec& spec, const ReplayTrace& trace, const RoutingProfile& profile);

/// Replays one policy at one capacity: opt record by record (replay), every other policy step by
/// step through the ExpertCache (replay_cache).
ReplayResult replay_policy(const ReplayTrace& trace, const PolicySpec& spec, const RoutingProfile& profile, int capacity,
                           const ReplayOptions& opt = {}, const SimModel& model = {});

}  // namespace nitro
