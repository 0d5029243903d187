#include "server/live_stats.h"

#include "cache/expert_cache.h"
#include "server/scheduler.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

namespace nitro::server {

using json = nlohmann::json;

LiveStats::LiveStats(LiveShape shape, LiveStatsOptions opt) : shape_(std::move(shape)), opt_(opt), start_(Clock::now()) {
    const size_t n = static_cast<size_t>(std::max(0, shape_.n_layer)) * static_cast<size_t>(std::max(0, shape_.n_expert));
    counts_ = std::make_unique<std::atomic<uint64_t>[]>(n);
    for (size_t i = 0; i < n; ++i) counts_[i].store(0, std::memory_order_relaxed);
    seen_.assign(n, 0);
    recent_.assign(n, 0.0f);
    mark_.t = start_;
    auto empty = std::make_shared<LiveSnapshot>();
    empty->shape = shape_;
    snap_ = std::move(empty);
}

bool LiveStats::wants_routes(const Engine& engine) { return engine.expert_cache() != nullptr || engine.expert_counters() == nullptr; }

const char* LiveStats::mode_of(const Engine& engine) {
    if (engine.expert_cache()) return "hybrid";
    if (engine.expert_counters()) return "gpu";
    return "cpu";
}

void LiveStats::on_route(const RouteEvent& e) {
    if (e.layer < 0 || e.layer >= shape_.n_layer) return;
    std::atomic<uint64_t>* row = &counts_[static_cast<size_t>(e.layer) * static_cast<size_t>(shape_.n_expert)];
    for (int32_t id : e.experts)
        if (id >= 0 && id < shape_.n_expert) row[id].fetch_add(1, std::memory_order_relaxed);
}

void LiveStats::on_step(uint64_t decode_rows, uint64_t prompt_rows, double seconds) {
    decode_rows_.fetch_add(decode_rows, std::memory_order_relaxed);
    prompt_rows_.fetch_add(prompt_rows, std::memory_order_relaxed);
    steps_.fetch_add(1, std::memory_order_relaxed);
    busy_ns_.fetch_add(static_cast<uint64_t>(std::max(0.0, seconds) * 1e9), std::memory_order_relaxed);
}

void LiveStats::on_finish(const JobStats& st, const char* finish) {
    LastRequest r;
    r.valid = true;
    r.prompt_tokens = st.n_prompt;
    r.cached_tokens = st.n_reused;
    r.completion_tokens = st.n_generated;
    r.queue_ms = st.queue_ms;
    // The first token is sampled right after the prompt's last chunk.
    r.ttft_ms = st.n_generated > 0 ? st.queue_ms + st.prompt_ms : 0;
    const int64_t evaluated = st.n_prompt - st.n_reused;
    r.prompt_tok_s = st.prompt_ms > 0 && evaluated > 0 ? 1000.0 * static_cast<double>(evaluated) / st.prompt_ms : 0;
    const int64_t steps = std::max<int64_t>(0, st.n_generated - 1);
    r.decode_tok_s = st.decode_ms > 0 && steps > 0 ? 1000.0 * static_cast<double>(steps) / st.decode_ms : 0;
    r.finish = finish;
    std::lock_guard<std::mutex> lk(mu_);
    last_ = std::move(r);
    ++finished_;
}

bool LiveStats::due() const {
    const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start_).count();
    return now - last_publish_ns_.load(std::memory_order_relaxed) >= std::chrono::nanoseconds(kPublishInterval).count();
}

