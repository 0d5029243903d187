// llama.cpp's flags as llama.cpp users type them (docs/cli.md "Coming from llama.cpp").
//
// llama.cpp spells many options as multi-letter short flags (-ngl, -fa, -np, -ub, -ctk, -cnv);
// CLI11 cannot declare those and would split them into letters (-ngl = -n gl). Before CLI11
// parses, one table rewrites each llama.cpp spelling into the long option nitro declares for it
// (-ngl -> --n-gpu-layers), for the subcommand being run, and turns a llama.cpp flag nitro does
// not have into an error that says what to use instead ("nitro has no -sm; ..."). Values of
// options are skipped, so a prompt such as `-p -fa` is left alone; nothing after `--` is touched.
//
// The table is data (llama_flags.cpp); the subcommands' options come from an interface, so the
// rewrite is tested without CLI11 (tests/unit/test_llama_flags.cpp) and end to end through the
// real binary (tests/unit/test_cli_llama_flags.cpp).
#pragma once

#include <string>
#include <vector>

namespace nitro::cli {

/// What the rewrite asks of the command line: the subcommands and their options.
class CommandOptions {
public:
    virtual ~CommandOptions() = default;
    /// Whether subcommand `command` declares option `name` ("--n-gpu-layers", "-t").
    virtual bool has(const std::string& command, const std::string& name) const = 0;
    /// Whether that option takes a value (false for flags and unknown names).
    virtual bool takes_value(const std::string& command, const std::string& name) const = 0;
    /// Every subcommand, in the order `nitro --help` lists them.
    virtual std::vector<std::string> commands() const = 0;
};

/// Rewrites llama.cpp spellings in `args`, the arguments after the subcommand `command`. Throws
/// nitro::Error for a llama.cpp flag nitro does not have (or `command` does not take), with what
/// to use instead. Arguments the table does not know are returned unchanged.
std::vector<std::string> rewrite_llama_flags(const std::string& command, const std::vector<std::string>& args,
                                             const CommandOptions& options);

/// One row of the table, for docs and tests: the llama.cpp spellings, the nitro option they
/// become ("" when nitro has none) and, when nitro has none, what to use instead.
struct LlamaFlagInfo {
    std::vector<std::string> spellings;
    std::string nitro;
    std::string instead;
};
std::vector<LlamaFlagInfo> llama_flag_table();

}  // namespace nitro::cli
