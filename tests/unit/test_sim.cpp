// The simulator driver, its metrics and outputs, router statistics, and `nitro sim` / `nitro trace`
// end to end on a trace of the gpt-oss fixture's shape.
#include "core/error.h"
#include "sim/router_stats.h"
#include "sim/sim_report.h"
#include "sim/simulator.h"
#include "trace/trace_file.h"
#include "gguf_bytes.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace nitro {
namespace {

// Trace T of test_policy_hand.cpp as one layer of one sequence: 5 experts, top-2, 8 tokens,
// 1000 bytes per expert.
Trace trace_t() {
    Trace t;
    t.header.model_name = std::string(1, 'T');  // (assigning "T": GCC 12's -Wrestrict false positive)
    t.header.n_layer = 1;
    t.header.n_expert = 5;
    t.header.n_expert_used = 2;
    t.header.bytes_per_expert_per_layer = {1000};
    const std::vector<std::vector<ExpertId>> steps = {{0, 1}, {0, 2}, {3, 0}, {1, 4}, {2, 0}, {3, 1}, {0, 4}, {2, 3}};
    for (uint32_t i = 0; i < steps.size(); ++i) t.append({0, i, TracePhase::Decode, 0, steps[i], {}});
    return t;
}

const SimResult& find(const SimReport& r, const std::string& policy, int c) {
    for (const auto& s : r.results)
        if (s.policy == policy && s.capacity == c) return s;
    throw std::runtime_error("no result " + policy);
}

TEST(SimDriver, MetricsOnTraceTMatchTheHandCounts) {
    const ReplayTrace rt = make_replay_trace(trace_t());
    SimOptions o;
    o.policies = parse_policy_list("lru,lfu,opt,rate:1/2");
    o.capacities = {3};
    o.ws_window = 1;
    const SimReport r = run_simulation(rt, o, 8);
    // Hits from test_policy_hand.cpp: LRU 4, LFU 5, OPT 11, rate:1/2 6 of 16.
    const SimResult& lru = find(r, "lru", 3);
    EXPECT_EQ(lru.hits, 4u);
    EXPECT_EQ(lru.accesses, 16u);
    EXPECT_DOUBLE_EQ(lru.hit_rate, 0.25);
    EXPECT_DOUBLE_EQ(lru.gap_to_opt_points, (11.0 - 4.0) / 16 * 100);  // 43.75 points
    // 12 admissions x 1000 B / 8 tokens; 12 misses x 1000 B / 8 tokens.
    EXPECT_DOUBLE_EQ(lru.h2d_bytes_per_token, 1500.0);
    EXPECT_DOUBLE_EQ(lru.cpu_bytes_per_token, 1500.0);
    EXPECT_EQ(lru.vram_bytes, 3000u);
    // Window 1: W = S; LRU with 3 slots holds all of S after every step.
    EXPECT_DOUBLE_EQ(lru.ws_coverage, 1.0);
    EXPECT_EQ(find(r, "lfu", 3).hits, 5u);
    EXPECT_EQ(find(r, "opt", 3).hits, 11u);
    const SimResult& rate = find(r, "rate:1/2", 3);
    EXPECT_EQ(rate.hits, 6u);
    EXPECT_DOUBLE_EQ(rate.h2d_bytes_per_token, 4 * 1000.0 / 8);
    // Cache after each step vs S: 1/2 1/2 1 0 1 1/2 1 1/2 -> 5/8 (see RateLimitedOnT).
    EXPECT_DOUBLE_EQ(rate.ws_coverage, 0.625);
    ASSERT_EQ(r.best.size(), 1u);
    EXPECT_EQ(r.best[0].policy, "rate:1/2");  // 6 > 5 > 4; OPT is not an online policy
    EXPECT_DOUBLE_EQ(r.best[0].opt_hit_rate, 11.0 / 16);
}

TEST(SimDriver, WorkingSetCoverageOfAStaticCacheWithWindowTwo) {
    // Static {0,1,2}; W_t = S_{t-1} ∪ S_t: 2/2 3/3 2/3 2/4 3/4 3/4 2/4 2/4 -> sum 17/3, mean 17/24.
    const ReplayTrace rt = make_replay_trace(trace_t());
    SimOptions o;
    o.policies = parse_policy_list("static");
    o.capacities = {3};
    o.ws_window = 2;
    const SimReport r = run_simulation(rt, o, 8);
    EXPECT_NEAR(find(r, "static", 3).ws_coverage, 17.0 / 24, 1e-12);
    EXPECT_EQ(find(r, "static", 3).preload_bytes, 3000u);
    EXPECT_EQ(find(r, "static", 3).hits, 11u);
}

TEST(SimDriver, VramBudgetsAndCapacityLists) {
    EXPECT_EQ(parse_capacity_list("2:7"), (std::vector<int>{2, 3, 4, 5, 6, 7}));
    EXPECT_EQ(parse_capacity_list("1,4:12:4"), (std::vector<int>{1, 4, 8, 12}));
    EXPECT_THROW(parse_capacity_list("7:2"), Error);
    EXPECT_THROW(parse_capacity_list("x"), Error);
    EXPECT_EQ(parse_gib_list("0.5:2:0.5"), (std::vector<double>{0.5, 1.0, 1.5, 2.0}));
    // 36 layers x 13 MiB per expert = 468 MiB per slot-in-every-layer; 12 GiB -> 26 slots.
    EXPECT_EQ(slots_for_vram(12, 36ull * 13 * 1048576), 26);
    EXPECT_THROW(slots_for_vram(12, 0), Error);
    EXPECT_THROW(parse_policy_list("lru,bogus"), Error);
    EXPECT_THROW(parse_policy_list("rate:3"), Error);
    const std::vector<PolicySpec> p = parse_policy_list("lru,rate:2/8,freq-decay:16,static+lru:0.25,lru");
    ASSERT_EQ(p.size(), 4u);  // duplicate removed
    EXPECT_EQ(p[1].name(), "rate:2/8");
    EXPECT_EQ(p[3].name(), "static+lru:0.25");
}

TEST(SimRouterStats, HandComputedSmallLayer) {
    // 10 experts (top 10/20/30% = 1/2/3 experts), top-2, one sequence:
    // s0 {0,1} s1 {0,2} s2 {3,0} s3 {1,2}. Counts 0:3 1:2 2:2 3:1 of 8 selections.
    Trace t;
    t.header.n_layer = 1;
    t.header.n_expert = 10;
    t.header.n_expert_used = 2;
    const std::vector<std::vector<ExpertId>> steps = {{0, 1}, {0, 2}, {3, 0}, {1, 2}};
    for (uint32_t i = 0; i < steps.size(); ++i) t.append({0, i, TracePhase::Decode, 0, steps[i], {}});
    const RouterStats s = compute_router_stats(make_replay_trace(t));
    const LayerRouterStats& l = s.layers.at(0);
    EXPECT_DOUBLE_EQ(l.top_share[0], 3.0 / 8);
    EXPECT_DOUBLE_EQ(l.top_share[1], 5.0 / 8);
    EXPECT_DOUBLE_EQ(l.top_share[2], 7.0 / 8);
    EXPECT_DOUBLE_EQ(l.tokens_touching_top10, 3.0 / 4);  // top-10% = {0}: s0 s1 s2
    const double h = -(0.375 * std::log(0.375) + 2 * 0.25 * std::log(0.25) + 0.125 * std::log(0.125));
    EXPECT_NEAR(l.entropy, h / std::log(10.0), 1e-12);
    // Pairs (s0,s1) (s1,s2) (s2,s3): same first 0=0 only; top-2 overlap in the first two.
    EXPECT_EQ(l.consecutive_pairs, 3u);
    EXPECT_DOUBLE_EQ(l.same_first, 1.0 / 3);
    EXPECT_DOUBLE_EQ(l.top2_overlap, 2.0 / 3);
    // Reuse: s1 0 (d=1), s2 0 (d=1), s3 1 (d=3), s3 2 (d=2); firsts: 0 1 2 3.
    EXPECT_EQ(l.reuse[0], 2u);
    EXPECT_EQ(l.reuse[1], 1u);
    EXPECT_EQ(l.reuse[2], 1u);
    EXPECT_EQ(l.reuse[kReuseBuckets - 1], 4u);
    EXPECT_EQ(reuse_bucket_label(2), "3-4");
    EXPECT_EQ(reuse_bucket_label(10), "513-1024");
}

TEST(SimReportOutput, JsonCsvSvgCarryEveryResult) {
    const ReplayTrace rt = make_replay_trace(trace_t());
    SimOptions o;
    o.policies = parse_policy_list("lru,opt");
    o.capacities = parse_capacity_list("1:4");
    const SimReport r = run_simulation(rt, o, 8);
    const nlohmann::json j = sim_report_json(r);
    ASSERT_EQ(j["results"].size(), 8u);
    EXPECT_EQ(j["results"][2]["policy"], "lru");
    EXPECT_EQ(j["results"][2]["capacity"], 3);
    EXPECT_EQ(j["results"][2]["hits"], 4);
    EXPECT_EQ(j["results"][2]["accesses"], 16);
    EXPECT_DOUBLE_EQ(j["results"][2]["hit_rate"].get<double>(), 0.25);
    EXPECT_DOUBLE_EQ(j["results"][2]["bytes"]["h2d_per_token"].get<double>(), 1500.0);
    EXPECT_EQ(j["best"].size(), 4u);
    const std::string csv = sim_report_csv(r);
    EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 9);
    EXPECT_NE(csv.find("lru,3,3000,4,16,0.250000,12,"), std::string::npos) << csv;
    const std::string svg = sim_report_svg(r);
    EXPECT_EQ(svg.rfind("<svg", 0), 0u);
    size_t lines = 0;
    for (size_t p = 0; (p = svg.find("<polyline", p)) != std::string::npos; ++p) ++lines;
    EXPECT_EQ(lines, 2u);
    const std::string text = sim_report_text(r);
    EXPECT_NE(text.find("SIMULATED"), std::string::npos);
    EXPECT_NE(text.find("43.75 pt"), std::string::npos);  // lru at 3 slots
}

