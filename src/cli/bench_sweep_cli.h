// `nitro bench -o DIR`: the benchmark protocol (docs/bench.md), run from cmd_bench.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nitro::cli {

struct BenchSweepOptions {
    std::string model, out;
    std::string modes = "cpu,gpu,hybrid";  ///< --modes, comma-separated engine modes
    std::string ctx = "4k,16k,32k,128k";   ///< --ctx, comma-separated depths (4k = 4096)
    std::vector<double> budgets;           ///< --vram-budget GiB list (gpu/hybrid steps)
    int64_t n_gen = 32;                    ///< -n: decode tokens per run
    int threads = 1;
    int repeat = 1;                        ///< --repeat: runs per step (and per peer)
    std::string peer_cmd;                  ///< --peer-cmd template ("" = no peer)
    double peer_timeout_s = 600;           ///< --peer-timeout, seconds per peer run
    double read_probe_mib = 1024;          ///< --read-probe, MiB for the DRAM read-bandwidth probe
    int gpu_device = 0;
    bool overwrite = false;                ///< --overwrite: replace an earlier sweep's records in `out`
};

/// Runs the sweep into o.out (records.jsonl, report.md, report-*.svg), printing a progress bar
/// with ETA on stderr. Returns 0, or 1 when any run failed (a peer command that failed or timed
/// out, a nitro run that threw after its engine was made). Throws nitro::Error for bad options,
/// and when o.out already holds an earlier sweep's records.jsonl and o.overwrite is not set.
int run_bench_sweep(const BenchSweepOptions& o);

}  // namespace nitro::cli
