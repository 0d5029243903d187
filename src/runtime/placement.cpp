#include "runtime/placement.h"

#include "arch/synth.h"
#include "core/error.h"
#include "core/user_file.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <functional>
#include <regex>

namespace nitro {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = kMiB * 1024.0;

std::string upper(std::string s) {
    for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return s;
}

const char* device_name(Device d) { return d == Device::Gpu ? "GPU" : "CPU"; }

}  // namespace

TensorOverride parse_tensor_override(const std::string& arg) {
    const size_t eq = arg.rfind('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size())
        fail("--override-tensor '{}': expected REGEX=DEVICE (e.g. 'exps=CPU' or 'blk\\.[0-9]\\.ffn_.*_exps=CPU')", arg);
    TensorOverride o;
    o.pattern = arg.substr(0, eq);
    const std::string dev = upper(arg.substr(eq + 1));
    if (dev == "CPU") o.device = Device::Cpu;
    else if (dev == "GPU" || dev == "CUDA" || dev == "CUDA0") o.device = Device::Gpu;
    else fail("--override-tensor '{}': unknown device '{}' (expected CPU, GPU or CUDA0)", arg, arg.substr(eq + 1));
    try {
        std::regex re(o.pattern);
    } catch (const std::regex_error& e) {
        fail("--override-tensor '{}': the pattern '{}' is not a valid regular expression ({})", arg, o.pattern, e.what());
    }
    return o;
}

HotSet read_hot_set(const std::string& path, int64_t n_layer, int64_t n_expert) {
    const std::string text = read_user_file(path, "hot-set file");
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        fail("hot-set file '{}' is not valid JSON: {}", path, e.what());
    }
    if (!j.is_object() || j.value("format", "") != "nitro-hot-set")
        fail("'{}' is not a hot-set file (expected {{\"format\": \"nitro-hot-set\", \"layers\": [[expert ids]...]}})", path);
    if (!j.contains("layers") || !j["layers"].is_array()) fail("hot-set file '{}': \"layers\" must be an array of id arrays", path);
    HotSet h;
    h.source = path;
    for (size_t il = 0; il < j["layers"].size(); ++il) {
        const auto& L = j["layers"][il];
        if (!L.is_array()) fail("hot-set file '{}': layer {} is not an array of expert ids", path, il);
        std::vector<int32_t> ids;
        std::vector<bool> seen(static_cast<size_t>(std::max<int64_t>(n_expert, 0)), false);
        for (const auto& v : L) {
            if (!v.is_number_integer()) fail("hot-set file '{}': layer {} holds a non-integer id", path, il);
            const int64_t e = v.get<int64_t>();
            if (e < 0 || (n_expert > 0 && e >= n_expert))
                fail("hot-set file '{}': layer {} names expert {}, but the model has {} experts per layer", path, il, e, n_expert);
            if (n_expert > 0) {
                if (seen[static_cast<size_t>(e)]) fail("hot-set file '{}': layer {} lists expert {} twice", path, il, e);
                seen[static_cast<size_t>(e)] = true;
            }
            ids.push_back(static_cast<int32_t>(e));
        }
        h.layers.push_back(std::move(ids));
    }
    if (n_layer > 0 && static_cast<int64_t>(h.layers.size()) != n_layer)
        fail("hot-set file '{}' has {} layers, the model has {}", path, h.layers.size(), n_layer);
    return h;
}

void write_hot_set(const std::string& path, const std::vector<std::vector<int32_t>>& ranked,
                   const std::vector<std::vector<uint64_t>>& counts, const std::string& source) {
    nlohmann::json j = {{"format", "nitro-hot-set"}, {"version", 1}, {"source", source}, {"layers", ranked},
                        {"counts", counts}};
    std::ofstream out(path);
    if (!out) fail("cannot write hot-set file '{}'", path);
    out << j.dump() << "\n";
    if (!out) fail("writing hot-set file '{}' failed", path);
}

int64_t Plan::n_resident() const {
    int64_t n = 0;
    for (const auto& L : layers) n += static_cast<int64_t>(L.resident.size());
    return n;
}