// ---------------------------------------------------------------------------------------------
// End to end through the nitro binary.

std::string run_cmd(const std::string& cmd, int* rc) {
    std::string out;
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    if (!p) return out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    *rc = pclose(p);
    return out;
}

TEST(SimCli, SynthFromFixtureThenSimPrintsTableJsonAndSvg) {
    const std::string dir = test::temp_dir("sim-cli");
    const std::string model = std::string(NITRO_SHARED_DIR) + "/fixtures/tiny-gptoss-mxfp4.gguf";
    const std::string bin = NITRO_BINARY;
    const std::string tr = dir + "/g.nmtr";
    int rc = -1;
    std::string out = run_cmd(bin + " trace synth -m " + model + " -o " + tr +
                                  " --sequences 3 --prompt 8 --decode 40 --zipf 1.1 --locality 0.3 --seed 5",
                              &rc);
    ASSERT_EQ(rc, 0) << out;
    out = run_cmd(bin + " trace info " + tr, &rc);
    ASSERT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("valid nitro trace"), std::string::npos) << out;
    EXPECT_NE(out.find("4 layers x 16 experts, top-4"), std::string::npos) << out;

    // Minimal call with --json: per policy and capacity, hits/accesses/hit_rate/bytes.
    out = run_cmd(bin + " sim " + tr + " --policy lru,lfu,opt --capacity 2:7 --json", &rc);
    ASSERT_EQ(rc, 0) << out;
    const nlohmann::json j = nlohmann::json::parse(out);
    ASSERT_EQ(j["results"].size(), 18u);
    EXPECT_GT(j["trace"]["bytes_per_slot_all_layers"].get<uint64_t>(), 0u);  // from the fixture's tensors
    // The binary's numbers are the library's numbers.
    const ReplayTrace rt = make_replay_trace(read_trace(tr));
    const RoutingProfile prof = make_profile(rt);
    const uint64_t lru4 = replay_policy(rt, parse_policy_list("lru")[0], prof, 4).total.hits;
    for (const auto& r : j["results"]) {
        EXPECT_EQ(r["accesses"].get<uint64_t>(), rt.accesses());
        if (r["policy"] == "lru" && r["capacity"] == 4) { EXPECT_EQ(r["hits"].get<uint64_t>(), lru4); }
    }

    // Table and SVG; the JSON Lines form gives the same numbers.
    const std::string svg = dir + "/g.svg", jl = dir + "/g.jsonl";
    out = run_cmd(bin + " sim " + tr + " --policy all --capacity 2:7 --svg " + svg, &rc);
    ASSERT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("Best online policy per VRAM budget"), std::string::npos);
    EXPECT_NE(out.find("hit rate"), std::string::npos);
    std::ifstream f(svg);
    std::stringstream ss;
    ss << f.rdbuf();
    EXPECT_NE(ss.str().find("</svg>"), std::string::npos);
    ASSERT_EQ(run_cmd(bin + " trace export " + tr + " -o " + jl, &rc).find("error"), std::string::npos);
    out = run_cmd(bin + " sim --import-jsonl " + jl + " -m " + model + " --policy lru --capacity 4 --json", &rc);
    ASSERT_EQ(rc, 0) << out;
    EXPECT_EQ(nlohmann::json::parse(out)["results"][0]["hits"].get<uint64_t>(), lru4);

    // A corrupt trace is refused with the offset.
    {
        std::fstream c(tr, std::ios::in | std::ios::out | std::ios::binary);
        c.seekp(200);
        c.put('\x7f');
    }
    out = run_cmd(bin + " sim " + tr + " --capacity 4", &rc);
    EXPECT_NE(rc, 0);
    EXPECT_NE(out.find("offset"), std::string::npos) << out;
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace nitro
