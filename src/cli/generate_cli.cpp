#include "cli/generate_cli.h"

#include "cli/hf_option.h"
#include "cli/load_progress.h"
#include "cli/validators.h"
#include "core/error.h"

#include <unistd.h>

#include <charconv>
#include <random>

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

void add_generate_options(CLI::App* sub, GenerateCli& g, bool chat) {
    GenerateOptions* o = &g.gen;
    sub->add_option("-m,--model", o->model, "GGUF model (first shard of a split model); default: the embedded models/tiny-moe-pystd.gguf")
        ->envname("NITRO_MODEL");
    add_hf_option(sub, g.hf);
    g.prompt_opt = sub->add_option("-p,--prompt", o->prompt,
                                   chat ? "First user message (then the conversation goes on at the prompt)"
                                        : "Prompt text (none given: a chat on a terminal, as llama-cli; else the default "
                                          "prompt \"def read_config(path):\")");
    g.file_opt = sub->add_option("-f,--file", o->prompt_file, chat ? "Read the first user message from this file" : "Read the prompt from this file");
    sub->add_option("--system-prompt", o->system_prompt, "System message of the conversation (llama.cpp's -sys); run: with --chat");
    if (!chat) sub->add_option("--prompt-ids", g.prompt_ids, "Prompt as token ids, comma-separated (no tokenization)");
    if (chat) o->n_predict = -1;
    g.n_opt = sub->add_option("-n,--n-predict,--predict", o->n_predict,
                              chat ? "Most tokens per reply (-1 = until the end of the turn or a full context)"
                                   : "Tokens to generate (-1 = until end of generation or a full context)")
                  ->capture_default_str();
    // The server's bounds for the same fields (src/server/openai_schema.cpp parse_generation:
    // temperature [0, 2], top_p [0, 1], min_p [0, 1], top_k [0, 2^31-1]), so a setting that works
    // on the command line works in a request and the other way round.
    sub->add_option("--temp", o->sampling.temperature, "Temperature (0 = greedy)")->capture_default_str()->check(number_in(0.0, 2.0));
    sub->add_option("--top-k", o->sampling.top_k, "Top-k (0 = off)")->capture_default_str()->check(integer_at_least(0));
    sub->add_option("--top-p", o->sampling.top_p, "Top-p (1 = off)")->capture_default_str()->check(number_in(0.0, 1.0));
    sub->add_option("--min-p", o->sampling.min_p, "Min-p (0 = off)")->capture_default_str()->check(number_in(0.0, 1.0));
    sub->add_option("--seed", g.seed, "Sampling seed (-1 = random; llama.cpp's -s)")->capture_default_str()->check(integer_at_least(-1));
    sub->add_option("-t,--threads", o->session.n_threads, "CPU threads (0 = all)")
        ->check(CLI::Range(0, 65536))
        ->capture_default_str()
        ->envname("NITRO_THREADS");
    g.ctx_opt = sub->add_option("-c,--ctx-size", o->session.n_ctx,
                                "Context length, tokens (capped at the model's training context; a -c above it warns)")
                    ->capture_default_str();
    sub->add_option("-u,--ubatch,--ubatch-size", o->session.n_ubatch, "Prompt tokens per forward chunk (llama.cpp's -ub)")
        ->capture_default_str()
        ->check(integer_at_least(1));
    add_engine_options(sub, g.engine);
    add_llama_compat_options(sub, g.compat);
    sub->add_flag("-v,--verbose", o->gpu.verbose, "The plan per layer at startup and the expert counters per layer at the end");
    sub->add_flag("--no-prefault", g.no_prefault,
                  "Do not read the weights before the prompt (pages then load on first use, inside the TTFT)");
    const char* conv = "llama.cpp's conversation flags";
    if (!chat) {
        sub->add_flag("--chat", o->chat, "Wrap the prompt as one user turn in the model's chat format");
        sub->add_flag("--conversation", g.conversation, "A multi-turn chat in the terminal, as `nitro chat` (llama.cpp's -cnv)")->group(conv);
        sub->add_flag("--interactive", g.interactive, "As --conversation (llama.cpp's -i)")->group(conv);
        sub->add_flag("--interactive-first", g.interactive_first, "As --conversation (llama.cpp's -if)")->group(conv);
        sub->add_flag("--no-conversation", g.no_conversation,
                      "Never start a chat: without a prompt, complete the default prompt (llama.cpp's -no-cnv)")
            ->group(conv);
        sub->add_flag("--ignore-eos", o->ignore_eos, "Keep generating after end-of-generation tokens");
        sub->add_option("--trace", o->trace_path, "Capture routing (expert ids and weights per token and layer) to this trace file");
        sub->add_option("--route-replay", o->route_replay,
                        "BENCHMARK ONLY: take every expert choice from this router trace (docs/bench.md); the output is then "
                        "not the model's");
        sub->add_flag("--json", g.json, "Print one JSON object instead of text");
        sub->add_option("--n-probs", o->n_probs, "With --json: the K most likely tokens (p at temperature 1) for every generated step");
        sub->add_flag("--echo", o->echo, "With --json --n-probs: also the top-K after every prompt position (prompt_probs)");
    } else {
        sub->add_flag("--conversation", g.conversation, "Accepted (nitro chat is always a conversation; llama.cpp's -cnv)")->group(conv);
        sub->add_flag("--interactive", g.interactive, "Accepted (llama.cpp's -i)")->group(conv);
        sub->add_flag("--interactive-first", g.interactive_first, "Accepted (llama.cpp's -if)")->group(conv);
    }
    add_memory_flags(sub, g.mem);
}

bool no_prompt_given(const GenerateCli& g) {
    return g.prompt_opt->count() == 0 && g.file_opt->count() == 0 && g.prompt_ids.empty();
}

void resolve_generate_options(GenerateCli& g) {
    GenerateOptions& o = g.gen;
    warn_threads_over_hardware(o.session.n_threads);
    o.prompt_ids = parse_prompt_ids(g.prompt_ids);
    resolve_hf_model(g.hf, o.model);
    o.ctx_given = g.ctx_opt->count() > 0;
    apply_memory_flags(g.mem);
    resolve_llama_compat(g.compat, &g.engine, o.session);
    o.sampling.seed = g.seed >= 0 ? static_cast<uint64_t>(g.seed) : std::random_device{}();
    const bool verbose = o.gpu.verbose;
    o.gpu = g.engine.gpu;
    o.gpu.verbose = verbose;
    o.mode = engine_mode(g.engine);
    if (!g.no_prefault) {
        const bool live = isatty(STDERR_FILENO);
        o.on_engine_ready = [live](const Model& m) { prefault_weights(m, live, false); };
    }
}

}  // namespace nitro::cli
