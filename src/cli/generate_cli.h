// The options of `nitro run` and `nitro chat`: one table, so a flag means the same in both
// (model, prompt, sampling, context, threads, engine placement, memory, llama.cpp's flags).
#pragma once

#include "cli/engine_options.h"
#include "cli/llama_compat.h"
#include "cli/memory_options.h"
#include "runtime/generate.h"

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace nitro::cli {

struct GenerateCli {
    GenerateOptions gen;
    EngineCli engine;
    MemoryFlags mem;
    LlamaCompat compat;
    std::vector<std::string> prompt_ids;
    std::string hf;    ///< -hf/--hf-repo OWNER/NAME[:QUANT] (cli/hf_option.h)
    int64_t seed = 0;  ///< --seed; -1 = a random seed (llama.cpp's)
    bool json = false;
    bool conversation = false, interactive = false, interactive_first = false, no_conversation = false;
    bool no_prefault = false;
    CLI::Option* ctx_opt = nullptr;
    CLI::Option* n_opt = nullptr;
    CLI::Option* prompt_opt = nullptr;
    CLI::Option* file_opt = nullptr;
};

/// Adds the options to `sub`. `chat`: the conversation command (no --json/--echo/--n-probs/
/// --prompt-ids/--trace; -n counts per reply, default until the end of the turn).
void add_generate_options(CLI::App* sub, GenerateCli& g, bool chat);

/// After parsing: checks and resolves the flags into g.gen (prompt ids, memory flags, llama.cpp
/// flags, engine mode, seed, the prefault hook).
void resolve_generate_options(GenerateCli& g);

/// True when no prompt was given (-p, -f, --prompt-ids).
bool no_prompt_given(const GenerateCli& g);

}  // namespace nitro::cli
