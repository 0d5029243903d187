// Subcommands of the `nitro` binary. Each file src/cli/cmd_NAME.cpp adds one subcommand to the
// app and runs it; main.cpp wires them up and turns nitro::Error into a clean message + exit 1.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace nitro::cli {

/// A subcommand registers its options and returns the action to run when it is selected.
using Action = std::function<int()>;

Action add_inspect(CLI::App& app);
Action add_synth(CLI::App& app);
Action add_run(CLI::App& app);
/// `nitro chat`: a multi-turn conversation in the terminal (cli/chat_repl.h).
Action add_chat(CLI::App& app);
Action add_bench(CLI::App& app);
/// `nitro sim`: replay a router trace against expert-cache policies (docs/sim.md).
Action add_sim(CLI::App& app);
/// `nitro trace info|export|import|synth`: router trace files (docs/trace-format.md).
Action add_trace(CLI::App& app);
Action add_tokenize(CLI::App& app);
Action add_convert(CLI::App& app);
/// `nitro serve`: the OpenAI-compatible HTTP server (docs/server.md).
Action add_serve(CLI::App& app);
/// `nitro plan`: the placement of a model for a VRAM budget, without a GPU (docs/hybrid.md).
Action add_plan(CLI::App& app);
/// `nitro pull`: download a GGUF model from Hugging Face into its cache (docs/models.md).
Action add_pull(CLI::App& app);

}  // namespace nitro::cli