std::string Plan::mode() const {
    const int64_t r = n_resident();
    return r == n_experts() ? "gpu" : r == 0 ? "cpu-experts" : "hybrid";
}

double Plan::cpu_bytes_per_token_uniform() const {
    double b = 0;
    for (const auto& L : layers)
        if (L.n_expert > 0)
            b += static_cast<double>(n_expert_used) * (1.0 - static_cast<double>(L.resident.size()) / static_cast<double>(L.n_expert)) *
                 static_cast<double>(expert_bytes);
    return b;
}

int64_t Plan::n_experts() const {
    int64_t n = 0;
    for (const auto& L : layers) n += L.n_expert;
    return n;
}

uint64_t gpu_compute_bytes(const ModelSpec& spec) { return gpu_scratch_sizes(spec).bytes(); }

GpuScratchSizes gpu_scratch_sizes(const ModelSpec& sp) {
    GpuScratchSizes z;
    const int64_t ub = sp.n_ubatch, E = sp.n_embd, K = sp.n_expert_used, F = sp.n_ff_exp, R = ub * K;
    z.x = ub * E;
    z.h = ub * std::max(E, sp.n_o());
    z.q = ub * sp.n_q();
    z.qg = sp.attn_gate ? 2 * ub * sp.n_q() : 0;
    z.gate = sp.attn_gate ? ub * sp.n_q() : 0;
    if (sp.has_recurrent()) {
        const int64_t cd = sp.ssm.conv_dim(), vd = sp.ssm.value_dim(), nv = sp.ssm.n_v_heads;
        z.ssm_qkv = ub * cd;
        z.ssm_z = ub * vd;
        z.ssm_ba = ub * 2 * nv;
        z.ssm_beta = ub * nv;
        z.ssm_g = ub * nv;
        z.ssm_conv = ub * cd;
        z.ssm_core = ub * vd;
        z.ssm_in = ub * (cd + vd);
    }
    if (sp.shared_expert || sp.n_ff > 0) {  // the shared expert's and the dense layers' FFN
        const int64_t F = std::max(sp.n_ff_shexp, sp.n_ff);
        z.sh_gate = ub * F;
        z.sh_up = ub * F;
        z.sh_down = sp.shared_expert ? ub * E : 0;
    }
    z.k = ub * sp.n_k();
    z.v = ub * sp.n_v();
    z.attn = ub * sp.n_o();
    z.router = ub * sp.n_expert;
    z.ids = R;
    z.weights = R;
    z.margin = ub;
    z.logits_rows = std::min<int64_t>(ub, GpuScratchSizes::kMaxLogitsRows);
    z.logits = z.logits_rows * sp.n_vocab;
    int64_t keys = 0;
    for (const LayerSpec& L : sp.layers) keys = std::max(keys, L.window > 0 ? std::min(L.window, sp.n_ctx) : sp.n_ctx);
    z.max_split = attention_max_split(keys);
    z.attn_partial = (z.max_split > 1 ? sp.n_head * z.max_split * (sp.head_dim + 2) : 0) + 1;
    z.tok = ub;
    z.pos = std::max<int64_t>(1, sp.n_seq);
    // (+ room for the 8-bit layout of the GLU output: its 256-byte alignment exceeds a few short rows)
    z.moe_act = std::max<int64_t>(R * F, static_cast<int64_t>((q8_act_bytes(R, F) + 3) / 4));
    z.moe_down = R * E;
    const int64_t max_ne0 = std::max({E, sp.n_o(), F, sp.ssm.value_dim(), sp.n_ff_shexp, sp.n_ff});
    // (+ room for the decode MoE's 8-bit activations when the chunk is too small to hold them)
    const int64_t dec_rows = std::min<int64_t>(ub, kGemvMaxTokens) * K;
    z.xr = std::max<int64_t>(ub * max_ne0, static_cast<int64_t>((q8_act_bytes(dec_rows, max_ne0) + 3) / 4));
    z.hq = static_cast<int64_t>((q8_act_bytes(std::min<int64_t>(ub, kGemvMaxTokens), E) + 3) / 4);
    if (ub > kGemvMaxTokens) {
        z.moe_gate = R * F;
        z.moe_up = R * F;
        z.group = R;
        z.group_off = 2 * (sp.n_expert + 1);
        z.gemm_act = std::max(R * E, ub * max_ne0);
        z.gemm_w = std::max<int64_t>(32ll << 20, F * E);
    }
    z.partial = ub * E;
    return z;
}

