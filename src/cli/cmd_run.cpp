// nitro run -m MODEL [-p TEXT | -f FILE | --prompt-ids 1,2,3] [-n N] [sampling] [--json --n-probs K --echo]
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/memory_options.h"
#include "core/error.h"
#include "runtime/generate.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>

namespace nitro::cli {

Action add_run(CLI::App& app) {
    auto o = std::make_shared<GenerateOptions>();
    auto json = std::make_shared<bool>(false);
    auto eng = std::make_shared<EngineCli>();
    CLI::App* sub = app.add_subcommand("run", "Generate text from a prompt (on the CPU, the GPU, or both: --mode)");
    sub->add_option("-m,--model", o->model, "GGUF model (first shard of a split model); default: the embedded models/tiny-moe-pystd.gguf")->envname("NITRO_MODEL");
    sub->add_option("-p,--prompt", o->prompt, "Prompt text");
    sub->add_option("-f,--file", o->prompt_file, "Read the prompt from this file");
    sub->add_option("--prompt-ids", o->prompt_ids, "Prompt as token ids, comma-separated (no tokenization)")->delimiter(',');
    sub->add_option("-n,--n-predict", o->n_predict, "Tokens to generate")->capture_default_str();
    sub->add_option("--temp", o->sampling.temperature, "Temperature (0 = greedy)")->capture_default_str();
    sub->add_option("--top-k", o->sampling.top_k, "Top-k (0 = off)")->capture_default_str();
    sub->add_option("--top-p", o->sampling.top_p, "Top-p (1 = off)")->capture_default_str();
    sub->add_option("--min-p", o->sampling.min_p, "Min-p (0 = off)")->capture_default_str();
    sub->add_option("--seed", o->sampling.seed, "Sampling seed")->capture_default_str();
    sub->add_option("-t,--threads", o->session.n_threads, "CPU threads (0 = all)")
        ->check(CLI::Range(0, 65536))
        ->capture_default_str()
        ->envname("NITRO_THREADS");
    sub->add_option("-c,--ctx-size", o->session.n_ctx, "Context length, tokens")->capture_default_str();
    sub->add_option("-u,--ubatch", o->session.n_ubatch, "Prompt tokens per forward chunk")->capture_default_str();
    add_engine_options(sub, *eng);
    sub->add_flag("-v,--verbose", o->gpu.verbose, "The plan per layer at startup and the expert counters per layer at the end");
    sub->add_flag("--chat", o->chat, "Wrap the prompt as one user turn in the model's chat format");
    sub->add_flag("--ignore-eos", o->ignore_eos, "Keep generating after end-of-generation tokens");
    sub->add_option("--trace", o->trace_path, "Capture routing (expert ids and weights per token and layer) to this trace file");
    sub->add_option("--route-replay", o->route_replay,
                    "BENCHMARK ONLY: take every expert choice from this router trace (docs/bench.md); the output is then "
                    "not the model's");
    sub->add_flag("--json", *json, "Print one JSON object instead of text");
    sub->add_option("--n-probs", o->n_probs, "With --json: the K most likely tokens (p at temperature 1) for every generated step");
    sub->add_flag("--echo", o->echo, "With --json --n-probs: also the top-K after every prompt position (prompt_probs)");
    auto mem = std::make_shared<MemoryFlags>();
    add_memory_flags(sub, *mem);
    return [o, json, eng, mem]() {
        apply_memory_flags(*mem);
        const bool verbose = o->gpu.verbose;
        o->gpu = eng->gpu;
        o->gpu.verbose = verbose;
        o->mode = engine_mode(*eng);
        std::function<void(const std::string&)> print;
        if (!*json)
            print = [](const std::string& piece) {
                std::fwrite(piece.data(), 1, piece.size(), stdout);
                std::fflush(stdout);
            };
        GenerateResult r = generate(*o, print);
        if (*json) {
            std::puts(generate_result_json(r, *o).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
        } else {
            std::printf("\n");
            std::fprintf(stderr,
                         "[%s] prompt: %lld tokens, %.1f tok/s | generated: %lld tokens, %.1f tok/s | TTFT %.1f ms\n",
                         r.engine.c_str(),
                         static_cast<long long>(r.prompt_ids.size()), r.timings.prompt_tok_s(),
                         static_cast<long long>(r.ids.size()), r.timings.decode_tok_s(), r.timings.ttft_ms);
            if (r.experts) {
                const std::string line = expert_counters_line(*r.experts);
                if (!line.empty()) std::fprintf(stderr, "%s\n", line.c_str());
                if (o->gpu.verbose) std::fputs(expert_counters_table(*r.experts).c_str(), stderr);
            }
        }
        return 0;
    };
}

}  // namespace nitro::cli
