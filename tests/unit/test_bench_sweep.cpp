// The benchmark protocol of `nitro bench -o DIR` (bench/bench_sweep.h, bench/bench_report.h,
// docs/bench.md): the context ladder, the mirrored run order, the weighted-rate arithmetic, peer
// output and failures, the record schema on the embedded model and a synthetic one, and the
// report's SVG as well-formed XML.
#include "gguf_bytes.h"

#include "core/error.h"
#include "bench/bench_report.h"
#include "bench/bench_sweep.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <sys/wait.h>

namespace nitro {
namespace {

// ---- a small XML well-formedness checker (the project has no XML library) ----
// Checks what a browser's XML parser rejects: one root element, tags closed in order, attribute
// values quoted, no duplicate attribute, '&' only in the five predefined or numeric entities,
// '<' only as markup. Returns "" when well formed, else what is wrong and where.
std::string xml_problem(const std::string& s) {
    size_t i = 0;
    auto is_name_start = [](char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':'; };
    auto is_name = [&](char c) { return is_name_start(c) || std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.'; };
    auto entity_ok = [&](size_t at) {
        const size_t e = s.find(';', at);
        if (e == std::string::npos) return false;
        const std::string n = s.substr(at + 1, e - at - 1);
        if (n == "amp" || n == "lt" || n == "gt" || n == "quot" || n == "apos") return true;
        if (n.size() > 1 && n[0] == '#') return n.find_first_not_of("0123456789", 1) == std::string::npos;
        return false;
    };
    if (s.compare(0, 5, "<?xml") == 0) {
        i = s.find("?>");
        if (i == std::string::npos) return "unterminated XML declaration";
        i += 2;
    }
    std::vector<std::string> stack;
    int roots = 0;
    while (i < s.size()) {
        if (s[i] != '<') {
            if (s[i] == '&' && !entity_ok(i)) return "bad entity at " + std::to_string(i);
            if (stack.empty() && !std::isspace(static_cast<unsigned char>(s[i]))) return "text outside the root at " + std::to_string(i);
            ++i;
            continue;
        }
        if (s.compare(i, 4, "<!--") == 0) {
            const size_t e = s.find("-->", i);
            if (e == std::string::npos) return "unterminated comment";
            i = e + 3;
            continue;
        }
        if (s[i + 1] == '/') {
            size_t j = i + 2;
            while (j < s.size() && is_name(s[j])) ++j;
            const std::string name = s.substr(i + 2, j - i - 2);
            while (j < s.size() && std::isspace(static_cast<unsigned char>(s[j]))) ++j;
            if (j >= s.size() || s[j] != '>') return "bad closing tag at " + std::to_string(i);
            if (stack.empty() || stack.back() != name) return "closing </" + name + "> does not match at " + std::to_string(i);
            stack.pop_back();
            i = j + 1;
            continue;
        }
        size_t j = i + 1;
        if (j >= s.size() || !is_name_start(s[j])) return "bad tag name at " + std::to_string(i);
        while (j < s.size() && is_name(s[j])) ++j;
        const std::string name = s.substr(i + 1, j - i - 1);
        if (stack.empty() && ++roots > 1) return "second root element <" + name + ">";
        std::set<std::string> attrs;
        for (;;) {
            const size_t ws = j;
            while (j < s.size() && std::isspace(static_cast<unsigned char>(s[j]))) ++j;
            if (j >= s.size()) return "unterminated tag <" + name + ">";
            if (s[j] == '>') {
                stack.push_back(name);
                ++j;
                break;
            }
            if (s.compare(j, 2, "/>") == 0) {
                j += 2;
                break;
            }
            if (j == ws || !is_name_start(s[j])) return "bad attribute in <" + name + "> at " + std::to_string(j);
            const size_t a = j;
            while (j < s.size() && is_name(s[j])) ++j;
            if (!attrs.insert(s.substr(a, j - a)).second) return "duplicate attribute in <" + name + ">";
            if (j >= s.size() || s[j] != '=') return "attribute without a value in <" + name + ">";
            ++j;
            if (j >= s.size() || (s[j] != '"' && s[j] != '\'')) return "unquoted attribute in <" + name + ">";
            const char q = s[j];
            const size_t e = s.find(q, j + 1);
            if (e == std::string::npos) return "unterminated attribute in <" + name + ">";
            for (size_t k = j + 1; k < e; ++k) {
                if (s[k] == '<') return "'<' in an attribute of <" + name + ">";
                if (s[k] == '&' && !entity_ok(k)) return "bad entity in an attribute of <" + name + ">";
            }
            j = e + 1;
        }
        i = j;
    }
    if (!stack.empty()) return "<" + stack.back() + "> is not closed";
    if (roots != 1) return "no root element";
    return "";
}

TEST(BenchSweep, XmlCheckerRejectsMalformedDocuments) {
    EXPECT_EQ(xml_problem("<?xml version=\"1.0\"?>\n<svg a=\"1\"><g/><text>x &amp; y</text></svg>\n"), "");
    EXPECT_NE(xml_problem("<svg><g></svg>"), "");
    EXPECT_NE(xml_problem("<svg a=1/>"), "");
    EXPECT_NE(xml_problem("<svg><text>a & b</text></svg>"), "");
    EXPECT_NE(xml_problem("<svg a=\"1\" a=\"2\"/>"), "");
    EXPECT_NE(xml_problem("<svg/><svg/>"), "");
    EXPECT_NE(xml_problem("<svg><text>x</svg>"), "");
}

// ---- pure parts ----

TEST(BenchSweep, ParsesContextLengths) {
    EXPECT_EQ(parse_ctx_tokens("4k"), 4096);
    EXPECT_EQ(parse_ctx_tokens("128K"), 131072);
    EXPECT_EQ(parse_ctx_tokens("64"), 64);
    for (const char* bad : {"", "k", "abc", "0", "4m", "-4", "4.5k"})
        EXPECT_NE(test::error_of([&] { parse_ctx_tokens(bad); }), "") << bad;
}

TEST(BenchSweep, LadderCapsAtTheTrainingContextAndSaysWhy) {
    const auto steps = plan_sweep({EngineMode::Cpu, EngineMode::Gpu}, {4, 8}, {64, 1000, 2048, 4096}, 1024, 4);
    ASSERT_EQ(steps.size(), 4u + 2 * 4u);  // cpu: no budget; gpu: two budgets
    EXPECT_FALSE(steps[0].budget_gib);
    EXPECT_EQ(steps[0].ctx, 64);
    EXPECT_EQ(steps[1].ctx, 1000);
    EXPECT_TRUE(steps[1].note.empty() && steps[1].skip_reason.empty());
    EXPECT_EQ(steps[2].ctx_requested, 2048);
    EXPECT_EQ(steps[2].ctx, 1020);  // 1024 - 4 generated tokens
    EXPECT_NE(steps[2].note.find("n_ctx_train is 1024"), std::string::npos) << steps[2].note;
    EXPECT_TRUE(steps[2].skip_reason.empty());
    EXPECT_NE(steps[3].skip_reason.find("already run"), std::string::npos) << steps[3].skip_reason;  // 4096 caps to 1020 too
    ASSERT_TRUE(steps[4].budget_gib && steps[8].budget_gib);
    EXPECT_EQ(*steps[4].budget_gib, 4);
    EXPECT_EQ(*steps[8].budget_gib, 8);
    EXPECT_TRUE(steps[8].skip_reason.empty());  // each budget has its own ladder
    EXPECT_NE(steps[11].skip_reason, "");
    // A model too short for the generated tokens: every step is skipped with the reason.
    const auto none = plan_sweep({EngineMode::Cpu}, {}, {64}, 4, 8);
    ASSERT_EQ(none.size(), 1u);
    EXPECT_NE(none[0].skip_reason.find("n_ctx_train 4"), std::string::npos);
}

TEST(BenchSweep, MirroredOrderIsABBA) {
    std::vector<SweepStep> steps(3);
    steps[1].skip_reason = "skipped";
    const auto r = mirrored_order(steps, 3, true);
    const std::vector<SweepRun> want = {{0, 0, false}, {0, 0, true}, {0, 1, true}, {0, 1, false}, {0, 2, false}, {0, 2, true},
                                        {2, 0, false}, {2, 0, true}, {2, 1, true}, {2, 1, false}, {2, 2, false}, {2, 2, true}};
    EXPECT_EQ(r, want);
    const auto solo = mirrored_order(steps, 2, false);
    const std::vector<SweepRun> want_solo = {{0, 0, false}, {0, 1, false}, {2, 0, false}, {2, 1, false}};
    EXPECT_EQ(solo, want_solo);
}

TEST(BenchSweep, WeightedRateIsTotalTokensOverTotalSeconds) {
    // 100 tokens in 1 s and 100 tokens in 4 s: 200 / 5 = 40 tok/s (the mean of the two rates,
    // (100 + 25) / 2 = 62.5, would over-weight the short run).
    EXPECT_DOUBLE_EQ(weighted_rate({{100, 1.0}, {100, 4.0}}), 40.0);
    EXPECT_DOUBLE_EQ(weighted_rate({{30, 0.5}, {10, 0.5}, {60, 1.0}}), 50.0);
    EXPECT_EQ(weighted_rate({}), 0.0);
}

TEST(BenchSweep, ParsesPeerOutput) {
    // llama-bench -o json with -p 512 -n 16 -d 0,512: the prompt test at depth 0, decode at the deepest.
    const std::string lb = R"(warming up
[{"n_prompt":512,"n_gen":0,"n_depth":0,"avg_ts":100.5},{"n_prompt":0,"n_gen":16,"n_depth":0,"avg_ts":10.0},
 {"n_prompt":512,"n_gen":0,"n_depth":512,"avg_ts":90.0},{"n_prompt":0,"n_gen":16,"n_depth":512,"avg_ts":8.0}])";
    const PeerRates r = parse_peer_output(lb);
    EXPECT_DOUBLE_EQ(r.prompt_tok_s, 100.5);
    EXPECT_DOUBLE_EQ(r.decode_tok_s, 8.0);
    EXPECT_EQ(r.decode_depth, 512);
    EXPECT_EQ(r.prompt_tokens, 512);
    EXPECT_EQ(r.decode_tokens, 16);
    const PeerRates o = parse_peer_output(R"({"prompt_tokens":64,"prompt_tok_s":50,"gen_tokens":4,"decode_tok_s":5})");
    EXPECT_DOUBLE_EQ(o.prompt_tok_s, 50);
    EXPECT_DOUBLE_EQ(o.decode_tok_s, 5);
    EXPECT_NE(test::error_of([] { parse_peer_output("no json here"); }).find("no JSON"), std::string::npos);
    EXPECT_NE(test::error_of([] { parse_peer_output(R"([{"n_prompt":8,"n_gen":0,"avg_ts":1}])"); }).find("no decode test"),
              std::string::npos);
    EXPECT_NE(test::error_of([] { parse_peer_output(R"({"prompt_tok_s":1})"); }), "");
    EXPECT_NE(test::error_of([] { parse_peer_output("[{\"n_prompt\":"); }).find("not valid JSON"), std::string::npos);
}

TEST(BenchSweep, ExpandsPeerCommandPlaceholders) {
    EXPECT_EQ(expand_peer_command("llama-bench -m {model} -p {ctx} -n {n_gen} -t {threads} -d 0,{n_prompt} --x {mode}:{budget}",
                                  "/a b/m.gguf", 64, 4, 2, "hybrid", 8),
              "llama-bench -m '/a b/m.gguf' -p 64 -n 4 -t 2 -d 0,64 --x hybrid:8");
    EXPECT_NE(test::error_of([] { expand_peer_command("x {nope}", "m", 1, 1, 1); }).find("unknown placeholder {nope}"),
              std::string::npos);
    // Braces that are not placeholders stay: JSON in an echo, ${VAR}, an unclosed brace.
    EXPECT_EQ(expand_peer_command(R"(echo '{"a": {ctx}}' ${HOME} {n_gen)", "m", 7, 1, 1), R"(echo '{"a": 7}' ${HOME} {n_gen)");
}

TEST(BenchSweep, CommandWithTimeoutReportsExitAndKillsOnTimeout) {
    const CommandResult ok = run_command_with_timeout("echo out; echo err >&2; exit 3", 10);
    EXPECT_EQ(ok.exit_code, 3);
    EXPECT_FALSE(ok.timed_out);
    EXPECT_EQ(ok.out, "out\n");
    EXPECT_EQ(ok.err, "err\n");
    const auto t = std::chrono::steady_clock::now();
    const CommandResult slow = run_command_with_timeout("sleep 30", 0.5);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    EXPECT_TRUE(slow.timed_out);
    EXPECT_EQ(slow.exit_code, -1);
    EXPECT_LT(s, 5.0);
    // A child that leaves a background process holding the output open is killed with its group.
    const auto t2 = std::chrono::steady_clock::now();
    const CommandResult bg = run_command_with_timeout("sleep 30 & echo started", 0.5);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t2).count(), 5.0);
    EXPECT_EQ(bg.out, "started\n");
}

