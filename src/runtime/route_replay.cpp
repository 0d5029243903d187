#include "runtime/route_replay.h"

#include "core/error.h"
#include "runtime/default_model.h"
#include "trace/trace_file.h"
#include "trace/trace_jsonl.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>

namespace nitro {

namespace {

constexpr float kOther = -1e4f;       ///< logit of an expert the trace did not select (after the bias)
constexpr float kMinGap = 1e-4f;      ///< the selected logits decrease by at least this much
constexpr float kMinLogit = -60.f;    ///< ln of the smallest weight kept

std::vector<std::string> split_items(const std::string& s) {
    std::vector<std::string> r;
    std::stringstream ss(s);
    for (std::string item; std::getline(ss, item, ',');)
        if (!item.empty()) r.push_back(item);
    return r;
}

/// "zipf:S" with S a number >= 0; returns -1 when `s` is not of that form.
double parse_zipf(const std::string& s) {
    if (s.rfind("zipf:", 0) != 0) return -1;
    char* end = nullptr;
    const double v = std::strtod(s.c_str() + 5, &end);
    if (end == s.c_str() + 5 || *end != '\0' || !(v >= 0) || !std::isfinite(v)) return -1;
    return v;
}

}  // namespace

std::string resolve_replay_trace(const std::string& trace) {
    if (trace.empty()) fail("--routing replay: needs a trace file (replay:TRACE)");
    std::error_code ec;
    if (std::filesystem::exists(trace, ec) || trace.find('/') != std::string::npos) return trace;
    std::string looked;
    const std::string p = find_in_checkout("bench/traces/" + trace + ".nmtr", &looked);
    if (p.empty()) fail("replay trace '{}': no such file, and no committed trace of that name (looked at: {})", trace, looked);
    return p;
}

std::string file_routing(const Model& model) {
    const GgufMetadata& m = model.gguf().metadata();
    if (const auto s = m.get_float("nitro.synth.router_skew_zipf"); s && *s > 0) return fmt::format("zipf:{:g}", *s);
    if (model.hp().name.rfind("synth-", 0) == 0) return "uniform";
    return "model";
}

std::vector<RoutingScenario> parse_routing_scenarios(const std::string& list, const Model& model) {
    std::vector<RoutingScenario> out;
    const std::string own = file_routing(model);
    for (const std::string& item : split_items(list)) {
        RoutingScenario r;
        if (item == "file") {
            r.name = own;
        } else if (item.rfind("replay:", 0) == 0) {
            r.trace = resolve_replay_trace(item.substr(7));
            RouteReplay check(r.trace, model);  // readable, valid, the model's shape: fail now, not mid-sweep
            r.name = item;
        } else if (item == "uniform" || item == "model" || parse_zipf(item) >= 0) {
            const bool same = item == own || (parse_zipf(item) >= 0 && parse_zipf(own) >= 0 &&
                                               std::abs(parse_zipf(item) - parse_zipf(own)) < 1e-6);
            if (!same)
                fail("--routing {}: {} routes as '{}' (the router is in the file); for '{}' use a file made with nitro synth{} "
                     "or --routing replay:TRACE",
                     item, model.path(), own, item,
                     item == "uniform" ? " (no --router-skew)" : item == "model" ? "" : " --router-skew " + item);
            r.name = own;
        } else {
            fail("--routing '{}': expected file, uniform, zipf:S, model or replay:TRACE", item);
        }
        if (std::find_if(out.begin(), out.end(), [&](const RoutingScenario& o) { return o.name == r.name; }) != out.end())
            fail("--routing: scenario '{}' is given twice", r.name);
        out.push_back(std::move(r));
    }
    if (out.empty()) fail("--routing is empty (expected e.g. file or replay:TRACE)");
    return out;
}

RouteReplay::RouteReplay(const std::string& trace_path, const Model& model) : name_(trace_path) {
    // The model's shape only (trace_header_from_model would hash the whole file).
    TraceHeader mh;
    mh.model_name = model.hp().name;
    mh.n_layer = static_cast<uint32_t>(model.hp().n_layer);
    mh.n_expert = static_cast<uint32_t>(model.hp().n_expert);
    mh.n_expert_used = static_cast<uint32_t>(model.hp().n_expert_used);
    Trace t;
    if (is_binary_trace(trace_path)) {
        t = read_trace(trace_path);
    } else {
        JsonlImportOptions jo;
        jo.model = &mh;
        t = import_jsonl_file(trace_path, jo);
    }
    init(t, model);
}

RouteReplay::RouteReplay(const Trace& trace, const Model& model, const std::string& name) : name_(name) { init(trace, model); }

void RouteReplay::init(const Trace& t, const Model& model) {
    const ModelHparams& hp = model.hp();
    const TraceHeader& h = t.header;
    if (h.n_layer != hp.n_layer || h.n_expert != hp.n_expert || h.n_expert_used != hp.n_expert_used)
        fail("replay trace {}: routing of {} layers x {} experts, top-{}, but {} has {} layers x {} experts, top-{}", name_,
             h.n_layer, h.n_expert, h.n_expert_used, model.path(), hp.n_layer, hp.n_expert, hp.n_expert_used);
    if (t.size() == 0) fail("replay trace {}: no records", name_);
    // The replay writes router logits that make a softmax router choose the trace's experts; a
    // sigmoid router with a score bias or expert groups would choose by other values.
    const GatingSpec g = model.arch().config(hp).gating;
    if (g.score != GatingSpec::Score::Softmax || g.score_bias || g.n_group > 1)
        fail("replay trace {}: route replay drives softmax routers; {} routes by {} scores{}{}, which it cannot replay", name_,
             hp.arch, g.score == GatingSpec::Score::Sigmoid ? "sigmoid" : "softmax", g.score_bias ? " with a score bias" : "",
             g.n_group > 1 ? " in expert groups" : "");
    n_layer_ = static_cast<int>(h.n_layer);
    n_expert_ = static_cast<int>(h.n_expert);
    k_ = static_cast<int>(h.n_expert_used);
    size_t n_steps = 0;
    const std::vector<uint32_t> step = t.step_index(&n_steps);
    const size_t L = static_cast<size_t>(n_layer_), K = static_cast<size_t>(k_);
    ids_.assign(n_steps * L * K, -1);
    target_.assign(n_steps * L * K, 0.f);
    std::vector<int8_t> phase(n_steps, -1);
    for (size_t i = 0; i < t.size(); ++i) {
        const size_t s = step[i], l = t.layer[i];
        int32_t* id = &ids_[(s * L + l) * K];
        if (id[0] >= 0)
            fail("replay trace {}: record {} routes layer {} of token (sequence {}, position {}) a second time", name_, i, l,
                 t.seq[i], t.pos[i]);
        if (phase[s] < 0) phase[s] = static_cast<int8_t>(t.phase[i]);
        const auto ids = t.record_ids(i);
        const auto w = t.record_weights(i);
        float* tg = &target_[(s * L + l) * K];
        for (size_t j = 0; j < K; ++j) {
            id[j] = ids[j];
            float v = w.empty() ? 0.f : std::max(kMinLogit, std::log(std::max(w[j], 1e-30f)));
            if (j > 0) v = std::min(v, tg[j - 1] - kMinGap);
            tg[j] = v;
        }
    }
    for (size_t s = 0; s < n_steps; ++s) {
        for (size_t l = 0; l < L; ++l)
            if (ids_[(s * L + l) * K] < 0 && model.layers()[l].moe()) {  // (a dense FFN layer routes nothing)
                size_t i = 0;
                while (step[i] != s) ++i;
                fail("replay trace {}: token (sequence {}, position {}) has no record for layer {}; a replay needs every layer of "
                     "every token",
                     name_, t.seq[i], t.pos[i], l);
            }
        (phase[s] == static_cast<int8_t>(TracePhase::Prefill) ? prefill_ : decode_).push_back(static_cast<int64_t>(s));
    }
    bias_.clear();
    for (const LayerWeights& lw : model.layers()) {
        const GgufTensorInfo* gb = lw[TensorId::ffn_gate_inp_bias];
        if (!gb) {
            bias_.emplace_back();
            continue;
        }
        if (gb->type != GgmlType::F32 || gb->n_elements() != n_expert_)
            fail("replay: router bias '{}' must be F32 with {} values", gb->name, n_expert_);
        const float* b = reinterpret_cast<const float*>(gb->data);
        bias_.emplace_back(b, b + n_expert_);
    }
}

void RouteReplay::next_chunk(std::span<const uint8_t> prefill) {
    chosen_.resize(prefill.size());
    for (size_t i = 0; i < prefill.size(); ++i) {
        const bool p = prefill[i] != 0;
        const std::vector<int64_t>& list = (p && !prefill_.empty()) || decode_.empty() ? prefill_ : decode_;
        int64_t& used = p ? prefill_used_ : decode_used_;
        chosen_[i] = list[static_cast<size_t>(used % static_cast<int64_t>(list.size()))];
        ++used;
    }
}

void RouteReplay::next_chunk(int64_t n) {
    const std::vector<uint8_t> p(static_cast<size_t>(n), n > 1 ? 1 : 0);
    next_chunk(p);
}

void RouteReplay::fill_logits(int layer, float* logits) const {
    const size_t L = static_cast<size_t>(n_layer_), K = static_cast<size_t>(k_), X = static_cast<size_t>(n_expert_);
    const std::vector<float>& b = bias_[static_cast<size_t>(layer)];
    for (size_t r = 0; r < chosen_.size(); ++r) {
        float* out = logits + r * X;
        for (size_t e = 0; e < X; ++e) out[e] = kOther - (b.empty() ? 0.f : b[e]);
        const size_t at = (static_cast<size_t>(chosen_[r]) * L + static_cast<size_t>(layer)) * K;
        if (ids_[at] < 0) continue;  // a layer without routed experts: nothing to route
        for (size_t j = 0; j < K; ++j) {
            const size_t e = static_cast<size_t>(ids_[at + j]);
            out[e] = target_[at + j] - (b.empty() ? 0.f : b[e]);
        }
    }
}

std::span<const int32_t> RouteReplay::row_experts(int64_t row, int layer) const {
    const size_t L = static_cast<size_t>(n_layer_), K = static_cast<size_t>(k_);
    return {&ids_[(static_cast<size_t>(chosen_.at(static_cast<size_t>(row))) * L + static_cast<size_t>(layer)) * K], K};
}

}  // namespace nitro
