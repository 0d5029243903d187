// nitro run -m MODEL [-p TEXT | -f FILE | --prompt-ids 1,2,3] [-n N] [sampling] [--json --n-probs K --echo]
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/hf_option.h"
#include "cli/memory_options.h"
#include "cli/validators.h"
#include "core/error.h"
#include "core/text.h"
#include "runtime/generate.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <charconv>
#include <cstdio>
#include <limits>
#include <memory>

namespace nitro::cli {

namespace {

/// --prompt-ids 1,2,3: every comma-separated item must be a token id; an empty item ("1,,2") or a
/// non-integer one is an error naming it, not dropped.
std::vector<int32_t> parse_prompt_ids(const std::vector<std::string>& args) {
    std::vector<int32_t> ids;
    for (const std::string& arg : args) {
        size_t start = 0;
        for (int k = 1;; ++k) {
            const size_t comma = arg.find(',', start);
            std::string item = arg.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
            item.erase(0, item.find_first_not_of(' '));
            item.erase(item.find_last_not_of(' ') + 1);
            if (item.empty())
                fail("--prompt-ids '{}': item {} is empty (expected token ids separated by single commas, e.g. 1,2,3)", arg,
                     k);
            int32_t v = 0;
            const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
            if (ec != std::errc() || end != item.data() + item.size() || v < 0)
                fail("--prompt-ids '{}': item {} ('{}') is not a token id (an integer >= 0)", arg, k, item);
            ids.push_back(v);
            if (comma == std::string::npos) break;
            start = comma + 1;
        }
    }
    return ids;
}

}  // namespace

Action add_run(CLI::App& app) {
    auto o = std::make_shared<GenerateOptions>();
    auto json = std::make_shared<bool>(false);
    auto eng = std::make_shared<EngineCli>();
    auto prompt_ids = std::make_shared<std::vector<std::string>>();
    auto hf = std::make_shared<std::string>();
    CLI::App* sub = app.add_subcommand("run", "Generate text from a prompt (on the CPU, the GPU, or both: --mode)");
    sub->add_option("-m,--model", o->model, "GGUF model (first shard of a split model); default: the embedded models/tiny-moe-pystd.gguf")->envname("NITRO_MODEL");
    add_hf_option(sub, *hf);
    sub->add_option("-p,--prompt", o->prompt, "Prompt text");
    sub->add_option("-f,--file", o->prompt_file, "Read the prompt from this file");
    sub->add_option("--prompt-ids", *prompt_ids, "Prompt as token ids, comma-separated (no tokenization)");
    sub->add_option("-n,--n-predict", o->n_predict, "Tokens to generate")->capture_default_str();
    // The server's bounds for the same fields (src/server/openai_schema.cpp parse_generation:
    // temperature [0, 2], top_p [0, 1], min_p [0, 1], top_k [0, 2^31-1]), so a setting that works
    // on the command line works in a request and the other way round.
    sub->add_option("--temp", o->sampling.temperature, "Temperature (0 = greedy)")
        ->capture_default_str()
        ->check(number_in(0.0, 2.0));
    sub->add_option("--top-k", o->sampling.top_k, "Top-k (0 = off)")->capture_default_str()->check(integer_at_least(0));
    sub->add_option("--top-p", o->sampling.top_p, "Top-p (1 = off)")->capture_default_str()->check(number_in(0.0, 1.0));
    sub->add_option("--min-p", o->sampling.min_p, "Min-p (0 = off)")->capture_default_str()->check(number_in(0.0, 1.0));
    sub->add_option("--seed", o->sampling.seed, "Sampling seed")->capture_default_str();
    sub->add_option("-t,--threads", o->session.n_threads, "CPU threads (0 = all)")
        ->check(CLI::Range(0, 65536))
        ->capture_default_str()
        ->envname("NITRO_THREADS");
    CLI::Option* ctx_opt = sub->add_option("-c,--ctx-size", o->session.n_ctx,
                                           "Context length, tokens (capped at the model's training context; a -c above "
                                           "it warns)")
                               ->capture_default_str();
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
    return [o, json, eng, mem, prompt_ids, ctx_opt, hf]() {
        warn_threads_over_hardware(o->session.n_threads);
        o->prompt_ids = parse_prompt_ids(*prompt_ids);
        resolve_hf_model(*hf, o->model);
        o->ctx_given = ctx_opt->count() > 0;
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
            std::fflush(stdout);  // the text ends before the stats on stderr (both may go to one terminal or file)
            // the first generated token comes from the prompt's pass (TTFT): a rate needs a decode step
            const std::string decode_rate =
                r.timings.n_decode > 0 ? fmt::format("{:.1f} tok/s", r.timings.decode_tok_s()) : "no decode step";
            const auto n_prompt = static_cast<long long>(r.prompt_ids.size()), n_gen = static_cast<long long>(r.ids.size());
            std::fprintf(stderr, "[%s] prompt: %s, %.1f tok/s | generated: %s, %s | TTFT %.1f ms\n", r.engine.c_str(),
                         count_noun(n_prompt, "token").c_str(), r.timings.prompt_tok_s(), count_noun(n_gen, "token").c_str(),
                         decode_rate.c_str(), r.timings.ttft_ms);
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
