// The options nitro declares for llama.cpp's flags that have no nitro meaning of their own
// (docs/cli.md "Coming from llama.cpp"): -ngl, -fa, -b, -tb, -ctk/-ctv, --jinja. Each is one
// table row with its help text saying what it does in nitro; resolve_llama_compat() turns them
// into nitro's settings (or a warning, or an error naming the flag) after parsing.
// cli/llama_flags.h rewrites llama.cpp's multi-letter spellings into these long names.
#pragma once

#include "cli/engine_options.h"

#include <CLI/CLI.hpp>

#include <string>

namespace nitro::cli {

struct LlamaCompat {
    std::string n_gpu_layers;      ///< --n-gpu-layers (-ngl): "" = not given
    std::string flash_attn = "auto";  ///< --flash-attn (-fa): on|off|auto (nitro's attention is always fused)
    int64_t batch_size = 0;        ///< --batch-size (-b): 0 = not given
    int threads_batch = 0;         ///< --threads-batch (-tb): 0 = not given
    std::string cache_type_k = "f16", cache_type_v = "f16";  ///< --cache-type-k/-v (-ctk/-ctv)
    bool jinja = false, no_jinja = false;
    // Set by add_llama_compat_options, read by resolve_llama_compat.
    CLI::Option* threads_batch_opt = nullptr;
};

/// What a command takes: run, chat and serve take all; plan takes -b, -ctk/-ctv (it counts the
/// K/V cache); bench takes -fa.
struct LlamaCompatSet {
    bool placement = true;  ///< -ngl
    bool attention = true;  ///< -fa
    bool batch = true;      ///< -b
    bool threads = true;    ///< -tb
    bool cache_types = true;  ///< -ctk/-ctv
    bool chat_template = true;  ///< --jinja/--no-jinja
};

void add_llama_compat_options(CLI::App* sub, LlamaCompat& c, const LlamaCompatSet& which = {});

/// Applies the parsed flags: -ngl 0 -> --mode cpu (an error against another --mode), -b N caps -u at
/// N (llama.cpp's n_ubatch <= n_batch), -tb other than -t and -fa off warn that nitro has no such
/// setting, -ctk/-ctv other than f16 are errors naming the flag. `engine` may be null (plan).
void resolve_llama_compat(const LlamaCompat& c, EngineCli* engine, SessionOptions& session);

/// The K/V cache type of -ctk/-ctv, checked: f16 is nitro's; q8_0 and q4_0 are not yet there;
/// anything else is an error naming the flag and the value.
std::string check_cache_type(const std::string& flag, const std::string& value);

}  // namespace nitro::cli