uint64_t GpuScratchSizes::bytes() const {
    // One arena (DeviceAllocator::begin_arena): 256-byte aligned pieces, one page rounding.
    const auto rnd = [](uint64_t b) { return (std::max<uint64_t>(b, 1) + 255) / 256 * 256; };
    uint64_t b = 0;
    for (int64_t n : {x, h, q, k, v, attn, router, weights, margin, logits, attn_partial, moe_act, moe_down, moe_gate, moe_up,
                      partial, qg, gate, ssm_qkv, ssm_z, ssm_ba, ssm_beta, ssm_g, ssm_conv, ssm_core, ssm_in, sh_gate, sh_up,
                      sh_down, xr, hq})
        if (n > 0) b += rnd(static_cast<uint64_t>(n) * 4);
    for (int64_t n : {ids, tok, group, group, group, group_off})
        if (n > 0) b += rnd(static_cast<uint64_t>(n) * 4);
    b += rnd(static_cast<uint64_t>(pos) * 4) + rnd(4) + rnd(4);  // positions, step counter, router counter
    for (int64_t n : {gemm_act, gemm_w})
        if (n > 0) b += rnd(static_cast<uint64_t>(n) * 2);
    return vram_alloc_size(b);
}

PrefillGroupSizes prefill_group_sizes(const ModelSpec& sp, int64_t tokens) {
    PrefillGroupSizes g;
    const int64_t G = tokens, E = sp.n_embd, K = sp.n_expert_used, ub = sp.n_ubatch;
    g.tokens = G;
    g.x = G * E;
    g.h = G * E + ub * (std::max(E, sp.n_o()) - E);  // (a block's ops may use h as [n, n_o])
    g.ids = G * K;
    g.weights = G * K;
    g.margin = G;
    g.tok = G;
    g.pos = (G + ub - 1) / ub;
    g.partial = G * E;
    g.moe_down = G * K * E;
    g.group = G * K;
    g.gemm_act = G * K * E;
    return g;
}

uint64_t PrefillGroupSizes::bytes() const {
    const auto rnd = [](uint64_t b) { return (std::max<uint64_t>(b, 1) + 255) / 256 * 256; };
    uint64_t b = 0;
    for (int64_t n : {x, h, ids, weights, margin, tok, pos, partial, moe_down, group, group, group})
        b += rnd(static_cast<uint64_t>(n) * 4);
    b += rnd(static_cast<uint64_t>(gemm_act) * 2);
    return vram_alloc_size(b);
}

namespace {

/// Sorts table rows into a layout: routed experts per layer (gate, up, down), their biases, the
/// rest (the dense core the GPU engine uploads). bytes(row): what the row takes.
void sort_rows(ModelLayout& l, const std::vector<TensorSpec>& rows, const std::function<uint64_t(const TensorSpec&)>& bytes) {
    l.experts.resize(static_cast<size_t>(l.spec.n_layer));
    for (const TensorSpec& t : rows) {
        const ModelLayout::Tensor lt{t.name, bytes(t)};
        if (t.kind == TensorKind::Expert) {
            const int k = t.id == TensorId::ffn_gate_exps ? 0 : t.id == TensorId::ffn_up_exps ? 1 : 2;
            l.experts[static_cast<size_t>(t.layer)][static_cast<size_t>(k)] = lt;
        } else {
            (t.kind == TensorKind::ExpertBias ? l.expert_biases : l.dense).push_back(lt);
        }
    }
}

}  // namespace

