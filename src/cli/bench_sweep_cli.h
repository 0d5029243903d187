// `nitro bench -o DIR`: the benchmark protocol (docs/bench.md), run from cmd_bench.cpp. Two kinds
// of sweep: the context ladder (cmd_bench_sweep.cpp) and, with --requests, the replay of saved
// OpenAI requests against `nitro serve` and a peer server (cmd_bench_requests.cpp).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace nitro::cli {

struct BenchSweepOptions {
    std::string model, out;
    std::string modes = "cpu,gpu,hybrid";  ///< --modes, comma-separated engine modes
    std::string ctx = "4k,16k,32k,128k";   ///< --ctx, comma-separated depths (4k = 4096)
    bool ctx_given = false;                ///< --ctx was on the command line
    std::vector<double> budgets;           ///< --vram-budget GiB list (gpu/hybrid steps)
    int64_t n_gen = 32;                    ///< -n: decode tokens per run
    int threads = 1;
    int repeat = 1;                        ///< --repeat: runs per step (and per peer)
    std::string peer_cmd;                  ///< --peer-cmd template ("" = no peer)
    double peer_timeout_s = 600;           ///< --peer-timeout, seconds per peer run
    double read_probe_mib = 1024;          ///< --read-probe, MiB for the DRAM read-bandwidth probe
    int gpu_device = 0;
    std::string routing = "file";          ///< --routing: comma-separated scenarios (file, uniform, zipf:S, replay:TRACE)
    // Request replay (--requests):
    std::string requests;                  ///< --requests FILE.jsonl ("" = the context ladder)
    std::string peer_url;                  ///< --peer-url: an OpenAI-compatible peer server
    std::string peer_model;                ///< --peer-model: the "model" field sent to the peer
    std::string peer_api_key;              ///< --peer-api-key
    std::string nitro_url;                 ///< --nitro-url: an already running nitro serve
    std::string nitro_api_key;             ///< --nitro-api-key (for --nitro-url)
    double request_timeout_s = 600;        ///< --request-timeout: seconds a request (or a server start) may take
    bool append = false;                   ///< --append: add to DIR/records.jsonl; the report covers all of it
    bool overwrite = false;                ///< --overwrite: replace an earlier sweep's records in `out` (else refused)
    bool render_only = false;              ///< --render-only: only write the report of DIR/records.jsonl
};

/// Runs the sweep into o.out (records.jsonl, report.md, report-*.svg), printing a progress bar
/// with ETA on stderr. Returns 0, or 1 when any run failed (a peer command that failed or timed
/// out, a nitro run that threw after its engine was made). Throws nitro::Error for bad options,
/// and when o.out already holds an earlier sweep's records.jsonl and neither o.append nor
/// o.overwrite is set.
int run_bench_sweep(const BenchSweepOptions& o);

/// The request-replay sweep (--requests): one step per mode and budget, each a `nitro serve`
/// started here (or --nitro-url) replaying every request, mirrored with --peer-url. Returns as
/// run_bench_sweep; throws nitro::Error for bad options, a request file that does not parse, or a
/// peer (or --nitro-url) that does not answer.
int run_request_sweep(const BenchSweepOptions& o);

// ---- shared by the two sweeps (cmd_bench_sweep.cpp)

/// The exact command line of this process (/proc/self/cmdline), arguments shell-quoted where needed.
std::string own_command_line();
/// `s` split at commas, empty items dropped.
std::vector<std::string> split_list(const std::string& s);
/// Progress bar with ETA on stderr (one line, redrawn); `unit` names what is counted.
void progress(size_t done, size_t total, double elapsed_s, const std::string& what, const char* unit = "runs");
/// Creates `dir` and opens its records.jsonl: with `append` kept, its records read into `records`
/// (the report covers them too); with `overwrite` truncated. Throws nitro::Error when it already
/// holds records and neither is set (an earlier sweep is never replaced unasked), naming the file
/// and line of a line that is not a record, or when the folder or file cannot be written. `flag`
/// is the option the records are read for, named in those messages ("--append", "--render-only").
std::ofstream open_records(const std::string& dir, bool append, bool overwrite, std::vector<nlohmann::json>& records,
                           std::string_view flag = "--append");
/// Writes report.md and the SVG charts of `records` into `dir` and prints the report and where
/// the files are. Throws nitro::Error if a file cannot be written.
void write_report(const std::string& dir, const std::vector<nlohmann::json>& records);

}  // namespace nitro::cli
