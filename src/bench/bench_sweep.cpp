#include "bench/bench_sweep.h"

#include "core/sha256.h"

#include "core/error.h"
#include "core/mapped_file.h"
#include "cpu/matmul.h"
#include "quant/types.h"
#include "bench/bench.h"
#include "runtime/sampler.h"
#include "trace/model_header.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <poll.h>
#include <random>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace nitro {

namespace {

using Clock = std::chrono::steady_clock;
double secs_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

/// A line of /proc/self/status such as "VmHWM:  1234 kB", in bytes (0 when absent).
int64_t status_kib_bytes(const char* key) {
    std::ifstream f("/proc/self/status");
    for (std::string line; std::getline(f, line);)
        if (line.rfind(key, 0) == 0) return 1024 * std::atoll(line.c_str() + std::strlen(key));
    return 0;
}

std::string shell_quote(const std::string& s) {
    std::string r = "'";
    for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return r + "'";
}

}  // namespace

int64_t parse_ctx_tokens(const std::string& s) {
    if (s.empty()) fail("context length '' is empty (expected tokens such as 4096 or 4k)");
    size_t n = s.size();
    int64_t mul = 1;
    if (s.back() == 'k' || s.back() == 'K') {
        mul = 1024;
        --n;
    }
    if (n == 0 || n > 12 || !std::all_of(s.begin(), s.begin() + static_cast<long>(n), [](char c) { return c >= '0' && c <= '9'; }))
        fail("context length '{}' is not a number of tokens (expected e.g. 4096, 4k, 128k)", s);
    const int64_t v = std::stoll(s.substr(0, n)) * mul;
    if (v <= 0) fail("context length '{}' must be at least 1 token", s);
    return v;
}

std::vector<SweepStep> plan_sweep(const std::vector<EngineMode>& modes, const std::vector<double>& budgets,
                                  const std::vector<int64_t>& ctxs, int64_t n_ctx_train, int64_t n_gen) {
    std::vector<SweepStep> steps;
    for (EngineMode m : modes) {
        std::vector<std::optional<double>> bs;
        if (m == EngineMode::Cpu || budgets.empty()) bs.push_back(std::nullopt);
        else
            for (double b : budgets) bs.push_back(b);
        for (const auto& b : bs) {
            std::vector<int64_t> seen;
            for (int64_t c : ctxs) {
                SweepStep s;
                s.mode = m;
                s.budget_gib = b;
                s.ctx_requested = s.ctx = c;
                const int64_t cap = n_ctx_train - n_gen;
                if (n_ctx_train > 0 && cap < 1) {
                    s.skip_reason = fmt::format("the model's n_ctx_train {} leaves no room for a prompt before {} generated tokens",
                                                n_ctx_train, n_gen);
                } else if (n_ctx_train > 0 && c > cap) {
                    s.ctx = cap;
                    s.note = fmt::format("capped from {} to {}: the model's n_ctx_train is {} and {} tokens are generated after the prompt",
                                         c, cap, n_ctx_train, n_gen);
                }
                if (s.skip_reason.empty() && std::find(seen.begin(), seen.end(), s.ctx) != seen.end())
                    s.skip_reason = fmt::format("context {} (capped to {}) was already run in this ladder", c, s.ctx);
                if (s.skip_reason.empty()) seen.push_back(s.ctx);
                steps.push_back(std::move(s));
            }
        }
    }
    return steps;
}

std::vector<SweepRun> mirrored_order(const std::vector<SweepStep>& steps, int repeat, bool with_peer) {
    std::vector<SweepRun> r;
    for (size_t i = 0; i < steps.size(); ++i) {
        if (!steps[i].skip_reason.empty()) continue;
        for (int k = 0; k < repeat; ++k) {
            if (!with_peer) {
                r.push_back({i, k, false});
                continue;
            }
            const bool peer_first = k % 2 == 1;
            r.push_back({i, k, peer_first});
            r.push_back({i, k, !peer_first});
        }
    }
    return r;
}

double weighted_rate(const std::vector<RateSample>& samples) {
    int64_t tokens = 0;
    double seconds = 0;
    for (const RateSample& s : samples) {
        tokens += s.tokens;
        seconds += s.seconds;
    }
    return seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0;
}

