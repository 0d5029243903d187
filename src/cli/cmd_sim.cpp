// nitro sim TRACE --policy lru,lfu,opt --capacity 2:7 [--json] [--csv F] [--svg F] (docs/sim.md)
#include "cli/commands.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "runtime/placement.h"
#include "sim/policy_spec.h"
#include "sim/sim_report.h"
#include "sim/simulator.h"
#include "trace/model_header.h"
#include "trace/trace_file.h"
#include "trace/trace_jsonl.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <memory>

namespace nitro::cli {

namespace {

struct SimCliOptions {
    std::string trace, import_jsonl, model, profile, json_out, csv, svg, hot_set;
    std::string policies = "all";
    std::string capacity, vram_gib;
    bool json = false;
    uint32_t ws_window = 32;
};

void write_text_file(const std::string& path, const std::string& text) {
    std::ofstream f(path, std::ios::binary);
    if (!f) fail("{}: cannot create", path);
    f << text;
    f.close();
    if (!f) fail("{}: write failed", path);
}

Trace load_trace(const std::string& path, bool jsonl) {
    if (jsonl) return import_jsonl_file(path);
    if (!is_binary_trace(path))
        fail("{}: not a binary nitro trace (no \"NMTR\" magic); for JSON Lines use --import-jsonl {}", path, path);
    return read_trace(path);
}

}  // namespace

Action add_sim(CLI::App& app) {
    auto o = std::make_shared<SimCliOptions>();
    CLI::App* sub = app.add_subcommand("sim", "Replay a router trace against expert-cache policies: hit rate, "
                                              "bytes per token, gap to OPT, per capacity (SIMULATED)");
    sub->add_option("trace", o->trace, "Trace file (.nmtr, from `nitro trace` or live capture)");
    sub->add_option("--import-jsonl", o->import_jsonl, "Read the trace from JSON Lines instead (docs/trace-format.md)");
    sub->add_option("--policy", o->policies,
                    "Comma-separated policies: lru, lfu, lru-freq, freq-decay[:HALF_LIFE], static, static-global, "
                    "static+lru[:SHARE], rate[:M/R], opt, all")
        ->capture_default_str();
    sub->add_option("--capacity", o->capacity, "Slots per layer: N, A:B, A:B:STEP, comma-separated (default 1,2,4,.. up "
                                               "to n_expert)");
    sub->add_option("--vram-gib", o->vram_gib,
                    "VRAM budgets for expert slots in GiB (same forms as --capacity), converted with the expert "
                    "bytes of the trace header or -m MODEL");
    sub->add_option("-m,--model", o->model, "GGUF model the trace came from: expert bytes and a shape/hash check");
    sub->add_option("--profile", o->profile,
                    "Trace whose selection counts rank the static experts (default: the replayed trace itself)");
    sub->add_option("--ws-window", o->ws_window, "Working-set window for the coverage metric, tokens (0 = off)")
        ->capture_default_str();
    sub->add_option("--write-hot-set", o->hot_set,
                    "Write the hot-set file of the trace (per layer, experts by selection count, most first; what the "
                    "static policy preloads) for nitro run/serve/plan --hot-set, and stop");
    sub->add_flag("--json", o->json, "Print JSON instead of the table");
    sub->add_option("--csv", o->csv, "Also write the results as CSV to this file");
    sub->add_option("--svg", o->svg, "Also write an SVG chart of hit rate vs capacity to this file");

    return [o]() {
        if (o->trace.empty() == o->import_jsonl.empty())
            fail("give one trace: a trace file, or --import-jsonl FILE");
        Trace trace = o->import_jsonl.empty() ? load_trace(o->trace, false) : load_trace(o->import_jsonl, true);
        if (!o->model.empty()) {
            GgufModel model(o->model);
            const TraceHeader mh = trace_header_from_model(model, false);
            if (!check_trace_matches_model(trace.header, mh))
                fmt::print(stderr, "warning: the trace was captured from a different file (hash {:016x}) than {} "
                                   "(hash {:016x}); the shapes match, so the simulation goes on\n",
                           trace.header.model_hash, o->model, mh.model_hash);
            trace.header.bytes_per_expert_per_layer = mh.bytes_per_expert_per_layer;
            if (trace.header.model_name.empty()) trace.header.model_name = mh.model_name;
        }
        const ReplayTrace rt = make_replay_trace(trace);
        const uint64_t n_records = trace.size();
        if (!o->hot_set.empty()) {
            // The static policies' ranking (make_profile), with the counts it was ranked by.
            const RoutingProfile prof = make_profile(rt);
            std::vector<std::vector<int32_t>> ranked;
            std::vector<std::vector<uint64_t>> counts;
            for (size_t il = 0; il < rt.layers.size(); ++il) {
                std::vector<uint64_t> c(rt.header.n_expert, 0);
                for (ExpertId e : rt.layers[il].ids) ++c[e];
                ranked.emplace_back(prof.per_layer[il].begin(), prof.per_layer[il].end());
                std::vector<uint64_t> rc;
                for (ExpertId e : prof.per_layer[il]) rc.push_back(c[e]);
                counts.push_back(std::move(rc));
            }
            write_hot_set(o->hot_set, ranked, counts, o->trace.empty() ? o->import_jsonl : o->trace);
            fmt::print("wrote {} ({} layers x {} experts ranked by selection count over {} tokens)\n", o->hot_set,
                       ranked.size(), rt.header.n_expert, rt.n_tokens);
            return 0;
        }
        trace = Trace{};  // the replay copy is all that is needed from here on

        SimOptions so;
        so.policies = parse_policy_list(o->policies);
        so.ws_window = o->ws_window;
        if (!o->capacity.empty()) so.capacities = parse_capacity_list(o->capacity);
        if (!o->vram_gib.empty()) {
            uint64_t per_slot = 0;
            for (uint32_t l = 0; l < rt.header.n_layer; ++l) per_slot += rt.header.expert_bytes(l);
            for (double g : parse_gib_list(o->vram_gib)) so.capacities.push_back(slots_for_vram(g, per_slot));
        }
        if (so.capacities.empty())
            for (uint32_t c = 1; c <= rt.header.n_expert; c *= 2) so.capacities.push_back(static_cast<int>(c));
        if (!o->profile.empty()) {
            const ReplayTrace pt = make_replay_trace(load_trace(o->profile, !is_binary_trace(o->profile)));
            if (pt.header.n_layer != rt.header.n_layer || pt.header.n_expert != rt.header.n_expert)
                fail("{}: profile trace has {} layers x {} experts, the replayed trace {} x {}", o->profile,
                     pt.header.n_layer, pt.header.n_expert, rt.header.n_layer, rt.header.n_expert);
            so.profile = make_profile(pt);
            so.profile_name = o->profile;
        }
        const SimReport rep = run_simulation(rt, so, n_records);
        if (o->json) std::puts(sim_report_json(rep).dump(1).c_str());
        else std::fputs(sim_report_text(rep).c_str(), stdout);
        if (!o->csv.empty()) write_text_file(o->csv, sim_report_csv(rep));
        if (!o->svg.empty()) write_text_file(o->svg, sim_report_svg(rep));
        if (!o->json && (!o->csv.empty() || !o->svg.empty()))
            fmt::print("\nwrote{}{}\n", o->csv.empty() ? "" : " " + o->csv, o->svg.empty() ? "" : " " + o->svg);
        return 0;
    };
}

}  // namespace nitro::cli
