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

/// The per-layer factory of `spec` for `trace` (opt reads the layer's own stream; static kinds read
/// `profile`, which must match the trace's n_layer / n_expert: checked, nitro::Error otherwise).
PolicyFactory make_policy_factory(const PolicySpec& spec, const ReplayTrace& trace, const RoutingProfile& profile);

}  // namespace nitro