std::vector<std::vector<uint8_t>> expert_homes(const ExpertCache& cache, const LiveShape& shape) {
    std::vector<std::vector<uint8_t>> out(static_cast<size_t>(shape.n_layer));
    const int n_layer = std::min(shape.n_layer, cache.n_layer());
    for (int il = 0; il < n_layer; ++il) {
        if (!shape.moe_layer[static_cast<size_t>(il)]) continue;
        std::vector<uint8_t>& h = out[static_cast<size_t>(il)];
        h.assign(static_cast<size_t>(shape.n_expert), static_cast<uint8_t>(ExpertHome::CPU));
        const std::span<const int32_t> slot_of = cache.slot_of(il);
        const LayerSlots& ls = cache.setup().layers[static_cast<size_t>(il)];
        for (size_t e = 0; e < h.size() && e < slot_of.size(); ++e)
            if (slot_of[e] >= 0) h[e] = static_cast<uint8_t>(ExpertHome::GPU_SLOT);
        // The first n_static residents of the plan hold their slots for good.
        for (int s = 0; s < ls.n_static && s < static_cast<int>(ls.resident.size()); ++s) {
            const int32_t e = ls.resident[static_cast<size_t>(s)];
            if (e >= 0 && e < shape.n_expert && h[static_cast<size_t>(e)] != static_cast<uint8_t>(ExpertHome::CPU))
                h[static_cast<size_t>(e)] = static_cast<uint8_t>(ExpertHome::GPU_STATIC);
        }
    }
    return out;
}

std::vector<std::vector<uint8_t>> expert_homes(const Engine& engine, const LiveShape& shape) {
    if (const ExpertCache* c = engine.expert_cache()) return expert_homes(*c, shape);
    const ExpertHome all = engine.expert_counters() ? ExpertHome::GPU_STATIC : ExpertHome::CPU;
    std::vector<std::vector<uint8_t>> out(static_cast<size_t>(shape.n_layer));
    for (int il = 0; il < shape.n_layer; ++il)
        if (shape.moe_layer[static_cast<size_t>(il)]) out[static_cast<size_t>(il)].assign(static_cast<size_t>(shape.n_expert), static_cast<uint8_t>(all));
    return out;
}

void LiveStats::publish(const Engine& engine, std::span<const SlotLoad> slots, int64_t n_ctx) {
    const auto now = Clock::now();
    last_publish_ns_.store(std::chrono::duration_cast<std::chrono::nanoseconds>(now - start_).count(), std::memory_order_relaxed);
    auto s = std::make_shared<LiveSnapshot>();
    s->t_s = std::chrono::duration<double>(now - start_).count();
    s->mode = mode_of(engine);
    s->engine = engine.describe();
    s->shape = shape_;
    s->routing = routing_.load();
    s->cache = engine.expert_cache() != nullptr;
    s->half_life_tokens = kHalfLifeTokens;
    s->decode_rows = decode_rows_.load(std::memory_order_relaxed);
    s->prompt_rows = prompt_rows_.load(std::memory_order_relaxed);
    s->steps = steps_.load(std::memory_order_relaxed);
    const uint64_t busy_ns = busy_ns_.load(std::memory_order_relaxed);
    s->busy_s = static_cast<double>(busy_ns) / 1e9;
    s->slots.assign(slots.begin(), slots.end());
    s->n_ctx = n_ctx;
    s->kv_host_bytes = engine.kv_host_bytes();
    s->home = expert_homes(engine, shape_);

    // Selections: since start, and decayed by the rows evaluated since the last publish.
    const uint64_t rows = s->decode_rows + s->prompt_rows;
    const float decay = static_cast<float>(std::exp2(-static_cast<double>(rows - rows_seen_) / kHalfLifeTokens));
    rows_seen_ = rows;
    const size_t X = static_cast<size_t>(shape_.n_expert);
    s->selections.resize(static_cast<size_t>(shape_.n_layer));
    s->recent.resize(static_cast<size_t>(shape_.n_layer));
    for (size_t il = 0; il < static_cast<size_t>(shape_.n_layer); ++il) {
        if (!shape_.moe_layer[il]) continue;
        s->selections[il].resize(X);
        s->recent[il].resize(X);
        for (size_t e = 0; e < X; ++e) {
            const size_t i = il * X + e;
            const uint64_t c = counts_[i].load(std::memory_order_relaxed);
            recent_[i] = recent_[i] * decay + static_cast<float>(c - seen_[i]);
            seen_[i] = c;
            s->selections[il][e] = c;
            s->recent[il][e] = recent_[i];
        }
    }
    // Where the work went: the engine's own counters (GPU engines); on the CPU engine every
    // selection is computed by the CPU.
    if (const ExpertCounters* c = engine.expert_counters()) {
        s->counters = *c;
    } else {
        s->counters.layers.resize(static_cast<size_t>(shape_.n_layer));
        for (size_t il = 0; il < s->selections.size(); ++il)
            for (uint64_t v : s->selections[il]) s->counters.layers[il].cpu_pairs += v;
    }
    const ExpertLayerCounters tot = s->counters.total();

    std::lock_guard<std::mutex> lk(mu_);
    s->last = last_;
    s->requests_finished = finished_;
    // History: one sample per history_interval with work, rates over the interval's busy time.
    if (now - mark_.t >= opt_.history_interval || history_.empty()) {
        Mark m{now, s->decode_rows, s->prompt_rows, busy_ns, tot.cache.hits, tot.cache.misses, tot.cpu_pairs,
               tot.cpu_pairs + tot.gpu_pairs + tot.staged_pairs};
        const double busy = static_cast<double>(m.busy_ns - mark_.busy_ns) / 1e9;
        if (m.decode + m.prompt > mark_.decode + mark_.prompt) {
            LiveSample p;
            p.t_s = s->t_s;
            p.decode_tok_s = busy > 0 ? static_cast<double>(m.decode - mark_.decode) / busy : 0;
            p.prompt_tok_s = busy > 0 ? static_cast<double>(m.prompt - mark_.prompt) / busy : 0;
            const uint64_t looked = (m.hits - mark_.hits) + (m.misses - mark_.misses);
            if (s->cache && looked > 0) p.hit_rate = static_cast<double>(m.hits - mark_.hits) / static_cast<double>(looked);
            if (m.all > mark_.all) p.cpu_share = static_cast<double>(m.cpu - mark_.cpu) / static_cast<double>(m.all - mark_.all);
            int64_t held = 0;
            for (const SlotLoad& sl : slots) held += sl.n_cached;
            const double cap = static_cast<double>(n_ctx) * static_cast<double>(slots.size());
            p.kv_used = cap > 0 ? static_cast<double>(held) / cap : 0;
            history_.push_back(p);
            while (history_.size() > opt_.history_size) history_.pop_front();
        }
        mark_ = m;
    }
    s->history.assign(history_.begin(), history_.end());
    s->version = snap_->version + 1;
    snap_ = std::move(s);
    cv_.notify_all();
}