// ---- the report ----

nlohmann::json step_record(const char* mode, nlohmann::json budget, int64_t ctx, double pp, double tg, double ratio,
                           const char* routing = "uniform", double hit_rate = -1) {
    nlohmann::json f = {{"prompt_tok_s", figure(pp, "tok/s", false)}, {"decode_tok_s", figure(tg, "tok/s", false)},
                        {"ttft_ms", figure(12.5, "ms", false)}};
    if (hit_rate >= 0) f["expert_hit_rate"] = figure(hit_rate, "fraction on the GPU", false);
    if (ratio > 0) {
        f["peer_prompt_tok_s"] = figure(pp / ratio, "tok/s", false);
        f["peer_decode_tok_s"] = figure(tg / ratio, "tok/s", false);
        f["ratio_prompt_tok_s"] = figure(ratio, "nitro / peer", false);
        f["ratio_decode_tok_s"] = figure(ratio, "nitro / peer", false);
    }
    return {{"record", "step"}, {"mode", mode}, {"vram_budget_gib", budget}, {"ctx", ctx},     {"runs", 2},
            {"status", "ok"},   {"reason", ""}, {"note", ""},             {"routing", routing}, {"workload", "ladder"},
            {"figures", f}};
}

TEST(BenchSweep, ReportRendersTableAndWellFormedSvg) {
    std::vector<nlohmann::json> recs = {step_record("cpu", nullptr, 4096, 100, 20, 1.25),
                                        step_record("cpu", nullptr, 16384, 80, 15, 1.5),
                                        step_record("hybrid", 8, 4096, 300, 40, 2.0, "uniform", 0.25),
                                        step_record("hybrid", 8, 16384, 250, 35, 2.5, "uniform", 0.25),
                                        step_record("hybrid", 4, 4096, 200, 30, 1.5, "uniform", 0.125),
                                        step_record("hybrid", 8, 4096, 320, 45, 2.2, "replay:t.nmtr", 0.5),
                                        step_record("hybrid", 4, 4096, 220, 33, 1.6, "replay:t.nmtr", 0.3)};
    nlohmann::json skipped = {{"record", "step"}, {"mode", "gpu"}, {"vram_budget_gib", 4}, {"ctx", 4096}, {"runs", 0},
                              {"status", "skipped"}, {"reason", "needs <CUDA> & a | GPU"}, {"note", ""},
                              {"figures", nlohmann::json::object()}};
    recs.push_back(skipped);
    recs.push_back({{"record", "run"}, {"mode", "cpu"}});  // ignored by the report
    const ReportFiles rep = render_report(recs);
    EXPECT_NE(rep.markdown.find("| cpu | uniform | - | ladder | 4096 | 2 | 100.00 | 20.00 | 12.5 | 80.00 | 16.00 | 1.250 | 1.250 | ok |"),
              std::string::npos)
        << rep.markdown;
    EXPECT_NE(rep.markdown.find("| hybrid | uniform | 8 GiB | ladder | 16384 |"), std::string::npos);
    EXPECT_NE(rep.markdown.find("| hybrid | replay:t.nmtr | 4 GiB | ladder | 4096 | 2 | 220.00 |"), std::string::npos);
    EXPECT_NE(rep.markdown.find("skipped: needs <CUDA> & a \\| GPU"), std::string::npos) << rep.markdown;
    EXPECT_NE(rep.markdown.find("prompt tok/s (CALCULATED)"), std::string::npos);
    EXPECT_NE(rep.markdown.find("ratio decode (CALCULATED)"), std::string::npos);
    std::set<std::string> names;
    for (const auto& [name, svg] : rep.svgs) {
        names.insert(name);
        EXPECT_EQ(xml_problem(svg), "") << name << "\n" << svg;
        EXPECT_NE(svg.find("CALCULATED"), std::string::npos) << name;
        EXPECT_NE(svg.find("<polyline"), std::string::npos) << name;  // two points per series: a line
        EXPECT_NE(rep.markdown.find("](" + name + ")"), std::string::npos) << name;
    }
    EXPECT_EQ(names, (std::set<std::string>{"report-prompt.svg", "report-decode.svg", "report-ratio.svg", "report-ratio-prompt.svg",
                                            "report-hit-rate.svg"}));
    // Several routings: the series say which; the hit-rate chart has one line per mode, routing and
    // context (budgets on x): the uniform 4k line at 4 and 8 GiB is 12.5 % then 25 %.
    for (const auto& [name, svg] : rep.svgs) {
        if (name == "report-decode.svg") {
            EXPECT_NE(svg.find("hybrid 8 GiB, replay:t.nmtr"), std::string::npos) << svg;
        }
        if (name != "report-hit-rate.svg") continue;
        EXPECT_NE(svg.find("hybrid, uniform, ctx 4k: 4 GiB, 12.5"), std::string::npos) << svg;
        EXPECT_NE(svg.find("hybrid, uniform, ctx 4k: 8 GiB, 25"), std::string::npos) << svg;
        EXPECT_NE(svg.find("hybrid, replay:t.nmtr, ctx 4k: 8 GiB, 50"), std::string::npos) << svg;
    }
    // Without a peer, no ratio chart; names with markup are escaped in the SVG.
    const ReportFiles solo = render_report({step_record("c<&>\"'", nullptr, 64, 10, 2, 0)});
    ASSERT_EQ(solo.svgs.size(), 2u);
    for (const auto& [name, svg] : solo.svgs) {
        EXPECT_EQ(xml_problem(svg), "") << svg;
        EXPECT_NE(svg.find("c&lt;&amp;&gt;&quot;&apos;"), std::string::npos);
    }
    EXPECT_EQ(solo.markdown.find("ratio decode"), std::string::npos);
    EXPECT_EQ(solo.markdown.find("peer prompt tok/s"), std::string::npos);
}