ModelLayout model_layout(const Model& model, const ModelSpec& spec) {
    ModelLayout l;
    l.spec = spec;
    l.description = model.path();
    sort_rows(l, model.tensors(), [&](const TensorSpec& t) { return model.gguf().get(t.name).n_bytes; });
    for (const LayerWeights& L : model.layers())
        if (L[TensorId::ffn_gate_exps]) {
            l.expert_type = type_display_name(L[TensorId::ffn_gate_exps]->type);
            break;
        }
    return l;
}

ModelLayout synth_layout(const std::string& arch_name, const std::string& preset, GgmlType expert_type,
                         const SessionOptions& so) {
    int64_t n_vocab = 0;
    bool tied = false;
    const ModelHparams hp = synth_preset(arch_name, preset, &n_vocab, &tied);
    if (n_vocab == 0) n_vocab = 256;  // tiny presets get a vocabulary copied from elsewhere; any size plans
    const ArchInfo& arch = require_arch(hp.arch, "nitro plan");
    ModelLayout l;
    l.spec = make_model_spec(hp, arch.config(hp), n_vocab, so);
    l.description = fmt::format("synth preset {} ({} experts)", preset, type_display_name(expert_type));
    l.expert_type = type_display_name(expert_type);
    std::vector<TensorSpec> rows;
    for (TensorSpec& t : arch.tensors(hp, n_vocab))
        if (!t.legacy && !(tied && t.id == TensorId::output)) rows.push_back(std::move(t));  // what synth writes
    sort_rows(l, rows, [&](const TensorSpec& t) {
        int64_t n = 1;
        for (size_t d = 1; d < t.ne.size(); ++d) n *= t.ne[d];
        return row_size(synth_tensor_type(t.kind, expert_type), t.ne[0]) * static_cast<uint64_t>(n);
    });
    return l;
}

uint64_t kv_cache_bytes(const ModelSpec& spec) {
    // K/V: F16 keys and values at each layer's capacity, plus the slot tables.
    // Every part is one arena on the GPU (DeviceAllocator::begin_arena): pieces 256-byte aligned,
    // the whole rounded once to the driver's pages.
    const auto align = [](uint64_t b) { return (std::max<uint64_t>(b, 1) + 255) / 256 * 256; };
    // Every sequence (--parallel) has its own K/V region and recurrent state.
    uint64_t kv = 0;  // K, V and the slot table of every layer
    const uint64_t n_seq = static_cast<uint64_t>(std::max<int64_t>(1, spec.n_seq));
    for (const LayerSpec& L : spec.layers) {
        kv += align(n_seq * static_cast<uint64_t>(L.kv_capacity) * static_cast<uint64_t>(spec.n_k()) * 2) +
              align(n_seq * static_cast<uint64_t>(L.kv_capacity) * static_cast<uint64_t>(spec.n_v()) * 2) +
              align(static_cast<uint64_t>(spec.n_expert) * 4);
        if (L.kind == LayerKind::DeltaNet)  // its recurrent state (F32 conv and delta-rule state) instead
            kv += align(n_seq * static_cast<uint64_t>(spec.ssm.conv_state_size()) * 4) +
                  align(n_seq * static_cast<uint64_t>(spec.ssm.delta_state_size()) * 4);
    }
    return vram_alloc_size(kv);
}

namespace {

/// What a plan needs before any expert slot: the dense core, the K/V cache, the buffers, the runtime.
uint64_t fixed_bytes(const Plan& p) { return p.dense_bytes + p.expert_biases_bytes + p.kv_bytes + p.compute_bytes + p.overhead_bytes; }

}  // namespace

int64_t largest_fitting_context(const ModelSpec& spec, uint64_t dense_bytes, const PlacementOptions& opt) {
    const uint64_t budget = static_cast<uint64_t>(opt.vram_budget_gib * kGiB);
    auto fits = [&](int64_t n_ctx) {
        ModelSpec s = spec;
        set_context(s, n_ctx);
        return dense_bytes + kv_cache_bytes(s) + gpu_compute_bytes(s) + opt.runtime_overhead_bytes <= budget;
    };
    if (!fits(1)) return 0;
    int64_t lo = 1, hi = spec.n_ctx;  // fits(lo); the answer is below hi unless hi fits
    if (fits(hi)) return hi;
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        (fits(mid) ? lo : hi) = mid;
    }
    return lo;
}

