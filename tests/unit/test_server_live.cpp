// The live statistics of the web page (server/live_stats.h): per-expert selection counts against
// hand counts and against the routing of a fresh Session on the same tokens, the decayed `recent`
// counts (worked out by hand), where experts run (from a real ExpertCache, as the hybrid engine's),
// hit rates and the CPU/GPU split from an engine's counters, the bounded history and its rates,
// concurrent counting, and the wake-ups of the event streams.
#include "core/error.h"
#include "cache/expert_cache.h"
#include "runtime/generate.h"
#include "runtime/model.h"
#include "server/live_stats.h"
#include "server/scheduler.h"
#include "tokenizer_fixtures.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <future>
#include <thread>

namespace nitro::server {
namespace {

using json = nlohmann::json;

LiveShape shape(int n_layer, int n_expert, int k, std::vector<uint8_t> moe = {}) {
    LiveShape s;
    s.n_layer = n_layer;
    s.n_expert = n_expert;
    s.n_expert_used = k;
    s.moe_layer = moe.empty() ? std::vector<uint8_t>(static_cast<size_t>(n_layer), 1) : std::move(moe);
    return s;
}

/// An engine that only exposes what LiveStats reads: optional expert counters and cache.
class FakeEngine final : public Engine {
public:
    void eval(std::span<const int32_t>, bool, std::vector<float>&) override {}
    int64_t n_past() const override { return 0; }
    int64_t n_ctx() const override { return 64; }
    void truncate(int64_t) override {}
    std::string describe() const override { return "fake"; }
    const ExpertCounters* expert_counters() const override { return counters ? &*counters : nullptr; }
    const ExpertCache* expert_cache() const override { return cache; }
    std::optional<ExpertCounters> counters;
    const ExpertCache* cache = nullptr;
};

void route(LiveStats& live, int layer, std::vector<int32_t> ids) {
    std::vector<float> w(ids.size(), 1.0f / static_cast<float>(ids.size()));
    live.on_route(RouteEvent{0, layer, false, ids, w});
}

TEST(LiveStats, CountsSelectionsPerLayerAndExpertAndIgnoresIdsOutOfRange) {
    LiveStats live(shape(2, 4, 2));
    FakeEngine cpu;
    route(live, 0, {1, 3});
    route(live, 0, {3, 0});
    route(live, 1, {2, 1});
    route(live, 1, {7, -1});  // out of range: ignored
    route(live, 5, {0, 1});   // no such layer: ignored
    live.publish(cpu, {}, 64);
    const auto s = live.snapshot();
    EXPECT_EQ(s->mode, "cpu");
    EXPECT_EQ(s->selections[0], (std::vector<uint64_t>{1, 1, 0, 2}));
    EXPECT_EQ(s->selections[1], (std::vector<uint64_t>{0, 1, 1, 0}));
    // The CPU engine computes every selection on the CPU.
    EXPECT_EQ(s->counters.layers[0].cpu_pairs, 4u);
    EXPECT_EQ(s->counters.layers[1].cpu_pairs, 2u);
    EXPECT_EQ(s->home[0], (std::vector<uint8_t>(4, 0)));
    const json st = live_status_json(*s, 0, 0);
    EXPECT_EQ(st["experts"]["selections"], 6);
    EXPECT_EQ(st["experts"]["cpu_share"], 1.0);
    EXPECT_TRUE(st["experts"]["hit_rate"].is_null());
    const json ex = live_experts_json(*s);
    EXPECT_EQ(ex["layers"][0]["selections"], json({1, 1, 0, 2}));
    EXPECT_EQ(ex["layers"][1]["home"], json({0, 0, 0, 0}));
}

TEST(LiveStats, RecentSelectionsHalveEveryHalfLifeOfTokens) {
    LiveStats live(shape(1, 2, 1));
    FakeEngine cpu;
    for (int i = 0; i < 8; ++i) route(live, 0, {0});
    live.on_step(0, 8, 0.01);
    live.publish(cpu, {}, 64);
    EXPECT_FLOAT_EQ(live.snapshot()->recent[0][0], 8.0f);  // the new selections count whole
    live.on_step(static_cast<uint64_t>(LiveStats::kHalfLifeTokens), 0, 0.01);
    live.publish(cpu, {}, 64);
    EXPECT_FLOAT_EQ(live.snapshot()->recent[0][0], 4.0f);  // one half-life later: half
    for (int i = 0; i < 3; ++i) route(live, 0, {1});
    live.on_step(static_cast<uint64_t>(LiveStats::kHalfLifeTokens / 2), 0, 0.01);
    live.publish(cpu, {}, 64);
    const auto s = live.snapshot();
    EXPECT_NEAR(s->recent[0][0], 4.0 / std::sqrt(2.0), 1e-5);  // half a half-life: 2^-1/2
    EXPECT_FLOAT_EQ(s->recent[0][1], 3.0f);
    EXPECT_EQ(s->selections[0], (std::vector<uint64_t>{8, 3}));
}

TEST(LiveStats, LayersWithoutExpertsHaveNoCells) {
    LiveStats live(shape(3, 4, 2, {0, 1, 1}));
    FakeEngine cpu;
    route(live, 1, {0, 1});
    live.publish(cpu, {}, 64);
    const json ex = live_experts_json(*live.snapshot());
    EXPECT_EQ(ex["layers"][0], json({{"layer", 0}, {"moe", false}}));
    EXPECT_EQ(ex["layers"][1]["selections"], json({1, 1, 0, 0}));
}

TEST(LiveStats, ExpertHomesFollowTheExpertCache) {
    // One layer of 6 experts, 2 slots holding {4, 1}; the first is static. LRU, one admission per
    // token, copies land at once (the simulator's backend).
    InstantCopyBackend backend(4);
    LayerSlots ls;
    ls.resident = {4, 1};
    ls.n_static = 1;
    ls.expert_bytes = 100;
    ResidencyOptions opt;
    opt.policy = "lru";
    opt.static_share = 0.5;
    opt.refresh_every = 1;
    opt.admit_per_token = 1;
    opt.staging_buffers = 4;
    ExpertCache cache({ls}, 6, 2, opt, &backend);
    const LiveShape sh = shape(1, 6, 2);
    EXPECT_EQ(expert_homes(cache, sh)[0], (std::vector<uint8_t>{0, 1, 0, 0, 2, 0}));
    // A step selects {2, 4}: 2 misses and is admitted into the adaptive slot of 1 (1 is not in the step).
    cache.begin_step(1);
    const std::vector<int32_t> ids = {2, 4};
    cache.access(0, ids);
    cache.commit(0);
    cache.begin_step(1);  // the copy has landed: 2 is in VRAM, 1 is back on the CPU
    EXPECT_EQ(expert_homes(cache, sh)[0], (std::vector<uint8_t>{0, 0, 1, 0, 2, 0}));

    // Through an engine that exposes the cache (the hybrid): its mode, homes, hits and split.
    FakeEngine hybrid;
    hybrid.cache = &cache;
    hybrid.counters = ExpertCounters{};
    hybrid.counters->layers.resize(1);
    ExpertLayerCounters& c = hybrid.counters->layers[0];
    c.gpu_pairs = 6;
    c.cpu_pairs = 2;
    c.cache.hits = 6;
    c.cache.misses = 2;
    LiveStats live(sh);
    live.publish(hybrid, {}, 64);
    const auto s = live.snapshot();
    EXPECT_EQ(s->mode, "hybrid");
    EXPECT_TRUE(s->cache);
    const json st = live_status_json(*s, 0, 0);
    EXPECT_EQ(st["experts"]["hit_rate"], 0.75);  // 6 / (6 + 2)
    EXPECT_EQ(st["experts"]["cpu_share"], 0.25);
    EXPECT_EQ(live_experts_json(*s)["layers"][0]["home"], json({0, 0, 1, 0, 2, 0}));

    // The GPU-all engine (counters, no cache): every expert in VRAM for good, no routing wanted.
    FakeEngine gpu;
    gpu.counters = ExpertCounters{};
    EXPECT_EQ(LiveStats::mode_of(gpu), std::string("gpu"));
    EXPECT_FALSE(LiveStats::wants_routes(gpu));
    EXPECT_TRUE(LiveStats::wants_routes(hybrid));
    EXPECT_EQ(expert_homes(gpu, sh)[0], (std::vector<uint8_t>(6, 2)));
}

TEST(LiveStats, HistoryIsBoundedAndItsRatesUseForwardTime) {
    LiveStatsOptions opt;
    opt.history_interval = std::chrono::milliseconds(0);
    opt.history_size = 3;
    LiveStats live(shape(1, 2, 1), opt);
    FakeEngine cpu;
    const std::vector<SlotLoad> slots = {{true, 16}, {false, 48}};
    for (int i = 1; i <= 5; ++i) {
        route(live, 0, {0});
        live.on_step(10, 30, 0.5);  // 10 decode + 30 prompt rows in 0.5 s
        live.publish(cpu, slots, 64);
    }
    const auto s = live.snapshot();
    ASSERT_EQ(s->history.size(), 3u);
    for (const LiveSample& p : s->history) {
        EXPECT_DOUBLE_EQ(p.decode_tok_s, 20.0);
        EXPECT_DOUBLE_EQ(p.prompt_tok_s, 60.0);
        EXPECT_DOUBLE_EQ(p.cpu_share, 1.0);
        EXPECT_DOUBLE_EQ(p.hit_rate, -1.0);       // no cache
        EXPECT_DOUBLE_EQ(p.kv_used, 64.0 / 128);  // (16 + 48) of 2 x 64 positions
    }
    const json st = live_status_json(*s, 2, 1);
    EXPECT_EQ(st["requests"], json({{"queued", 2}, {"active", 1}, {"finished", 0}}));
    EXPECT_EQ(st["kv_cache"]["tokens_used"], 64);
    EXPECT_EQ(st["kv_cache"]["tokens_capacity"], 128);
    EXPECT_EQ(st["history"].size(), 3u);
    EXPECT_TRUE(st["history"][0]["hit_rate"].is_null());
    EXPECT_EQ(st["tokens"]["decode"], 50);
    EXPECT_EQ(st["tokens"]["prompt"], 150);
}

TEST(LiveStats, CountsFromManyThreadsWhilePublishingAreAllKept) {
    LiveStats live(shape(2, 8, 2));
    FakeEngine cpu;
    std::atomic<bool> stop{false};
    std::thread publisher([&] {
        while (!stop) live.publish(cpu, {}, 64);
    });
    std::vector<std::thread> workers;
    for (int t = 0; t < 4; ++t)
        workers.emplace_back([&, t] {
            for (int i = 0; i < 5000; ++i) route(live, i % 2, {t, 7 - t});
        });
    for (auto& w : workers) w.join();
    stop = true;
    publisher.join();
    live.publish(cpu, {}, 64);
    const auto s = live.snapshot();
    for (int il = 0; il < 2; ++il) {
        uint64_t sum = 0;
        for (uint64_t v : s->selections[static_cast<size_t>(il)]) sum += v;
        EXPECT_EQ(sum, 4u * 2500u * 2u) << "layer " << il;
        EXPECT_EQ(s->selections[static_cast<size_t>(il)][0], 2500u);
    }
}

TEST(LiveStats, WaitNewerWakesOnAPublishAndOnClose) {
    LiveStats live(shape(1, 2, 1));
    FakeEngine cpu;
    const uint64_t v0 = live.snapshot()->version;
    auto waiting = std::async(std::launch::async, [&] { return live.wait_newer(v0, std::chrono::seconds(20))->version; });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    live.publish(cpu, {}, 64);
    EXPECT_EQ(waiting.get(), v0 + 1);
    const auto t0 = std::chrono::steady_clock::now();
    auto closing = std::async(std::launch::async, [&] { return live.wait_newer(v0 + 1, std::chrono::seconds(20))->version; });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    live.close();
    EXPECT_EQ(closing.get(), v0 + 1);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
    EXPECT_TRUE(live.closed());
}

struct Collect : TokenSink {
    std::vector<int32_t> ids;
    std::promise<void> done;
    bool on_token(const TokenStep& s) override {
        ids.push_back(s.id);
        return true;
    }
    void on_finish(FinishCause, const JobStats&, const std::string&) override { done.set_value(); }
};

TEST(LiveStats, TheSchedulerCountsTheRoutingOfEveryEvaluatedToken) {
    for (const char* family : {"gpt-oss", "qwen3"}) {
        Model model(test::fixture_for(family));
        const Tokenizer& tok = test::tokenizer_for(family);
        Metrics metrics;
        SchedulerOptions so;
        so.session.n_ctx = 128;
        so.session.n_threads = 2;
        so.session.n_ubatch = 4;  // the prompt in chunks
        so.end_of_generation = end_of_generation_tokens(model, tok);
        Scheduler sched(model, so, metrics);
        auto sink = std::make_shared<Collect>();
        auto job = std::make_shared<Job>();
        job->prompt = tok.encode("The quick brown fox jumps over the lazy dog.");
        job->max_tokens = 6;
        job->ignore_eos = true;
        job->sink = sink;
        sched.submit(job);
        sink->done.get_future().wait();
        // Published before the sink heard of the finish.
        const auto s = sched.live().snapshot();
        EXPECT_EQ(s->requests_finished, 1u);
        EXPECT_TRUE(s->routing);
        EXPECT_EQ(s->last.completion_tokens, 6);
        EXPECT_EQ(s->last.finish, "length");

        // The reference: a fresh Session's routing of the same tokens (the prompt, then every
        // generated token but the last), counted by its own route callback.
        const size_t X = static_cast<size_t>(model.hp().n_expert);
        std::vector<std::vector<uint64_t>> want(static_cast<size_t>(model.hp().n_layer), std::vector<uint64_t>(X, 0));
        SessionOptions ro;
        ro.n_ctx = 128;
        ro.n_threads = 2;
        Session ref(model, ro);
        ref.set_route_callback([&](const RouteEvent& e) {
            for (int32_t id : e.experts) ++want[static_cast<size_t>(e.layer)][static_cast<size_t>(id)];
        });
        std::vector<float> logits;
        ref.eval(job->prompt, false, logits);
        for (size_t i = 0; i + 1 < sink->ids.size(); ++i) ref.eval(std::span<const int32_t>(&sink->ids[i], 1), false, logits);
        EXPECT_EQ(s->selections, want) << family;
        EXPECT_EQ(s->prompt_rows, job->prompt.size()) << family;
        EXPECT_EQ(s->decode_rows, 5u) << family;
        ASSERT_EQ(s->slots.size(), 1u);
        EXPECT_EQ(s->slots[0].n_cached, static_cast<int64_t>(job->prompt.size() + 5)) << family;
        EXPECT_FALSE(s->slots[0].busy);
    }
}

}  // namespace
}  // namespace nitro::server