void LiveStats::close() {
    std::lock_guard<std::mutex> lk(mu_);
    closed_ = true;
    cv_.notify_all();
}

std::shared_ptr<const LiveSnapshot> LiveStats::snapshot() const {
    std::lock_guard<std::mutex> lk(mu_);
    return snap_;
}

std::shared_ptr<const LiveSnapshot> LiveStats::wait_newer(uint64_t version, std::chrono::milliseconds timeout) const {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait_for(lk, timeout, [&] { return closed_.load() || snap_->version > version; });
    return snap_;
}

// ---------------------------------------------------------------------------------------------

namespace {

/// Rounds to 3 significant decimals, so the JSON stays short.
double round3(double v) { return std::round(v * 1000.0) / 1000.0; }

}  // namespace

json live_status_json(const LiveSnapshot& s, int64_t queued, int64_t active) {
    const ExpertLayerCounters tot = s.counters.total();
    const uint64_t pairs = tot.cpu_pairs + tot.gpu_pairs + tot.staged_pairs;
    json slots = json::array();
    int64_t held = 0;
    for (const SlotLoad& sl : s.slots) {
        slots.push_back({{"busy", sl.busy}, {"n_cached", sl.n_cached}});
        held += sl.n_cached;
    }
    const int64_t capacity = s.n_ctx * static_cast<int64_t>(s.slots.size());
    json history = json::array();
    for (const LiveSample& p : s.history)
        history.push_back({{"t_s", round3(p.t_s)},
                           {"decode_tok_s", round3(p.decode_tok_s)},
                           {"prompt_tok_s", round3(p.prompt_tok_s)},
                           {"hit_rate", p.hit_rate < 0 ? json(nullptr) : json(round3(p.hit_rate))},
                           {"cpu_share", p.cpu_share < 0 ? json(nullptr) : json(round3(p.cpu_share))},
                           {"kv_used", round3(p.kv_used)}});
    json last = nullptr;
    if (s.last.valid)
        last = {{"prompt_tokens", s.last.prompt_tokens},
                {"cached_tokens", s.last.cached_tokens},
                {"completion_tokens", s.last.completion_tokens},
                {"queue_ms", round3(s.last.queue_ms)},
                {"ttft_ms", round3(s.last.ttft_ms)},
                {"prompt_tok_s", round3(s.last.prompt_tok_s)},
                {"decode_tok_s", round3(s.last.decode_tok_s)},
                {"finish", s.last.finish}};
    const uint64_t looked = tot.cache.hits + tot.cache.misses;
    return {{"object", "nitro.status"},
            {"version", s.version},
            {"uptime_s", round3(s.t_s)},
            {"engine", {{"mode", s.mode}, {"description", s.engine}}},
            {"model", {{"n_layer", s.shape.n_layer}, {"n_expert", s.shape.n_expert}, {"n_expert_used", s.shape.n_expert_used}}},
            {"requests", {{"queued", queued}, {"active", active}, {"finished", s.requests_finished}}},
            {"tokens", {{"prompt", s.prompt_rows}, {"decode", s.decode_rows}, {"steps", s.steps}, {"busy_s", round3(s.busy_s)}}},
            {"kv_cache",
             {{"n_ctx", s.n_ctx},
              {"tokens_used", held},
              {"tokens_capacity", capacity},
              {"used_fraction", capacity > 0 ? round3(static_cast<double>(held) / static_cast<double>(capacity)) : 0.0},
              {"host_bytes", s.kv_host_bytes},
              {"slots", std::move(slots)}}},
            {"experts",
             {{"routing", s.routing},
              {"cache", s.cache},
              {"selections", pairs},
              {"gpu_pairs", tot.gpu_pairs},
              {"cpu_pairs", tot.cpu_pairs},
              {"staged_pairs", tot.staged_pairs},
              {"cpu_share", pairs > 0 ? json(round3(static_cast<double>(tot.cpu_pairs) / static_cast<double>(pairs))) : json(nullptr)},
              {"hits", tot.cache.hits},
              {"misses", tot.cache.misses},
              {"hit_rate", s.cache && looked > 0 ? json(round3(tot.cache.hit_rate())) : json(nullptr)},
              {"admissions", tot.cache.admissions},
              {"evictions", tot.cache.evictions},
              {"cpu_ms", round3(tot.cpu_ms)},
              {"gpu_ms", round3(tot.gpu_ms)},
              {"gpu_wait_ms", round3(tot.wait_ms)}}},
            {"last_request", std::move(last)},
            {"history", std::move(history)}};
}