Plan plan_placement(const ModelLayout& layout, const PlacementOptions& opt) {
    const ModelSpec& spec = layout.spec;
    if (!(opt.vram_budget_gib > 0)) fail("a VRAM budget is needed to plan a placement (--vram-budget GiB)");
    int64_t n_moe = 0;  // layers with routed experts (the others have a dense FFN: nothing to place)
    for (const LayerSpec& L : spec.layers) n_moe += L.n_expert > 0;
    if (layout.experts.size() != static_cast<size_t>(spec.n_layer) || spec.n_expert <= 0 || n_moe == 0)
        fail("{}: the model has no routed experts, so there is nothing to place", layout.description);
    const auto experts_of = [&](int64_t il) { return spec.layers[static_cast<size_t>(il)].n_expert; };
    Plan p;
    p.budget_bytes = static_cast<uint64_t>(opt.vram_budget_gib * kGiB);
    p.n_layer = spec.n_layer;
    p.n_expert = spec.n_expert;
    p.n_expert_used = spec.n_expert_used;
    p.overhead_bytes = opt.runtime_overhead_bytes;
    p.compute_bytes = gpu_compute_bytes(spec);
    p.kv_bytes = kv_cache_bytes(spec);
    // Every part is one arena on the GPU: pieces 256-byte aligned, the whole rounded once.
    const auto align = [](uint64_t b) { return (std::max<uint64_t>(b, 1) + 255) / 256 * 256; };
    const auto rnd = [](uint64_t b) { return vram_alloc_size(b); };

    // Dense core and expert sizes; overrides checked against every name.
    std::vector<std::regex> res;
    for (const auto& o : opt.overrides) res.emplace_back(o.pattern);
    std::vector<bool> matched(opt.overrides.size(), false);
    auto override_for = [&](const std::string& name) -> const TensorOverride* {
        for (size_t i = 0; i < res.size(); ++i)
            if (std::regex_search(name, res[i])) {
                matched[i] = true;
                return &opt.overrides[i];
            }
        return nullptr;
    };
    for (const auto& t : layout.expert_biases) p.expert_biases_bytes += align(t.bytes);
    for (const auto& t : layout.dense) {
        p.dense_bytes += align(t.bytes);
        if (const TensorOverride* o = override_for(t.name); o && o->device == Device::Cpu)
            fail("--override-tensor '{}={}' puts '{}' on the CPU: the hybrid executor keeps the dense core (attention, "
                 "norms, router, embeddings, LM head) on the GPU and places only routed experts (ffn_*_exps) on the CPU",
                 o->pattern, device_name(o->device), t.name);
    }
    p.dense_bytes = rnd(p.dense_bytes + p.expert_biases_bytes) - p.expert_biases_bytes;  // one arena with the biases
    const uint64_t X = static_cast<uint64_t>(spec.n_expert);
    // One expert's bytes (the same in every layer with routed experts).
    for (int64_t il = 0; il < spec.n_layer && p.expert_bytes == 0; ++il)
        if (experts_of(il) > 0)
            for (const auto& t : layout.experts[static_cast<size_t>(il)]) p.expert_bytes += t.bytes / X;
    // The slot pools share one arena: 256-byte alignment of each of the 3 pools per layer and one
    // rounding of the arena to the driver's 2 MiB pages.
    const uint64_t pool_rounding = static_cast<uint64_t>(n_moe) * 3 * 256 + (2ull << 20);

    // The fixed part must fit.
    const uint64_t fixed = fixed_bytes(p);
    if (fixed > p.budget_bytes) {
        // Name the largest context this budget holds with the rest unchanged, when there is one.
        const int64_t fits = largest_fitting_context(spec, p.dense_bytes + p.expert_biases_bytes, opt);
        const std::string hint =
            fits > 0 ? fmt::format("; the largest context that fits this budget is -c {} (with -u {}, --parallel {})", fits,
                                   std::min(spec.n_ubatch, fits), spec.n_seq)
                     : "; no context fits: the dense core, buffers and runtime alone exceed the budget";
        fail("--vram-budget {:.2f} GiB is too small: the dense core needs {:.0f} MiB, the K/V cache {:.0f} MiB (-c {} x {} "
             "sequence(s)), buffers for -u {} tokens {:.0f} MiB, the CUDA runtime {:.0f} MiB: {:.0f} MiB in all, {:.0f} MiB "
             "short (lower -c, -u or --parallel, or raise the budget){}",
             opt.vram_budget_gib, (p.dense_bytes + p.expert_biases_bytes) / kMiB, p.kv_bytes / kMiB, spec.n_ctx,
             spec.n_seq, spec.n_ubatch, p.compute_bytes / kMiB, p.overhead_bytes / kMiB, fixed / kMiB, (fixed - p.budget_bytes) / kMiB,
             hint);
    }
    uint64_t avail = p.budget_bytes - fixed > pool_rounding ? p.budget_bytes - fixed - pool_rounding : 0;

    // Per layer: forced to the CPU, forced to the GPU, or free for the residency source.
    enum class Force { None, Cpu, Gpu };
    std::vector<Force> force(static_cast<size_t>(spec.n_layer), Force::None);
    std::vector<std::string> why(static_cast<size_t>(spec.n_layer));
    for (int64_t il = 0; il < spec.n_layer; ++il) {
        if (experts_of(il) == 0) continue;  // a dense FFN layer
        for (const ModelLayout::Tensor& t : layout.experts[static_cast<size_t>(il)]) {
            const TensorOverride* o = override_for(t.name);
            if (!o) continue;
            const Force f = o->device == Device::Cpu ? Force::Cpu : Force::Gpu;
            if (force[static_cast<size_t>(il)] == Force::None || f == Force::Cpu) {
                force[static_cast<size_t>(il)] = f;
                why[static_cast<size_t>(il)] = fmt::format("-ot '{}={}'", o->pattern, device_name(o->device));
            }
        }
        if (force[static_cast<size_t>(il)] != Force::None) continue;
        if (opt.cpu_moe) {
            force[static_cast<size_t>(il)] = Force::Cpu;
            why[static_cast<size_t>(il)] = "--cpu-moe";
        } else if (opt.n_cpu_moe > 0) {
            force[static_cast<size_t>(il)] = il < opt.n_cpu_moe ? Force::Cpu : Force::Gpu;
            why[static_cast<size_t>(il)] = fmt::format("--n-cpu-moe {}", opt.n_cpu_moe);
        }
    }
    for (size_t i = 0; i < matched.size(); ++i)
        if (!matched[i]) p.warnings.push_back(fmt::format("--override-tensor '{}' matched no tensor", opt.overrides[i].pattern));

    p.layers.resize(static_cast<size_t>(spec.n_layer));
    uint64_t forced_gpu = 0;
    for (int64_t il = 0; il < spec.n_layer; ++il) {
        LayerPlacement& lp = p.layers[static_cast<size_t>(il)];
        lp.n_expert = experts_of(il);
        lp.why = lp.n_expert == 0 ? "dense FFN layer (no routed experts)" : why[static_cast<size_t>(il)];
        if (force[static_cast<size_t>(il)] == Force::Gpu) {
            forced_gpu += p.expert_bytes * static_cast<uint64_t>(lp.n_expert);
            for (int32_t e = 0; e < lp.n_expert; ++e) lp.resident.push_back(e);
        }
    }
    if (forced_gpu > avail)
        fail("the experts placed on the GPU by {} need {:.0f} MiB, but only {:.0f} MiB of the {:.2f} GiB budget are left "
             "after the dense core, K/V cache and buffers ({:.0f} MiB short)",
             why[static_cast<size_t>(std::find(force.begin(), force.end(), Force::Gpu) - force.begin())], forced_gpu / kMiB,
             avail / kMiB, opt.vram_budget_gib, (forced_gpu - avail) / kMiB);
    avail -= forced_gpu;

    // Free layers: as many slots as the rest of the budget holds, by the residency source.
    std::vector<int64_t> free_layers;
    int64_t capacity = 0;
    for (int64_t il = 0; il < spec.n_layer; ++il)
        if (force[static_cast<size_t>(il)] == Force::None && experts_of(il) > 0) {
            free_layers.push_back(il);
            capacity += experts_of(il);
        }
    // Some experts stay off the GPU (forced, or the free layers do not all fit): reserve the prompt
    // staging slots first (as many as fit, up to the option's count).
    const bool forced_cpu = std::find(force.begin(), force.end(), Force::Cpu) != force.end();
    const bool all_fit = p.expert_bytes == 0 || static_cast<uint64_t>(capacity) <= avail / p.expert_bytes;
    if ((forced_cpu || !all_fit) && opt.prefill_stage_slots > 0 && spec.n_ubatch > kGemvMaxTokens) {
        for (const auto& layer : layout.experts) {
            uint64_t b = 0;
            for (const ModelLayout::Tensor& t : layer) b += align(t.bytes / X);
            p.stage_slot_bytes = std::max(p.stage_slot_bytes, b);
        }
        // The slots and the prompt's expert table (n_expert int32) are one arena, rounded once.
        const auto arena = [&](int n) { return rnd(static_cast<uint64_t>(n) * p.stage_slot_bytes + align(X * 4)); };
        p.stage_slots = opt.prefill_stage_slots;
        while (p.stage_slots > 0 && arena(p.stage_slots) > avail) --p.stage_slots;
        p.stage_bytes = p.stage_slots > 0 ? arena(p.stage_slots) : 0;
        avail -= std::min(avail, p.stage_bytes);
        // Layer-major prompt groups: as many tokens as asked (auto: 4 blocks, at most an eighth of
        // the budget), fewer if the rest of the budget is short; none if not more than one block fits.
        const int64_t ub = spec.n_ubatch;
        // (never more than the context: no prompt is longer)
        int64_t G = std::min(opt.prefill_group < 0 ? 4 * ub : opt.prefill_group, spec.n_ctx);
        const uint64_t cap = opt.prefill_group < 0 ? std::min(avail, p.budget_bytes / 8) : avail;
        const int64_t step = std::max<int64_t>(1, ub / 16);
        while (G > ub && prefill_group_sizes(spec, G).bytes() > cap) G -= step;
        if (p.stage_slots > 0 && G > ub) {
            p.group_tokens = G;
            p.group_bytes = prefill_group_sizes(spec, G).bytes();
            avail -= std::min(avail, p.group_bytes);
        }
    }
    const int64_t slots = std::min<int64_t>(capacity, p.expert_bytes > 0 ? static_cast<int64_t>(avail / p.expert_bytes) : 0);
    ResidencySource src = opt.source;
    if (src == ResidencySource::Auto) src = opt.hot_set ? ResidencySource::HotSet : ResidencySource::Even;
    if (src == ResidencySource::HotSet && !opt.hot_set) fail("the hot-set residency needs a hot-set file (--hot-set FILE)");
    if (slots == capacity) {
        for (int64_t il : free_layers) {
            LayerPlacement& lp = p.layers[static_cast<size_t>(il)];
            for (int32_t e = 0; e < lp.n_expert; ++e) lp.resident.push_back(e);
            lp.why = "fits the budget";
        }
    } else if (src == ResidencySource::Even) {
        const int64_t nl = static_cast<int64_t>(free_layers.size());
        for (int64_t i = 0; i < nl; ++i) {
            LayerPlacement& lp = p.layers[static_cast<size_t>(free_layers[static_cast<size_t>(i)])];
            const int64_t n = slots / nl + (i < slots % nl ? 1 : 0);
            for (int32_t e = 0; e < n; ++e) lp.resident.push_back(e);
            lp.why = "even fill";
        }
    } else if (src == ResidencySource::Layers) {
        int64_t left = slots;
        for (auto it = free_layers.rbegin(); it != free_layers.rend(); ++it) {
            LayerPlacement& lp = p.layers[static_cast<size_t>(*it)];
            lp.why = "whole layers";
            if (left < lp.n_expert) continue;
            for (int32_t e = 0; e < lp.n_expert; ++e) lp.resident.push_back(e);
            left -= lp.n_expert;
        }
    } else {  // hot set: per layer, the first entries of its ranking; slots spread by the ranking's counts
        const HotSet& hs = *opt.hot_set;
        if (static_cast<int64_t>(hs.layers.size()) != spec.n_layer)
            fail("hot set '{}' has {} layers, the model has {}", hs.source, hs.layers.size(), spec.n_layer);
        // Round-robin over the free layers in rank order: rank 0 of every layer, then rank 1, ...
        // (a profile's counts are not comparable across layers of different traffic; each layer
        // gets the same share, its own hottest experts first).
        int64_t left = slots;
        for (int64_t rank = 0; left > 0 && rank < spec.n_expert; ++rank) {
            for (int64_t il : free_layers) {
                if (left == 0) break;
                const auto& ranked = hs.layers[static_cast<size_t>(il)];
                LayerPlacement& lp = p.layers[static_cast<size_t>(il)];
                int32_t e;
                if (rank < static_cast<int64_t>(ranked.size())) {
                    e = ranked[static_cast<size_t>(rank)];
                } else {  // the profile never saw enough experts here: the lowest ids not yet resident
                    e = 0;
                    while (std::find(lp.resident.begin(), lp.resident.end(), e) != lp.resident.end()) ++e;
                }
                lp.resident.push_back(e);
                --left;
            }
        }
        for (int64_t il : free_layers) p.layers[static_cast<size_t>(il)].why = "hot set";
    }
    uint64_t arena = 0;
    for (size_t il = 0; il < p.layers.size(); ++il) {
        const uint64_t n = p.layers[il].resident.size();
        if (p.layers[il].n_expert > 0)
            for (const ModelLayout::Tensor& t : layout.experts[il]) arena += align(n * (t.bytes / X));
    }
    p.slots_bytes = arena > 0 ? rnd(arena) : 0;
    return p;
}

