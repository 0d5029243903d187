#include "runtime/engine.h"

#include "core/error.h"
#include "core/text.h"
#include "core/user_file.h"
#include "runtime/session.h"

#include <fmt/format.h>

#include <cstdio>
#include <string_view>

namespace nitro {

namespace {

GpuEngineFactory& gpu_factory() {
    static GpuEngineFactory f;
    return f;
}
std::function<int()>& gpu_devices() {
    static std::function<int()> f;
    return f;
}
std::function<double(uint64_t)>& gpu_h2d_probe() {
    static std::function<double(uint64_t)> f;
    return f;
}

}  // namespace

void Engine::eval_batch(const SeqBatch& b, std::vector<float>& logits) {
    if (b.seq.size() != b.tokens.size()) fail("eval_batch: {} tokens but {} sequence ids", b.tokens.size(), b.seq.size());
    if (!b.logits.empty() && b.logits.size() != b.tokens.size())
        fail("eval_batch: {} tokens but {} logits flags", b.tokens.size(), b.logits.size());
    for (size_t i = 0; i < b.seq.size(); ++i)
        if (b.seq[i] != 0) fail("eval_batch: row {} names sequence {} but this engine ({}) holds one sequence", i, b.seq[i], describe());
    // Which rows want logits: none, only the last (one eval as today), or others (all, then pick).
    size_t n_want = 0;
    for (uint8_t f : b.logits) n_want += f != 0;
    const bool only_last = n_want == 1 && b.logits.back() != 0;
    if (n_want == 0 || only_last) {
        eval(b.tokens, false, logits);
        if (n_want == 0) logits.clear();
        return;
    }
    std::vector<float> all;
    eval(b.tokens, true, all);
    const size_t V = all.size() / b.tokens.size();
    logits.clear();
    for (size_t i = 0; i < b.tokens.size(); ++i)
        if (b.logits[i]) logits.insert(logits.end(), all.begin() + static_cast<long>(i * V), all.begin() + static_cast<long>((i + 1) * V));
}

int64_t Engine::seq_n_past(int seq) const {
    if (seq != 0) fail("sequence {} does not exist: this engine ({}) holds one sequence", seq, describe());
    return n_past();
}

void Engine::seq_truncate(int seq, int64_t n) {
    if (seq != 0) fail("sequence {} does not exist: this engine ({}) holds one sequence", seq, describe());
    truncate(n);
}

void set_gpu_engine_factory(GpuEngineFactory f, std::function<int()> device_count, std::function<double(uint64_t)> h2d_gb_s) {
    gpu_factory() = std::move(f);
    gpu_devices() = std::move(device_count);
    gpu_h2d_probe() = std::move(h2d_gb_s);
}
double gpu_h2d_gb_s(uint64_t bytes) { return gpu_h2d_probe() && gpu_device_count() > 0 ? gpu_h2d_probe()(bytes) : 0.0; }
bool gpu_engine_available() { return static_cast<bool>(gpu_factory()); }
int gpu_device_count() { return gpu_devices() ? gpu_devices()() : 0; }

EngineMode parse_engine_mode(const std::string& s) {
    if (s == "cpu") return EngineMode::Cpu;
    if (s == "gpu") return EngineMode::Gpu;
    if (s == "hybrid") return EngineMode::Hybrid;
    if (s == "auto") return EngineMode::Auto;
    fail("unknown --mode '{}' (expected cpu, gpu, hybrid or auto)", s);
}

const char* engine_mode_name(EngineMode m) {
    switch (m) {
        case EngineMode::Cpu: return "cpu";
        case EngineMode::Gpu: return "gpu";
        case EngineMode::Hybrid: return "hybrid";
        case EngineMode::Auto: return "auto";
    }
    return "?";
}

PlacementOptions placement_options(const GpuOptions& go, double budget_gib, uint64_t runtime_overhead_bytes, const HotSet* hot) {
    PlacementOptions po;
    po.vram_budget_gib = budget_gib;
    po.cpu_moe = go.cpu_moe;
    po.n_cpu_moe = go.n_cpu_moe;
    for (const std::string& o : go.override_tensor) po.overrides.push_back(parse_tensor_override(o));
    if (go.residency == "auto") po.source = ResidencySource::Auto;
    else if (go.residency == "hot-set") po.source = ResidencySource::HotSet;
    else if (go.residency == "even") po.source = ResidencySource::Even;
    else if (go.residency == "layers") po.source = ResidencySource::Layers;
    else fail("--residency '{}': expected auto, hot-set, even or layers", go.residency);
    po.hot_set = hot;
    po.prefill_stage_slots = go.prefill_mode == PrefillCostMode::Cpu ? 0 : go.prefill_stage_slots;
    po.prefill_group = go.prefill_group;
    po.runtime_overhead_bytes = runtime_overhead_bytes;
    return po;
}

void ExpertLayerCounters::add(const ExpertLayerCounters& o) {
    gpu_pairs += o.gpu_pairs;
    cpu_pairs += o.cpu_pairs;
    cpu_experts += o.cpu_experts;
    cpu_bytes += o.cpu_bytes;
    cpu_ms += o.cpu_ms;
    cpu_decode_ms += o.cpu_decode_ms;
    gpu_ms += o.gpu_ms;
    wait_ms += o.wait_ms;
    prompt_resident_experts += o.prompt_resident_experts;
    prompt_cpu_experts += o.prompt_cpu_experts;
    staged_experts += o.staged_experts;
    staged_pairs += o.staged_pairs;
    staged_bytes += o.staged_bytes;
    staged_in_place += o.staged_in_place;
    stage_ms += o.stage_ms;
    prompt_cpu_ms += o.prompt_cpu_ms;
    prompt_idle_ms += o.prompt_idle_ms;
    cache.add(o.cache);
}

ExpertLayerCounters ExpertCounters::total() const {
    ExpertLayerCounters t;
    for (const auto& L : layers) t.add(L);
    return t;
}

void require_gpu_engine(EngineMode mode) {
    if ((mode == EngineMode::Gpu || mode == EngineMode::Hybrid) && !gpu_engine_available())
        fail("--mode {} needs a build with the CUDA backend (configure with -DNITRO_CUDA=ON); this nitro was built without it",
             engine_mode_name(mode));
}

namespace {

/// "a", "a and b", "a, b and c".
std::string join_and(const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i == 0 ? "" : i + 1 == v.size() ? " and " : ", ") + v[i];
    return s;
}

/// The GPU placement flags (--cpu-moe, --n-cpu-moe, -ot, --hot-set) given to a run on the CPU engine
/// (`why`: --mode cpu, no CUDA backend, no device): one warning line on stderr naming them, not an
/// error (scripts share flags across machines, as with llama.cpp); another for the device flags
/// (--gpu N other than 0, --vram-budget). A --hot-set file that cannot be read is still an error
/// naming it.
void warn_placement_flags_ignored(const GpuOptions& go, std::string_view why) {
    // A hot-set file that cannot be read is a mistake whatever the engine (the GPU engine reads it).
    if (!go.hot_set.empty()) check_user_file(go.hot_set, "--hot-set");
    std::vector<std::string> device;
    if (go.device != 0) device.push_back(fmt::format("--gpu {}", go.device));
    if (go.vram_budget_gib > 0) device.push_back(fmt::format("--vram-budget {:g}", go.vram_budget_gib));
    if (!device.empty())
        std::fprintf(stderr, "warning: %s %s no effect on the CPU engine (%.*s)\n", join_and(device).c_str(),
                     device.size() == 1 ? "has" : "have", static_cast<int>(why.size()), why.data());
    std::vector<std::string> given;
    if (go.cpu_moe) given.emplace_back("--cpu-moe");
    if (go.n_cpu_moe != 0) given.emplace_back("--n-cpu-moe");
    if (!go.override_tensor.empty()) given.emplace_back("-ot/--override-tensor");
    if (!go.hot_set.empty()) given.emplace_back("--hot-set");
    if (given.empty()) return;
    const std::string list = join_and(given);
    const bool one = given.size() == 1;
    std::fprintf(stderr, "warning: %s %s no effect on the CPU engine (%.*s): %s experts between GPU and CPU\n",
                 list.c_str(), one ? "has" : "have", static_cast<int>(why.size()), why.data(),
                 one ? "it places" : "they place");
}

}  // namespace

std::unique_ptr<Engine> make_engine(EngineMode mode, const Model& model, const SessionOptions& so, const GpuOptions& go) {
    if (mode == EngineMode::Cpu) {
        warn_placement_flags_ignored(go, "--mode cpu");
        return std::make_unique<Session>(model, so);
    }
    if (mode == EngineMode::Auto) {
        if (!gpu_engine_available() || gpu_device_count() == 0) {
            warn_placement_flags_ignored(
                go, !gpu_engine_available() ? "this nitro was built without the CUDA backend" : "no CUDA device found");
            return std::make_unique<Session>(model, so);
        }
        GpuOptions g = go;
        g.mode = EngineMode::Auto;
        return gpu_factory()(model, so, g);
    }
    require_gpu_engine(mode);
    GpuOptions g = go;
    g.mode = mode;
    return gpu_factory()(model, so, g);
}

}  // namespace nitro