json live_experts_json(const LiveSnapshot& s) {
    json layers = json::array();
    for (size_t il = 0; il < static_cast<size_t>(s.shape.n_layer); ++il) {
        const bool moe = s.shape.moe_layer[il] != 0;
        json L = {{"layer", il}, {"moe", moe}};
        if (moe) {
            json recent = json::array();
            for (float v : s.recent[il]) recent.push_back(std::round(v * 100.0f) / 100.0f);
            L["selections"] = s.selections[il];
            L["recent"] = std::move(recent);
            L["home"] = s.home[il];
            if (il < s.counters.layers.size()) {
                const ExpertLayerCounters& c = s.counters.layers[il];
                L["gpu_pairs"] = c.gpu_pairs;
                L["cpu_pairs"] = c.cpu_pairs;
                L["staged_pairs"] = c.staged_pairs;
                L["hits"] = c.cache.hits;
                L["misses"] = c.cache.misses;
                L["admissions"] = c.cache.admissions;
                L["evictions"] = c.cache.evictions;
            }
        }
        layers.push_back(std::move(L));
    }
    return {{"object", "nitro.experts"},
            {"version", s.version},
            {"mode", s.mode},
            {"routing", s.routing},
            {"cache", s.cache},
            {"n_expert", s.shape.n_expert},
            {"n_expert_used", s.shape.n_expert_used},
            {"half_life_tokens", s.half_life_tokens},
            {"home_codes", {{"0", "cpu"}, {"1", "gpu_slot"}, {"2", "gpu_static"}}},
            {"layers", std::move(layers)}};
}

}  // namespace nitro::server
