// nitro bench [-m MODEL] [-p N] [-n N] [-t THREADS] [--kernels model|all|none|T,T] [--json] [memory flags]
// nitro bench -m MODEL -o DIR [--modes ..] [--ctx ..] [--vram-budget ..] [--repeat N] [--peer-cmd CMD]: the
// benchmark protocol (cli/bench_sweep_cli.h, docs/bench.md)
#include "arch/summary.h"
#include "bench/bench.h"
#include "cli/bench_sweep_cli.h"
#include "cli/commands.h"
#include "cli/hf_option.h"
#include "cli/memory_options.h"
#include "cli/validators.h"
#include "core/error.h"
#include "core/text.h"
#include "runtime/default_model.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

namespace nitro::cli {

namespace {

/// Every type with a SIMD expert kernel, in the order the table prints them.
const GgmlType kAllKernelTypes[] = {GgmlType::MXFP4, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                                    GgmlType::Q8_0,  GgmlType::IQ4_NL, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K,
                                    GgmlType::Q5_K,  GgmlType::Q6_K, GgmlType::IQ4_XS};

std::vector<GgmlType> kernel_types(const std::string& spec, const Model& model) {
    std::vector<GgmlType> r;
    auto add = [&r](GgmlType t) {
        if (std::find(r.begin(), r.end(), t) == r.end()) r.push_back(t);
    };
    if (spec == "none") return r;
    if (spec == "all") {
        for (GgmlType t : kAllKernelTypes) add(t);
        return r;
    }
    std::stringstream ss(spec);
    for (std::string item; std::getline(ss, item, ',');) {
        if (item == "model") {
            for (const LayerWeights& L : model.layers())
                for (const GgufTensorInfo* t : {L[TensorId::ffn_gate_exps], L[TensorId::ffn_up_exps], L[TensorId::ffn_down_exps]}) add(t->type);
            continue;
        }
        const auto t = type_from_name(item);
        if (!t) fail("--kernels: '{}' is not a weight type (e.g. mxfp4, q4_k, iq4_xs), model, all or none", item);
        cpu::vec_dot_type(*t);  // throws for types without a kernel
        add(*t);
    }
    return r;
}

}  // namespace

Action add_bench(CLI::App& app) {
    struct Opts {
        std::string model;
        int64_t n_prompt = 128, n_gen = 32;
        int threads = 0;
        bool json = false, cpu = true, no_engine = false;
        std::string kernels = "model";
        std::vector<std::string> isas;
        std::vector<int> tokens{1, 4, 16};
        double kernel_seconds = 0.3, kernel_pool_gib = 1.0;
        std::string kernel_shape;
        int kernel_experts = 0;
        int64_t prefetch_bytes = cpu::kDefaultPrefetchBytes;
        std::string prefetch_hint = "t0";
        MemoryFlags mem;
        std::string flash_attn = "on";
        BenchSweepOptions sweep;
        std::string vram_budgets;
        std::string hf;
    };
    auto o = std::make_shared<Opts>();
    CLI::App* sub = app.add_subcommand(
        "bench", "Measure memory bandwidth, the expert kernels per type and ISA level, prompt and decode tok/s, page faults");
    // Required except with -o DIR --render-only, which reads no model (checked in the action: CLI11's
    // required() cannot depend on another flag).
    sub->add_option("-m,--model", o->model, "GGUF model; default: the embedded models/tiny-moe-pystd.gguf (-o DIR --render-only opens none)")
        ->envname("NITRO_MODEL");
    add_hf_option(sub, o->hf);
    sub->add_flag("--cpu", o->cpu, "Benchmark the CPU engine (the default)");
    sub->add_option("-p,--n-prompt", o->n_prompt, "Prompt tokens")->capture_default_str()->check(integer_at_least(1));
    sub->add_option("-n,--n-gen", o->n_gen, "Generated tokens")->capture_default_str()->check(integer_at_least(1));
    sub->add_option("-t,--threads", o->threads, "CPU threads (0 = all)")
        ->check(CLI::Range(0, 65536))
        ->capture_default_str()
        ->envname("NITRO_THREADS");
    sub->add_option("--kernels", o->kernels,
                    "Expert kernel table: weight types (comma-separated, e.g. mxfp4,q4_k), model (the model's expert "
                    "types), all (every quantized block type; F16, BF16 and F32 by name) or none")
        ->capture_default_str();
    sub->add_option("--kernel-isas", o->isas, "ISA levels for the kernel table (default: every SIMD level this CPU has)")
        ->delimiter(',');
    sub->add_option("--kernel-tokens", o->tokens, "Token counts for the kernel table (tokens sharing the same experts)")
        ->delimiter(',')
        ->capture_default_str()
        ->check(integer_at_least(1));
    sub->add_option("--kernel-seconds", o->kernel_seconds, "Seconds per kernel measurement")
        ->capture_default_str()
        ->check(positive_number());
    sub->add_option("--kernel-pool", o->kernel_pool_gib, "GiB of random experts the kernel table rotates through")
        ->capture_default_str()
        ->check(positive_number());
    sub->add_option("--kernel-shape", o->kernel_shape, "Expert shape n_embd x n_ff for the kernel table, e.g. 2880x2880 (default: the model's)");
    sub->add_option("--kernel-experts", o->kernel_experts,
                    "Experts per step in the kernel table (default: the model's n_expert_used)")
        ->check(integer_at_least(1));
    sub->add_option("--prefetch-bytes", o->prefetch_bytes,
                    "Software-prefetch distance of the CPU kernels in the weight stream, bytes (0 = none ahead), for tuning")
        ->capture_default_str()
        ->envname("NITRO_PREFETCH_BYTES");
    sub->add_option("--prefetch-hint", o->prefetch_hint,
                    "Cache level of that prefetch: t0 (L1), t1 (L2), t2, nta (x86 prefetch hints), for tuning")
        ->check(CLI::IsMember({"t0", "t1", "t2", "nta"}))
        ->capture_default_str()
        ->envname("NITRO_PREFETCH_HINT");
    sub->add_flag("--no-engine", o->no_engine, "Skip the prompt/decode run (memory, kernels and expert products only)");
    sub->add_flag("--json", o->json, "Print JSON");
    add_memory_flags(sub, o->mem);
    sub->add_option("--flash-attn", o->flash_attn,
                    "llama-bench's -fa 0|1 (on|off|auto): nitro's attention is always fused (flash attention); changes nothing")
        ->check(CLI::IsMember({"on", "off", "auto", "1", "0", "true", "false"}))
        ->group("llama.cpp flags (docs/cli.md)");
    sub->add_option("-o,--out", o->sweep.out,
                    "Run the benchmark protocol into this folder (records.jsonl, report.md, report-*.svg; docs/bench.md) "
                    "instead of the single run");
    sub->add_option("--modes", o->sweep.modes, "Sweep: engine modes, comma-separated (cpu, gpu, hybrid, auto)")
        ->capture_default_str();
    CLI::Option* ctx_opt = sub->add_option("--ctx", o->sweep.ctx,
                                           "Sweep: context depths, comma-separated tokens (4k = 4096); with --requests one "
                                           "value, the context of the nitro serve it starts (default 8k there)")
                               ->capture_default_str();
    sub->add_option("--vram-budget", o->vram_budgets, "Sweep: VRAM budgets of the gpu/hybrid steps, GiB, comma-separated "
                                                      "(default: free memory minus a margin)");
    sub->add_option("--repeat", o->sweep.repeat, "Sweep: runs per step (mirrored with the peer: A B B A ...)")
        ->capture_default_str();
    sub->add_option("--peer-cmd", o->sweep.peer_cmd,
                    "Sweep: peer command per step, printing llama-bench -o json or {prompt_tok_s, decode_tok_s}; "
                    "placeholders {model} {ctx} {n_prompt} {n_gen} {threads} {mode} {budget}");
    sub->add_option("--peer-timeout", o->sweep.peer_timeout_s, "Sweep: seconds before a peer run is killed")
        ->capture_default_str();
    sub->add_option("--read-probe", o->sweep.read_probe_mib, "Sweep: MiB the DRAM read-bandwidth probe reads")
        ->capture_default_str()
        ->check(positive_number());
    sub->add_option("--gpu", o->sweep.gpu_device, "Sweep: CUDA device index")
        ->capture_default_str()
        ->check(integer_at_least(0));
    sub->add_option("--routing", o->sweep.routing,
                    "Sweep: routing scenarios, comma-separated: file (the file's own: uniform or zipf:S for nitro synth "
                    "files, model otherwise), uniform, zipf:S, model (must be the file's), replay:TRACE (BENCHMARK ONLY: "
                    "expert choices replayed from a router trace; outputs are not the model's)")
        ->capture_default_str();
    sub->add_option("--requests", o->sweep.requests,
                    "Sweep: replay these saved OpenAI request bodies (JSON Lines: chat/completions or completions bodies, "
                    "or {\"body\", \"url\", \"conversation\"} lines) against nitro serve, streamed, instead of the ladder");
    sub->add_option("--peer-url", o->sweep.peer_url,
                    "Sweep with --requests: an OpenAI-compatible peer server (http://HOST:PORT, e.g. llama-server) that "
                    "gets the same requests, mirrored (A B B A)");
    sub->add_option("--peer-model", o->sweep.peer_model, "Sweep with --peer-url: the \"model\" field sent to the peer (default: none)");
    sub->add_option("--peer-api-key", o->sweep.peer_api_key, "Sweep with --peer-url: API key sent to the peer (Bearer)");
    sub->add_option("--nitro-url", o->sweep.nitro_url,
                    "Sweep with --requests: replay against this already running nitro serve instead of starting one per "
                    "mode and budget");
    sub->add_option("--nitro-api-key", o->sweep.nitro_api_key, "Sweep with --nitro-url: its API key (Bearer)");
    CLI::Option* append = sub->add_flag("--append", o->sweep.append,
                                        "Sweep: add the runs to DIR/records.jsonl instead of replacing it; the report covers "
                                        "every record there (e.g. one sweep per mode with its own budgets, one report)");
    sub->add_flag("--overwrite", o->sweep.overwrite,
                  "Sweep: replace the records of an earlier sweep in DIR (a folder holding records is refused without "
                  "--append or --overwrite)")
        ->excludes(append);
    sub->add_flag("--render-only", o->sweep.render_only,
                  "Sweep: run nothing; write the report of DIR/records.jsonl as it is (-m is not needed, and not opened)");
    sub->add_option("--request-timeout", o->sweep.request_timeout_s,
                    "Sweep with --requests: seconds a request, or the start of a nitro serve, may take")
        ->capture_default_str();
    return [o, ctx_opt]() {
        if (!o->sweep.render_only) resolve_hf_model(o->hf, o->model);
        if (o->model.empty() && !o->sweep.render_only) o->model = default_model_path();  // the embedded model, as nitro run
        warn_threads_over_hardware(o->threads);
        apply_memory_flags(o->mem);
        cpu::set_prefetch_bytes(o->prefetch_bytes);
        cpu::set_prefetch_hint(o->prefetch_hint);
        const int threads = o->threads > 0 ? o->threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
        if (!o->sweep.out.empty()) {
            BenchSweepOptions s = o->sweep;
            s.ctx_given = ctx_opt->count() > 0;
            s.model = o->model;
            s.threads = threads;
            s.n_gen = o->n_gen;
            std::stringstream ss(o->vram_budgets);
            for (std::string item; std::getline(ss, item, ',');) {
                if (item.empty()) continue;
                try {
                    size_t used = 0;
                    s.budgets.push_back(std::stod(item, &used));
                    if (used != item.size()) throw std::invalid_argument(item);
                } catch (const std::exception&) {
                    fail("--vram-budget: '{}' is not a number of GiB", item);
                }
            }
            return run_bench_sweep(s);
        }
        if (!o->vram_budgets.empty() || o->sweep.repeat != 1 || !o->sweep.peer_cmd.empty() || !o->sweep.requests.empty() ||
            !o->sweep.peer_url.empty() || !o->sweep.nitro_url.empty() || o->sweep.routing != "file" || o->sweep.append ||
            o->sweep.overwrite || o->sweep.render_only)
            fail("--vram-budget, --repeat, --peer-cmd, --routing, --requests, --peer-url, --nitro-url, --append, --overwrite "
                 "and --render-only belong to the sweep: give -o DIR");
        const PageFaults f_load0 = page_faults();
        const auto t_load = std::chrono::steady_clock::now();
        Model model(o->model);
        const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
        const PageFaults f_load = page_faults() - f_load0;
        const MappedFile& mf = model.gguf().shards().front()->file();
        SessionOptions so;
        so.n_threads = threads;
        so.n_ctx = o->n_prompt + o->n_gen + 1;
        cpu::ThreadPool pool(threads);
        // The probe reads at least as much memory as the kernel table rotates through, so a large
        // last-level cache (300 MiB on the lent Xeon) favours neither side.
        const double bw = measure_read_bandwidth(
            pool, std::max(size_t{1} << 30, static_cast<size_t>(o->kernel_pool_gib * 1024 * 1024 * 1024)));

        KernelBenchOptions ko;
        ko.n_embd = model.hp().n_embd;
        ko.n_ff = model.hp().n_ff_exp;
        ko.n_used = static_cast<int>(model.hp().n_expert_used);
        if (!o->kernel_shape.empty()) {
            long long e = 0, f = 0;
            if (std::sscanf(o->kernel_shape.c_str(), "%lldx%lld", &e, &f) != 2 || e <= 0 || f <= 0)
                fail("--kernel-shape: '{}' is not N_EMBDxN_FF (e.g. 2880x2880)", o->kernel_shape);
            ko.n_embd = e;
            ko.n_ff = f;
        }
        if (o->kernel_experts > 0) ko.n_used = o->kernel_experts;
        ko.types = kernel_types(o->kernels, model);
        ko.isas = o->isas;
        if (ko.isas.empty()) {
            for (const std::string& l : cpu::available_isas())
                if (l != "scalar") ko.isas.push_back(l);
            if (ko.isas.empty()) ko.isas.push_back("scalar");
        }
        ko.tokens = o->tokens;
        ko.seconds = o->kernel_seconds;
        ko.pool_bytes = static_cast<size_t>(o->kernel_pool_gib * 1024 * 1024 * 1024);
        const std::vector<KernelBenchRow> kr = bench_expert_kernels(pool, ko);

        std::vector<std::pair<int, ExpertGemvBench>> gemv;
        for (int n : o->tokens) gemv.emplace_back(n, bench_expert_gemv(model, pool, n == 1 ? 16 : 8, n));
        const ExpertGemvBench g = std::find_if(gemv.begin(), gemv.end(), [](auto& p) { return p.first == 1; }) != gemv.end()
                                      ? std::find_if(gemv.begin(), gemv.end(), [](auto& p) { return p.first == 1; })->second
                                      : bench_expert_gemv(model, pool, 16, 1);
        const double floor = bw / g.bytes_per_token;  // tok/s if experts were the only reads
        // Every weight a decode token reads (experts at their used share, attention, router, shared
        // expert, LM head): a dense part in F16 can outweigh the experts, and then no kernel of the
        // experts' can approach the expert floor (qwen3-30b-a3b synth: 1.8 GB of F16 attention per token).
        const PhaseTimes wb = decode_weight_bytes(model);
        double dense_bytes = 0;
        for (size_t p = 0; p < wb.size(); ++p)
            if (p != static_cast<size_t>(Phase::ExpertGateUp) && p != static_cast<size_t>(Phase::ExpertDown)) dense_bytes += wb[p];
        const double floor_all = bw / (g.bytes_per_token + dense_bytes);
        nlohmann::json j = {
            {"model", o->model}, {"threads", threads}, {"isa", cpu::kernel_isa()}, {"prefetch_bytes", cpu::prefetch_bytes()},
            {"prefetch_hint", cpu::prefetch_hint()},
            {"read_bandwidth_gb_s", bw / 1e9}, {"expert_bytes_per_token", g.bytes_per_token},
            {"expert_gemv_gb_s", g.gb_s}, {"expert_gemv_ms_per_token", g.ms_per_token},
            {"expert_floor_tok_s", floor}, {"dense_bytes_per_token", dense_bytes}, {"decode_floor_tok_s", floor_all}};
        j["memory"] = {{"copied", mf.copied()}, {"locked", mf.locked()},
                       {"huge_pages", huge_pages_name(model_map_options().huge_pages)}, {"load_s", load_s},
                       {"load_faults_minor", f_load.minor}, {"load_faults_major", f_load.major}};
        nlohmann::json jg = nlohmann::json::array();
        for (const auto& [n, b] : gemv)
            jg.push_back({{"tokens", n}, {"gb_s", b.gb_s}, {"ms_per_step", b.ms_per_token}, {"pct_of_read", 100.0 * b.gb_s * 1e9 / bw}});
        j["expert_gemv"] = jg;
        nlohmann::json jk = nlohmann::json::array();
        for (const KernelBenchRow& r : kr)
            jk.push_back({{"type", type_display_name(r.type)}, {"isa", r.isa}, {"tokens", r.tokens}, {"n_embd", r.n_embd},
                          {"n_ff", r.n_ff}, {"n_used", ko.n_used}, {"gb_s", r.gb_s}, {"ms_per_step", r.ms_per_step},
                          {"pct_of_read", 100.0 * r.gb_s * 1e9 / bw}, {"cell_read_gb_s", r.read_gb_s},
                          {"pct_of_cell_read", r.read_gb_s > 0 ? 100.0 * r.gb_s / r.read_gb_s : 0.0}});
        j["kernels"] = jk;
        EngineBench e;
        if (!o->no_engine) {
            e = bench_engine(model, so, o->n_prompt, o->n_gen);
            j["prompt_tokens"] = e.n_prompt;
            j["prompt_tok_s"] = e.prompt_tok_s;
            j["gen_tokens"] = e.n_gen;
            j["decode_tok_s"] = e.decode_tok_s;
            j["page_faults"] = {{"prompt_minor", e.prompt_faults.minor}, {"prompt_major", e.prompt_faults.major},
                                {"decode_minor_per_token", static_cast<double>(e.decode_faults.minor) / std::max<int64_t>(1, e.n_gen)},
                                {"decode_major_per_token", static_cast<double>(e.decode_faults.major) / std::max<int64_t>(1, e.n_gen)}};
            nlohmann::json phases = nlohmann::json::array();
            for (size_t p = 0; p < e.decode_ms.size(); ++p) {
                const double gb_s = e.decode_ms[p] > 0 ? e.decode_bytes[p] / (e.decode_ms[p] * 1e-3) / 1e9 : 0.0;
                phases.push_back({{"phase", phase_name(static_cast<Phase>(p))}, {"ms_per_token", e.decode_ms[p]},
                                  {"weight_bytes_per_token", e.decode_bytes[p]}, {"gb_s", gb_s},
                                  {"prompt_ms", e.prompt_ms[p]}});
            }
            j["decode_phases"] = phases;
        }
        if (o->json) {
            std::puts(j.dump(2).c_str());
            return 0;
        }
        std::printf("model            %s (%s, kernels %s, prefetch %lld B ahead, %s)\n", o->model.c_str(), count_noun(threads, "thread").c_str(),
                    cpu::kernel_isa(), static_cast<long long>(cpu::prefetch_bytes()), cpu::prefetch_hint());
        std::printf("model memory     %s, %s, huge pages %s; loaded in %.2f s (%lld minor / %lld major page faults)\n",
                    mf.copied() ? "copied into anonymous memory (--no-mmap)" : "file mapping", mf.locked() ? "locked" : "not locked",
                    huge_pages_name(model_map_options().huge_pages), load_s, static_cast<long long>(f_load.minor),
                    static_cast<long long>(f_load.major));
        std::printf("memory read      %8.2f GB/s   MEASURED (%s, 1 GiB buffer)\n", bw / 1e9, count_noun(threads, "thread").c_str());
        for (const auto& [n, b] : gemv)
            std::printf("expert products  %8.2f GB/s   MEASURED (%.1f%% of read bandwidth; %d token%s per step, %s of experts per step, %.2f ms)\n",
                        b.gb_s, 100.0 * b.gb_s * 1e9 / bw, n, n == 1 ? "" : "s", format_bytes(static_cast<uint64_t>(b.bytes_per_token)).c_str(),
                        b.ms_per_token);
        std::printf("decode floor     %8.2f tok/s  CALCULATED (read bandwidth / every weight byte of a token: %s of experts + %s dense)\n",
                    floor_all, format_bytes(static_cast<uint64_t>(g.bytes_per_token)).c_str(),
                    format_bytes(static_cast<uint64_t>(dense_bytes)).c_str());
        std::printf("expert floor     %8.2f tok/s  CALCULATED (read bandwidth / expert bytes per token alone)\n", floor);
        if (!kr.empty()) {
            std::printf("\nexpert kernels (MEASURED: cpu::moe_ffn on %d random experts per step, rotated through %.1f GiB, all tokens\n"
                        "on the same experts; GB/s of expert weights read, and %% of the read probe made just before\n"
                        "each cell over the same memory; the probe above read %.2f GB/s)\n",
                        ko.n_used, o->kernel_pool_gib, bw / 1e9);
            std::printf("  %-7s %-7s %-12s", "type", "isa", "E x F");
            for (int n : ko.tokens) std::printf(" %18s", fmt::format("{} token{}", n, n == 1 ? "" : "s").c_str());
            std::printf("\n");
            for (size_t i = 0; i < kr.size(); i += ko.tokens.size()) {
                std::printf("  %-7s %-7s %-12s", type_display_name(kr[i].type).c_str(), kr[i].isa.c_str(),
                            fmt::format("{}x{}", kr[i].n_embd, kr[i].n_ff).c_str());
                for (size_t k = 0; k < ko.tokens.size() && i + k < kr.size(); ++k)
                    std::printf(" %8.2f GB/s %4.0f%%", kr[i + k].gb_s, 100.0 * kr[i + k].gb_s / kr[i + k].read_gb_s);
                std::printf("\n");
            }
        }
        if (o->no_engine) return 0;
        std::printf("\nprompt           %8.2f tok/s  MEASURED (%lld tokens)\n", e.prompt_tok_s, static_cast<long long>(e.n_prompt));
        std::printf("decode           %8.2f tok/s  MEASURED (%lld tokens, %.1f%% of the decode floor)\n", e.decode_tok_s,
                    static_cast<long long>(e.n_gen), 100.0 * e.decode_tok_s / floor_all);
        std::printf("page faults      prompt %lld minor / %lld major; decode %.1f minor / %.1f major per token  MEASURED\n",
                    static_cast<long long>(e.prompt_faults.minor), static_cast<long long>(e.prompt_faults.major),
                    static_cast<double>(e.decode_faults.minor) / std::max<int64_t>(1, e.n_gen),
                    static_cast<double>(e.decode_faults.major) / std::max<int64_t>(1, e.n_gen));
        std::printf("\nwhere the time goes (MEASURED wall time: decode per token, and the whole prompt; weight GB/s\n"
                    "CALCULATED from the decode time; the expert sum is fused into expert down)\n");
        std::printf("  %-22s %9s %7s %12s %9s %14s %7s\n", "phase", "ms/token", "share", "weights", "GB/s", "prompt ms", "share");
        double total = 0, total_prompt = 0;
        for (double ms : e.decode_ms) total += ms;
        for (double ms : e.prompt_ms) total_prompt += ms;
        for (const auto& p : j["decode_phases"]) {
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
