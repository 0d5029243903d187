// nitro run [-m MODEL] [-p TEXT | -f FILE | --prompt-ids 1,2,3] [-n N] [sampling] [--json --n-probs K --echo]
// nitro run -cnv | -i     (a chat in the terminal, as `nitro chat`)
// Without a prompt: a chat when stdin and stdout are a terminal (as llama-cli), else the default
// prompt.
#include "cli/chat_repl.h"
#include "cli/commands.h"
#include "cli/generate_cli.h"
#include "core/error.h"
#include "core/text.h"
#include "runtime/generate.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstdio>
#include <memory>

namespace nitro::cli {

namespace {

constexpr const char* kDefaultPrompt = "def read_config(path):";

int run_once(GenerateCli& g) {
    GenerateOptions& o = g.gen;
    std::function<void(const std::string&)> print;
    if (!g.json)
        print = [](const std::string& piece) {
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
        };
    GenerateResult r = generate(o, print);
    if (g.json) {
        std::puts(generate_result_json(r, o).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
        return 0;
    }
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
        if (o.gpu.verbose) std::fputs(expert_counters_table(*r.experts).c_str(), stderr);
    }
    return 0;
}

}  // namespace

Action add_run(CLI::App& app) {
    auto g = std::make_shared<GenerateCli>();
    CLI::App* sub = app.add_subcommand("run", "Generate text from a prompt (on the CPU, the GPU, or both: --mode); -cnv for a chat");
    add_generate_options(sub, *g, false);
    return [g]() {
        resolve_generate_options(*g);
        const bool asked = g->conversation || g->interactive || g->interactive_first;
        if (asked && g->no_conversation) fail("-cnv/-i and -no-cnv ask for opposite things; give one of them");
        const bool terminal = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
        const bool chat = asked || (no_prompt_given(*g) && !g->no_conversation && !g->json && terminal);
        if (chat) {
            if (g->json || !g->gen.prompt_ids.empty() || !g->gen.trace_path.empty() || !g->gen.route_replay.empty() || g->gen.n_probs > 0)
                fail("a conversation (-cnv, -i, or no prompt on a terminal) takes no --json, --prompt-ids, --n-probs, --trace or "
                     "--route-replay");
            if (g->n_opt->count() == 0) g->gen.n_predict = -1;  // a reply runs to the end of its turn, as in nitro chat
            return run_chat(g->gen);
        }
        if (no_prompt_given(*g)) {
            std::fprintf(stderr, "nitro run: no prompt given (-p TEXT, -f FILE, or -cnv for a chat): completing \"%s\"\n",
                         kDefaultPrompt);
            g->gen.prompt = kDefaultPrompt;
        }
        return run_once(*g);
    };
}

}  // namespace nitro::cli
