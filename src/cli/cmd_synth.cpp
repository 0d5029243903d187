// nitro synth --arch gpt-oss|qwen3moe|qwen3next|qwen35moe --preset NAME [--type T] [--dense-type T] [--vocab-from FILE | --tokenizer DIR]
//             [--router-skew zipf:S] [--seed S] [-t THREADS] -o OUT.gguf
#include "arch/summary.h"
#include "arch/synth.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "core/error.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <memory>

#include <unistd.h>

namespace nitro::cli {

Action add_synth(CLI::App& app) {
    struct Opts {
        SynthOptions s;
        std::string type;
        std::string dense_type;
        std::string skew;
    };
    auto o = std::make_shared<Opts>();
    CLI::App* sub = app.add_subcommand("synth", "Write a GGUF of a real model's shapes with random weights "
                                                "(streamed: no RAM needed for the model's size)");
    CLI::Option* arch_opt = sub->add_option(
        "--arch", o->s.arch,
        "Architecture: gpt-oss, qwen3moe, qwen3next or qwen35moe (default: the one the --preset belongs to; gpt-oss for tiny)");
    sub->add_option("--preset", o->s.preset,
                    "Shape preset: tiny (every arch), gpt-oss-20b, gpt-oss-120b, qwen3-30b-a3b, qwen3-next-80b-a3b, qwen3.5-35b-a3b")
        ->capture_default_str();
    sub->add_option("--type", o->type, "Routed-expert weight type (mxfp4, q8_0, q4_0, q4_k, q5_k, q6_k, iq4_xs, f16...); "
                                       "default mxfp4 for gpt-oss, q8_0 for the qwen architectures");
    sub->add_option("--dense-type", o->dense_type,
                    "Weight type of the dense matrices (attention, DeltaNet projections, shared expert): f16 (default), "
                    "bf16, q8_0, q6_k...; embeddings and LM head stay q8_0");
    sub->add_option("--vocab-from", o->s.vocab_from, "Copy the tokenizer (tokenizer.* keys) from this GGUF");
    sub->add_option("--tokenizer", o->s.tokenizer_dir,
                    "Take the tokenizer from a Hugging Face folder (tokenizer.json; optional tokenizer_config.json, "
                    "config.json, chat_template.jinja), written as convert_hf_to_gguf.py would");
    sub->add_option("--router-skew", o->skew,
                    "zipf:S - bias routing towards a fixed random Zipf popularity of experts per layer "
                    "(gpt-oss: router bias -S ln(rank+1); qwen3moe: router row scaled by (rank+1)^-S)");
    sub->add_option("--seed", o->s.seed, "Random seed")->capture_default_str();
    sub->add_option("-t,--threads", o->s.n_threads, "Generating threads (0 = all cores, up to 16); the file does not depend on it")
        ->capture_default_str()
        ->envname("NITRO_THREADS");
    sub->add_option("-o,--output", o->s.out, "Output GGUF path")->required();
    return [o, arch_opt]() {
        // The architecture of a preset that belongs to one (gpt-oss-120b, qwen3-30b-a3b, ...).
        if (arch_opt->count() == 0) {
            const std::vector<std::string> archs = synth_archs_with_preset(o->s.preset);
            if (archs.size() == 1) o->s.arch = archs[0];
        }
        if (!o->type.empty()) {
            auto t = type_from_name(o->type);
            if (!t) fail("nitro synth: unknown weight type '{}'", o->type);
            o->s.expert_type = *t;
        }
        if (!o->dense_type.empty()) {
            auto t = type_from_name(o->dense_type);
            if (!t) fail("nitro synth: unknown weight type '{}' (--dense-type)", o->dense_type);
            o->s.dense_type = *t;
        }
        if (!o->skew.empty()) {
            const std::string p = "zipf:";
            char* end = nullptr;
            const double v = o->skew.rfind(p, 0) == 0 ? std::strtod(o->skew.c_str() + p.size(), &end) : -1;
            if (!end || *end != '\0' || end == o->skew.c_str() + p.size() || !(v >= 0) || !std::isfinite(v))
                fail("nitro synth: --router-skew expects zipf:S with a number S >= 0, got '{}'", o->skew);
            o->s.router_skew = v;
        }
        // A live line with rate and time left on a terminal, a line per 10% in logs.
        ProgressLine progress("synth:", ::isatty(2), 10);
        synth_model(o->s, [&](uint64_t done, uint64_t total) { progress.update(done, total); });
        progress.finish();
        std::fprintf(stderr, "synth: wrote %s in %.1f s\n", o->s.out.c_str(), progress.elapsed_s());
        return 0;
    };
}

}  // namespace nitro::cli
