#include "sim/policy_spec.h"

#include "core/error.h"
#include "sim/belady_policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>

namespace nitro {

namespace {

constexpr const char* kAccepted =
    "lru, lfu, lru-freq, freq-decay[:HALF_LIFE], static, static-global, static+lru[:SHARE], rate[:M/R], opt, all";

double parse_number(const std::string& s, const std::string& entry) {
    double v = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v))
        fail("policy '{}': '{}' is not a number", entry, s);
    return v;
}

int parse_int(const std::string& s, const std::string& entry) {
    int v = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size()) fail("policy '{}': '{}' is not an integer", entry, s);
    return v;
}

std::vector<ExpertId> rank_by_count(const std::vector<uint64_t>& count) {
    std::vector<ExpertId> order(count.size());
    std::iota(order.begin(), order.end(), ExpertId{0});
    std::stable_sort(order.begin(), order.end(), [&](ExpertId a, ExpertId b) { return count[a] > count[b]; });
    return order;
}

}  // namespace

std::string PolicySpec::name() const {
    switch (kind) {
        case PolicyKind::Lru: return "lru";
        case PolicyKind::Lfu: return "lfu";
        case PolicyKind::LruFreq: return "lru-freq";
        case PolicyKind::FreqDecay: return fmt::format("freq-decay:{}", half_life);
        case PolicyKind::Static: return "static";
        case PolicyKind::StaticGlobal: return "static-global";
        case PolicyKind::StaticLru: return fmt::format("static+lru:{}", static_share);
        case PolicyKind::Rate: return fmt::format("rate:{}/{}", rate_admissions, rate_window);
        case PolicyKind::Opt: return "opt";
    }
    return "?";
}

bool PolicySpec::needs_profile() const {
    return kind == PolicyKind::Static || kind == PolicyKind::StaticGlobal || kind == PolicyKind::StaticLru;
}

std::vector<PolicySpec> parse_policy_list(const std::string& text) {
    std::vector<PolicySpec> out;
    auto add = [&](const PolicySpec& p) {
        for (const auto& q : out)
            if (q.name() == p.name()) return;
        out.push_back(p);
    };
    size_t start = 0;
    while (start <= text.size()) {
        size_t end = text.find(',', start);
        if (end == std::string::npos) end = text.size();
        const std::string entry = text.substr(start, end - start);
        start = end + 1;
        if (entry.empty()) {
            if (end == text.size()) break;
            fail("policy list '{}' has an empty entry", text);
        }
        const size_t colon = entry.find(':');
        const std::string base = entry.substr(0, colon);
        const std::string arg = colon == std::string::npos ? "" : entry.substr(colon + 1);
        const bool has_arg = colon != std::string::npos;
        PolicySpec p;
        auto no_arg = [&] {
            if (has_arg) fail("policy '{}' takes no parameter", entry);
        };
        if (base == "all") {
            no_arg();
            for (PolicyKind k : {PolicyKind::Lru, PolicyKind::Lfu, PolicyKind::LruFreq, PolicyKind::FreqDecay,
                                 PolicyKind::Static, PolicyKind::StaticGlobal, PolicyKind::StaticLru, PolicyKind::Rate,
                                 PolicyKind::Opt}) {
                PolicySpec d;
                d.kind = k;
                add(d);
            }
            continue;
        }
        if (base == "lru") { no_arg(); p.kind = PolicyKind::Lru; }
        else if (base == "lfu") { no_arg(); p.kind = PolicyKind::Lfu; }
        else if (base == "lru-freq") { no_arg(); p.kind = PolicyKind::LruFreq; }
        else if (base == "opt") { no_arg(); p.kind = PolicyKind::Opt; }
        else if (base == "static") { no_arg(); p.kind = PolicyKind::Static; }
        else if (base == "static-global") { no_arg(); p.kind = PolicyKind::StaticGlobal; }
        else if (base == "freq-decay") {
            p.kind = PolicyKind::FreqDecay;
            if (has_arg) p.half_life = parse_number(arg, entry);
            if (!(p.half_life > 0)) fail("policy '{}': the half-life must be > 0 tokens", entry);
        } else if (base == "static+lru") {
            p.kind = PolicyKind::StaticLru;
            if (has_arg) p.static_share = parse_number(arg, entry);
            if (!(p.static_share >= 0 && p.static_share <= 1))
                fail("policy '{}': the static share must be in [0, 1]", entry);
        } else if (base == "rate") {
            p.kind = PolicyKind::Rate;
            if (has_arg) {
                const size_t slash = arg.find('/');
                if (slash == std::string::npos) fail("policy '{}': expected rate:M/R (M admissions every R tokens)", entry);
                p.rate_admissions = parse_int(arg.substr(0, slash), entry);
                p.rate_window = parse_int(arg.substr(slash + 1), entry);
            }
            if (p.rate_admissions < 0 || p.rate_window < 1)
                fail("policy '{}': need M >= 0 admissions every R >= 1 tokens", entry);
        } else {
            fail("unknown policy '{}' (accepted: {})", entry, kAccepted);
        }
        add(p);
    }
    if (out.empty()) fail("no policy given (accepted: {})", kAccepted);
    return out;
}

