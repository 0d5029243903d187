#include "cli/engine_options.h"
#include "cli/validators.h"
#include "core/error.h"
#include "cache/expert_cache.h"

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
    sub->add_option(
           "--vram-budget", o.gpu.vram_budget_gib,
           "GPU memory budget for the whole process, GiB (0 = free memory minus a margin); startup fails clearly if "
           "the dense core does not fit")
        ->check(number_in(0.0, 1.0e6))
        ->capture_default_str()
        ->envname("NITRO_VRAM_BUDGET");
    CLI::Option* cpu_moe =
        sub->add_flag("--cpu-moe", o.gpu.cpu_moe, "Keep every routed expert on the CPU (llama.cpp --cpu-moe)");
    // Both at once: llama.cpp's --cpu-moe overrides every layer, so its --n-cpu-moe does nothing;
    // an error says so instead of silently dropping one.
    sub->add_option(
           "--n-cpu-moe", o.gpu.n_cpu_moe,
           "Keep the routed experts of the first N layers on the CPU, the others on the GPU (llama.cpp --n-cpu-moe)")
        ->capture_default_str()
        ->check(integer_at_least(0))
        ->excludes(cpu_moe);
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
    add_residency_options(sub, o.gpu.adapt);
    const char* g = "Prompt processing (hybrid)";
    sub->add_option_function<std::string>(
           "--prefill-cost-model", [&o](const std::string& v) { o.gpu.prefill_mode = parse_prefill_cost_mode(v); },
           "Where the off-GPU experts of a prompt chunk are computed: auto (a cost model fed by rates measured at start-up "
           "stages the experts with many tokens to the GPU over PCIe and leaves the rest to the CPU, both at once; -v prints "
           "its decisions), cpu (all on the CPU), stage (all staged)")
        ->default_str("auto")
        ->check(CLI::IsMember({"auto", "cpu", "stage"}))
        ->envname("NITRO_PREFILL_COST_MODEL")
        ->group(g);
    sub->add_option("--prefill-stage-slots", o.gpu.prefill_stage_slots,
                    "VRAM scratch slots (one expert each) that staged experts are copied into; counted in the budget; 0 = "
                    "never stage")
        ->capture_default_str()
        ->check(CLI::Range(0, 64))
        ->group(g);
    sub->add_option("--prefill-stage-buffers", o.gpu.prefill_stage_buffers,
                    "Pinned host buffers (one expert each) the staging pipeline fills from the model file (never the whole "
                    "model; pageable, with a warning, if pinning fails)")
        ->capture_default_str()
        ->check(CLI::Range(1, 64))
        ->group(g);
    sub->add_option("--prefill-group", o.gpu.prefill_group,
                    "Tokens of a layer-major prompt group: each layer runs every -u block of the group, then the experts "
                    "of all of them at once, so a staged expert crosses PCIe once per layer per group (its buffers are "
                    "counted in the budget, about 104 KB per token for gpt-oss-120b); -1 = auto (4 x -u, at most an eighth "
                    "of the budget; never more than -c), 0 = off (each block alone)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{-1}, int64_t{1} << 24))
        ->envname("NITRO_PREFILL_GROUP")
        ->group(g);
    sub->add_option("--prefill-pin", o.gpu.prefill_pin_gib,
                    "GiB of the off-GPU experts' pages in the model file to page-lock in place (CUDA host registration) "
                    "at start-up, so prompts copy those experts straight from the file over PCIe instead of through the "
                    "CPU-filled pinned buffers (a third of the DRAM traffic); that much RAM cannot be swapped or trimmed "
                    "while nitro runs (start-up registers 10-16 GiB/s, MEASURED); -1 = auto (min(off-GPU experts, RAM / 4, "
                    "available RAM / 2)), 0 = none. If the driver refuses, a warning and the buffers for the rest")
        ->capture_default_str()
        ->check(CLI::Range(-1.0, 1e6))
        ->envname("NITRO_PREFILL_PIN")
        ->group(g);
    sub->add_option("--prefill-stage-threads", o.gpu.prefill_stage_threads,
                    "Threads that copy staged experts from the model file into the pinned buffers (0 = the engine's "
                    "threads, -t); in a layer that also leaves experts to the CPU, half of them fill and the CPU share "
                    "runs on the rest")
        ->capture_default_str()
        ->check(CLI::Range(0, 256))
        ->group(g);
}

void add_residency_options(CLI::App* sub, ResidencyOptions& o) {
    const char* g = "Adaptive residency (hybrid)";
    sub->add_option("--cache-policy", o.policy,
                    "Which adaptive expert a missed one displaces: lru, lfu, lru-freq, freq-decay[:HALF_LIFE_TOKENS]")
        ->capture_default_str()
        ->check(CLI::Validator(
            [](std::string& name) -> std::string {
                try {
                    (void)make_eviction_policy(name, 2, 1);  // throws for an unknown policy or a bad half-life
                } catch (const Error& e) {
                    return e.what();
                }
                return {};
            },
            "POLICY"))
        ->envname("NITRO_CACHE_POLICY")
        ->group(g);
    sub->add_option("--static-slots", o.static_share,
                    "Share of each layer's VRAM slots that are static (the plan's first experts: hot set or even), never "
                    "evicted; the rest follow the routing")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 1.0))
        ->envname("NITRO_STATIC_SLOTS")
        ->group(g);
    sub->add_option("--refresh-every", o.refresh_every,
                    "Residency may change once per window of this many tokens (the rate limit's window); 0 = frozen "
                    "residency (no admissions: bit-exact A/B runs)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber)
        ->envname("NITRO_REFRESH_EVERY")
        ->group(g);
    sub->add_option("--admit-per-token", o.admit_per_token,
                    "Admissions per layer per token: each window admits at most max(1, round(A x --refresh-every)) missed "
                    "experts per layer, copied to VRAM as the CPU computes them (copy-on-compute)")
        ->capture_default_str()
        ->check(CLI::PositiveNumber)
        ->envname("NITRO_ADMIT_PER_TOKEN")
        ->group(g);
    sub->add_option("--prefill-weight", o.prefill_weight,
                    "Weight of a prompt chunk in decode tokens: it may admit and refresh only its round(W x n_expert_used) "
                    "most selected experts, so a long prompt cannot flush the decode working set; 0 = prompts never "
                    "change residency")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber)
        ->envname("NITRO_PREFILL_WEIGHT")
        ->group(g);
    sub->add_option("--staging-buffers", o.staging_buffers,
                    "Pinned staging buffers, one expert each (the most admissions one step can start; never the whole "
                    "model). Fewer are used, with a warning, if pinning fails")
        ->capture_default_str()
        ->check(CLI::Range(1, 4096))
        ->envname("NITRO_STAGING_BUFFERS")
        ->group(g);
}

EngineMode engine_mode(const EngineCli& o) { return parse_engine_mode(o.mode); }

void check_mode_available(EngineMode mode) {
    require_gpu_engine(mode);
    if ((mode == EngineMode::Gpu || mode == EngineMode::Hybrid) && gpu_device_count() == 0)
        fail("--mode {} needs a CUDA device, and none was found (no NVIDIA driver, or no visible GPU); --mode cpu or auto "
             "runs on the CPU",
             engine_mode_name(mode));
}

}  // namespace nitro::cli
