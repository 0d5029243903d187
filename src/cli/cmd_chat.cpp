// nitro chat [-m MODEL] [-sys TEXT] [-p FIRST] [sampling, engine and memory flags]
// A multi-turn conversation in the terminal (cli/chat_repl.h); `nitro run -cnv` is the same.
#include "cli/chat_repl.h"
#include "cli/commands.h"
#include "cli/generate_cli.h"

#include <memory>

namespace nitro::cli {

Action add_chat(CLI::App& app) {
    auto g = std::make_shared<GenerateCli>();
    CLI::App* sub = app.add_subcommand("chat", "A multi-turn conversation in the terminal, in the model's chat format "
                                               "(/reset, /stats, /exit; Ctrl-D quits)");
    add_generate_options(sub, *g, true);
    return [g]() {
        resolve_generate_options(*g);
        return run_chat(g->gen);
    };
}

}  // namespace nitro::cli