StepMeasurement measure_step(Engine& engine, const Model& model, int64_t depth, int64_t n_gen) {
    if (engine.n_past() != 0) fail("measure_step: the engine already holds {} positions (expected a fresh one)", engine.n_past());
    if (engine.n_ctx() < depth + n_gen)
        fail("measure_step: depth {} + {} generated tokens exceed the engine's context of {} tokens", depth, n_gen, engine.n_ctx());
    StepMeasurement m;
    m.prompt_tokens = depth;
    m.decode_tokens = n_gen;
    std::mt19937 rng(1);
    std::vector<int32_t> prompt(static_cast<size_t>(depth));
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(std::min<int64_t>(model.n_vocab(), 1000)));
    {
        // Writing 5 to clear_refs resets the peak RSS (VmHWM) to the current RSS (Linux >= 4.0).
        std::ofstream f("/proc/self/clear_refs");
        f << "5";
        f.flush();
        m.peak_rss_reset = static_cast<bool>(f);
    }
    const ExpertCounters* ec0 = engine.expert_counters();
    const uint64_t gpu0 = ec0 ? ec0->total().gpu_pairs : 0, cpu0 = ec0 ? ec0->total().cpu_pairs : 0;
    const MoeWork* mw0 = engine.moe_work();
    const uint64_t rows0 = mw0 ? mw0->rows : 0;
    const PageFaults f0 = page_faults();
    std::vector<float> logits;
    auto t = Clock::now();
    engine.eval(prompt, false, logits);
    m.prompt_seconds = secs_since(t);
    int32_t tok = argmax(logits);
    m.ttft_seconds = secs_since(t);
    t = Clock::now();
    for (int64_t i = 0; i < n_gen; ++i) {
        const int32_t in[1] = {tok};
        engine.eval(in, false, logits);
        tok = argmax(logits);
    }
    m.decode_seconds = secs_since(t);
    const PageFaults df = page_faults() - f0;
    m.minor_faults = df.minor;
    m.major_faults = df.major;
    m.peak_rss_bytes = status_kib_bytes("VmHWM:");
    m.process_vram_bytes = engine.process_vram_bytes();
    if (const ExpertCounters* ec = engine.expert_counters()) {
        // GPU-all engines leave the counters at zero: then nothing was counted, not "no hits".
        const uint64_t g = ec->total().gpu_pairs - gpu0, c = ec->total().cpu_pairs - cpu0;
        if (g + c > 0) {
            m.expert_pairs_gpu = g;
            m.expert_pairs_cpu = c;
        }
    } else if (const MoeWork* mw = engine.moe_work()) {
        m.expert_pairs_gpu = 0;  // the CPU engine: every routed expert is computed on the CPU
        m.expert_pairs_cpu = mw->rows - rows0;
    }
    return m;
}

nlohmann::json figure(double value, const char* unit, bool measured) {
    return {{"value", value}, {"unit", unit}, {"kind", measured ? "MEASURED" : "CALCULATED"}};
}