RoutingProfile make_profile(const ReplayTrace& trace) {
    const uint32_t E = trace.header.n_expert;
    RoutingProfile prof;
    std::vector<uint64_t> global(E, 0);
    for (const LayerStream& s : trace.layers) {
        std::vector<uint64_t> count(E, 0);
        for (ExpertId e : s.ids) ++count[e];
        for (uint32_t e = 0; e < E; ++e) global[e] += count[e];
        prof.per_layer.push_back(rank_by_count(count));
    }
    prof.global = rank_by_count(global);
    return prof;
}

CacheSetup cache_setup(const PolicySpec& spec, const ReplayTrace& trace, const RoutingProfile& profile, int capacity,
                       const SimModel& model) {
    const int E = static_cast<int>(trace.header.n_expert);
    if (spec.kind == PolicyKind::Opt) fail("policy opt replays record by record (replay_policy), not through the cache");
    if (spec.needs_profile() &&
        (profile.per_layer.size() != trace.layers.size() || profile.global.size() != static_cast<size_t>(E)))
        fail("policy {}: the profile has {} layers x {} experts, the trace {} x {}", spec.name(),
             profile.per_layer.size(), profile.global.size(), trace.layers.size(), E);
    if (capacity < 0) fail("capacity {} slots is negative", capacity);
    const int C = std::min(capacity, E);
    CacheSetup cs;
    cs.opt.static_share = 0;
    cs.opt.prefill_weight = model.prefill_weight;
    cs.opt.staging_buffers = model.staging_buffers;
    // No rate limit: every step may admit every miss it requests (a decode step at most k).
    cs.opt.refresh_every = 1;
    cs.opt.admit_per_token = std::max(E, static_cast<int>(trace.k)) * 1.0;
    int n_static = 0;
    const std::vector<ExpertId>* ranked = nullptr;
    switch (spec.kind) {
        case PolicyKind::Lru: cs.opt.policy = "lru"; break;
        case PolicyKind::Lfu: cs.opt.policy = "lfu"; break;
        case PolicyKind::LruFreq: cs.opt.policy = "lru-freq"; break;
        case PolicyKind::FreqDecay: cs.opt.policy = fmt::format("freq-decay:{}", spec.half_life); break;
        case PolicyKind::Static:
        case PolicyKind::StaticGlobal:
            cs.opt.refresh_every = 0;
            n_static = C;
            break;
        case PolicyKind::StaticLru:
            n_static = static_cast<int>(std::floor(C * spec.static_share + 1e-9));
            break;
        case PolicyKind::Rate:
            if (spec.rate_admissions == 0) cs.opt.refresh_every = 0;
            else {
                cs.opt.refresh_every = spec.rate_window;
                cs.opt.admit_per_token = static_cast<double>(spec.rate_admissions) / spec.rate_window;
            }
            break;
        case PolicyKind::Opt: break;
    }
    for (size_t l = 0; l < trace.layers.size(); ++l) {
        LayerSlots ls;
        ls.capacity = C;
        ls.n_static = n_static;
        ls.expert_bytes = trace.header.expert_bytes(static_cast<uint32_t>(l));
        if (n_static > 0) {
            ranked = spec.kind == PolicyKind::StaticGlobal ? &profile.global : &profile.per_layer[l];
            for (int i = 0; i < n_static && i < static_cast<int>(ranked->size()); ++i) {
                const ExpertId e = (*ranked)[static_cast<size_t>(i)];
                if (e >= E) fail("{}: profile names expert {} but the layer has {} experts", spec.name(), e, E);
                ls.resident.push_back(e);
            }
        }
        cs.layers.push_back(std::move(ls));
    }
    return cs;
}

PolicyFactory make_policy_factory(const PolicySpec& spec, const ReplayTrace& trace, const RoutingProfile& profile) {
    (void)profile;
    const int E = static_cast<int>(trace.header.n_expert);
    if (spec.kind != PolicyKind::Opt)
        fail("policy {}: only opt replays record by record; the others run through the expert cache", spec.name());
    return [E, &trace](uint32_t l, int c) {
        return std::make_unique<BeladyPolicy>(E, c, trace.layers[l].ids, static_cast<int>(trace.k));
    };
}

ReplayResult replay_policy(const ReplayTrace& trace, const PolicySpec& spec, const RoutingProfile& profile, int capacity,
                           const ReplayOptions& opt, const SimModel& model) {
    if (spec.kind == PolicyKind::Opt) return replay(trace, make_policy_factory(spec, trace, profile), capacity, opt);
    return replay_cache(trace, cache_setup(spec, trace, profile, capacity, model), opt);
}

}  // namespace nitro
