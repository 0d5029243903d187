// Router statistics of a trace, per layer: how skewed and how repetitive the routing is. These
// say which policies can work before any policy is run.
#pragma once

#include "sim/replay.h"

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace nitro {

/// Reuse-distance buckets: distance d = layer steps since the same expert's previous request at
/// that layer; bucket b < 11 holds 2^(b-1) < d <= 2^b (b = 0: d = 1), bucket 11 holds d > 1024,
/// bucket 12 first requests.
inline constexpr int kReuseBuckets = 13;
/// "1", "2", "3-4", ..., "513-1024", ">1024", "first".
std::string reuse_bucket_label(int b);

/// Statistics of one layer (shares are fractions in [0, 1]).
struct LayerRouterStats {
    uint64_t steps = 0;                ///< requests (tokens) of this layer
    std::array<double, 3> top_share{}; ///< share of selections on the top 10/20/30% experts (by count;
                                       ///< top p% = ceil(p/100 * n_expert) experts)
    double tokens_touching_top10 = 0;  ///< share of steps selecting at least one top-10% expert
    double entropy = 0;                ///< entropy of the selection distribution / log(n_expert)
    uint64_t consecutive_pairs = 0;    ///< (token i, token i+1) pairs: same sequence, position + 1
    double same_first = 0;             ///< share of pairs where i+1's first choice = i's first choice
    double top2_overlap = 0;           ///< share of pairs whose first-or-second choices share an expert
    std::array<uint64_t, kReuseBuckets> reuse{};  ///< reuse-distance histogram (selections)
};

/// Statistics of all layers plus means over layers (unweighted) and the summed histogram.
struct RouterStats {
    std::vector<LayerRouterStats> layers;
    LayerRouterStats mean;             ///< means of the shares over layers with steps; summed counts
};

RouterStats compute_router_stats(const ReplayTrace& trace);

/// As JSON: {"layers": [...], "mean": {...}, "reuse_buckets": [labels]}.
nlohmann::json router_stats_to_json(const RouterStats& s);

}  // namespace nitro