nlohmann::json model_facts(const Model& model) {
    std::map<std::string, std::pair<int64_t, uint64_t>> mix;
    uint64_t file_bytes = 0;
    // SHA-256 as `sha256sum` and Hugging Face show it: one string, or one per shard of a split model
    nlohmann::json file_sha256 = nlohmann::json::array();
    for (const auto& shard : model.gguf().shards()) {
        file_sha256.push_back(sha256_hex(shard->mapping(), shard->file_size()));
        file_bytes += shard->file_size();
        for (const GgufTensorInfo& t : shard->tensors()) {
            auto& e = mix[type_display_name(t.type)];
            e.first += 1;
            e.second += t.n_bytes;
        }
    }
    if (file_sha256.size() == 1) file_sha256 = file_sha256[0];
    std::vector<std::pair<std::string, std::pair<int64_t, uint64_t>>> rows(mix.begin(), mix.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
    nlohmann::json q = nlohmann::json::array();
    for (const auto& [type, e] : rows) q.push_back({{"type", type}, {"tensors", e.first}, {"bytes", e.second}});
    return {{"path", model.path()},
            {"file_bytes", file_bytes},
            {"file_sha256", file_sha256},
            {"file_xxh3_64", fmt::format("{:016x}", model_file_hash(model.gguf()))},
            {"arch", model.hp().arch},
            {"name", model.hp().name},
            {"n_ctx_train", model.hp().n_ctx_train},
            {"quant_mix", q}};
}

nlohmann::json machine_facts() {
    std::string cpu = "unknown";
    {
        std::ifstream f("/proc/cpuinfo");
        for (std::string line; std::getline(f, line);)
            if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
                cpu = line.substr(line.find(':') + 1);
                cpu.erase(0, cpu.find_first_not_of(' '));
                break;
            }
    }
    const auto ram = static_cast<int64_t>(read_meminfo().total);
    nlohmann::json gpus = nlohmann::json::array();
    std::error_code ec;
    for (const auto& d : std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
        std::ifstream f(d.path() / "information");
        for (std::string line; std::getline(f, line);)
            if (line.rfind("Model:", 0) == 0) {
                std::string name = line.substr(6);
                name.erase(0, name.find_first_not_of(" \t"));
                gpus.push_back(name);
            }
    }
    std::string driver = "none";
    {
        std::ifstream f("/proc/driver/nvidia/version");
        if (std::string line; std::getline(f, line)) driver = line;
    }
    nlohmann::json facts = {{"cpu_model", cpu},
            {"cores", std::max(1u, std::thread::hardware_concurrency())},
            {"isa", cpu::kernel_isa()},
            {"ram_bytes", ram},
            {"gpus", gpus},
            {"gpu_driver", driver},
            {"cuda_engine", gpu_engine_available()},
            {"cuda_devices", gpu_device_count()}};
    if (gpu_device_count() > 0) {
        constexpr uint64_t kProbe = 256ull << 20;
        facts["pcie_h2d_gb_s"] = figure(gpu_h2d_gb_s(kProbe), "GB/s", true);
        facts["pcie_h2d_probe_bytes"] = kProbe;
    }
    return facts;
}

PeerRates parse_peer_output(const std::string& text) {
    const size_t start = text.find_first_of("[{");
    if (start == std::string::npos) fail("the peer printed no JSON (expected llama-bench -o json or {{prompt_tok_s, decode_tok_s}})");
    nlohmann::json j = nlohmann::json::parse(text.begin() + static_cast<long>(start), text.end(), nullptr, false);
    if (j.is_discarded()) fail("the peer's output is not valid JSON from offset {}", start);
    PeerRates r;
    auto num = [](const nlohmann::json& o, const char* k) -> double {
        return o.contains(k) && o[k].is_number() ? o[k].get<double>() : -1.0;
    };
    if (j.is_object()) {
        r.prompt_tok_s = num(j, "prompt_tok_s");
        r.decode_tok_s = num(j, "decode_tok_s");
        if (r.prompt_tok_s <= 0 || r.decode_tok_s <= 0)
            fail("the peer's JSON object has no positive prompt_tok_s and decode_tok_s");
        r.prompt_tokens = static_cast<int64_t>(std::max(0.0, num(j, "prompt_tokens")));
        r.decode_tokens = static_cast<int64_t>(std::max(0.0, num(j, "gen_tokens")));
        return r;
    }
    if (!j.is_array()) fail("the peer's JSON is neither an array of llama-bench tests nor an object");
    const nlohmann::json *pp = nullptr, *tg = nullptr;
    for (const auto& t : j) {
        if (!t.is_object()) continue;
        const double np = num(t, "n_prompt"), ng = num(t, "n_gen"), nd = std::max(0.0, num(t, "n_depth"));
        if (np > 0 && ng == 0 && (!pp || nd < std::max(0.0, num(*pp, "n_depth")))) pp = &t;
        if (ng > 0 && np == 0 && (!tg || nd > std::max(0.0, num(*tg, "n_depth")))) tg = &t;
    }
    if (!pp) fail("the peer's llama-bench JSON has no prompt test (n_prompt > 0, n_gen 0)");
    if (!tg) fail("the peer's llama-bench JSON has no decode test (n_gen > 0, n_prompt 0)");
    r.prompt_tok_s = num(*pp, "avg_ts");
    r.decode_tok_s = num(*tg, "avg_ts");
    if (r.prompt_tok_s <= 0 || r.decode_tok_s <= 0) fail("the peer's llama-bench tests have no positive avg_ts");
    r.prompt_tokens = static_cast<int64_t>(num(*pp, "n_prompt"));
    r.decode_tokens = static_cast<int64_t>(num(*tg, "n_gen"));
    r.decode_depth = static_cast<int64_t>(std::max(0.0, num(*tg, "n_depth")));
    return r;
}