std::string plan_summary_line(const Plan& p) {
    return fmt::format("experts: {} resident slots ({:.0f} MiB) in VRAM, {} on CPU; dense core {:.0f} MiB, KV {:.0f} MiB, "
                       "buffers {:.0f} MiB, prompt staging {} slots {:.0f} MiB, prompt groups of {} tokens {:.0f} MiB, runtime "
                       "{:.0f} MiB; budget {:.0f} MiB",
                       p.n_resident(), p.slots_bytes / kMiB, p.n_experts() - p.n_resident(),
                       (p.dense_bytes + p.expert_biases_bytes) / kMiB, p.kv_bytes / kMiB, p.compute_bytes / kMiB,
                       p.stage_slots, p.stage_bytes / kMiB, p.group_tokens, p.group_bytes / kMiB, p.overhead_bytes / kMiB,
                       p.budget_bytes / kMiB);
}

nlohmann::json plan_to_json(const Plan& p) {
    nlohmann::json layers = nlohmann::json::array();
    for (const auto& L : p.layers) layers.push_back({{"n_expert", L.n_expert}, {"resident", L.resident}, {"why", L.why}});
    return {
        {"mode", p.mode()},
        {"budget_bytes", p.budget_bytes},
        {"dense_bytes", p.dense_bytes},
        {"expert_biases_bytes", p.expert_biases_bytes},
        {"kv_bytes", p.kv_bytes},
        {"compute_bytes", p.compute_bytes},
        {"stage_slots", p.stage_slots},
        {"stage_bytes", p.stage_bytes},
        {"prefill_group_tokens", p.group_tokens},
        {"prefill_group_bytes", p.group_bytes},
        {"runtime_overhead_bytes", p.overhead_bytes},
        {"expert_bytes", p.expert_bytes},
        {"slots_bytes", p.slots_bytes},
        {"total_bytes", p.total_bytes()},
        {"n_layer", p.n_layer},
        {"n_expert", p.n_expert},
        {"n_expert_used", p.n_expert_used},
        {"n_resident", p.n_resident()},
        {"cpu_bytes_per_token_uniform", p.cpu_bytes_per_token_uniform()},
        {"layers", layers},
        {"warnings", p.warnings},
    };
}

}  // namespace nitro
