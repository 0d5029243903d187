// nitro plan [-m MODEL] --vram-budget GiB [-c CTX] [-u UBATCH] [placement flags] [--json]
// nitro plan --synth [ARCH:]PRESET[:TYPE] --vram-budget GiB ...   (a preset's shape, no file needed)
// Prints where every tensor and expert would live, without a GPU (runtime/placement.h).
#include "arch/arch.h"
#include "arch/summary.h"
#include "arch/synth.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/hf_option.h"
#include "cli/llama_compat.h"
#include "cli/validators.h"
#include "core/error.h"
#include "runtime/default_model.h"
#include "runtime/model.h"
#include "runtime/placement.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>

namespace nitro::cli {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

struct PlanCli {
    std::string model, synth, hf;
    SessionOptions session;
    EngineCli engine;
    double dram_gbps = 50.0;
    double runtime_mib = 700;
    bool json = false, layers = false, ctx_ladder = false;
    LlamaCompat compat;
};

/// The context ladder of issue 46 (4K to 256K, and the model's own limit): what each context costs
/// in VRAM and how many expert slots it leaves, for the same budget and options.
struct LadderStep {
    int64_t n_ctx = 0;
    bool fits = false;
    Plan plan;
    std::string why;  ///< the plan's error when it does not fit
};

std::vector<LadderStep> context_ladder(const ModelLayout& layout, int64_t max_ctx, const PlacementOptions& po) {
    std::vector<int64_t> steps;
    for (int64_t c : {4096, 16384, 32768, 65536, 131072, 262144})
        if (c < max_ctx) steps.push_back(c);
    steps.push_back(max_ctx);
    std::vector<LadderStep> out;
    for (int64_t c : steps) {
        LadderStep st;
        st.n_ctx = c;
        ModelLayout l = layout;
        set_context(l.spec, c);
        try {
            st.plan = plan_placement(l, po);
            st.fits = true;
        } catch (const Error& e) {
            st.why = e.what();
        }
        out.push_back(std::move(st));
    }
    return out;
}

/// "[ARCH:]PRESET[:TYPE]" -> a layout: "gpt-oss-120b", "gpt-oss:gpt-oss-120b:q4_k", "qwen3moe:tiny".
ModelLayout synth_from_arg(const std::string& arg, const SessionOptions& so) {
    std::vector<std::string> parts;
    for (size_t start = 0;;) {
        const size_t c = arg.find(':', start);
        parts.push_back(arg.substr(start, c == std::string::npos ? std::string::npos : c - start));
        if (c == std::string::npos) break;
        start = c + 1;
    }
    const bool with_arch = parts.size() >= 2 && find_arch(parts[0]) != nullptr;
    if (parts.size() > 3 || (parts.size() == 3 && !with_arch))
        fail("--synth '{}': expected [ARCH:]PRESET[:TYPE], e.g. gpt-oss-120b or gpt-oss:gpt-oss-120b:mxfp4", arg);
    const auto [arch, preset] = synth_arch_preset(with_arch ? parts[0] + ":" + parts[1] : parts[0], "--synth");
    GgmlType t = synth_default_expert_type(arch);
    const size_t type_at = with_arch ? 2 : 1;
    if (parts.size() > type_at) {
        const auto parsed = type_from_name(parts[type_at]);
        if (!parsed) fail("--synth '{}': unknown weight type '{}'", arg, parts[type_at]);
        t = *parsed;
    }
    return synth_layout(arch, preset, t, so);
}

int print_ladder(const ModelLayout& layout, const std::vector<LadderStep>& ladder, bool json) {
    if (json) {
        nlohmann::json j = nlohmann::json::array();
        for (const LadderStep& st : ladder) {
            nlohmann::json e{{"n_ctx", st.n_ctx}, {"fits", st.fits}};
            if (st.fits) {
                e["kv_bytes"] = st.plan.kv_bytes;
                e["compute_bytes"] = st.plan.compute_bytes;
                e["n_resident"] = st.plan.n_resident();
                e["n_experts"] = st.plan.n_experts();
                e["slots_bytes"] = st.plan.slots_bytes;
                e["mode"] = st.plan.mode();
            } else {
                e["error"] = st.why;
            }
            j.push_back(e);
        }
        std::puts(nlohmann::json{{"model", layout.description}, {"ladder", j}}.dump(1).c_str());
        return 0;
    }
    std::printf("context ladder of %s (K/V F16; the same budget, -u and --parallel at every step)\n", layout.description.c_str());
    std::printf("  %9s  %10s  %10s  %22s  %s\n", "-c", "KV cache", "buffers", "expert slots", "mode");
    for (const LadderStep& st : ladder) {
        if (!st.fits) {
            std::printf("  %9lld  does not fit: %s\n", static_cast<long long>(st.n_ctx), st.why.c_str());
            continue;
        }
        const Plan& p = st.plan;
        const std::string slots = fmt::format("{} of {} ({:.1f}%)", p.n_resident(), p.n_experts(),
                                              100.0 * static_cast<double>(p.n_resident()) / std::max<int64_t>(1, p.n_experts()));
        std::printf("  %9lld  %6.0f MiB  %6.0f MiB  %22s  %s\n", static_cast<long long>(st.n_ctx), p.kv_bytes / kMiB,
                    p.compute_bytes / kMiB, slots.c_str(), p.mode().c_str());
    }
    return 0;
}

int run_plan(const PlanCli& o) {
    if (!o.model.empty() && !o.synth.empty())
        fail("nitro plan: give a model (-m FILE or -hf REPO) or a preset (--synth [ARCH:]PRESET[:TYPE]), not both");
    std::unique_ptr<Model> model;
    ModelLayout layout;
    // The layout at the model's own context limit (the training context), for the ladder and to
    // say when -c is past it.
    SessionOptions widest = o.session;
    widest.n_ctx = int64_t{1} << 40;
    ModelLayout at_limit;
    if (o.synth.empty()) {
        model = std::make_unique<Model>(o.model.empty() ? default_model_path() : o.model);  // the embedded model, as nitro run
        layout = model_layout(*model, make_model_spec(*model, o.session));
        at_limit = model_layout(*model, make_model_spec(*model, widest));
    } else {
        layout = synth_from_arg(o.synth, o.session);
        at_limit = synth_from_arg(o.synth, widest);
    }
    // A model without a training context in its file: the ladder stops at 256K.
    const int64_t max_ctx = at_limit.spec.n_ctx < (int64_t{1} << 40) ? at_limit.spec.n_ctx : 262144;
    if (layout.spec.n_ctx < o.session.n_ctx && !o.json)  // (--json: n_ctx says it; a script reads stdout and stderr alike)
        std::fprintf(stderr, "note: -c %lld is past the model's training context; planned at -c %lld (its context_length)\n",
                     static_cast<long long>(o.session.n_ctx), static_cast<long long>(layout.spec.n_ctx));
    const ModelSpec& sp = layout.spec;
    HotSet hot;
    if (!o.engine.gpu.hot_set.empty()) hot = read_hot_set(o.engine.gpu.hot_set, sp.n_layer, sp.n_expert);
    const PlacementOptions po = placement_options(o.engine.gpu, o.engine.gpu.vram_budget_gib, static_cast<uint64_t>(o.runtime_mib * kMiB),
                                                  o.engine.gpu.hot_set.empty() ? nullptr : &hot);
    if (o.ctx_ladder) return print_ladder(layout, context_ladder(layout, max_ctx, po), o.json);
    const Plan p = plan_placement(layout, po);

    // CALCULATED decode floor of the CPU side: its expert bytes per token over the DRAM bandwidth.
    const double cpu_bytes = p.cpu_bytes_per_token_uniform();
    const double floor_tok_s = cpu_bytes > 0 ? o.dram_gbps * 1e9 / cpu_bytes : 0;
    if (o.json) {
        nlohmann::json j = plan_to_json(p);
        j["model"] = layout.description;
        j["expert_type"] = layout.expert_type;
        j["n_ctx"] = sp.n_ctx;
        j["n_ubatch"] = sp.n_ubatch;
        j["runtime_overhead"] = "ASSUMED";
        j["dram_gbps"] = o.dram_gbps;
        j["cpu_decode_floor_tok_s"] = floor_tok_s;
        std::puts(j.dump(1).c_str());
        return 0;
    }
    for (const std::string& w : p.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
    // One expert in the unit nitro inspect uses for it (format_bytes), so both say the same.
    std::printf("model        %s: %lld layers, %lld experts, %lld used per token; one expert %s (%s)\n",
                layout.description.c_str(), static_cast<long long>(sp.n_layer), static_cast<long long>(sp.n_expert),
                static_cast<long long>(sp.n_expert_used), format_bytes(p.expert_bytes).c_str(), layout.expert_type.c_str());
    std::printf("budget       %.0f MiB (%.2f GiB), plan uses %.0f MiB: mode %s\n", p.budget_bytes / kMiB, p.budget_bytes / kMiB / 1024,
                p.total_bytes() / kMiB, p.mode().c_str());
    std::printf("  dense core   %9.0f MiB  (attention, norms, router, embeddings, LM head; expert biases %.0f MiB)\n",
                (p.dense_bytes + p.expert_biases_bytes) / kMiB, p.expert_biases_bytes / kMiB);
    std::printf("  KV cache     %9.0f MiB  (F16, -c %lld)\n", p.kv_bytes / kMiB, static_cast<long long>(sp.n_ctx));
    std::printf("  buffers      %9.0f MiB  (activations for -u %lld tokens, slot tables)\n", p.compute_bytes / kMiB,
                static_cast<long long>(sp.n_ubatch));
    if (p.stage_slots > 0)
        std::printf("  staging      %9.0f MiB  (%d scratch slots for experts staged to the GPU during prompts)\n", p.stage_bytes / kMiB,
                    p.stage_slots);
    if (p.group_tokens > 0)
        std::printf("  prompt group %9.0f MiB  (layer-major groups of %lld prompt tokens, --prefill-group)\n", p.group_bytes / kMiB,
                    static_cast<long long>(p.group_tokens));
    std::printf("  CUDA runtime %9.0f MiB  (ASSUMED, --runtime-mib: context, cuBLAS + workspace, modules; the engine measures it)\n",
                p.overhead_bytes / kMiB);
    std::printf("  expert slots %9.0f MiB  (%lld of %lld experts, %.1f%%)\n", p.slots_bytes / kMiB, static_cast<long long>(p.n_resident()),
                static_cast<long long>(p.n_experts()), 100.0 * p.n_resident() / std::max<int64_t>(1, p.n_experts()));
    std::printf("%s\n", plan_summary_line(p).c_str());
    // Per layer, compactly: counts and why (runs of equal layers merged).
    for (size_t i = 0; i < p.layers.size();) {
        size_t j = i;
        while (j + 1 < p.layers.size() && p.layers[j + 1].resident.size() == p.layers[i].resident.size() &&
               p.layers[j + 1].why == p.layers[i].why)
            ++j;
        const std::string range = i == j ? fmt::format("layer  {:2}   ", i) : fmt::format("layers {:2}-{:<2}", i, j);
        if (p.layers[i].n_expert == 0)
            std::printf("  %s   no routed experts  (%s)\n", range.c_str(), p.layers[i].why.c_str());
        else
            std::printf("  %s %4zu of %lld resident  (%s)\n", range.c_str(), p.layers[i].resident.size(),
                        static_cast<long long>(p.layers[i].n_expert), p.layers[i].why.c_str());
        if (o.layers)
            for (size_t k = i; k <= j; ++k) std::printf("    layer %zu: %s\n", k, nlohmann::json(p.layers[k].resident).dump().c_str());
        i = j + 1;
    }
    if (cpu_bytes <= 0) {
        std::printf("CPU side     no routed expert runs on the CPU: every expert is resident in VRAM\n");
        return 0;
    }
    std::printf("CPU side     CALCULATED at uniform routing: %.0f MiB of expert weights per decode token (%.1f%% of selections miss "
                "VRAM); at %.1f GB/s DRAM read (ASSUMED, --dram-gbps) the CPU experts alone allow %.1f tok/s\n",
                cpu_bytes / kMiB, 100.0 * (1.0 - static_cast<double>(p.n_resident()) / std::max<int64_t>(1, p.n_experts())),
                o.dram_gbps, floor_tok_s);
    return 0;
}

}  // namespace

Action add_plan(CLI::App& app) {
    auto o = std::make_shared<PlanCli>();
    CLI::App* sub = app.add_subcommand("plan", "Where every tensor and expert would live for a VRAM budget (no GPU needed)");
    sub->add_option("-m,--model", o->model, "GGUF model (first shard of a split model); default: the embedded models/tiny-moe-pystd.gguf")
        ->envname("NITRO_MODEL");
    add_hf_option(sub, o->hf);
    sub->add_option("--synth", o->synth,
                    "Plan a synth preset's shape instead of a file: [ARCH:]PRESET[:TYPE], e.g. gpt-oss-120b, qwen3-30b-a3b:q4_k, "
                    "qwen3moe:tiny (ARCH only where the preset name is not unique)");
    sub->add_option("-c,--ctx-size", o->session.n_ctx, "Context length, tokens")->capture_default_str();
    sub->add_option("-u,--ubatch,--ubatch-size", o->session.n_ubatch, "Prompt tokens per forward chunk (llama.cpp's -ub)")
        ->capture_default_str()
        ->check(integer_at_least(1));
    add_engine_options(sub, o->engine, false);
    LlamaCompatSet compat_set;
    compat_set.placement = compat_set.attention = compat_set.threads = compat_set.chat_template = false;
    add_llama_compat_options(sub, o->compat, compat_set);
    sub->add_option("--dram-gbps", o->dram_gbps, "DRAM read bandwidth for the CALCULATED CPU decode floor, GB/s")
        ->capture_default_str()
        ->check(positive_number());
    sub->add_option("--runtime-mib", o->runtime_mib,
                    "GPU memory the CUDA runtime takes (context, cuBLAS and its workspace, modules, margin), MiB (ASSUMED; "
                    "691 MEASURED on an H200)")
        ->capture_default_str()
        ->check(number_in(0.0, 1.0e7));
    sub->add_flag("--layers", o->layers, "List the resident expert ids of every layer");
    sub->add_flag("--json", o->json, "Print the plan as JSON");
    sub->add_flag("--ctx-ladder", o->ctx_ladder,
                  "For contexts of 4K, 16K, 32K, 64K, 128K, 256K and the model's limit: the K/V cache, buffers and the expert "
                  "slots left at this budget (or why a context does not fit)");
    return [o]() {
        if (!o->hf.empty() && !o->synth.empty()) fail("nitro plan: -hf and --synth name two models: give one of them");
        resolve_hf_model(o->hf, o->model);
        resolve_llama_compat(o->compat, nullptr, o->session);
        return run_plan(*o);
    };
}

}  // namespace nitro::cli
