// The simulator: replays a trace through a list of policies at a list of capacities and derives
// the metrics of `nitro sim` (docs/sim.md). Every figure here is SIMULATED from the trace's routing.
#pragma once

#include "sim/policy_spec.h"
#include "sim/replay.h"
#include "sim/router_stats.h"

#include <cstdint>
#include <string>
#include <vector>

namespace nitro {

/// What to simulate.
struct SimOptions {
    std::vector<PolicySpec> policies;
    std::vector<int> capacities;      ///< slots per layer, each >= 0 (clamped to n_expert)
    uint32_t ws_window = 32;          ///< working-set window, layer steps (0 = no coverage metric)
    /// Profile for the static policies; empty per_layer = the replayed trace itself (optimistic:
    /// the profile then knows the future).
    RoutingProfile profile;
    std::string profile_name;         ///< where `profile` came from (a file name), for the report
    int64_t ubatch = 512;             ///< prompt chunk size, tokens (the engine's -u)
    SimModel model;                   ///< prompt chunk weight, staging buffers
};

/// One policy at one capacity.
struct SimResult {
    std::string policy;
    int capacity = 0;                 ///< slots per layer, after clamping
    uint64_t vram_bytes = 0;          ///< capacity x sum over layers of one expert's bytes (0 = unknown)
    uint64_t hits = 0, accesses = 0, admissions = 0, preloaded = 0;
    double hit_rate = 0;              ///< hits / accesses
    double h2d_bytes_per_token = 0;   ///< admissions x expert bytes / tokens (host-to-device copies)
    double cpu_bytes_per_token = 0;   ///< misses x expert bytes / tokens (experts the CPU reads)
    uint64_t preload_bytes = 0;       ///< preloaded x expert bytes, once (static slots)
    double gap_to_opt_points = 0;     ///< (OPT hit rate - hit rate) x 100 at the same capacity
    double ws_coverage = 0;           ///< mean over layer steps of |cache ∩ W| / |W|
    double seconds = 0;               ///< replay wall time, s (MEASURED)
    double accesses_per_second() const { return seconds > 0 ? accesses / seconds : 0; }
};

/// The best online (non-OPT) policy at one capacity.
struct BestPolicy {
    int capacity = 0;
    uint64_t vram_bytes = 0;
    std::string policy;
    double hit_rate = 0;
    double opt_hit_rate = 0;
};

/// Everything `nitro sim` prints.
struct SimReport {
    TraceHeader header;
    uint64_t records = 0;
    uint64_t tokens = 0;              ///< distinct (sequence, position) steps
    uint64_t accesses = 0;            ///< expert requests (all layers)
    uint64_t bytes_per_slot_all_layers = 0;  ///< sum over layers of one expert's bytes (0 = unknown)
    std::string profile_source;       ///< "trace itself" or the profile file
    uint32_t ws_window = 0;
    std::vector<SimResult> results;   ///< policies x capacities, in the order given
    std::vector<BestPolicy> best;     ///< per capacity
    RouterStats router;
};

/// Slots per layer that fit `gib` GiB of VRAM: floor(gib * 2^30 / bytes_per_slot_all_layers).
/// Throws nitro::Error if the expert size is unknown (0).
int slots_for_vram(double gib, uint64_t bytes_per_slot_all_layers);

/// Runs the simulation. OPT is always replayed (for the gap column) even if not listed.
SimReport run_simulation(const ReplayTrace& trace, const SimOptions& opt, uint64_t n_records);

}  // namespace nitro

namespace nitro {

/// Parses slot capacities: comma-separated integers or ranges "A:B" (A..B inclusive) and
/// "A:B:STEP" ("2:7", "1,2,4,8", "4:64:4"). Throws nitro::Error naming the bad entry.
std::vector<int> parse_capacity_list(const std::string& text);
/// Parses VRAM budgets in GiB: comma-separated numbers or ranges "A:B[:STEP]" (step default 1).
std::vector<double> parse_gib_list(const std::string& text);

}  // namespace nitro
