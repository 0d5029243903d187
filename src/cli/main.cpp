// nitro: the command-line front end. `nitro --help` lists the subcommands.
#include "cli/commands.h"
#include "cli/llama_flags.h"
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
#include <algorithm>
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

/// The subcommand of `app` named `name`, or null.
const CLI::App* find_subcommand(const CLI::App& app, const std::string& name) {
    for (const CLI::App* s : app.get_subcommands({}))
        if (s->get_name() == name) return s;
    return nullptr;
}

/// The subcommands of a CLI11 app, as the llama.cpp flag table asks about them. A command is a
/// path of subcommand names separated by spaces ("run", "trace synth").
class Cli11Options : public nitro::cli::CommandOptions {
public:
    explicit Cli11Options(CLI::App& app) : app_(app) {}
    bool has(const std::string& command, const std::string& name) const override { return option(command, name) != nullptr; }
    bool takes_value(const std::string& command, const std::string& name) const override {
        const CLI::Option* o = option(command, name);
        return o && o->get_expected_max() > 0 && o->get_type_size_max() > 0;  // a flag expects 0 values
    }
    std::vector<std::string> commands() const override {
        std::vector<std::string> names;
        for (const CLI::App* s : app_.get_subcommands({})) names.push_back(s->get_name());
        return names;
    }

private:
    const CLI::Option* option(const std::string& command, const std::string& name) const {
        const CLI::App* app = &app_;
        size_t start = 0;
        while (start < command.size()) {
            const size_t sp = std::min(command.find(' ', start), command.size());
            app = find_subcommand(*app, command.substr(start, sp - start));
            if (!app) return nullptr;
            start = sp + 1;
        }
        return app->get_option_no_throw(name);
    }
    CLI::App& app_;
};

/// argv with llama.cpp's spellings rewritten for the subcommand it names (and its nested
/// subcommands: `trace synth`). Throws nitro::Error for a llama.cpp flag nitro does not have.
std::vector<std::string> rewrite_for_subcommand(CLI::App& app, const std::vector<std::string>& argv) {
    std::string command;
    const CLI::App* sub = &app;
    size_t i = 1;
    for (; i < argv.size(); ++i) {
        const CLI::App* next = argv[i].empty() || argv[i][0] == '-' ? nullptr : find_subcommand(*sub, argv[i]);
        if (!next) break;
        command += (command.empty() ? "" : " ") + argv[i];
        sub = next;
    }
    if (command.empty()) return argv;  // --help, --version, or an unknown subcommand CLI11 reports
    std::vector<std::string> out(argv.begin(), argv.begin() + static_cast<long>(i));
    const std::vector<std::string> rest =
        nitro::cli::rewrite_llama_flags(command, std::vector<std::string>(argv.begin() + static_cast<long>(i), argv.end()),
                                        Cli11Options(app));
    out.insert(out.end(), rest.begin(), rest.end());
    return out;
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
    add(nitro::cli::add_chat);
    add(nitro::cli::add_bench);
    add(nitro::cli::add_sim);
    add(nitro::cli::add_trace);
    add(nitro::cli::add_tokenize);
    add(nitro::cli::add_convert);
    add(nitro::cli::add_serve);
    add(nitro::cli::add_plan);
    add(nitro::cli::add_pull);

    // llama.cpp's spellings (-ngl, -fa, -np, -ub, -ctk, -cnv, ...; cli/llama_flags.h) become the
    // long options nitro declares for the subcommand, before CLI11 would split them into letters.
    std::vector<std::string> args(argv, argv + argc);
    try {
        args = rewrite_for_subcommand(app, args);
    } catch (const nitro::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
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