std::string expand_peer_command(const std::string& tmpl, const std::string& model, int64_t ctx, int64_t n_gen,
                                int threads, const std::string& mode, double budget_gib) {
    std::string r;
    for (size_t i = 0; i < tmpl.size(); ++i) {
        // A placeholder is '{' identifier '}'; any other brace (JSON in an echo, shell ${VAR}) is text.
        size_t e = i + 1;
        while (e < tmpl.size() && (std::islower(static_cast<unsigned char>(tmpl[e])) || tmpl[e] == '_')) ++e;
        if (tmpl[i] != '{' || e == i + 1 || e >= tmpl.size() || tmpl[e] != '}' || (i > 0 && tmpl[i - 1] == '$')) {
            r += tmpl[i];
            continue;
        }
        const std::string key = tmpl.substr(i + 1, e - i - 1);
        if (key == "model") r += shell_quote(model);
        else if (key == "ctx" || key == "n_prompt") r += std::to_string(ctx);
        else if (key == "n_gen") r += std::to_string(n_gen);
        else if (key == "threads") r += std::to_string(threads);
        else if (key == "mode") r += mode;
        else if (key == "budget") r += fmt::format("{:g}", budget_gib);
        else fail("--peer-cmd: unknown placeholder {{{}}} (known: {{model}} {{ctx}} {{n_prompt}} {{n_gen}} {{threads}} {{mode}} {{budget}})", key);
        i = e;
    }
    return r;
}

CommandResult run_command_with_timeout(const std::string& cmd, double timeout_s) {
    CommandResult r;
    int out[2], err[2];
    if (pipe(out) != 0) fail("cannot create a pipe for the peer command: {}", std::strerror(errno));
    if (pipe(err) != 0) {
        close(out[0]);
        close(out[1]);
        fail("cannot create a pipe for the peer command: {}", std::strerror(errno));
    }
    const auto t0 = Clock::now();
    const pid_t pid = fork();
    if (pid < 0) fail("cannot fork for the peer command: {}", std::strerror(errno));
    if (pid == 0) {
        setpgid(0, 0);
        dup2(out[1], 1);
        dup2(err[1], 2);
        close(out[0]);
        close(err[0]);
        close(out[1]);
        close(err[1]);
        execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
        _exit(127);
    }
    setpgid(pid, pid);  // also here, so the group exists before any kill below
    close(out[1]);
    close(err[1]);
    pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    int open_fds = 2;
    char buf[65536];
    while (open_fds > 0) {
        const double left = timeout_s - secs_since(t0);
        if (left <= 0) {
            r.timed_out = true;
            break;
        }
        const int n = poll(fds, 2, static_cast<int>(std::min(left, 1.0) * 1000) + 1);
        if (n < 0 && errno != EINTR) break;
        for (pollfd& p : fds) {
            if (p.fd < 0 || !(p.revents & (POLLIN | POLLHUP | POLLERR))) continue;
            const ssize_t k = read(p.fd, buf, sizeof buf);
            if (k > 0) {
                (p.fd == out[0] ? r.out : r.err).append(buf, static_cast<size_t>(k));
                if (r.err.size() > 8192) r.err.erase(0, r.err.size() - 4096);
            } else {
                close(p.fd);
                p.fd = -1;
                --open_fds;
            }
        }
    }
    if (r.timed_out) kill(-pid, SIGKILL);
    for (pollfd& p : fds)
        if (p.fd >= 0) close(p.fd);
    int status = 0;
    // The pipes are closed: a child that has not exited yet (it closed its output, or it was
    // killed) is waited for until the limit, then killed.
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (secs_since(t0) > timeout_s) {
            r.timed_out = true;
            kill(-pid, SIGKILL);
            waitpid(pid, &status, 0);
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (r.err.size() > 4096) r.err.erase(0, r.err.size() - 4096);
    r.exit_code = !r.timed_out && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.seconds = secs_since(t0);
    return r;
}

}  // namespace nitro
