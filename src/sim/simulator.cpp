#include "sim/simulator.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>
#include <charconv>
#include <map>
#include <type_traits>

namespace nitro {

int slots_for_vram(double gib, uint64_t bytes_per_slot_all_layers) {
    if (bytes_per_slot_all_layers == 0)
        fail("a VRAM budget needs the expert size: the trace header has none; give the model with -m MODEL");
    if (!(gib >= 0) || !std::isfinite(gib)) fail("VRAM budget {} GiB must be a number >= 0", gib);
    const double slots = std::floor(gib * 1073741824.0 / static_cast<double>(bytes_per_slot_all_layers));
    return slots > 1e9 ? 1000000000 : static_cast<int>(slots);
}

SimReport run_simulation(const ReplayTrace& trace, const SimOptions& opt, uint64_t n_records) {
    SimReport rep;
    rep.header = trace.header;
    rep.records = n_records;
    rep.tokens = trace.n_tokens;
    rep.accesses = trace.accesses();
    rep.ws_window = opt.ws_window;
    for (uint32_t l = 0; l < trace.header.n_layer; ++l) rep.bytes_per_slot_all_layers += trace.header.expert_bytes(l);
    const bool own_profile = opt.profile.per_layer.empty();
    const RoutingProfile profile = own_profile ? make_profile(trace) : opt.profile;
    rep.profile_source = own_profile ? "the trace itself (optimistic: it knows the future)"
                                     : (opt.profile_name.empty() ? "a given profile" : opt.profile_name);
    if (opt.capacities.empty()) fail("no capacity given");
    if (opt.policies.empty()) fail("no policy given");

    const int E = static_cast<int>(trace.header.n_expert);
    std::vector<int> caps;
    for (int c : opt.capacities) {
        if (c < 0) fail("capacity {} slots is negative", c);
        const int cc = std::min(c, E);
        if (std::find(caps.begin(), caps.end(), cc) == caps.end()) caps.push_back(cc);
    }
    const ReplayOptions ro{opt.ws_window, opt.ubatch};
    PolicySpec opt_spec;
    opt_spec.kind = PolicyKind::Opt;
    std::map<int, double> opt_rate;
    const double tokens = std::max<double>(1, static_cast<double>(trace.n_tokens));

    for (const PolicySpec& spec : opt.policies) {
        for (int c : caps) {
            const ReplayResult rr = replay_policy(trace, spec, profile, c, ro, opt.model);
            SimResult r;
            r.policy = spec.name();
            r.capacity = c;
            r.vram_bytes = static_cast<uint64_t>(c) * rep.bytes_per_slot_all_layers;
            r.hits = rr.total.hits;
            r.accesses = rr.total.accesses;
            r.admissions = rr.total.admissions;
            r.preloaded = rr.total.preloaded;
            r.hit_rate = r.accesses ? static_cast<double>(r.hits) / r.accesses : 0;
            double h2d = 0, cpu = 0, pre = 0;
            for (size_t l = 0; l < rr.layers.size(); ++l) {
                const double b = static_cast<double>(trace.header.expert_bytes(static_cast<uint32_t>(l)));
                const LayerCounts& lc = rr.layers[l];
                h2d += lc.admissions * b;
                cpu += (lc.accesses - lc.hits) * b;
                pre += lc.preloaded * b;
            }
            r.h2d_bytes_per_token = h2d / tokens;
            r.cpu_bytes_per_token = cpu / tokens;
            r.preload_bytes = static_cast<uint64_t>(pre);
            const double layer_steps = r.accesses / static_cast<double>(trace.k);
            r.ws_coverage = layer_steps > 0 ? rr.total.ws_coverage_sum / layer_steps : 0;
            r.seconds = rr.seconds;
            if (spec.kind == PolicyKind::Opt) opt_rate[c] = r.hit_rate;
            rep.results.push_back(r);
        }
    }
    for (int c : caps)
        if (!opt_rate.count(c)) {
            const ReplayResult rr = replay_policy(trace, opt_spec, profile, c, ReplayOptions{0, opt.ubatch});
            opt_rate[c] = rr.total.accesses ? static_cast<double>(rr.total.hits) / rr.total.accesses : 0;
        }
    for (SimResult& r : rep.results) r.gap_to_opt_points = (opt_rate[r.capacity] - r.hit_rate) * 100.0;

    for (int c : caps) {
        BestPolicy b;
        b.capacity = c;
        b.vram_bytes = static_cast<uint64_t>(c) * rep.bytes_per_slot_all_layers;
        b.opt_hit_rate = opt_rate[c];
        b.hit_rate = -1;
        for (const SimResult& r : rep.results)
            if (r.capacity == c && r.policy != "opt" && r.hit_rate > b.hit_rate) {
                b.hit_rate = r.hit_rate;
                b.policy = r.policy;
            }
        if (b.policy.empty()) {
            b.policy = "opt";
            b.hit_rate = b.opt_hit_rate;
        }
        rep.best.push_back(b);
    }
    rep.router = compute_router_stats(trace);
    return rep;
}

}  // namespace nitro

namespace nitro {

namespace {

template <typename T>
std::vector<T> parse_ranges(const std::string& text, const char* what, T default_step) {
    std::vector<T> out;
    size_t start = 0;
    auto num = [&](const std::string& s, const std::string& entry) -> T {
        T v{};
        const char* b = s.data();
        const char* e = s.data() + s.size();
        const auto [p, ec] = std::from_chars(b, e, v);
        if (s.empty() || ec != std::errc() || p != e) fail("{} '{}': '{}' is not a number", what, entry, s);
        return v;
    };
    while (start <= text.size()) {
        size_t end = text.find(',', start);
        if (end == std::string::npos) end = text.size();
        const std::string entry = text.substr(start, end - start);
        start = end + 1;
        if (entry.empty()) fail("{} list '{}' has an empty entry", what, text);
        std::vector<std::string> parts;
        size_t a = 0;
        for (size_t c; (c = entry.find(':', a)) != std::string::npos; a = c + 1) parts.push_back(entry.substr(a, c - a));
        parts.push_back(entry.substr(a));
        if (parts.size() == 1) {
            out.push_back(num(parts[0], entry));
            continue;
        }
        if (parts.size() > 3) fail("{} '{}': expected A, A:B or A:B:STEP", what, entry);
        const T lo = num(parts[0], entry), hi = num(parts[1], entry);
        const T step = parts.size() == 3 ? num(parts[2], entry) : default_step;
        if (!(step > 0) || !(hi >= lo)) fail("{} '{}': need A <= B and STEP > 0", what, entry);
        if ((hi - lo) / step > 100000) fail("{} '{}': more than 100000 values", what, entry);
        for (int i = 0;; ++i) {
            const T v = static_cast<T>(lo + step * i);
            if (v > hi + (std::is_floating_point_v<T> ? step * 1e-9 : 0)) break;
            out.push_back(v);
        }
    }
    return out;
}

}  // namespace

std::vector<int> parse_capacity_list(const std::string& text) {
    std::vector<int> v = parse_ranges<int>(text, "capacity", 1);
    for (int c : v)
        if (c < 0) fail("capacity {} slots is negative", c);
    return v;
}

std::vector<double> parse_gib_list(const std::string& text) {
    std::vector<double> v = parse_ranges<double>(text, "VRAM budget (GiB)", 1.0);
    for (double g : v)
        if (!(g >= 0) || !std::isfinite(g)) fail("VRAM budget {} GiB must be a finite number >= 0", g);
    return v;
}

}  // namespace nitro
