#include "cli/llama_compat.h"

#include "cli/validators.h"
#include "core/error.h"

#include <cstdio>
#include <thread>

namespace nitro::cli {

namespace {

const char* kGroup = "llama.cpp flags (docs/cli.md)";

/// -ngl's value: an integer >= -1, "auto" or "all" (llama.cpp's forms).
CLI::Validator gpu_layers_value() {
    return CLI::Validator(
        [](std::string& s) -> std::string {
            if (s == "auto" || s == "all") return {};
            long long v = 0;
            if (!CLI::detail::lexical_cast(s, v) || v < -1)
                return fmt::format("'{}' is not a layer count (an integer >= 0, -1, auto or all)", s);
            return {};
        },
        "N|auto|all");
}

}  // namespace

void add_llama_compat_options(CLI::App* sub, LlamaCompat& c, const LlamaCompatSet& which) {
    if (which.placement)
        sub->add_option("--n-gpu-layers,--gpu-layers", c.n_gpu_layers,
                        "llama.cpp's -ngl N: 0 = nothing on the GPU (--mode cpu); any other value (99, all, auto) = nitro's "
                        "placement: the dense core of every layer on the GPU and as many experts as --vram-budget holds, the "
                        "others computed by the CPU (llama.cpp's `-ngl 99 --n-cpu-moe N` is `--n-cpu-moe N` here)")
            ->check(gpu_layers_value())
            ->group(kGroup);
    if (which.attention)
        sub->add_option("--flash-attn", c.flash_attn,
                        "llama.cpp's -fa on|off|auto: nitro's attention is always fused (flash attention: tiles of keys, "
                        "online softmax, no score matrix), on the CPU and the GPU; off prints a warning and changes nothing")
            ->check(CLI::IsMember({"on", "off", "auto", "1", "0", "true", "false"}))
            ->capture_default_str()
            ->group(kGroup);
    if (which.batch)
        sub->add_option("-b,--batch-size", c.batch_size,
                        "llama.cpp's logical batch, tokens: nitro hands the whole prompt to the engine in chunks of -u "
                        "tokens, so -b N only caps -u at N (llama.cpp's ubatch <= batch)")
            ->check(integer_at_least(1))
            ->group(kGroup);
    if (which.threads)
        c.threads_batch_opt =
            sub->add_option("--threads-batch", c.threads_batch,
                            "llama.cpp's -tb N (threads for prompts): nitro runs prompts and decode on one team of -t "
                            "threads; a -tb other than -t warns and is ignored")
                ->check(CLI::Range(1, 65536))
                ->group(kGroup);
    if (which.cache_types) {
        sub->add_option("--cache-type-k", c.cache_type_k, "K cache element type (llama.cpp's -ctk): f16 (q8_0, q4_0: not yet)")
            ->capture_default_str()
            ->group(kGroup);
        sub->add_option("--cache-type-v", c.cache_type_v, "V cache element type (llama.cpp's -ctv): f16 (q8_0, q4_0: not yet)")
            ->capture_default_str()
            ->group(kGroup);
    }
    if (which.chat_template) {
        sub->add_flag("--jinja", c.jinja,
                      "Accepted for llama.cpp users; changes nothing: nitro renders the model's chat format (harmony, ChatML) "
                      "exactly as its official Jinja template does, always. --chat-template-file is refused: nitro has no "
                      "Jinja engine")
            ->group(kGroup);
        sub->add_flag("--no-jinja", c.no_jinja, "Accepted for llama.cpp users; changes nothing (see --jinja)")->group(kGroup);
    }
}

std::string check_cache_type(const std::string& flag, const std::string& value) {
    if (value == "f16") return value;
    if (value == "q8_0" || value == "q4_0")
        fail("{} {}: a {} K/V cache is not yet supported by nitro's engines; use f16 (the default)", flag, value, value);
    static const char* llama_types[] = {"f32", "bf16", "q4_1", "iq4_nl", "q5_0", "q5_1"};
    for (const char* t : llama_types)
        if (value == t) fail("{} {}: nitro's K/V cache is f16 (q8_0 and q4_0 are not yet supported); {} is not", flag, value, value);
    fail("{} '{}' is not a K/V cache type (llama.cpp's are f16, bf16, f32, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1; nitro's: f16)",
         flag, value);
}

void resolve_llama_compat(const LlamaCompat& c, EngineCli* engine, SessionOptions& session) {
    check_cache_type("-ctk/--cache-type-k", c.cache_type_k);
    check_cache_type("-ctv/--cache-type-v", c.cache_type_v);
    session.cache_type_k = c.cache_type_k;
    session.cache_type_v = c.cache_type_v;
    if (!c.n_gpu_layers.empty() && c.n_gpu_layers == "0" && engine) {
        if (engine->mode != "auto" && engine->mode != "cpu")
            fail("-ngl 0 keeps every layer off the GPU, but --mode {} asks for the GPU; give one of them", engine->mode);
        engine->mode = "cpu";
    }
    if (c.flash_attn == "off" || c.flash_attn == "0" || c.flash_attn == "false")
        std::fprintf(stderr, "warning: -fa %s changes nothing: nitro's attention is always fused (flash attention)\n",
                     c.flash_attn.c_str());
    if (c.batch_size > 0 && session.n_ubatch > c.batch_size) session.n_ubatch = c.batch_size;
    if (c.threads_batch_opt && c.threads_batch_opt->count() > 0) {
        const int team = session.n_threads > 0 ? session.n_threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
        if (c.threads_batch != team)
            std::fprintf(stderr,
                         "warning: -tb %d is ignored: nitro runs prompts and decode on one team of -t threads (%d here); give "
                         "-t %d to use %d\n",
                         c.threads_batch, team, c.threads_batch, c.threads_batch);
    }
}

}  // namespace nitro::cli
