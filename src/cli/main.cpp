// nitro: the command-line front end. `nitro --help` lists the subcommands.
#include "cli/commands.h"
#include "core/error.h"
#include "core/version.h"
#include "cpu/cpu_features.h"
#include "cpu/matmul.h"

#include <fmt/format.h>

#ifdef NITRO_HAS_CUDA
#include "gpu/gpu_session.h"
#endif

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace {

/// `nitro --version`: the build, the CPU features found and the kernel level chosen.
std::string version_text() {
    using namespace nitro;
    const cpu::CpuFeatures& f = cpu::cpu_features();
    std::string avail, lower;  // every level this CPU has; those below its best, for NITRO_ISA
    const std::vector<std::string> levels = cpu::available_isas();
    for (size_t i = 0; i < levels.size(); ++i) {
        avail += (i ? " " : "") + levels[i];
        if (i + 1 < levels.size()) lower += (i ? "|" : "") + levels[i];
    }
    const char* env = std::getenv("NITRO_ISA");
    const std::string base = cpu::build_baseline_features();
    std::string s = fmt::format("nitro {} (git {})\n", version(), git_commit());
    s += fmt::format("cpu: {} ({}), {} hardware threads\n", f.model_name.empty() ? "unknown model" : f.model_name, f.vendor,
                     std::thread::hardware_concurrency());
    s += fmt::format("cpu features: {}\n", cpu::cpu_feature_list(f));
    s += fmt::format("kernels: {} (this CPU can run: {}{})\n", cpu::kernel_isa(), avail,
                     env && *env     ? fmt::format("; NITRO_ISA={}", env)
                     : lower.empty() ? std::string()
                                     : "; lower with NITRO_ISA=" + lower);
    s += fmt::format("build: {}\n", base.empty() ? "portable x86-64, kernels chosen at run time"
                                                  : "compiled to require " + base);
#ifdef NITRO_HAS_CUDA
    s += "cuda backend: built (--mode gpu)";
#else
    s += "cuda backend: not built (configure with -DNITRO_CUDA=ON)";
#endif
    return s;
}

}  // namespace

int main(int argc, char** argv) {
#ifdef NITRO_HAS_CUDA
    nitro::cuda::register_engine();
#endif
    CLI::App app{"nitro: Mixture-of-Experts inference for models larger than the GPU"};
    app.require_subcommand(1);
    app.set_version_flag("--version", version_text);
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
    add(nitro::cli::add_plan);
    add(nitro::cli::add_pull);

    // llama.cpp spells --override-tensor "-ot" and --hf-repo "-hf" (two-letter short options, which
    // CLI11 cannot declare): accept them as that.
    std::vector<std::string> args(argv, argv + argc);
    for (auto& a : args)
        if (a == "-ot") a = "--override-tensor";
        else if (a == "-hf") a = "--hf-repo";
    std::vector<char*> argv2;
    for (auto& a : args) argv2.push_back(a.data());
    try {
        app.parse(static_cast<int>(argv2.size()), argv2.data());
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const std::exception& e) {  // from --version (e.g. a bad NITRO_ISA), which runs while parsing
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
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
    } catch (const std::exception& e) {
        // Any other std exception (a stream failure, a length_error from a bad size) is a bug to fix
        // where it is thrown, but it must still end the command with a message, not an abort.
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
