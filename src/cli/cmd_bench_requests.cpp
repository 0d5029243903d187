// nitro bench -m MODEL -o DIR --requests FILE.jsonl [--modes ..] [--vram-budget ..] [--ctx N] [--repeat N]
//             [--peer-url URL [--peer-model NAME]] [--nitro-url URL] [--routing ..]   (docs/bench.md)
// The request-replay sweep: one step per routing scenario, mode and budget, each a `nitro serve`
// started here on 127.0.0.1 (or the running --nitro-url) that gets every saved request in file
// order, streamed, mirrored A B B A against the peer server.
#include "cli/bench_sweep_cli.h"

#include "core/error.h"
#include "core/version.h"
#include "cpu/thread_pool.h"
#include "bench/bench.h"
#include "bench/bench_requests.h"
#include "bench/bench_sweep.h"
#include "runtime/route_replay.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>

namespace nitro::cli {

namespace {

using Clock = std::chrono::steady_clock;

/// VmHWM of process `pid` (/proc/PID/status), bytes; 0 when unreadable.
int64_t peak_rss_of(pid_t pid) {
    std::ifstream f(fmt::format("/proc/{}/status", pid));
    for (std::string line; std::getline(f, line);)
        if (line.rfind("VmHWM:", 0) == 0) return 1024 * std::atoll(line.c_str() + 6);
    return 0;
}

struct StepAgg {
    std::vector<RateSample> prompt, decode, peer_prompt, peer_decode;
    std::vector<double> ttft_s, peer_ttft_s;
    std::string status = "ok", reason;
    int runs = 0, peer_runs = 0, errors = 0, peer_errors = 0;
    std::string error_reason, peer_reason;
};

/// One replay of every request against `t`; fills the run record `j` and returns the totals.
ReplayTotals replay_all(const std::vector<SavedRequest>& reqs, const HttpTarget& t, double timeout_s, nlohmann::json& j,
                        const std::function<void(size_t)>& on_request) {
    std::vector<RequestTiming> timings;
    const auto t0 = Clock::now();
    for (size_t i = 0; i < reqs.size(); ++i) {
        on_request(i);
        timings.push_back(replay_request(t, reqs[i], timeout_s));
    }
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    const ReplayTotals s = replay_totals(reqs, timings);
    nlohmann::json per = nlohmann::json::array();
    std::string first_error;
    for (size_t i = 0; i < reqs.size(); ++i) {
        const RequestTiming& r = timings[i];
        const SavedRequest& q = reqs[i];
        nlohmann::json e = {{"id", q.id},
                            {"line", q.line},
                            {"conversation", q.conversation},
                            {"turn", q.turn},
                            {"endpoint", q.endpoint},
                            {"status", r.error.empty() ? "ok" : "error"},
                            {"error", r.error},
                            {"http_status", r.http_status},
                            {"kind", "MEASURED"},
                            {"ttft_ms", r.first_text_s >= 0 ? 1000.0 * r.first_text_s : -1.0},
                            {"total_ms", 1000.0 * r.total_s},
                            {"text_events", r.text_events},
                            {"tokens_from", r.usage ? "usage" : "stream events (the server sent no usage)"},
                            {"prompt_tokens", r.prompt_tokens},
                            {"cached_tokens", r.cached_tokens},
                            {"completion_tokens", r.usage ? r.completion_tokens : r.text_events},
                            {"decode_tokens", r.decode_tokens()},
                            {"decode_seconds", r.decode_seconds()}};
        per.push_back(std::move(e));
        if (!r.error.empty() && first_error.empty()) first_error = fmt::format("{} ({}): {}", q.id, q.endpoint, r.error);
    }
    const double mean_ttft = s.ttft_s.empty() ? 0.0 : [&] {
        double a = 0;
        for (double v : s.ttft_s) a += v;
        return a / static_cast<double>(s.ttft_s.size());
    }();
    nlohmann::json f = {
        {"requests", figure(s.requests, "requests", true)},
        {"requests_failed", figure(s.failed, "requests", true)},
        {"wall_seconds", figure(wall, "s", true)},
        {"prompt_tokens", figure(static_cast<double>(s.prompt_tokens), "tokens", false)},
        {"cached_prompt_tokens", figure(static_cast<double>(s.cached_tokens), "tokens", false)},
        {"completion_tokens", figure(static_cast<double>(s.completion_tokens), "tokens", false)},
        {"decode_tokens", figure(static_cast<double>(s.decode.tokens), "tokens", false)},
        {"decode_seconds", figure(s.decode.seconds, "s", false)},
        {"decode_tok_s", figure(weighted_rate({s.decode}), "tok/s", false)},
        {"prompt_tok_s", figure(weighted_rate({s.prompt}), "tok/s", false)},
        {"ttft_ms", figure(1000.0 * mean_ttft, "ms", false)},
        {"ttft_ms_max", figure(s.ttft_s.empty() ? 0.0 : 1000.0 * *std::max_element(s.ttft_s.begin(), s.ttft_s.end()), "ms", false)},
    };
    if (s.first_turns) f["ttft_first_turn_ms"] = figure(1000.0 * s.ttft_first_turn_s, "ms", false);
    if (s.later_turns) f["ttft_later_turns_ms"] = figure(1000.0 * s.ttft_later_turns_s, "ms", false);
    j["figures"] = f;
    j["requests"] = per;
    j["status"] = s.failed ? "error" : "ok";
    j["reason"] = s.failed ? fmt::format("{} of {} requests failed; the first: {}", s.failed, s.requests, first_error) : "";
    return s;
}

}  // namespace

int run_request_sweep(const BenchSweepOptions& o) {
    namespace fs = std::filesystem;
    if (o.repeat < 1) fail("--repeat must be at least 1 (got {})", o.repeat);
    if (!(o.request_timeout_s > 0)) fail("--request-timeout must be positive seconds (got {})", o.request_timeout_s);
    if (!o.peer_cmd.empty()) fail("--peer-cmd is the ladder's peer; with --requests the peer is a server: --peer-url URL");
    const std::vector<SavedRequest> reqs = read_saved_requests(o.requests);
    // Servers that should be there are checked first: one that is down is an error now, quickly.
    std::optional<HttpTarget> peer, external;
    const double probe_s = std::min(10.0, o.request_timeout_s);
    if (!o.peer_url.empty()) {
        peer = parse_http_url(o.peer_url, "--peer-url");
        peer->model = o.peer_model;
        peer->api_key = o.peer_api_key;
        check_server_up(*peer, "--peer-url", probe_s);
    }
    if (!o.nitro_url.empty()) {
        external = parse_http_url(o.nitro_url, "--nitro-url");
        external->api_key = o.nitro_api_key;
        check_server_up(*external, "--nitro-url", probe_s);
    }
    int64_t ctx = 8192;
    if (o.ctx_given) {
        const auto c = split_list(o.ctx);
        if (c.size() != 1) fail("--ctx with --requests is the context of the nitro serve the bench starts: give one value (got '{}')", o.ctx);
        ctx = parse_ctx_tokens(c[0]);
    }
    std::vector<nlohmann::json> records;  // with --append, the folder's earlier records first
    std::ofstream rec = open_records(o.out, o.append, o.overwrite, records);

    Model model(o.model);
    std::vector<SweepStep> steps;
    std::vector<std::string> step_trace;  // replay trace of each step ("" = none)
    if (external) {
        if (o.routing != "file") fail("--routing with --nitro-url: the running server routes as it was started");
        SweepStep s;
        s.mode = EngineMode::Auto;
        s.ctx = s.ctx_requested = 0;
        s.routing = "as served (--nitro-url)";
        steps.push_back(s);
        step_trace.emplace_back();
    } else {
        std::vector<EngineMode> modes;
        for (const std::string& m : split_list(o.modes)) modes.push_back(parse_engine_mode(m));
        if (modes.empty()) fail("--modes is empty (expected e.g. cpu,gpu,hybrid)");
        for (double b : o.budgets)
            if (!(b > 0)) fail("--vram-budget {} in a sweep: budgets must be positive GiB", b);
        for (const RoutingScenario& sc : parse_routing_scenarios(o.routing, model)) {
            if (!sc.trace.empty())
                std::fprintf(stderr,
                             "WARNING: --routing %s: BENCHMARK ONLY. nitro serve takes every expert choice from the trace, so "
                             "its outputs are not the model's; the peer routes as it does.\n",
                             sc.name.c_str());
            for (SweepStep& st : plan_sweep(modes, o.budgets, {ctx}, model.hp().n_ctx_train, 0)) {
                st.routing = sc.name;
                if (!st.note.empty())
                    st.note = fmt::format("the server's context is capped from {} to {}: the model's n_ctx_train is {}",
                                          st.ctx_requested, st.ctx, model.hp().n_ctx_train);
                steps.push_back(std::move(st));
                step_trace.push_back(sc.trace);
            }
        }
    }
    nlohmann::json machine = machine_facts();
    {
        cpu::ThreadPool pool(o.threads);
        const double bw = measure_read_bandwidth(pool, static_cast<size_t>(o.read_probe_mib * 1024 * 1024));
        machine["dram_read_gb_s"] = figure(bw / 1e9, "GB/s", true);
        machine["dram_read_probe_bytes"] = static_cast<int64_t>(o.read_probe_mib * 1024 * 1024);
    }
    std::set<std::string> conversations;
    for (const auto& q : reqs) conversations.insert(q.conversation);
    const nlohmann::json base = {{"schema", "nitro-bench-run/1"},
                                 {"command", own_command_line()},
                                 {"nitro", {{"version", version()}, {"git_commit", git_commit()}}},
                                 {"model", model_facts(model)},
                                 {"machine", machine},
                                 {"threads", o.threads},
                                 {"repeat", o.repeat},
                                 {"workload", "requests"},
                                 {"requests_file", {{"path", o.requests},
                                                    {"requests", reqs.size()},
                                                    {"conversations", conversations.size()}}}};
    auto step_fields = [&](nlohmann::json& j, size_t i) {
        const SweepStep& s = steps[i];
        j["step"] = i;
        j["mode"] = external ? "external" : engine_mode_name(s.mode);
        j["vram_budget_gib"] = s.budget_gib ? nlohmann::json(*s.budget_gib) : nlohmann::json(nullptr);
        j["ctx"] = s.ctx;
        j["ctx_requested"] = s.ctx_requested;
        j["note"] = external ? fmt::format("the running server at {}", external->url) : s.note;
        j["routing"] = s.routing;
        if (!step_trace[i].empty())
            j["routing_note"] = "nitro serve's expert choices are replayed from the trace (benchmark only: its outputs are not "
                                "the model's); the peer routes as its model does";
    };
    auto emit = [&](nlohmann::json j) {
        rec << j.dump() << '\n';
        rec.flush();
        records.push_back(std::move(j));
    };

    const std::vector<SweepRun> order = mirrored_order(steps, o.repeat, peer.has_value());
    std::vector<StepAgg> agg(steps.size());
    bool failed = false;
    std::unique_ptr<ServeProcess> server;
    size_t server_step = SIZE_MAX;
    nlohmann::json server_info;
    std::string exe;
    {
        std::error_code e2;
        exe = fs::read_symlink("/proc/self/exe", e2).string();
        if (e2) fail("cannot find this program (/proc/self/exe) to start nitro serve: {}", e2.message());
    }
    const auto t0 = Clock::now();
    const size_t total = order.size() * reqs.size();
    auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
    for (size_t k = 0; k < order.size(); ++k) {
        const SweepRun& run = order[k];
        const SweepStep& s = steps[run.step];
        StepAgg& a = agg[run.step];
        nlohmann::json j = base;
        j["record"] = "run";
        j["engine"] = run.peer ? "peer" : "nitro";
        j["rep"] = run.rep;
        j["order"] = k;
        step_fields(j, run.step);
        if (a.status == "skipped") continue;  // its server could not be started
        HttpTarget target;
        if (run.peer) {
            // The peer runs alone: a nitro serve of this step is stopped first (and started again
            // for its next run), so its threads and memory do not weigh on the peer's timing.
            server.reset();
            server_step = SIZE_MAX;
            target = *peer;
            j["server"] = {{"url", peer->url}, {"model_field", peer->model}};
        } else if (external) {
            target = *external;
            j["server"] = {{"url", external->url}, {"started_by_bench", false}};
        } else {
            if (server_step != run.step) {
                server.reset();  // the previous step's server
                server_step = run.step;
                std::vector<std::string> args = {"-m", o.model, "--mode", engine_mode_name(s.mode), "-c", std::to_string(s.ctx),
                                                 "-t", std::to_string(o.threads), "--gpu", std::to_string(o.gpu_device)};
                if (s.budget_gib) args.insert(args.end(), {"--vram-budget", fmt::format("{:g}", *s.budget_gib)});
                if (!step_trace[run.step].empty()) args.insert(args.end(), {"--route-replay", step_trace[run.step]});
                const std::string log = (fs::path(o.out) / fmt::format("serve-step{}.log", run.step)).string();
                std::string cmd = exe + " serve --host 127.0.0.1 --port 0";
                for (const auto& x : args) cmd += " " + x;
                server_info = {{"command", cmd}, {"log", log}, {"started_by_bench", true}};
                progress(k * reqs.size(), total, elapsed(), fmt::format("starting nitro serve {}", engine_mode_name(s.mode)), "requests");
                try {
                    server = std::make_unique<ServeProcess>(exe, args, log, o.request_timeout_s);
                } catch (const Error& e) {
                    a.status = "skipped";
                    a.reason = e.what();
                    j["status"] = "skipped";
                    j["reason"] = a.reason;
                    j["server"] = server_info;
                    emit(std::move(j));
                    continue;
                }
                server_info["url"] = fmt::format("http://127.0.0.1:{}", server->port());
            }
            target.url = server_info["url"];
            target.host = "127.0.0.1";
            target.port = server->port();
            j["server"] = server_info;
        }
        const ReplayTotals t = replay_all(reqs, target, o.request_timeout_s, j, [&](size_t i) {
            progress(k * reqs.size() + i, total, elapsed(),
                     fmt::format("{} {} request {}/{}", run.peer ? "peer" : "nitro", j["mode"].get<std::string>(), i + 1, reqs.size()),
                     "requests");
        });
        if (!run.peer && server) j["figures"]["server_peak_rss_bytes"] = figure(static_cast<double>(peak_rss_of(server->pid())),
                                                                                "bytes (VmHWM of nitro serve since it started)", true);
        if (t.failed) {
            failed = true;
            int& errs = run.peer ? a.peer_errors : a.errors;
            std::string& why = run.peer ? a.peer_reason : a.error_reason;
            if (errs++ == 0) why = j["reason"];
        }
        (run.peer ? a.peer_decode : a.decode).push_back(t.decode);
        (run.peer ? a.peer_prompt : a.prompt).push_back(t.prompt);
        auto& tt = run.peer ? a.peer_ttft_s : a.ttft_s;
        tt.insert(tt.end(), t.ttft_s.begin(), t.ttft_s.end());
        ++(run.peer ? a.peer_runs : a.runs);
        emit(std::move(j));
    }
    server.reset();
    progress(total, total, elapsed(), "done", "requests");
    auto mean = [](const std::vector<double>& v) {
        double a = 0;
        for (double x : v) a += x;
        return v.empty() ? 0.0 : a / static_cast<double>(v.size());
    };
    for (size_t i = 0; i < steps.size(); ++i) {
        const StepAgg& a = agg[i];
        nlohmann::json j = base;
        j["record"] = "step";
        step_fields(j, i);
        j["runs"] = a.runs;
        j["peer_runs"] = a.peer_runs;
        j["status"] = a.status;
        j["reason"] = a.reason;
        if (!steps[i].skip_reason.empty()) {
            j["status"] = "skipped";
            j["reason"] = steps[i].skip_reason;
        } else if (a.errors + a.peer_errors > 0) {
            j["status"] = "error";
            std::string r;
            if (a.errors) r = fmt::format("{} of {} nitro runs had failed requests: {}", a.errors, a.runs, a.error_reason);
            if (a.peer_errors)
                r += fmt::format("{}{} of {} peer runs had failed requests: {}", r.empty() ? "" : "; ", a.peer_errors, a.peer_runs,
                                 a.peer_reason);
            j["reason"] = r;
        }
        nlohmann::json f = nlohmann::json::object();
        if (a.runs > 0) {
            f["prompt_tok_s"] = figure(weighted_rate(a.prompt), "tok/s", false);
            f["decode_tok_s"] = figure(weighted_rate(a.decode), "tok/s", false);
            f["ttft_ms"] = figure(1000.0 * mean(a.ttft_s), "ms", false);
        }
        if (a.peer_runs > 0) {
            f["peer_prompt_tok_s"] = figure(weighted_rate(a.peer_prompt), "tok/s", false);
            f["peer_decode_tok_s"] = figure(weighted_rate(a.peer_decode), "tok/s", false);
            f["peer_ttft_ms"] = figure(1000.0 * mean(a.peer_ttft_s), "ms", false);
        }
        if (a.runs > 0 && a.peer_runs > 0) {
            if (weighted_rate(a.peer_prompt) > 0)
                f["ratio_prompt_tok_s"] = figure(weighted_rate(a.prompt) / weighted_rate(a.peer_prompt), "nitro / peer", false);
            if (weighted_rate(a.peer_decode) > 0)
                f["ratio_decode_tok_s"] = figure(weighted_rate(a.decode) / weighted_rate(a.peer_decode), "nitro / peer", false);
            if (mean(a.peer_ttft_s) > 0)
                f["ratio_ttft_ms"] = figure(mean(a.ttft_s) / mean(a.peer_ttft_s), "nitro / peer (below 1: nitro answers sooner)", false);
        }
        j["figures"] = f;
        emit(std::move(j));
    }
    write_report(o.out, records);
    if (failed) std::fprintf(stderr, "nitro bench: some requests failed; their records say why (status \"error\")\n");
    return failed ? 1 : 0;
}

}  // namespace nitro::cli
