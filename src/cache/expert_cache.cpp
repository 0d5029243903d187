#include "cache/expert_cache.h"

#include "core/error.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>

namespace nitro {

// ---------------------------------------------------------------------------------------------
// Options

int ResidencyOptions::admissions_per_window() const {
    if (frozen()) return 0;
    return std::max(1, static_cast<int>(std::lround(admit_per_token * refresh_every)));
}

std::string ResidencyOptions::describe() const {
    if (frozen()) return fmt::format("frozen (--refresh-every 0), static {:.0f}%", static_share * 100);
    const int m = admissions_per_window();
    return fmt::format("{}, static {:.0f}%, {} admission{}/layer every {} token{}, prefill weight {:g}, {}", policy,
                       static_share * 100, m, m == 1 ? "" : "s", refresh_every, refresh_every == 1 ? "" : "s", prefill_weight,
                       staging_buffers < 0 ? std::string("unlimited staging") : fmt::format("{} staging buffers", staging_buffers));
}

void ResidencyOptions::validate() const {
    if (!(static_share >= 0 && static_share <= 1)) fail("--static-slots {} must be a share in [0, 1]", static_share);
    if (refresh_every < 0) fail("--refresh-every {} must be >= 0 tokens (0 = frozen residency)", refresh_every);
    if (!(admit_per_token > 0) || !std::isfinite(admit_per_token))
        fail("--admit-per-token {} must be a number > 0 (admissions per layer per token)", admit_per_token);
    if (!(prefill_weight >= 0) || !std::isfinite(prefill_weight))
        fail("--prefill-weight {} must be a number >= 0 (decode tokens a prompt chunk counts as)", prefill_weight);
    (void)make_eviction_policy(policy, 2, 1);  // throws for an unknown policy
}

std::unique_ptr<ExpertCachePolicy> make_eviction_policy(const std::string& name, int n_expert, int capacity) {
    const size_t colon = name.find(':');
    const std::string base = name.substr(0, colon);
    const bool has_arg = colon != std::string::npos;
    if (base == "lru" && !has_arg) return std::make_unique<LruPolicy>(n_expert, capacity);
    if (base == "lfu" && !has_arg) return std::make_unique<LfuPolicy>(n_expert, capacity);
    if (base == "lru-freq" && !has_arg) return std::make_unique<LruFreqPolicy>(n_expert, capacity);
    if (base == "freq-decay") {
        double h = 32;
        if (has_arg) {
            const std::string a = name.substr(colon + 1);
            const auto r = std::from_chars(a.data(), a.data() + a.size(), h);
            if (r.ec != std::errc{} || r.ptr != a.data() + a.size() || !(h > 0))
                fail("eviction policy '{}': expected freq-decay:HALF_LIFE with a half-life > 0 tokens", name);
        }
        return std::make_unique<FreqDecayPolicy>(n_expert, capacity, h);
    }
    fail("unknown eviction policy '{}' (accepted: lru, lfu, lru-freq, freq-decay[:HALF_LIFE_TOKENS])", name);
}

nlohmann::json setup_to_json(const CacheSetup& s) {
    nlohmann::json layers = nlohmann::json::array();
    for (const LayerSlots& l : s.layers)
        layers.push_back({{"n_expert", l.n_expert},
                          {"resident", l.resident},
                          {"capacity", l.capacity < 0 ? static_cast<int>(l.resident.size()) : l.capacity},
                          {"n_static", l.n_static},
                          {"expert_bytes", l.expert_bytes}});
    return {{"options",
             {{"policy", s.opt.policy},
              {"static_share", s.opt.static_share},
              {"refresh_every", s.opt.refresh_every},
              {"admit_per_token", s.opt.admit_per_token},
              {"prefill_weight", s.opt.prefill_weight},
              {"staging_buffers", s.opt.staging_buffers}}},
            {"layers", layers}};
}

CacheSetup setup_from_json(const nlohmann::json& j) {
    auto need = [](const nlohmann::json& o, const char* key, const std::string& where) -> const nlohmann::json& {
        if (!o.is_object() || !o.contains(key)) fail("residency setup: {} has no \"{}\"", where, key);
        return o.at(key);
    };
    CacheSetup s;
    try {
        const nlohmann::json& o = need(j, "options", "the file");
        s.opt.policy = need(o, "policy", "options").get<std::string>();
        s.opt.static_share = need(o, "static_share", "options").get<double>();
        s.opt.refresh_every = need(o, "refresh_every", "options").get<int>();
        s.opt.admit_per_token = need(o, "admit_per_token", "options").get<double>();
        s.opt.prefill_weight = need(o, "prefill_weight", "options").get<double>();
        s.opt.staging_buffers = need(o, "staging_buffers", "options").get<int>();
        s.opt.validate();
        const nlohmann::json& ls = need(j, "layers", "the file");
        if (!ls.is_array()) fail("residency setup: \"layers\" is not an array");
        for (size_t i = 0; i < ls.size(); ++i) {
            const std::string where = fmt::format("layers[{}]", i);
            LayerSlots l;
            l.n_expert = ls[i].value("n_expert", -1);  // (absent in setups written before layers could lack experts)
            l.resident = need(ls[i], "resident", where).get<std::vector<int32_t>>();
            l.capacity = need(ls[i], "capacity", where).get<int>();
            l.n_static = need(ls[i], "n_static", where).get<int>();
            l.expert_bytes = need(ls[i], "expert_bytes", where).get<uint64_t>();
            s.layers.push_back(std::move(l));
        }
    } catch (const nlohmann::json::exception& e) {
        fail("residency setup: {}", e.what());
    }
    return s;
}

void CacheCounters::add(const CacheCounters& o) {
    hits += o.hits;
    misses += o.misses;
    admissions += o.admissions;
    evictions += o.evictions;
    refused_rate += o.refused_rate;
    refused_staging += o.refused_staging;
    refused_policy += o.refused_policy;
    late_copies += o.late_copies;
    failed_copies += o.failed_copies;
    flips += o.flips;
    h2d_bytes += o.h2d_bytes;
}

// ---------------------------------------------------------------------------------------------
// The cache

struct ExpertCache::Layer {
    int n_expert = 0;                    // the layer's routed experts (0: a dense FFN layer)
    std::unique_ptr<ExpertCachePolicy> policy;
    int capacity = 0;
    uint64_t expert_bytes = 0;
    std::vector<int32_t> ready_slot_of;  // [n_expert] the snapshot: slot if ready, else -1
    std::vector<uint64_t> slot_gen;      // [capacity] admissions into the slot so far
    std::vector<uint8_t> resident;       // [n_expert] mask returned by access()
    std::vector<Admission> admissions;   // of the current step
    std::vector<SlotChange> changes;     // scratch
    std::vector<ExpertId> requested, protect;
    std::vector<uint32_t> count;         // [n_expert] scratch (chunk counts)
    int64_t window = -1;
    int used = 0;                        // admissions in the current window
    bool changed = true;
    CacheCounters c;
};

ExpertCache::ExpertCache(std::vector<LayerSlots> layers, int n_expert, int n_expert_used, const ResidencyOptions& opt,
                         CopyBackend* backend)
    : setup_{opt, layers}, opt_(opt), n_expert_(n_expert), k_(n_expert_used), backend_(backend) {
    opt_.validate();
    if (n_expert < 1 || n_expert >= kNoExpert) fail("expert cache: n_expert {} out of range", n_expert);
    if (n_expert_used < 1 || n_expert_used > n_expert)
        fail("expert cache: n_expert_used {} out of range [1, {}]", n_expert_used, n_expert);
    if (!opt_.frozen() && !backend_) fail("expert cache: adaptive residency needs a copy backend");
    unlimited_ = opt_.staging_buffers < 0;
    if (!unlimited_ && backend_)
        for (int b = backend_->n_buffers() - 1; b >= 0; --b) free_buffers_.push_back(b);
    for (size_t il = 0; il < layers.size(); ++il) {
        LayerSlots& ls = layers[il];
        auto L = std::make_unique<Layer>();
        L->n_expert = ls.n_expert < 0 ? n_expert : ls.n_expert;
        if (L->n_expert > n_expert) fail("layer {}: {} experts, more than the cache's {}", il, L->n_expert, n_expert);
        L->capacity = ls.capacity < 0 ? static_cast<int>(ls.resident.size()) : ls.capacity;
        if (L->capacity > L->n_expert) fail("layer {}: {} slots for {} experts", il, L->capacity, L->n_expert);
        if (ls.resident.size() > static_cast<size_t>(L->capacity))
            fail("layer {}: {} initial residents for {} slots", il, ls.resident.size(), L->capacity);
        L->expert_bytes = ls.expert_bytes;
        if (L->n_expert == 0) {  // a layer without routed experts: nothing to cache
            layers_.push_back(std::move(L));
            continue;
        }
        const int ne = L->n_expert;
        L->policy = make_eviction_policy(opt_.policy, ne, L->capacity);
        L->ready_slot_of.assign(static_cast<size_t>(ne), -1);
        L->slot_gen.assign(static_cast<size_t>(L->capacity), 0);
        L->resident.assign(static_cast<size_t>(ne), 0);
        L->changes.resize(static_cast<size_t>(ne));
        L->count.assign(static_cast<size_t>(ne), 0);
        const int n_static = std::clamp(ls.n_static, 0, L->capacity);
        for (int s = 0; s < static_cast<int>(ls.resident.size()); ++s) {
            const int32_t e = ls.resident[static_cast<size_t>(s)];
            if (e < 0 || e >= ne) fail("layer {}: initial resident expert {} out of range [0, {})", il, e, ne);
            if (L->policy->lookup(static_cast<ExpertId>(e))) fail("layer {}: expert {} is resident twice", il, e);
            L->policy->preload(static_cast<ExpertId>(e), s < n_static);
            // Preloading fills slots from the top of the free stack: slot numbers follow the order.
            const int slot = L->policy->slot_of(static_cast<ExpertId>(e));
            NITRO_CHECK(slot == s);
            L->ready_slot_of[static_cast<size_t>(e)] = slot;
        }
        layers_.push_back(std::move(L));
    }
}

ExpertCache::~ExpertCache() = default;

void ExpertCache::land(const Flight& f, CopyBackend::State st) {
    Layer& L = *layers_[static_cast<size_t>(f.layer)];
    // The slot may have been given to another admission since (the expert was evicted while its
    // copy was in flight): then this copy flips nothing.
    const bool current = L.slot_gen[static_cast<size_t>(f.slot)] == f.gen && L.policy->slot_of(f.expert) == f.slot;
    if (st == CopyBackend::State::Landed) {
        if (current) {
            L.ready_slot_of[f.expert] = f.slot;
            L.changed = true;
            ++L.c.flips;
        }
    } else {
        ++L.c.failed_copies;
        if (current) L.policy->drop(f.expert);
    }
    if (f.buffer >= 0) free_buffers_.push_back(f.buffer);
}

void ExpertCache::begin_step(int64_t n_tokens) {
    if (n_tokens < 1) fail("expert cache: a step of {} tokens", n_tokens);
    clock_ += n_tokens_;
    n_tokens_ = n_tokens;
    ++step_;
    size_t keep = 0;
    for (size_t i = 0; i < flight_.size(); ++i) {
        Flight& f = flight_[i];
        const CopyBackend::State st = backend_->poll(f.buffer);
        if (st == CopyBackend::State::Pending) {
            if (!f.late_counted) {
                ++layers_[static_cast<size_t>(f.layer)]->c.late_copies;
                f.late_counted = true;
            }
            flight_[keep++] = f;
            continue;
        }
        land(f, st);
    }
    flight_.resize(keep);
    buffers_at_start_ = static_cast<int>(free_buffers_.size());
    buffers_taken_ = 0;
}

ExpertCache::LayerStep ExpertCache::access(int layer, std::span<const int32_t> ids) {
    if (layer < 0 || layer >= n_layer()) fail("expert cache: layer {} out of range", layer);
    if (step_ == 0) fail("expert cache: access before begin_step");
    Layer& L = *layers_[static_cast<size_t>(layer)];
    if (L.n_expert == 0) fail("expert cache: layer {} has no routed experts", layer);
    const size_t n_sel = static_cast<size_t>(n_tokens_) * static_cast<size_t>(k_);
    if (ids.size() % static_cast<size_t>(k_) != 0 || ids.size() > n_sel)
        fail("expert cache: {} selections for a step of {} tokens x {}", ids.size(), n_tokens_, k_);
    L.admissions.clear();
    std::fill(L.resident.begin(), L.resident.end(), 0);
    for (int32_t e : ids) {
        if (e < 0 || e >= L.n_expert) fail("expert cache: expert id {} out of range [0, {})", e, L.n_expert);
        const bool hit = L.ready_slot_of[static_cast<size_t>(e)] >= 0;
        L.resident[static_cast<size_t>(e)] = hit;
        hit ? ++L.c.hits : ++L.c.misses;
    }
    if (opt_.frozen() || L.capacity == 0) return {L.resident, L.admissions};

    // The requested set (recency, admissions) and the protected set (no eviction).
    L.requested.clear();
    L.protect.clear();
    if (n_tokens_ == 1) {
        for (int32_t e : ids) L.requested.push_back(static_cast<ExpertId>(e));
    } else {
        for (int32_t e : ids)
            if (L.count[static_cast<size_t>(e)]++ == 0) L.protect.push_back(static_cast<ExpertId>(e));
        std::vector<ExpertId>& order = L.requested;
        order = L.protect;
        std::sort(order.begin(), order.end(), [&](ExpertId a, ExpertId b) {
            return L.count[a] != L.count[b] ? L.count[a] > L.count[b] : a < b;
        });
        const size_t want = static_cast<size_t>(std::lround(opt_.prefill_weight * k_));
        if (order.size() > want) order.resize(want);
        for (ExpertId e : L.protect) L.count[e] = 0;
    }
    // The budget: what is left of the window's rate, and the staging buffers left in this step.
    // Windows are staggered by layer (layer l's start l tokens later, modulo the window), so each
    // token only some layers get a fresh budget and the staging buffers are shared out evenly.
    const int64_t window = (clock_ + layer) / opt_.refresh_every;
    if (window != L.window) {
        L.window = window;
        L.used = 0;
    }
    const int rate_left = std::max(0, opt_.admissions_per_window() - L.used);
    const int buffers_left = unlimited_ ? rate_left : buffers_at_start_ - buffers_taken_;
    StepLimits lim;
    lim.protect = L.protect;
    lim.max_admissions = std::min(rate_left, buffers_left);
    const StepOutcome o = L.policy->access(L.requested, clock_, L.changes, lim);
    if (o.refused_limit > 0) (buffers_left < rate_left ? L.c.refused_staging : L.c.refused_rate) += static_cast<uint64_t>(o.refused_limit);
    L.c.refused_policy += static_cast<uint64_t>(o.refused_policy);
    for (int a = 0; a < o.admissions; ++a) {
        const SlotChange& ch = L.changes[static_cast<size_t>(a)];
        if (ch.evicted != kNoExpert) {
            L.ready_slot_of[ch.evicted] = -1;
            ++L.c.evictions;
        }
        ++L.slot_gen[static_cast<size_t>(ch.slot)];
        Admission ad{ch.expert, ch.evicted, ch.slot, -1};
        if (!unlimited_) {
            ad.buffer = free_buffers_.back();
            free_buffers_.pop_back();
            ++buffers_taken_;
        }
        L.admissions.push_back(ad);
        ++L.c.admissions;
        L.c.h2d_bytes += L.expert_bytes;
        L.changed = L.changed || ch.evicted != kNoExpert;
    }
    L.used += o.admissions;
    return {L.resident, L.admissions};
}

void ExpertCache::commit(int layer) {
    Layer& L = *layers_.at(static_cast<size_t>(layer));
    for (const Admission& ad : L.admissions) {
        const uint64_t gen = L.slot_gen[static_cast<size_t>(ad.slot)];
        if (backend_ && backend_->submit(ad.buffer, layer, ad.slot, ad.expert)) {
            flight_.push_back(Flight{ad.buffer, layer, ad.slot, ad.expert, gen, step_, false});
            continue;
        }
        // Could not start: the expert leaves its slot, the buffer is free again after the step.
        land(Flight{ad.buffer, layer, ad.slot, ad.expert, gen, step_, false}, CopyBackend::State::Failed);
    }
    L.admissions.clear();
}

void ExpertCache::abandon(int layer) {
    Layer& L = *layers_.at(static_cast<size_t>(layer));
    for (const Admission& ad : L.admissions)
        land(Flight{ad.buffer, layer, ad.slot, ad.expert, L.slot_gen[static_cast<size_t>(ad.slot)], step_, false},
             CopyBackend::State::Failed);
    L.admissions.clear();
}

std::span<const int32_t> ExpertCache::slot_of(int layer) const { return layers_.at(static_cast<size_t>(layer))->ready_slot_of; }
std::span<const ExpertId> ExpertCache::slots(int layer) const {
    const Layer& L = *layers_.at(static_cast<size_t>(layer));
    return L.policy ? L.policy->slots() : std::span<const ExpertId>{};
}
int ExpertCache::capacity(int layer) const { return layers_.at(static_cast<size_t>(layer))->capacity; }
const CacheCounters& ExpertCache::counters(int layer) const { return layers_.at(static_cast<size_t>(layer))->c; }

bool ExpertCache::take_changed(int layer) {
    Layer& L = *layers_.at(static_cast<size_t>(layer));
    const bool c = L.changed;
    L.changed = false;
    return c;
}

CacheCounters ExpertCache::total() const {
    CacheCounters t;
    for (const auto& L : layers_) t.add(L->c);
    return t;
}

}  // namespace nitro
