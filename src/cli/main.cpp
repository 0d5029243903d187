// nitro: the command-line front end. `nitro --help` lists the subcommands.
#include "cli/commands.h"
#include "core/error.h"

#ifdef NITRO_HAS_CUDA
#include "cuda/gpu_session.h"
#endif

#include <cstdio>
#include <map>

int main(int argc, char** argv) {
#ifdef NITRO_HAS_CUDA
    nitro::cuda::register_engine();
#endif
    CLI::App app{"nitro: Mixture-of-Experts inference for models larger than the GPU"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "nitro 0.1.0");
    std::map<CLI::App*, nitro::cli::Action> actions;
    auto add = [&](auto fn) {
        const size_t before = app.get_subcommands({}).size();
        nitro::cli::Action a = fn(app);
        actions[app.get_subcommands({}).at(before)] = std::move(a);
    };
    add(nitro::cli::add_inspect);
    add(nitro::cli::add_synth);
    add(nitro::cli::add_run);
    add(nitro::cli::add_bench);
    add(nitro::cli::add_sim);
    add(nitro::cli::add_trace);
    add(nitro::cli::add_tokenize);
    add(nitro::cli::add_convert);
    add(nitro::cli::add_serve);

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    try {
        for (auto& [sub, action] : actions)
            if (sub->parsed()) return action();
    } catch (const nitro::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "error: out of memory\n");
        return 1;
    }
    return 0;
}