// ---- the command, end to end ----

std::string read_text(const std::string& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::vector<nlohmann::json> read_records(const std::string& dir) {
    std::vector<nlohmann::json> r;
    std::ifstream f(dir + "/records.jsonl");
    for (std::string line; std::getline(f, line);) r.push_back(nlohmann::json::parse(line));
    return r;
}

/// Exit status of `cmd` run by the shell (output to `log`).
int run_status(const std::string& cmd, const std::string& log) {
    const int rc = std::system((cmd + " >" + log + " 2>&1").c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

void expect_figure(const nlohmann::json& f, const char* key, const char* kind) {
    ASSERT_TRUE(f.contains(key)) << key << " in " << f.dump();
    EXPECT_TRUE(f[key]["value"].is_number()) << key;
    EXPECT_TRUE(f[key]["unit"].is_string()) << key;
    EXPECT_EQ(f[key]["kind"], kind) << key;
}

const std::string kModel = std::string(NITRO_SOURCE_DIR) + "/models/tiny-moe-pystd.gguf";
const std::string kBench = std::string(NITRO_BINARY) + " bench -t 1 --read-probe 32 -n 4";

TEST(BenchSweep, RecordsOnTheEmbeddedModelHaveTheSchema) {
    const std::string dir = test::temp_dir("bench-sweep");
    const int rc = run_status(kBench + " -m " + kModel + " -o " + dir + "/out --modes cpu,gpu --ctx 64,2k,4k --vram-budget 4",
                              dir + "/log");
    ASSERT_EQ(rc, 0) << read_text(dir + "/log");
    const auto recs = read_records(dir + "/out");
    // the file's SHA-256 as coreutils' sha256sum computes it (an independent implementation)
    ASSERT_EQ(run_status("sha256sum " + kModel, dir + "/sha"), 0);
    const std::string sha = read_text(dir + "/sha").substr(0, 64);
    int runs = 0, steps = 0;
    for (const auto& r : recs) {
        EXPECT_EQ(r["model"]["file_sha256"], sha);
        for (const char* k : {"schema", "command", "nitro", "model", "machine", "mode", "vram_budget_gib", "ctx", "ctx_requested",
                              "status", "reason", "record"})
            EXPECT_TRUE(r.contains(k)) << k << " in " << r.dump();
        EXPECT_EQ(r["schema"], "nitro-bench-run/1");
        EXPECT_NE(r["command"].get<std::string>().find("--ctx 64,2k,4k"), std::string::npos);
        EXPECT_FALSE(r["nitro"]["version"].get<std::string>().empty());
        EXPECT_FALSE(r["nitro"]["git_commit"].get<std::string>().empty());
        EXPECT_EQ(r["model"]["file_xxh3_64"].get<std::string>().size(), 16u);
        EXPECT_EQ(r["model"]["n_ctx_train"], 1024);
        EXPECT_FALSE(r["model"]["quant_mix"].empty());
        EXPECT_GT(r["model"]["file_bytes"].get<int64_t>(), 0);
        for (const char* k : {"cpu_model", "cores", "isa", "ram_bytes", "gpus", "gpu_driver"})
            EXPECT_TRUE(r["machine"].contains(k)) << k;
        expect_figure(r["machine"], "dram_read_gb_s", "MEASURED");
        EXPECT_GT(r["machine"]["dram_read_gb_s"]["value"].get<double>(), 0);
        // Every figure anywhere is labelled.
        if (r.contains("figures")) {
            for (const auto& [k, f] : r["figures"].items()) {
                EXPECT_TRUE(f["kind"] == "MEASURED" || f["kind"] == "CALCULATED") << k;
            }
        }
        if (r["record"] == "run" && r["mode"] == "cpu") {
            ++runs;
            EXPECT_EQ(r["status"], "ok") << r.dump();
            EXPECT_EQ(r["engine"], "nitro");
            const auto& f = r["figures"];
            for (const char* k : {"prompt_tokens", "prompt_seconds", "prompt_tok_s", "ttft_ms", "decode_tokens", "decode_seconds",
                                  "decode_tok_s", "peak_rss_bytes", "major_page_faults", "minor_page_faults", "expert_pairs_gpu",
                                  "expert_pairs_cpu"})
                expect_figure(f, k, "MEASURED");
            expect_figure(f, "weight_bytes_per_token", "CALCULATED");
            expect_figure(f, "expert_hit_rate", "CALCULATED");
            EXPECT_EQ(f["prompt_tokens"]["value"], r["ctx"]);
            EXPECT_EQ(f["decode_tokens"]["value"], 4);
            EXPECT_GT(f["decode_tok_s"]["value"].get<double>(), 0);
            EXPECT_GE(f["ttft_ms"]["value"].get<double>(), 1000 * f["prompt_seconds"]["value"].get<double>());
            EXPECT_EQ(f["expert_hit_rate"]["value"], 0.0);  // the CPU engine holds no expert in VRAM
            EXPECT_GT(f["expert_pairs_cpu"]["value"].get<double>(), 0);
            EXPECT_GT(f["peak_rss_bytes"]["value"].get<double>(), 0);
        }
        if (r["record"] == "step") ++steps;
    }
    EXPECT_EQ(runs, 2);  // 64 and 2k capped to 1020; 4k caps to 1020 again and is skipped
    EXPECT_EQ(steps, 6);  // cpu x 3 contexts, gpu 4 GiB x 3 contexts
    bool capped = false, dup = false, gpu_reason = false;
    for (const auto& r : recs) {
        if (r["record"] != "step") continue;
        if (r["mode"] == "cpu" && r["ctx_requested"] == 2048) {
            capped = r["ctx"] == 1020 && r["status"] == "ok" && !r["note"].get<std::string>().empty();
            expect_figure(r["figures"], "decode_tok_s", "CALCULATED");
        }
        if (r["mode"] == "cpu" && r["ctx_requested"] == 4096) dup = r["status"] == "skipped" && !r["reason"].get<std::string>().empty();
        if (r["mode"] == "gpu" && r["ctx_requested"] == 64 && !r["machine"]["cuda_engine"].get<bool>())
            gpu_reason = r["status"] == "skipped" && r["reason"].get<std::string>().find("CUDA") != std::string::npos;
        if (r["mode"] == "gpu" && r["machine"]["cuda_engine"].get<bool>()) gpu_reason = true;  // a CUDA build: not this check
    }
    EXPECT_TRUE(capped);
    EXPECT_TRUE(dup);
    EXPECT_TRUE(gpu_reason);
    const std::string md = read_text(dir + "/out/report.md");
    EXPECT_NE(md.find("| cpu | model | - | ladder | 1020 |"), std::string::npos) << md;
    for (const char* svg : {"report-prompt.svg", "report-decode.svg"})
        EXPECT_EQ(xml_problem(read_text(dir + "/out/" + svg)), "") << svg;
}

TEST(BenchSweep, AnEarlierSweepIsNotOverwrittenWithoutOverwrite) {
    const std::string dir = test::temp_dir("bench-again");
    std::filesystem::create_directories(dir + "/out");
    {
        std::ofstream f(dir + "/out/records.jsonl");
        f << "{\"schema\":\"nitro-bench-run/1\",\"record\":\"step\"}\n";
    }
    const std::string sweep = kBench + " -m " + kModel + " -o " + dir + "/out --modes cpu --ctx 32";
    EXPECT_NE(run_status(sweep, dir + "/log"), 0);
    const std::string log = read_text(dir + "/log");
    EXPECT_NE(log.find("holds the records of an earlier sweep"), std::string::npos) << log;
    EXPECT_NE(log.find("--overwrite"), std::string::npos) << log;
    EXPECT_NE(log.find("--append"), std::string::npos) << log;
    EXPECT_EQ(read_text(dir + "/out/records.jsonl"), "{\"schema\":\"nitro-bench-run/1\",\"record\":\"step\"}\n") << "left as it was";
    ASSERT_EQ(run_status(sweep + " --overwrite", dir + "/log2"), 0) << read_text(dir + "/log2");
    EXPECT_GE(read_records(dir + "/out").size(), 2u);
}

TEST(BenchSweep, RatioAgainstAPeerComesFromThePairs) {
    const std::string dir = test::temp_dir("bench-peer");
    {
        std::ofstream f(dir + "/peer.json");
        f << R"([{"n_prompt":32,"n_gen":0,"n_depth":0,"avg_ts":200.0},{"n_prompt":0,"n_gen":4,"n_depth":32,"avg_ts":50.0}])";
    }
    const int rc = run_status(kBench + " -m " + kModel + " -o " + dir + "/out --modes cpu --ctx 32 --repeat 2 --peer-cmd 'cat " +
                                  dir + "/peer.json # {model} {ctx}'",
                              dir + "/log");
    ASSERT_EQ(rc, 0) << read_text(dir + "/log");
    const auto recs = read_records(dir + "/out");
    std::vector<std::string> order;
    int64_t tokens = 0;
    double seconds = 0;
    const nlohmann::json* step = nullptr;
    for (const auto& r : recs) {
        if (r["record"] == "run") {
            order.push_back(r["engine"]);
            if (r["engine"] == "nitro") {
                tokens += r["figures"]["decode_tokens"]["value"].get<int64_t>();
                seconds += r["figures"]["decode_seconds"]["value"].get<double>();
            } else {
                EXPECT_NE(r["peer_command"].get<std::string>().find("# '" + kModel + "' 32"), std::string::npos) << r["peer_command"];
                expect_figure(r["figures"], "decode_tok_s", "MEASURED");
            }
        }
        if (r["record"] == "step") step = &r;
    }
    EXPECT_EQ(order, (std::vector<std::string>{"nitro", "peer", "peer", "nitro"}));
    ASSERT_NE(step, nullptr);
    const auto& f = (*step)["figures"];
    expect_figure(f, "ratio_decode_tok_s", "CALCULATED");
    EXPECT_NEAR(f["peer_decode_tok_s"]["value"].get<double>(), 50.0, 1e-9);
    EXPECT_NEAR(f["ratio_decode_tok_s"]["value"].get<double>(), (tokens / seconds) / 50.0, 1e-9 * tokens / seconds);
    EXPECT_NEAR(f["decode_tok_s"]["value"].get<double>(), tokens / seconds, 1e-9 * tokens / seconds);
    EXPECT_EQ(xml_problem(read_text(dir + "/out/report-ratio.svg")), "");
    EXPECT_NE(read_text(dir + "/out/report.md").find("ratio decode (CALCULATED)"), std::string::npos);
}

TEST(BenchSweep, PeerThatFailsOrHangsGivesAClearErrorNotAHang) {
    const std::string dir = test::temp_dir("bench-peer-bad");
    struct Case {
        const char* cmd;
        const char* reason;
    };
    int n = 0;
    for (const Case& c : {Case{"echo broken >&2; exit 1", "exited with status 1: broken"},
                          Case{"sleep 60", "timed out after 1 s"}, Case{"echo not json", "no JSON"}}) {
        const auto t = std::chrono::steady_clock::now();
        const std::string out = dir + "/out" + std::to_string(n++);  // a fresh folder: an earlier sweep's is refused
        const int rc = run_status(kBench + " -m " + kModel + " -o " + out + " --modes cpu --ctx 16 --peer-timeout 1 --peer-cmd '" +
                                      c.cmd + "'",
                                  dir + "/log");
        EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count(), 30.0) << c.cmd;
        EXPECT_EQ(rc, 1) << c.cmd << "\n" << read_text(dir + "/log");
        bool seen = false, step_seen = false;
        for (const auto& r : read_records(out)) {
            if (r["record"] == "run" && r["engine"] == "peer") {
                EXPECT_EQ(r["status"], "error");
                EXPECT_NE(r["reason"].get<std::string>().find(c.reason), std::string::npos) << r["reason"];
                seen = true;
            }
            if (r["record"] == "step") {  // the step fails with its peer, and says why
                EXPECT_EQ(r["status"], "error");
                EXPECT_NE(r["reason"].get<std::string>().find("1 of 1 peer runs failed"), std::string::npos) << r["reason"];
                step_seen = true;
            }
        }
        EXPECT_TRUE(seen) << c.cmd;
        EXPECT_TRUE(step_seen) << c.cmd;
        EXPECT_NE(read_text(dir + "/log").find("some runs failed"), std::string::npos);
        EXPECT_NE(read_text(out + "/report.md").find("peer runs failed"), std::string::npos);
    }
}

TEST(BenchSweep, RunsOnASynthesizedModel) {
    const std::string dir = test::temp_dir("bench-synth");
    test::run_command(std::string(NITRO_BINARY) + " synth --arch gpt-oss --preset tiny -o " + dir + "/tiny.gguf 2>&1");
    const int rc = run_status(kBench + " -m " + dir + "/tiny.gguf -o " + dir + "/out --modes cpu --ctx 16,32", dir + "/log");
    ASSERT_EQ(rc, 0) << read_text(dir + "/log");
    int ok = 0;
    for (const auto& r : read_records(dir + "/out")) {
        EXPECT_EQ(r["model"]["arch"], "gpt-oss");
        if (r["record"] == "run" && r["status"] == "ok") ++ok;
    }
    EXPECT_EQ(ok, 2);
}

TEST(BenchSweep, RoutingScenariosAreNamedInEveryRecord) {
    // A nitro synth file routes as it was made (uniform, or zipf:S from --router-skew); replay:TRACE
    // adds a scenario whose runs take their experts from the trace (benchmark only, said loudly).
    const std::string dir = test::temp_dir("bench-routing");
    test::run_command(std::string(NITRO_BINARY) + " synth --arch gpt-oss --preset tiny --router-skew zipf:0.7 -o " + dir +
                      "/z.gguf 2>&1");
    test::run_command(std::string(NITRO_BINARY) + " trace synth -m " + dir + "/z.gguf -o " + dir +
                      "/t.nmtr --sequences 2 --prompt 8 --decode 8 2>&1");
    const int rc = run_status(kBench + " -m " + dir + "/z.gguf -o " + dir + "/out --modes cpu --ctx 16 --routing file,replay:" + dir +
                                  "/t.nmtr",
                              dir + "/log");
    ASSERT_EQ(rc, 0) << read_text(dir + "/log");
    EXPECT_NE(read_text(dir + "/log").find("BENCHMARK ONLY"), std::string::npos);
    std::set<std::string> seen;
    for (const auto& r : read_records(dir + "/out")) {
        ASSERT_TRUE(r.contains("routing")) << r.dump();
        seen.insert(r["routing"].get<std::string>() + "/" + r["record"].get<std::string>());
        EXPECT_EQ(r["workload"], "ladder");
        if (r["routing"] == "zipf:0.7") {
            EXPECT_FALSE(r.contains("routing_trace"));
            continue;
        }
        EXPECT_EQ(r["routing"], "replay:" + dir + "/t.nmtr");
        EXPECT_EQ(r["routing_trace"]["prefill_tokens"], 16);  // 2 sequences x 8 prompt tokens
        EXPECT_EQ(r["routing_trace"]["decode_tokens"], 16);
        EXPECT_NE(r["routing_note"].get<std::string>().find("not the model's"), std::string::npos);
        if (r["record"] == "run") {
            EXPECT_NE(r["engine_description"].get<std::string>().find("routing replayed from"), std::string::npos);
            EXPECT_EQ(r["routing_replayed_tokens"]["prefill"], 16);  // the 16-token prompt
            EXPECT_EQ(r["routing_replayed_tokens"]["decode"], 4);    // -n 4
        }
    }
    EXPECT_EQ(seen, (std::set<std::string>{"zipf:0.7/run", "zipf:0.7/step", "replay:" + dir + "/t.nmtr/run",
                                           "replay:" + dir + "/t.nmtr/step"}));
    EXPECT_NE(read_text(dir + "/out/report.md").find("| cpu | replay:" + dir + "/t.nmtr | - | ladder | 16 |"), std::string::npos);
    // A scenario the file does not give is refused before anything runs.
    EXPECT_EQ(run_status(kBench + " -m " + dir + "/z.gguf -o " + dir + "/out2 --modes cpu --ctx 16 --routing uniform", dir + "/log2"),
              1);
    EXPECT_NE(read_text(dir + "/log2").find("routes as 'zipf:0.7'"), std::string::npos) << read_text(dir + "/log2");
}

TEST(BenchSweep, AppendKeepsEarlierRecordsAndReportsThemAll) {
    // Two sweeps into one folder (e.g. one per mode, each with its own budgets): one report.
    const std::string dir = test::temp_dir("bench-append");
    ASSERT_EQ(run_status(kBench + " -m " + kModel + " -o " + dir + "/out --modes cpu --ctx 16", dir + "/log"), 0);
    ASSERT_EQ(run_status(kBench + " -m " + kModel + " -o " + dir + "/out --append --modes cpu --ctx 32", dir + "/log"), 0)
        << read_text(dir + "/log");
    std::vector<int64_t> ctx;
    for (const auto& r : read_records(dir + "/out"))
        if (r["record"] == "step") ctx.push_back(r["ctx"].get<int64_t>());
    EXPECT_EQ(ctx, (std::vector<int64_t>{16, 32}));
    const std::string md = read_text(dir + "/out/report.md");
    EXPECT_NE(md.find("| cpu | model | - | ladder | 16 |"), std::string::npos) << md;
    EXPECT_NE(md.find("| cpu | model | - | ladder | 32 |"), std::string::npos) << md;
    // --render-only writes the report of the records as they are, running nothing.
    std::filesystem::remove(dir + "/out/report.md");
    ASSERT_EQ(run_status(std::string(NITRO_BINARY) + " bench -m /nonexistent.gguf -o " + dir + "/out --render-only", dir + "/log"), 0)
        << read_text(dir + "/log");
    EXPECT_EQ(read_text(dir + "/out/report.md"), md);
    // With --overwrite the folder starts over (without it, or --append, it is refused: another test);
    // a file that is not records is refused.
    ASSERT_EQ(run_status(kBench + " -m " + kModel + " -o " + dir + "/out --overwrite --modes cpu --ctx 16", dir + "/log"), 0);
    EXPECT_EQ(read_records(dir + "/out").size(), 2u);  // one run, one step
    std::ofstream(dir + "/out/records.jsonl", std::ios::app) << "{\"not\": \"a record\"}\n";
    EXPECT_EQ(run_status(kBench + " -m " + kModel + " -o " + dir + "/out --append --modes cpu --ctx 16", dir + "/log"), 1);
    EXPECT_NE(read_text(dir + "/log").find("records.jsonl:3 is not a nitro bench record"), std::string::npos) << read_text(dir + "/log");
}

TEST(BenchSweep, SingleRunFlagsStillWorkAndSweepFlagsNeedOut) {
    const std::string dir = test::temp_dir("bench-single");
    const std::string out = test::run_command(std::string(NITRO_BINARY) + " bench -m " + kModel +
                                              " -t 1 -p 8 -n 2 --kernels none --kernel-pool 0.03125 --json 2>/dev/null");
    const auto j = nlohmann::json::parse(out);
    EXPECT_EQ(j["prompt_tokens"], 8);
    EXPECT_EQ(j["gen_tokens"], 2);
    EXPECT_EQ(run_status(std::string(NITRO_BINARY) + " bench -m " + kModel + " --repeat 2", dir + "/log"), 1);
    EXPECT_NE(read_text(dir + "/log").find("give -o DIR"), std::string::npos);
}

}  // namespace
}  // namespace nitro
