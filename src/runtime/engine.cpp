#include "runtime/engine.h"

#include "core/error.h"

#include <fmt/format.h>

namespace nitro {

namespace {

GpuEngineFactory& gpu_factory() {
    static GpuEngineFactory f;
    return f;
}

/// The CPU reference behind the Engine interface.
class CpuEngine final : public Engine {
public:
    CpuEngine(const Model& m, const SessionOptions& so) : s_(m, so) {}
    void eval(std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits) override {
        s_.eval(tokens, all_logits, logits);
    }
    int64_t n_past() const override { return s_.n_past(); }
    int64_t n_ctx() const override { return s_.n_ctx(); }
    void truncate(int64_t n) override { s_.truncate(n); }
    std::string describe() const override {
        return fmt::format("cpu ({} threads, {} kernels)", const_cast<Session&>(s_).pool().size(), cpu::kernel_isa());
    }
    uint64_t kv_host_bytes() const override { return s_.kv_cache().bytes(); }
    bool set_route_callback(std::function<void(const RouteEvent&)> cb) override {
        s_.on_route = std::move(cb);
        return true;
    }

private:
    Session s_;
};

}  // namespace

void set_gpu_engine_factory(GpuEngineFactory f) { gpu_factory() = std::move(f); }
bool gpu_engine_available() { return static_cast<bool>(gpu_factory()); }

EngineMode parse_engine_mode(const std::string& s) {
    if (s == "cpu") return EngineMode::Cpu;
    if (s == "gpu") return EngineMode::Gpu;
    fail("unknown --mode '{}' (expected cpu or gpu)", s);
}

std::unique_ptr<Engine> make_engine(EngineMode mode, const Model& model, const SessionOptions& so, const GpuOptions& go) {
    if (mode == EngineMode::Cpu) return std::make_unique<CpuEngine>(model, so);
    if (!gpu_engine_available())
        fail("--mode gpu needs a build with the CUDA backend (configure with -DNITRO_CUDA=ON); this nitro was built without it");
    return gpu_factory()(model, so, go);
}

}  // namespace nitro
