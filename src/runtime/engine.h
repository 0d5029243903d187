// The engine a front end drives: the CPU reference (runtime/session.h) or the GPU-all CUDA
// session (src/cuda/gpu_session.h), chosen by --mode. Both evaluate tokens the same way:
// eval(tokens, all_logits, logits) appends `tokens` to the sequence and returns logits.
//
// nitro_lib has no CUDA code: a CUDA build registers its factory at start-up
// (nitro::cuda::register_engine(), called from the CLI's main), and --mode gpu in a build
// without CUDA is a clear error.
#pragma once

#include "runtime/model.h"
#include "runtime/session.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace nitro {

enum class EngineMode { Cpu, Gpu };

/// Options of the GPU engine (ignored in CPU mode).
struct GpuOptions {
    int device = 0;                 ///< --gpu N
    double vram_budget_gib = 0;     ///< --vram-budget GiB; 0 = free memory minus a margin
    bool graphs = true;             ///< capture decode steps as CUDA graphs
    bool progress = true;           ///< load progress bar on stderr
};

class Engine {
public:
    virtual ~Engine() = default;
    /// As Session::eval.
    virtual void eval(std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits) = 0;
    virtual int64_t n_past() const = 0;
    virtual int64_t n_ctx() const = 0;
    virtual void truncate(int64_t n) = 0;
    /// One line saying what runs where (printed by `nitro run`).
    virtual std::string describe() const = 0;
    /// Installs a callback for every (token, layer) routing decision once it is final (router
    /// traces). Returns false if this engine cannot report routing.
    virtual bool set_route_callback(std::function<void(const RouteEvent&)> cb) { return false; }
    /// Bytes of host memory held by the K/V cache (0 when it lives on the GPU).
    virtual uint64_t kv_host_bytes() const { return 0; }
};

using GpuEngineFactory =
    std::function<std::unique_ptr<Engine>(const Model&, const SessionOptions&, const GpuOptions&)>;

/// Installs the GPU engine factory (a CUDA build does this once at start-up).
void set_gpu_engine_factory(GpuEngineFactory f);
/// True when a GPU engine factory is installed.
bool gpu_engine_available();

/// Parses "cpu" / "gpu". Throws nitro::Error otherwise.
EngineMode parse_engine_mode(const std::string& s);

/// Makes the engine for `mode`. Throws nitro::Error for --mode gpu in a build without CUDA.
std::unique_ptr<Engine> make_engine(EngineMode mode, const Model& model, const SessionOptions& so,
                                    const GpuOptions& go);

}  // namespace nitro
