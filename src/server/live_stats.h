// Live statistics of `nitro serve` for its web page and the /v1/nitro/* endpoints (docs/server.md,
// "Web page and live statistics"): per layer, which experts the router chose (since start and
// recently), where each expert is computed (a VRAM slot or the CPU), the expert cache's hits and
// misses, the CPU/GPU split of the work, throughput, TTFT, K/V cache use, and a short history.
//
// Two sides:
//  - the engine side: on_route() counts every (token, layer) routing decision into per-expert
//    atomic counters (relaxed increments, no allocation, any thread); the scheduler's worker calls
//    on_step() after every forward step and publish() when due() (at most every
//    kPublishInterval, and after each request): publish() reads the engine's counters and expert
//    cache (which only the worker may touch) and makes an immutable Snapshot;
//  - the readers (HTTP threads): snapshot() takes the newest Snapshot (a shared pointer swapped
//    under a mutex), wait_newer() blocks until a newer one or close().
// Memory is bounded: a few numbers per (layer, expert), LiveStatsOptions::history_size samples, nothing that
// grows with requests or tokens.
#pragma once

#include "runtime/engine.h"
#include "runtime/session.h"

#include <nlohmann/json_fwd.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace nitro::server {

struct JobStats;

/// Where an expert of a layer is computed now.
enum class ExpertHome : uint8_t {
    CPU = 0,         ///< read from RAM and computed by the CPU
    GPU_SLOT = 1,    ///< in an adaptive VRAM slot of the expert cache (may be evicted)
    GPU_STATIC = 2,  ///< in VRAM for good (a static slot, or every expert of a GPU-all engine)
};

/// What the routing counters are shaped by: the model's layers and experts.
struct LiveShape {
    int n_layer = 0;
    int n_expert = 0;
    int n_expert_used = 0;
    std::vector<uint8_t> moe_layer;  ///< [n_layer] 1 when the layer has routed experts
};

/// One slot of the scheduler (--parallel) as the page shows it.
struct SlotLoad {
    bool busy = false;
    int64_t n_cached = 0;  ///< tokens whose K/V the slot's sequence holds
};

/// One point of the history (one per LiveStatsOptions::history_interval with work; rates over the
/// interval's forward-step time).
struct LiveSample {
    double t_s = 0;             ///< seconds since the server started
    double decode_tok_s = 0;    ///< decode rows per second of forward-step time
    double prompt_tok_s = 0;    ///< prompt rows per second of forward-step time
    double hit_rate = -1;       ///< expert-cache hits / (hits + misses) in the interval; -1: no cache or no selection
    double cpu_share = -1;      ///< selections computed by the CPU / all selections in the interval; -1: none
    double kv_used = 0;         ///< K/V positions held / positions of all slots
};

/// The last finished request.
struct LastRequest {
    bool valid = false;
    int64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
    double queue_ms = 0, ttft_ms = 0, prompt_tok_s = 0, decode_tok_s = 0;
    std::string finish;  ///< "stop", "length", "cancelled", "error"
};

/// Everything the page shows, as of one publish().
struct LiveSnapshot {
    uint64_t version = 0;    ///< increases with every publish()
    double t_s = 0;          ///< seconds since the server started
    std::string mode;        ///< "cpu", "gpu" (every expert in VRAM) or "hybrid"
    std::string engine;      ///< Engine::describe()
    LiveShape shape;
    bool routing = false;    ///< per-expert selection counts are collected (see LiveStats::wants_routes)
    bool cache = false;      ///< the engine has an expert cache (hits/misses are meaningful)
    double half_life_tokens = 0;  ///< of `recent`
    // Per layer, [n_layer][n_expert] (empty rows for layers without experts).
    std::vector<std::vector<uint64_t>> selections;  ///< selections since start
    std::vector<std::vector<float>> recent;         ///< selections, exponentially decayed by tokens
    std::vector<std::vector<uint8_t>> home;         ///< ExpertHome
    ExpertCounters counters;  ///< the engine's (GPU engines); for the CPU engine cpu_pairs = selections
    uint64_t decode_rows = 0, prompt_rows = 0, steps = 0;
    double busy_s = 0;       ///< forward-step time since start
    std::vector<SlotLoad> slots;
    int64_t n_ctx = 0;       ///< positions per slot
    uint64_t kv_host_bytes = 0;
    uint64_t requests_finished = 0;
    LastRequest last;
    std::vector<LiveSample> history;  ///< oldest first
};

