#include "cli/hf_option.h"

#include "arch/summary.h"
#include "core/error.h"
#include "hub/hub.h"

#include <cstdio>
#include <cstdlib>

namespace nitro::cli {

void add_hf_option(CLI::App* sub, std::string& spec) {
    sub->add_option("--hf-repo", spec,
                    "OWNER/NAME[:QUANT] (also -hf): the model from Hugging Face, e.g. ggml-org/gpt-oss-20b-GGUF or "
                    "unsloth/Qwen3-30B-A3B-GGUF:Q4_K_M (quant picked as llama.cpp does: Q4_K_M, then Q8_0, then the "
                    "first GGUF), or OWNER/NAME:FILE.gguf; downloaded into the Hugging Face cache on first use "
                    "(nitro pull, docs/models.md)");
}

void resolve_hf_model(const std::string& spec, std::string& model) {
    if (spec.empty()) return;
    const char* env_model = std::getenv("NITRO_MODEL");
    if (!model.empty() && !(env_model && model == env_model))
        fail("-m {} and -hf {} name two models: give one of them", model, spec);
    const hub::PullResult r = hub::pull(spec);
    std::fprintf(stderr, "model: %s (%s%s)\n", r.path.c_str(), format_bytes(r.bytes).c_str(),
                 r.downloaded ? ", downloaded" : r.offline ? ", cached; offline" : ", cached");
    model = r.path;
}

}  // namespace nitro::cli
