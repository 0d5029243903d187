// nitro bench --cpu -m MODEL [-p N] [-n N] [-t THREADS] [--json]
#include "arch/summary.h"
#include "cli/commands.h"
#include "core/error.h"
#include "runtime/bench.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <thread>

namespace nitro::cli {

Action add_bench(CLI::App& app) {
    struct Opts {
        std::string model;
        int64_t n_prompt = 128, n_gen = 32;
        int threads = 0;
        bool json = false, cpu = true;
    };
    auto o = std::make_shared<Opts>();
    CLI::App* sub = app.add_subcommand("bench", "Measure memory bandwidth, prompt and decode tok/s, expert GEMV GB/s");
    sub->add_option("-m,--model", o->model, "GGUF model")->required();
    sub->add_flag("--cpu", o->cpu, "Benchmark the CPU engine (the default)");
    sub->add_option("-p,--n-prompt", o->n_prompt, "Prompt tokens")->capture_default_str();
    sub->add_option("-n,--n-gen", o->n_gen, "Generated tokens")->capture_default_str();
    sub->add_option("-t,--threads", o->threads, "CPU threads (0 = all)")->capture_default_str();
    sub->add_flag("--json", o->json, "Print JSON");
    return [o]() {
        Model model(o->model);
        SessionOptions so;
        so.n_threads = o->threads > 0 ? o->threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
        so.n_ctx = o->n_prompt + o->n_gen + 1;
        cpu::ThreadPool pool(so.n_threads);
        const double bw = measure_read_bandwidth(pool);
        const ExpertGemvBench g = bench_expert_gemv(model, pool);
        const EngineBench e = bench_engine(model, so, o->n_prompt, o->n_gen);
        const double floor = bw / g.bytes_per_token;  // tok/s if experts were the only reads
        nlohmann::json j = {
            {"model", o->model}, {"threads", so.n_threads}, {"isa", cpu::kernel_isa()},
            {"read_bandwidth_gb_s", bw / 1e9}, {"expert_bytes_per_token", g.bytes_per_token},
            {"expert_gemv_gb_s", g.gb_s}, {"expert_gemv_ms_per_token", g.ms_per_token},
            {"expert_floor_tok_s", floor}, {"prompt_tokens", e.n_prompt}, {"prompt_tok_s", e.prompt_tok_s},
            {"gen_tokens", e.n_gen}, {"decode_tok_s", e.decode_tok_s}};
        nlohmann::json phases = nlohmann::json::array();
        for (size_t p = 0; p < e.decode_ms.size(); ++p) {
            const double gb_s = e.decode_ms[p] > 0 ? e.decode_bytes[p] / (e.decode_ms[p] * 1e-3) / 1e9 : 0.0;
            phases.push_back({{"phase", phase_name(static_cast<Phase>(p))}, {"ms_per_token", e.decode_ms[p]},
                              {"weight_bytes_per_token", e.decode_bytes[p]}, {"gb_s", gb_s},
                              {"prompt_ms", e.prompt_ms[p]}});
        }
        j["decode_phases"] = phases;
        if (o->json) {
            std::puts(j.dump(2).c_str());
            return 0;
        }
        std::printf("model            %s (%d threads, kernels %s)\n", o->model.c_str(), so.n_threads, cpu::kernel_isa());
        std::printf("memory read      %8.2f GB/s   MEASURED (%d threads, 1 GiB buffer)\n", bw / 1e9, so.n_threads);
        std::printf("expert GEMV      %8.2f GB/s   MEASURED (%.1f%% of read bandwidth; %s of experts per token, %.2f ms)\n",
                    g.gb_s, 100.0 * g.gb_s * 1e9 / bw, format_bytes(static_cast<uint64_t>(g.bytes_per_token)).c_str(),
                    g.ms_per_token);
        std::printf("decode floor     %8.2f tok/s  CALCULATED (read bandwidth / expert bytes per token)\n", floor);
        std::printf("prompt           %8.2f tok/s  MEASURED (%lld tokens)\n", e.prompt_tok_s, static_cast<long long>(e.n_prompt));
        std::printf("decode           %8.2f tok/s  MEASURED (%lld tokens, %.1f%% of the floor)\n", e.decode_tok_s,
                    static_cast<long long>(e.n_gen), 100.0 * e.decode_tok_s / floor);
        std::printf("\nwhere the time goes (MEASURED wall time: decode per token, and the whole prompt; weight GB/s\n"
                    "CALCULATED from the decode time)\n");
        std::printf("  %-22s %9s %7s %12s %9s %14s %7s\n", "phase", "ms/token", "share", "weights", "GB/s", "prompt ms", "share");
        double total = 0, total_prompt = 0;
        for (double ms : e.decode_ms) total += ms;
        for (double ms : e.prompt_ms) total_prompt += ms;
        for (const auto& p : phases) {
            const double ms = p["ms_per_token"].get<double>(), bytes = p["weight_bytes_per_token"].get<double>();
            const double pms = p["prompt_ms"].get<double>();
            std::printf("  %-22s %9.3f %6.1f%% %12s %9s %14.2f %6.1f%%\n", p["phase"].get<std::string>().c_str(), ms,
                        100.0 * ms / total, bytes > 0 ? format_bytes(static_cast<uint64_t>(bytes)).c_str() : "-",
                        bytes > 0 ? fmt::format("{:.1f}", p["gb_s"].get<double>()).c_str() : "-", pms,
                        100.0 * pms / total_prompt);
        }
        return 0;
    };
}

}  // namespace nitro::cli
