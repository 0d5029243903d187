// The options of every command that runs a model (nitro run, serve, bench, plan): where it runs
// and how routed experts are placed, one table with help text, defaults, units and environment
// mirrors. The placement flags are llama.cpp's (common/arg.cpp): --cpu-moe, --n-cpu-moe N,
// -ot/--override-tensor REGEX=DEVICE.
#pragma once

#include "runtime/engine.h"

#include <CLI/CLI.hpp>

#include <string>

namespace nitro::cli {

struct EngineCli {
    std::string mode = "auto";  ///< --mode
    GpuOptions gpu;
};

/// Adds --mode, --gpu, --vram-budget, --cpu-moe, --n-cpu-moe, -ot/--override-tensor, --hot-set,
/// --residency, --no-graphs to `sub`. with_mode = false leaves out --mode and --gpu (nitro plan).
void add_engine_options(CLI::App* sub, EngineCli& o, bool with_mode = true);

/// Adds the adaptive-residency flags (--cache-policy, --static-slots, --refresh-every,
/// --admit-per-token, --prefill-weight, --staging-buffers; cache/expert_cache.h) to `sub`.
/// add_engine_options calls it; `nitro sim` uses it for the same model of the engine.
void add_residency_options(CLI::App* sub, ResidencyOptions& o);

/// The engine mode of the parsed options (throws nitro::Error for an unknown --mode).
EngineMode engine_mode(const EngineCli& o);

/// Throws nitro::Error when `mode` (gpu, hybrid) needs the CUDA backend or a CUDA device this
/// machine lacks: a check made before the model is opened.
void check_mode_available(EngineMode mode);

}  // namespace nitro::cli
