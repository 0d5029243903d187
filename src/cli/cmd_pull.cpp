// nitro pull OWNER/NAME[:QUANT|:FILE.gguf]: download a GGUF model from Hugging Face into the
// Hugging Face cache (src/hub/hub.h), print the path of the file to open. docs/models.md.
#include "arch/summary.h"
#include "cli/commands.h"
#include "hub/hub.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>

namespace nitro::cli {

Action add_pull(CLI::App& app) {
    struct Opts {
        std::string spec;
        bool json = false;
    };
    auto o = std::make_shared<Opts>();
    CLI::App* sub = app.add_subcommand(
        "pull", "Download a GGUF model from Hugging Face into its cache (resumable, checked) and print its path");
    sub->add_option("model", o->spec,
                    "OWNER/NAME[:QUANT] or OWNER/NAME:FILE.gguf, e.g. ggml-org/gpt-oss-20b-GGUF, "
                    "unsloth/Qwen3-30B-A3B-GGUF:Q4_K_M (no quant: Q4_K_M, then Q8_0, then the first GGUF, as llama.cpp's "
                    "-hf). Environment: HF_TOKEN (gated or private repositories), HF_HOME / HF_HUB_CACHE (the cache), "
                    "HF_ENDPOINT (the Hub), HF_HUB_OFFLINE=1 (the cache only)")
        ->required();
    sub->add_flag("--json", o->json, "Print {path, files, commit, bytes, downloaded, offline} as JSON instead of the path");
    return [o]() {
        const hub::PullResult r = hub::pull(o->spec);
        if (o->json) {
            const nlohmann::json j = {{"path", r.path},   {"files", r.files},           {"commit", r.commit},
                                      {"bytes", r.bytes}, {"downloaded", r.downloaded}, {"offline", r.offline}};
            std::puts(j.dump().c_str());
            return 0;
        }
        std::fprintf(stderr, "%s: %zu file%s, %s (%s)\n", o->spec.c_str(), r.files.size(), r.files.size() == 1 ? "" : "s",
                     format_bytes(r.bytes).c_str(),
                     r.downloaded ? ("downloaded " + format_bytes(r.downloaded)).c_str()
                     : r.offline  ? "in the cache; offline"
                                  : "already in the cache");
        std::puts(r.path.c_str());  // stdout: the path alone, for `nitro run -m "$(nitro pull ...)"`
        return 0;
    };
}

}  // namespace nitro::cli
