// nitro bench -m MODEL -o DIR [--modes cpu,gpu,hybrid] [--ctx 4k,16k] [--vram-budget 4,8] [-n N]
//             [--repeat N] [--peer-cmd 'CMD'] [--peer-timeout S]   (docs/bench.md)
#include "cli/bench_sweep_cli.h"

#include "core/error.h"
#include "core/user_file.h"
#include "core/version.h"
#include "cpu/thread_pool.h"
#include "bench/bench.h"
#include "bench/bench_report.h"
#include "bench/bench_sweep.h"
#include "runtime/route_replay.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

namespace nitro::cli {

std::string own_command_line() {
    std::ifstream f("/proc/self/cmdline", std::ios::binary);
    std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::string r;
    size_t i = 0;
    while (i < all.size()) {
        const size_t e = all.find('\0', i);
        const std::string a = all.substr(i, e == std::string::npos ? std::string::npos : e - i);
        if (!r.empty()) r += ' ';
        if (a.find_first_of(" '\"$\\|&;<>(){}*?") == std::string::npos && !a.empty()) r += a;
        else {
            r += '\'';
            for (char c : a) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
            r += '\'';
        }
        if (e == std::string::npos) break;
        i = e + 1;
    }
    return r;
}

std::vector<std::string> split_list(const std::string& s) {
    std::vector<std::string> r;
    std::stringstream ss(s);
    for (std::string item; std::getline(ss, item, ',');)
        if (!item.empty()) r.push_back(item);
    return r;
}

void progress(size_t done, size_t total, double elapsed_s, const std::string& what, const char* unit) {
    const int W = 30;
    const int filled = total ? static_cast<int>(W * done / total) : W;
    std::string eta = "-";
    if (done > 0 && done < total) eta = fmt::format("{:.0f} s", elapsed_s / static_cast<double>(done) * static_cast<double>(total - done));
    else if (done == total) eta = "0 s";
    std::fprintf(stderr, "\r[%s%s] %zu/%zu %s, %.0f s elapsed, ETA %s  %-40.40s", std::string(filled, '#').c_str(),
                 std::string(W - filled, '.').c_str(), done, total, unit, elapsed_s, eta.c_str(), what.c_str());
    if (done == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
}

std::ofstream open_records(const std::string& dir, bool append, bool overwrite, std::vector<nlohmann::json>& records,
                           std::string_view flag) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (const fs::path old = fs::path(dir) / "records.jsonl"; !append && !overwrite && fs::file_size(old, ec) > 0 && !ec)
        fail("-o {}: {} holds the records of an earlier sweep; choose another folder, or pass --append to add to them or "
             "--overwrite to replace them",
             dir, old.string());
    ec.clear();
    fs::create_directories(dir, ec);
    if (ec) fail("-o {}: cannot create the folder: {}", dir, ec.message());
    const std::string path = (fs::path(dir) / "records.jsonl").string();
    records.clear();
    if (append) {
        std::ifstream in;
        if (fs::exists(path, ec)) in = open_user_file(path, fmt::format("{}: the records file", flag));
        int line_no = 0;
        for (std::string line; std::getline(in, line);) {
            ++line_no;
            if (line.empty()) continue;
            nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
            if (j.is_discarded() || !j.is_object() || j.value("schema", std::string()) != "nitro-bench-run/1")
                fail("{}: {}:{} is not a nitro bench record (schema nitro-bench-run/1)", flag, path, line_no);
            records.push_back(std::move(j));
        }
    }
    std::ofstream rec(path, append ? std::ios::app : std::ios::trunc);
    if (!rec) fail("-o {}: cannot write {}", dir, path);
    return rec;
}

void write_report(const std::string& dir, const std::vector<nlohmann::json>& records) {
    namespace fs = std::filesystem;
    const ReportFiles rep = render_report(records);
    auto write = [&](const std::string& name, const std::string& text) {
        const std::string p = (fs::path(dir) / name).string();
        std::ofstream f(p, std::ios::trunc);
        f << text;
        if (!f) fail("-o {}: cannot write {}", dir, p);
    };
    write("report.md", rep.markdown);
    for (const auto& [name, svg] : rep.svgs) write(name, svg);
    std::printf("%s\n", rep.markdown.c_str());
    std::printf("records: %s; report: %s\n", (fs::path(dir) / "records.jsonl").string().c_str(),
                (fs::path(dir) / "report.md").string().c_str());
}

namespace {

using Clock = std::chrono::steady_clock;

struct StepAgg {
    std::vector<RateSample> prompt, decode, peer_prompt, peer_decode;
    std::vector<double> ttft_ms;
    uint64_t gpu_pairs = 0, cpu_pairs = 0;  // expert selections per device, over the runs that counted them
    std::string status = "ok", reason;  // skipped (engine could not be made) or error
    int runs = 0, peer_runs = 0, peer_errors = 0;
    std::string peer_reason;  // the first failed peer run's message
};

}  // namespace

int run_bench_sweep(const BenchSweepOptions& o) {
    namespace fs = std::filesystem;
    if (o.render_only) {  // the report of records already there (e.g. concatenated from several machines' runs)
        std::vector<nlohmann::json> records;
        if (!fs::is_regular_file(fs::path(o.out) / "records.jsonl")) fail("--render-only: {}/records.jsonl does not exist", o.out);
        (void)open_records(o.out, true, false, records, "--render-only");  // reads (and checks) every record; writes nothing
        write_report(o.out, records);
        return 0;
    }
    if (!o.requests.empty()) return run_request_sweep(o);
    if (!o.peer_url.empty() || !o.nitro_url.empty())
        fail("--peer-url and --nitro-url replay requests: give --requests FILE.jsonl (the ladder's peer is --peer-cmd)");
    if (o.repeat < 1) fail("--repeat must be at least 1 (got {})", o.repeat);
    if (o.n_gen < 1) fail("-n/--n-gen must be at least 1 in a sweep (got {})", o.n_gen);
    if (o.peer_timeout_s <= 0) fail("--peer-timeout must be positive seconds (got {})", o.peer_timeout_s);
    std::vector<EngineMode> modes;
    for (const std::string& m : split_list(o.modes)) modes.push_back(parse_engine_mode(m));
    if (modes.empty()) fail("--modes is empty (expected e.g. cpu,gpu,hybrid)");
    std::vector<int64_t> ctxs;
    for (const std::string& c : split_list(o.ctx)) ctxs.push_back(parse_ctx_tokens(c));
    if (ctxs.empty()) fail("--ctx is empty (expected e.g. 4k,16k,32k)");
    for (double b : o.budgets)
        if (!(b > 0)) fail("--vram-budget {} in a sweep: budgets must be positive GiB", b);
    if (!o.peer_cmd.empty()) (void)expand_peer_command(o.peer_cmd, o.model, 1, o.n_gen, o.threads);  // bad placeholders fail now
    std::vector<nlohmann::json> records;  // with --append, the folder's earlier records first
    std::ofstream rec = open_records(o.out, o.append, o.overwrite, records);

    Model model(o.model);
    const nlohmann::json mfacts = model_facts(model);
    nlohmann::json machine = machine_facts();
    {
        cpu::ThreadPool pool(o.threads);
        const double bw = measure_read_bandwidth(pool, static_cast<size_t>(o.read_probe_mib * 1024 * 1024));
        machine["dram_read_gb_s"] = figure(bw / 1e9, "GB/s", true);
        machine["dram_read_probe_bytes"] = static_cast<int64_t>(o.read_probe_mib * 1024 * 1024);
    }
    // Routing scenarios (outermost): the file's own routing, or a trace replayed into the router.
    const std::vector<RoutingScenario> scenarios = parse_routing_scenarios(o.routing, model);
    std::map<std::string, std::shared_ptr<const RouteReplay>> replays;  // scenario name -> the trace, never advanced
    std::vector<SweepStep> steps;
    for (const RoutingScenario& sc : scenarios) {
        if (!sc.trace.empty()) {
            replays[sc.name] = std::make_shared<const RouteReplay>(sc.trace, model);
            std::fprintf(stderr,
                         "WARNING: --routing %s: BENCHMARK ONLY. The engine takes every expert choice from the trace, so "
                         "its outputs are not the model's; the peer routes as the file does (%s).\n",
                         sc.name.c_str(), file_routing(model).c_str());
        }
        for (SweepStep& st : plan_sweep(modes, o.budgets, ctxs, model.hp().n_ctx_train, o.n_gen)) {
            st.routing = sc.name;
            steps.push_back(std::move(st));
        }
    }
    const std::vector<SweepRun> order = mirrored_order(steps, o.repeat, !o.peer_cmd.empty());
    const PhaseTimes wb = decode_weight_bytes(model);
    double weight_bytes = 0;
    for (double b : wb) weight_bytes += b;
    const nlohmann::json base = {{"schema", "nitro-bench-run/1"},
                                 {"command", own_command_line()},
                                 {"nitro", {{"version", version()}, {"git_commit", git_commit()}}},
                                 {"model", mfacts},
                                 {"machine", machine},
                                 {"threads", o.threads},
                                 {"n_gen", o.n_gen},
                                 {"repeat", o.repeat},
                                 {"workload", "ladder"}};
    auto step_fields = [&](nlohmann::json& j, size_t i) {
        const SweepStep& s = steps[i];
        j["step"] = i;
        j["mode"] = engine_mode_name(s.mode);
        j["vram_budget_gib"] = s.budget_gib ? nlohmann::json(*s.budget_gib) : nlohmann::json(nullptr);
        j["ctx"] = s.ctx;
        j["ctx_requested"] = s.ctx_requested;
        j["note"] = s.note;
        j["routing"] = s.routing;
        if (const auto r = replays.find(s.routing); r != replays.end()) {
            j["routing_trace"] = {{"path", r->second->name()},
                                  {"prefill_tokens", r->second->prefill_tokens()},
                                  {"decode_tokens", r->second->decode_tokens()}};
            j["routing_note"] = fmt::format(
                "nitro's expert choices are replayed from the trace (benchmark only: its outputs are not the model's); a "
                "peer routes as the file does ({}): llama.cpp places whole layers, which read the same bytes whatever the "
                "routing, so its figure on the same file stands as the baseline",
                file_routing(model));
        }
    };
    auto emit = [&](nlohmann::json j) {
        rec << j.dump() << '\n';
        rec.flush();
        records.push_back(std::move(j));
    };
    std::vector<StepAgg> agg(steps.size());
    bool failed = false;
    const auto t0 = Clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
    for (size_t k = 0; k < order.size(); ++k) {
        const SweepRun& run = order[k];
        const SweepStep& s = steps[run.step];
        StepAgg& a = agg[run.step];
        const std::string what = fmt::format("{} {} ctx {}", run.peer ? "peer" : "nitro", engine_mode_name(s.mode), s.ctx);
        progress(k, order.size(), elapsed(), what);
        nlohmann::json j = base;
        j["record"] = "run";
        j["engine"] = run.peer ? "peer" : "nitro";
        j["rep"] = run.rep;
        j["order"] = k;
        step_fields(j, run.step);
        if (a.status == "skipped") continue;  // the engine could not be made for this step
        if (!run.peer) {
            SessionOptions so;
            so.n_threads = o.threads;
            so.n_ctx = s.ctx + o.n_gen;
            GpuOptions go;
            if (s.mode != EngineMode::Cpu) go.device = o.gpu_device;  // the CPU step: no device (nor its warning)
            go.progress = false;
            go.vram_budget_gib = s.budget_gib.value_or(0);
            std::unique_ptr<Engine> engine;
            std::shared_ptr<RouteReplay> replay;  // a fresh copy per run: every run replays from the trace's start
            try {
                engine = make_engine(s.mode, model, so, go);
                if (const auto r = replays.find(s.routing); r != replays.end()) {
                    replay = std::make_shared<RouteReplay>(*r->second);
                    if (!engine->set_route_replay(replay)) fail("this engine ({}) cannot replay routing", engine->describe());
                }
            } catch (const Error& e) {
                a.status = "skipped";
                a.reason = e.what();
                j["status"] = "skipped";
                j["reason"] = a.reason;
                emit(std::move(j));
                continue;
            }
            try {
                const StepMeasurement m = measure_step(*engine, model, s.ctx, o.n_gen);
                a.prompt.push_back({m.prompt_tokens, m.prompt_seconds});
                a.decode.push_back({m.decode_tokens, m.decode_seconds});
                a.ttft_ms.push_back(1000.0 * m.ttft_seconds);
                ++a.runs;
                j["status"] = "ok";
                j["reason"] = "";
                j["engine_description"] = engine->describe();
                if (replay)
                    j["routing_replayed_tokens"] = {{"prefill", replay->prefill_replayed()}, {"decode", replay->decode_replayed()}};
                nlohmann::json f = {
                    {"prompt_tokens", figure(static_cast<double>(m.prompt_tokens), "tokens", true)},
                    {"prompt_seconds", figure(m.prompt_seconds, "s", true)},
                    {"prompt_tok_s", figure(m.prompt_tokens / m.prompt_seconds, "tok/s", true)},
                    {"ttft_ms", figure(1000.0 * m.ttft_seconds, "ms", true)},
                    {"decode_tokens", figure(static_cast<double>(m.decode_tokens), "tokens", true)},
                    {"decode_seconds", figure(m.decode_seconds, "s", true)},
                    {"decode_tok_s", figure(m.decode_tokens / m.decode_seconds, "tok/s", true)},
                    {"peak_rss_bytes", figure(static_cast<double>(m.peak_rss_bytes), "bytes", true)},
                    {"major_page_faults", figure(static_cast<double>(m.major_faults), "faults", true)},
                    {"minor_page_faults", figure(static_cast<double>(m.minor_faults), "faults", true)},
                    {"weight_bytes_per_token", figure(weight_bytes, "bytes/token", false)},
                };
                j["peak_rss_scope"] = m.peak_rss_reset ? "this run (VmHWM reset before it)" : "the process since it started";
                if (m.process_vram_bytes > 0)
                    f["process_vram_bytes"] = figure(static_cast<double>(m.process_vram_bytes),
                                                     "bytes (GPU memory of the process after the run, NVML)", true);
                if (m.expert_pairs_gpu && m.expert_pairs_cpu) {
                    const double g = static_cast<double>(*m.expert_pairs_gpu), c = static_cast<double>(*m.expert_pairs_cpu);
                    f["expert_pairs_gpu"] = figure(g, "(token, expert) pairs", true);
                    f["expert_pairs_cpu"] = figure(c, "(token, expert) pairs", true);
                    f["expert_hit_rate"] = figure(g + c > 0 ? g / (g + c) : 0.0, "fraction on the GPU", false);
                    a.gpu_pairs += *m.expert_pairs_gpu;
                    a.cpu_pairs += *m.expert_pairs_cpu;
                } else {
                    j["expert_split"] = "not counted by this engine (GPU-all engines do not count expert selections)";
                }
                j["figures"] = f;
            } catch (const Error& e) {
                a.status = "error";
                a.reason = e.what();
                failed = true;
                j["status"] = "error";
                j["reason"] = a.reason;
            }
            emit(std::move(j));
            continue;
        }
        const std::string cmd = expand_peer_command(o.peer_cmd, o.model, s.ctx, o.n_gen, o.threads, engine_mode_name(s.mode),
                                                    s.budget_gib.value_or(0));
        j["peer_command"] = cmd;
        const CommandResult r = run_command_with_timeout(cmd, o.peer_timeout_s);
        std::string reason;
        PeerRates pr;
        if (r.timed_out) reason = fmt::format("peer command timed out after {:g} s (--peer-timeout) and was killed", o.peer_timeout_s);
        else if (r.exit_code != 0)
            reason = fmt::format("peer command exited with status {}{}{}", r.exit_code, r.err.empty() ? "" : ": ",
                                 r.err.substr(r.err.size() > 500 ? r.err.size() - 500 : 0));
        else {
            try {
                pr = parse_peer_output(r.out);
            } catch (const Error& e) {
                reason = e.what();
            }
        }
        if (!reason.empty()) {
            failed = true;
            if (a.peer_errors++ == 0) a.peer_reason = reason;
            j["status"] = "error";
            j["reason"] = reason;
            emit(std::move(j));
            continue;
        }
        // The peer reports rates; its timed seconds are tokens / rate (with the step's token counts
        // where it did not report them), so its weighted rate is the same arithmetic as nitro's.
        const int64_t pt = pr.prompt_tokens > 0 ? pr.prompt_tokens : s.ctx, dt = pr.decode_tokens > 0 ? pr.decode_tokens : o.n_gen;
        a.peer_prompt.push_back({pt, pt / pr.prompt_tok_s});
        a.peer_decode.push_back({dt, dt / pr.decode_tok_s});
        ++a.peer_runs;
        j["status"] = "ok";
        j["reason"] = "";
        j["peer_seconds"] = r.seconds;
        j["figures"] = {{"prompt_tokens", figure(static_cast<double>(pt), "tokens", true)},
                        {"prompt_tok_s", figure(pr.prompt_tok_s, "tok/s", true)},
                        {"decode_tokens", figure(static_cast<double>(dt), "tokens", true)},
                        {"decode_tok_s", figure(pr.decode_tok_s, "tok/s", true)},
                        {"decode_depth", figure(static_cast<double>(pr.decode_depth), "tokens", true)}};
        emit(std::move(j));
    }
    progress(order.size(), order.size(), elapsed(), "done");
    for (size_t i = 0; i < steps.size(); ++i) {
        const StepAgg& a = agg[i];
        nlohmann::json j = base;
        j["record"] = "step";
        step_fields(j, i);
        j["runs"] = a.runs;
        j["peer_runs"] = a.peer_runs;
        if (!steps[i].skip_reason.empty()) {
            j["status"] = "skipped";
            j["reason"] = steps[i].skip_reason;
        } else {
            j["status"] = a.status;
            j["reason"] = a.reason;
            // A failed peer run fails its step too, so the report cannot read as a clean run
            // without a peer.
            if (a.peer_errors > 0) {
                j["status"] = "error";
                j["reason"] = fmt::format("{}{}{} of {} peer runs failed: {}", a.reason, a.reason.empty() ? "" : "; ", a.peer_errors,
                                          a.peer_errors + a.peer_runs, a.peer_reason);
            }
        }
        nlohmann::json f = nlohmann::json::object();
        if (a.runs > 0) {
            f["prompt_tok_s"] = figure(weighted_rate(a.prompt), "tok/s", false);
            f["decode_tok_s"] = figure(weighted_rate(a.decode), "tok/s", false);
            double t = 0;
            for (double v : a.ttft_ms) t += v;
            f["ttft_ms"] = figure(t / static_cast<double>(a.ttft_ms.size()), "ms", false);
            if (a.gpu_pairs + a.cpu_pairs > 0)
                f["expert_hit_rate"] = figure(static_cast<double>(a.gpu_pairs) / static_cast<double>(a.gpu_pairs + a.cpu_pairs),
                                              "fraction on the GPU", false);
        }
        if (a.peer_runs > 0) {
            f["peer_prompt_tok_s"] = figure(weighted_rate(a.peer_prompt), "tok/s", false);
            f["peer_decode_tok_s"] = figure(weighted_rate(a.peer_decode), "tok/s", false);
        }
        if (a.runs > 0 && a.peer_runs > 0) {
            f["ratio_prompt_tok_s"] = figure(weighted_rate(a.prompt) / weighted_rate(a.peer_prompt), "nitro / peer", false);
            f["ratio_decode_tok_s"] = figure(weighted_rate(a.decode) / weighted_rate(a.peer_decode), "nitro / peer", false);
        }
        j["figures"] = f;
        emit(std::move(j));
    }
    write_report(o.out, records);
    if (failed) std::fprintf(stderr, "nitro bench: some runs failed; their records say why (status \"error\")\n");
    return failed ? 1 : 0;
}

}  // namespace nitro::cli