/// How often LiveStats samples its history and how much it keeps.
struct LiveStatsOptions {
    std::chrono::milliseconds history_interval{1000};  ///< one sample per this much time with work
    size_t history_size = 300;                           ///< samples kept (the newest)
};

class LiveStats {
public:
    static constexpr std::chrono::milliseconds kPublishInterval{250};
    static constexpr double kHalfLifeTokens = 128;  ///< tokens after which a selection counts half in `recent`

    explicit LiveStats(LiveShape shape, LiveStatsOptions opt = {});
    LiveStats(const LiveStats&) = delete;
    LiveStats& operator=(const LiveStats&) = delete;

    /// Whether routing should be reported to on_route() for this engine: yes where the router's
    /// output reaches the host anyway (the CPU engine, the hybrid); no for the GPU-all engine, where
    /// a route callback would add a host synchronisation per layer to every prompt chunk.
    static bool wants_routes(const Engine& engine);
    /// "cpu", "gpu" or "hybrid", from what the engine exposes.
    static const char* mode_of(const Engine& engine);

    // Engine side.
    /// Counts one routing decision (relaxed atomic increments; ids out of range are ignored).
    void on_route(const RouteEvent& e);
    /// Marks that routing is being collected (published in Snapshot::routing).
    void set_routing(bool on) { routing_ = on; }
    /// One forward step of `decode_rows` + `prompt_rows` rows took `seconds`.
    void on_step(uint64_t decode_rows, uint64_t prompt_rows, double seconds);
    /// A request finished (its stats, and how).
    void on_finish(const JobStats& st, const char* finish);
    /// True when kPublishInterval has passed since the last publish().
    bool due() const;
    /// Makes a new snapshot. Call from the thread that drives `engine` (it reads the expert cache).
    void publish(const Engine& engine, std::span<const SlotLoad> slots, int64_t n_ctx);
    /// Wakes every wait_newer() for good (the server is stopping).
    void close();
    bool closed() const { return closed_.load(); }

    // Readers.
    std::shared_ptr<const LiveSnapshot> snapshot() const;
    /// Waits until a snapshot with version > `version`, close(), or `timeout`; returns the newest.
    std::shared_ptr<const LiveSnapshot> wait_newer(uint64_t version, std::chrono::milliseconds timeout) const;

private:
    using Clock = std::chrono::steady_clock;
    const LiveShape shape_;
    const LiveStatsOptions opt_;
    const Clock::time_point start_;
    // [n_layer * n_expert] selections since start, written by on_route.
    std::unique_ptr<std::atomic<uint64_t>[]> counts_;
    std::atomic<bool> routing_{false};
    std::atomic<uint64_t> decode_rows_{0}, prompt_rows_{0}, steps_{0}, busy_ns_{0};
    std::atomic<bool> closed_{false};

    // Publisher state (the worker thread only).
    std::vector<uint64_t> seen_;   ///< counts_ at the last publish
    std::vector<float> recent_;    ///< decayed selections
    uint64_t rows_seen_ = 0;       ///< decode + prompt rows at the last publish
    std::atomic<int64_t> last_publish_ns_{0};
    struct Mark {                  ///< totals at the last history sample
        Clock::time_point t;
        uint64_t decode = 0, prompt = 0, busy_ns = 0, hits = 0, misses = 0, cpu = 0, all = 0;
    } mark_;
    std::deque<LiveSample> history_;

    // Shared with readers.
    mutable std::mutex mu_;
    mutable std::condition_variable cv_;
    std::shared_ptr<const LiveSnapshot> snap_;
    LastRequest last_;
    uint64_t finished_ = 0;
};

/// Where each expert of each layer is computed, from what the engine exposes: the expert cache's
/// ready slots (static ones GPU_STATIC) for the hybrid, every expert GPU_STATIC for the GPU-all
/// engine, every expert CPU for the CPU engine. [n_layer][n_expert]; layers without experts empty.
std::vector<std::vector<uint8_t>> expert_homes(const Engine& engine, const LiveShape& shape);
/// The same from an expert cache alone (the hybrid's case).
std::vector<std::vector<uint8_t>> expert_homes(const ExpertCache& cache, const LiveShape& shape);

/// GET /v1/nitro/status: the snapshot's summary (docs/server.md lists the fields). `queued` and
/// `active` are the scheduler's counts now (they change between snapshots).
nlohmann::json live_status_json(const LiveSnapshot& s, int64_t queued, int64_t active);
/// GET /v1/nitro/experts: the per-layer, per-expert view.
nlohmann::json live_experts_json(const LiveSnapshot& s);

}  // namespace nitro::server
