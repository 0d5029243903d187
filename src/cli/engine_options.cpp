#include "cli/engine_options.h"

namespace nitro::cli {

void add_engine_options(CLI::App* sub, EngineCli& o, bool with_mode) {
    if (with_mode) {
        sub->add_option("--mode", o.mode,
                        "Where the model runs: auto (gpu if the model fits the VRAM budget, hybrid if not, cpu without a GPU), "
                        "cpu (reference), gpu (every expert in VRAM), hybrid (hot experts in VRAM, the rest on the CPU at the "
                        "same time)")
            ->capture_default_str()
            ->envname("NITRO_MODE");
        sub->add_option("--gpu", o.gpu.device, "CUDA device index")->capture_default_str();
        sub->add_flag("--no-graphs", [&o](int64_t) { o.gpu.graphs = false; }, "Do not capture decode steps as CUDA graphs");
    }
    sub->add_option("--vram-budget", o.gpu.vram_budget_gib,
                    "GPU memory budget for the whole process, GiB (0 = free memory minus a margin); startup fails clearly if "
                    "the dense core does not fit")
        ->check(CLI::Range(0.0, 1.0e6))
        ->capture_default_str()
        ->envname("NITRO_VRAM_BUDGET");
    sub->add_flag("--cpu-moe", o.gpu.cpu_moe, "Keep every routed expert on the CPU (llama.cpp --cpu-moe)");
    sub->add_option("--n-cpu-moe", o.gpu.n_cpu_moe,
                    "Keep the routed experts of the first N layers on the CPU, the others on the GPU (llama.cpp --n-cpu-moe)")
        ->capture_default_str();
    sub->add_option("--override-tensor", o.gpu.override_tensor,
                    "REGEX=DEVICE (also -ot): tensors whose name matches go to DEVICE (CPU, GPU/CUDA0); repeatable or "
                    "comma-separated, first match wins (llama.cpp -ot). Only routed experts (ffn_*_exps) may go to the CPU")
        ->delimiter(',');
    sub->add_option("--hot-set", o.gpu.hot_set,
                    "Hot-set file (nitro sim TRACE --write-hot-set FILE): the experts most selected per layer, resident first");
    sub->add_option("--residency", o.gpu.residency,
                    "Which experts fill the VRAM slots: auto (hot set if given, else even), hot-set, even (same count per "
                    "layer), layers (whole layers, last first)")
        ->capture_default_str()
        ->check(CLI::IsMember({"auto", "hot-set", "even", "layers"}));
}

EngineMode engine_mode(const EngineCli& o) { return parse_engine_mode(o.mode); }

}  // namespace nitro::cli
