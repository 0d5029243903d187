// nitro sim TRACE --policy lru,lfu,opt --capacity 2:7 [--json] [--csv F] [--svg F] (docs/sim.md)
#include "cli/commands.h"
#include "cli/validators.h"
#include "core/error.h"
#include "core/user_file.h"
#include "gguf/gguf.h"
#include "cache/expert_cache.h"
#include "runtime/generate.h"
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
#include <filesystem>
#include <memory>

namespace nitro::cli {

namespace {

struct SimCliOptions {
    std::string trace, import_jsonl, model, profile, json_out, csv, svg, hot_set;
    std::string policies = "all";
    std::string capacity, vram_gib;
    bool json = false;
    uint32_t ws_window = 32;
    int64_t ubatch = 512;
    SimModel model_opt;
    std::string engine;  ///< --engine: the residency setup of an engine run (TRACE.residency.json)
    bool engine_given = false;
};

/// The per-layer counters of an engine run (TRACE.counters.json "experts"."layers"[i]."cache").
std::vector<CacheCounters> read_engine_counters(const std::string& path) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return {};
    const std::string text = read_user_file(path, "engine counters");
    std::vector<CacheCounters> out;
    try {
        const nlohmann::json j = nlohmann::json::parse(text);
        for (const auto& l : j.at("experts").at("layers")) {
            const auto& c = l.at("cache");
            CacheCounters k;
            k.hits = c.at("hits");
            k.misses = c.at("misses");
            k.admissions = c.at("admissions");
            k.evictions = c.at("evictions");
            k.refused_rate = c.at("refused_rate");
            k.refused_staging = c.at("refused_staging");
            k.refused_policy = c.at("refused_policy");
            k.late_copies = c.at("late_copies");
            k.failed_copies = c.at("failed_copies");
            out.push_back(k);
        }
    } catch (const nlohmann::json::exception& e) {
        fail("{}: {}", path, e.what());
    }
    return out;
}

/// `nitro sim TRACE --engine`: replays the trace with the setup the engine ran and, when the
/// engine's counters are beside the trace, prints live and simulated counts per layer.
int simulate_engine(const ReplayTrace& rt, const std::string& setup_path, const std::string& counters_path,
                    int64_t ubatch, bool json) {
    std::error_code ec;
    if (!std::filesystem::exists(setup_path, ec))
        fail(
            "{}: cannot open the engine's residency setup (written next to `nitro run --trace FILE` as FILE.residency.json)",
            setup_path);
    const std::string setup_text = read_user_file(setup_path, "engine residency setup");
    nlohmann::json sj;
    try {
        sj = nlohmann::json::parse(setup_text);
    } catch (const nlohmann::json::exception& e) {
        fail("{}: {}", setup_path, e.what());
    }
    const CacheSetup setup = setup_from_json(sj);
    const ReplayResult r = replay_cache(rt, setup, ReplayOptions{0, ubatch});
    const std::vector<CacheCounters> live = read_engine_counters(counters_path);
    // Layers whose experts are all resident never reach the cache in the engine: compare the others.
    auto compared = [&](size_t l) {
        return l < setup.layers.size() && setup.layers[l].capacity < static_cast<int>(rt.header.n_expert);
    };
    bool equal = !live.empty() && live.size() == r.layers.size();
    CacheCounters sim_t, live_t;
    for (size_t l = 0; l < r.layers.size(); ++l) {
        if (!compared(l)) continue;
        const CacheCounters& s = r.layers[l].cache;
        sim_t.add(s);
        if (l < live.size()) {
            const CacheCounters& v = live[l];
            live_t.add(v);
            equal = equal && v.hits == s.hits && v.misses == s.misses && v.admissions == s.admissions &&
                    v.evictions == s.evictions && v.refused_rate == s.refused_rate &&
                    v.refused_staging == s.refused_staging && v.refused_policy == s.refused_policy;
        }
    }
    if (json) {
        nlohmann::json layers = nlohmann::json::array();
        for (size_t l = 0; l < r.layers.size(); ++l) {
            nlohmann::json e = {{"layer", l}, {"compared", compared(l)}, {"simulated", cache_counters_json(r.layers[l].cache)}};
            if (l < live.size()) e["live"] = cache_counters_json(live[l]);
            layers.push_back(e);
        }
        nlohmann::json out = {{"setup", setup.opt.describe()}, {"simulated", cache_counters_json(sim_t)}, {"layers", layers}};
        if (!live.empty()) {
            out["live"] = cache_counters_json(live_t);
            out["live_equals_simulated"] = equal;
        }
        std::puts(out.dump(1).c_str());
        return 0;
    }
    fmt::print("engine residency: {} (SIMULATED from {}, prompt chunks of {} tokens)\n", setup.opt.describe(), setup_path,
               ubatch);
    fmt::print("{:>5} {:>10} {:>10} {:>8} {:>8} {:>8}   {}\n", "layer", "hits", "misses", "admits", "evicts", "refused",
               live.empty() ? "" : "live: hits misses admits evicts refused");
    for (size_t l = 0; l < r.layers.size(); ++l) {
        if (!compared(l)) continue;
        const CacheCounters& s = r.layers[l].cache;
        std::string lv;
        if (l < live.size()) {
            const CacheCounters& v = live[l];
            lv = fmt::format("      {} {} {} {} {}", v.hits, v.misses, v.admissions, v.evictions,
                             v.refused_rate + v.refused_staging + v.refused_policy);
        }
        fmt::print("{:5} {:10} {:10} {:8} {:8} {:8}{}\n", l, s.hits, s.misses, s.admissions, s.evictions,
                   s.refused_rate + s.refused_staging + s.refused_policy, lv);
    }
    fmt::print("simulated hit rate {:.2f}% ({} admissions, {:.1f} MB host-to-device)\n", 100 * sim_t.hit_rate(),
               sim_t.admissions, sim_t.h2d_bytes / 1e6);
    if (!live.empty())
        fmt::print("live hit rate {:.2f}% ({} late copies, {} failed): live {} simulated\n", 100 * live_t.hit_rate(),
                   live_t.late_copies, live_t.failed_copies, equal ? "EQUALS" : "DIFFERS FROM");
    return 0;
}

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
    sub->add_option("--ubatch,-u", o->ubatch,
                    "Prompt chunk size, tokens (the engine's -u): consecutive prompt records form chunks, each one step "
                    "of the cache")
        ->capture_default_str()
        ->check(integer_at_least(1));
    sub->add_option("--prefill-weight", o->model_opt.prefill_weight,
                    "A prompt chunk requests only its round(W x n_expert_used) most selected experts (the engine's "
                    "--prefill-weight); 0 = prompts never change the cache")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    sub->add_option("--staging-buffers", o->model_opt.staging_buffers,
                    "Admissions one step can start (the engine's pinned staging buffers); -1 = unlimited")
        ->capture_default_str()
        ->check(CLI::Range(-1, 1 << 20));
    sub->add_flag("--engine", o->engine_given,
                  "Replay with the residency setup of the engine run that captured TRACE (TRACE.residency.json, written by "
                  "`nitro run --trace TRACE` in hybrid placement) and compare with its live counters (TRACE.counters.json)");
    sub->add_option("--engine-setup", o->engine, "With --engine: the residency setup file (default TRACE.residency.json)");
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
        const std::string base = o->trace.empty() ? o->import_jsonl : o->trace;
        if (o->engine_given || !o->engine.empty())
            return simulate_engine(rt, o->engine.empty() ? base + ".residency.json" : o->engine, base + ".counters.json",
                                   o->ubatch, o->json);

        SimOptions so;
        so.policies = parse_policy_list(o->policies);
        so.ws_window = o->ws_window;
        so.ubatch = o->ubatch;
        so.model = o->model_opt;
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
