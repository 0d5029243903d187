// The ExpertCache (cache/expert_cache.h): snapshot and copy latency, staging buffers, rate
// limits, prompt chunks, failures; and live = simulated: the cache driven step by step from the
// CPU engine's live routing equals `nitro sim`'s replay of the trace captured in the same run.
// Expected numbers are worked out by hand in the comments.
#include "cache/expert_cache.h"
#include "runtime/route_trace.h"
#include "runtime/session.h"
#include "runtime/default_model.h"
#include "runtime/generate.h"
#include "sim/policy_spec.h"
#include "sim/replay.h"
#include "trace/model_header.h"
#include "trace/trace_file.h"
#include "gguf_bytes.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include <algorithm>
#include <map>
#include <random>
#include <set>

namespace nitro {
namespace {

/// A copy backend whose copies land after `delay` polls, can fail on demand, and check that no
/// copy targets a slot whose old expert the current step computes.
class FakeBackend final : public CopyBackend {
public:
    explicit FakeBackend(int buffers) : n_(buffers), polls_(static_cast<size_t>(std::max(buffers, 1)), 0) {}
    int n_buffers() const override { return n_; }
    uint8_t* buffer_data(int) override { return nullptr; }
    bool submit(int buffer, int layer, int slot, ExpertId expert) override {
        if (fail_submit) return false;
        submitted.push_back({buffer, layer, slot, expert});
        polls_[static_cast<size_t>(std::max(buffer, 0))] = 0;
        return true;
    }
    State poll(int buffer) override {
        if (fail_copies) return State::Failed;
        return ++polls_[static_cast<size_t>(std::max(buffer, 0))] > delay ? State::Landed : State::Pending;
    }
    struct Sub {
        int buffer, layer, slot;
        ExpertId expert;
    };
    std::vector<Sub> submitted;
    int delay = 0;
    bool fail_submit = false, fail_copies = false;

private:
    int n_;
    std::vector<int> polls_;
};

LayerSlots slots(std::vector<int32_t> resident, int capacity, int n_static) {
    LayerSlots ls;
    ls.resident = std::move(resident);
    ls.capacity = capacity;
    ls.n_static = n_static;
    ls.expert_bytes = 1000;
    return ls;
}

ResidencyOptions adaptive(int per_window, int window, int buffers) {
    ResidencyOptions o;
    o.policy = "lru";
    o.refresh_every = window;
    o.admit_per_token = static_cast<double>(per_window) / window;
    o.staging_buffers = buffers;
    return o;
}

std::vector<uint8_t> mask(const ExpertCache::LayerStep& st) { return {st.resident.begin(), st.resident.end()}; }

TEST(ExpertCache, LayersWithoutRoutedExpertsAreNeverAccessed) {
    // Layer 0 is a dense FFN layer (no routed experts), layer 1 caches 2 of 6.
    FakeBackend b(4);
    LayerSlots dense;
    dense.n_expert = 0;
    ExpertCache c({dense, slots({0, 1}, 2, 0)}, 6, 2, adaptive(1, 1, 4), &b);
    c.begin_step(1);
    const std::vector<int32_t> ids = {0, 4};
    EXPECT_NE(test::error_of([&] { c.access(0, ids); }).find("layer 0 has no routed experts"), std::string::npos);
    const auto st = c.access(1, ids);
    EXPECT_EQ(mask(st), (std::vector<uint8_t>{1, 0, 0, 0, 0, 0}));
    c.commit(1);
    EXPECT_EQ(c.capacity(0), 0);
    EXPECT_TRUE(c.slot_of(0).empty());
    EXPECT_TRUE(c.slots(0).empty());
    // The setup round trip keeps the layer's count.
    const CacheSetup back = setup_from_json(setup_to_json(c.setup()));
    EXPECT_EQ(back.layers[0].n_expert, 0);
    EXPECT_EQ(back.layers[1].n_expert, -1);
    // A dense layer cannot hold slots.
    LayerSlots bad = slots({0}, 1, 0);
    bad.n_expert = 0;
    EXPECT_NE(test::error_of([&] { ExpertCache x({bad}, 6, 2, adaptive(1, 1, 4), &b); }).find("1 slots for 0 experts"),
              std::string::npos);
}

TEST(ExpertCache, AnAdmittedExpertIsResidentOnlyFromTheStepAfterItsCopyLanded) {
    // 6 experts, top-2, one layer of 2 slots holding {0, 1}, neither pinned.
    FakeBackend b(4);
    b.delay = 1;  // lands at the second poll: one step late
    ExpertCache c({slots({0, 1}, 2, 0)}, 6, 2, adaptive(1, 1, 4), &b);
    std::vector<int32_t> ids = {2, 0};
    c.begin_step(1);  // step 1: {2, 0}: 0 hits; 2 misses and is admitted in place of 1 (LRU, not in step)
    auto st = c.access(0, ids);
    EXPECT_EQ(mask(st), (std::vector<uint8_t>{1, 0, 0, 0, 0, 0}));
    ASSERT_EQ(st.admissions.size(), 1u);
    EXPECT_EQ(st.admissions[0].expert, 2);
    EXPECT_EQ(st.admissions[0].evicted, 1);
    EXPECT_EQ(st.admissions[0].slot, 1);
    c.commit(0);
    ASSERT_EQ(b.submitted.size(), 1u);
    EXPECT_EQ(c.slot_of(0)[1], -1);  // the victim left the snapshot at once
    c.begin_step(1);  // step 2: the copy has not landed (first poll): 2 is still a miss, counted late
    ids = {2, 3};
    st = c.access(0, ids);  // 3: rate 1/token, but the only victim candidate 0... 0 is not in the step
    EXPECT_EQ(st.resident[2], 0);
    EXPECT_EQ(c.counters(0).late_copies, 1u);
    c.commit(0);
    c.begin_step(1);  // step 3: landed: 2 is resident
    ids = {2, 4};
    st = c.access(0, ids);
    EXPECT_EQ(st.resident[2], 1);
    EXPECT_EQ(c.slot_of(0)[2], 1);
    EXPECT_GE(c.counters(0).flips, 1u);
}

TEST(ExpertCache, StagingBuffersCapTheAdmissionsOfAStepAcrossLayers) {
    // 2 layers with empty slots, 1 staging buffer, a generous rate: in step 1 layer 0 takes the
    // buffer, layer 1's miss is refused for staging; in step 2 the buffer is free again.
    FakeBackend b(1);
    ExpertCache c({slots({}, 2, 0), slots({}, 2, 0)}, 4, 1, adaptive(4, 1, 1), &b);
    std::vector<int32_t> ids = {3};
    c.begin_step(1);
    EXPECT_EQ(c.access(0, ids).admissions.size(), 1u);
    c.commit(0);
    EXPECT_EQ(c.access(1, ids).admissions.size(), 0u);
    c.commit(1);
    EXPECT_EQ(c.counters(1).refused_staging, 1u);
    EXPECT_EQ(c.counters(1).refused_rate, 0u);
    c.begin_step(1);
    EXPECT_EQ(c.access(0, ids).resident[3], 1);  // landed (delay 0)
    c.commit(0);
    EXPECT_EQ(c.access(1, ids).admissions.size(), 1u);
    c.commit(1);
}

TEST(ExpertCache, RateLimitCountsTokensOfPromptChunks) {
    // 1 admission per window of 4 tokens. A chunk of 4 tokens is one window; the decode step
    // after it starts a new one.
    FakeBackend b(8);
    ResidencyOptions o = adaptive(1, 4, 8);
    o.prefill_weight = 2;  // a chunk requests its 2 x k = 2 most selected experts
    ExpertCache c({slots({}, 4, 0)}, 8, 1, o, &b);
    // Chunk of 4 tokens {5, 6, 5, 7}: counts 5:2, 6:1, 7:1 -> requested 5, 6 (ties by id); 1 admission (5), 6 refused.
    std::vector<int32_t> chunk = {5, 6, 5, 7};
    c.begin_step(4);
    auto st = c.access(0, chunk);
    ASSERT_EQ(st.admissions.size(), 1u);
    EXPECT_EQ(st.admissions[0].expert, 5);
    c.commit(0);
    EXPECT_EQ(c.counters(0).refused_rate, 1u);
    EXPECT_EQ(c.counters(0).misses, 4u);  // every selection of the chunk was computed elsewhere
    std::vector<int32_t> one = {6};
    c.begin_step(1);  // clock 4: window 1, budget again
    st = c.access(0, one);
    ASSERT_EQ(st.admissions.size(), 1u);
    c.commit(0);
    c.begin_step(1);  // clock 5: same window, used
    one = {7};
    st = c.access(0, one);
    EXPECT_EQ(st.admissions.size(), 0u);
    EXPECT_EQ(c.counters(0).refused_rate, 2u);
}

TEST(ExpertCache, APromptChunkCannotEvictWhatItComputesNorFlushWithLowWeight) {
    // 8 experts, top-2, 3 slots {0, 1, 2}, LRU, unlimited rate. Decode warms 0, 1, 2 (LRU order
    // after the steps: 2 oldest? see below). A chunk selecting 0 and 3..7 with weight 0.5 requests
    // only its round(0.5 x 2) = 1 most selected expert (3, 4 selections); the victim must not be
    // 0 (in the chunk) although 0 is the least recent.
    FakeBackend b(8);
    ResidencyOptions o = adaptive(8, 1, 8);
    o.prefill_weight = 0.5;
    ExpertCache c({slots({0, 1, 2}, 3, 0)}, 8, 2, o, &b);
    std::vector<int32_t> ids = {0, 1};
    c.begin_step(1);
    c.access(0, ids);
    c.commit(0);
    ids = {1, 2};
    c.begin_step(1);
    c.access(0, ids);
    c.commit(0);  // recency: 0 (oldest), 1, 2
    std::vector<int32_t> chunk = {3, 0, 3, 4, 3, 5, 3, 6};  // 4 tokens x 2: 3 x4, 0, 4, 5, 6 once
    c.begin_step(4);
    const auto st = c.access(0, chunk);
    ASSERT_EQ(st.admissions.size(), 1u);
    EXPECT_EQ(st.admissions[0].expert, 3);
    EXPECT_EQ(st.admissions[0].evicted, 1);  // 0 is protected; the oldest evictable is 1
    EXPECT_EQ(st.resident[0], 1);
    c.commit(0);
    // Weight 0: prompts never change residency.
    FakeBackend b2(8);
    o.prefill_weight = 0;
    ExpertCache z({slots({0, 1, 2}, 3, 0)}, 8, 2, o, &b2);
    z.begin_step(4);
    EXPECT_EQ(z.access(0, chunk).admissions.size(), 0u);
}

TEST(ExpertCache, StaticSlotsAreNeverEvictedAndFrozenNeverChanges) {
    FakeBackend b(8);
    ExpertCache c({slots({0, 1, 2}, 3, 2)}, 8, 1, adaptive(8, 1, 8), &b);  // 0 and 1 pinned
    std::vector<int32_t> ids;
    for (int32_t e : {3, 4, 5, 6, 7, 3, 4}) {
        ids = {e};
        c.begin_step(1);
        c.access(0, ids);
        c.commit(0);
        EXPECT_GE(c.slot_of(0)[0], 0);
        EXPECT_GE(c.slot_of(0)[1], 0);
    }
    EXPECT_EQ(c.counters(0).admissions, 7u);  // every miss took the one adaptive slot
    ResidencyOptions f;
    f.refresh_every = 0;
    ExpertCache z({slots({0, 1, 2}, 3, 1)}, 8, 1, f, nullptr);
    for (int32_t e : {3, 4, 0}) {
        ids = {e};
        z.begin_step(1);
        EXPECT_EQ(z.access(0, ids).admissions.size(), 0u);
        z.commit(0);
    }
    EXPECT_EQ(z.counters(0).hits, 1u);
    EXPECT_EQ(z.counters(0).misses, 2u);
}

TEST(ExpertCache, FailedCopiesDropTheExpertAndNothingBreaks) {
    FakeBackend b(2);
    ExpertCache c({slots({}, 2, 0)}, 4, 1, adaptive(2, 1, 2), &b);
    std::vector<int32_t> ids = {1};
    b.fail_copies = true;
    c.begin_step(1);
    c.access(0, ids);
    c.commit(0);
    c.begin_step(1);  // the copy failed: 1 is dropped, the slot free again
    EXPECT_EQ(c.counters(0).failed_copies, 1u);
    EXPECT_EQ(c.access(0, ids).resident[1], 0);
    c.commit(0);  // admitted again (the slot is free)
    b.fail_copies = false;
    c.begin_step(1);
    EXPECT_EQ(c.access(0, ids).resident[1], 1);
    c.commit(0);
    // A copy that cannot even start: dropped at once.
    b.fail_submit = true;
    ids = {2};
    c.begin_step(1);
    c.access(0, ids);
    c.commit(0);
    EXPECT_EQ(c.counters(0).failed_copies, 2u);
    EXPECT_EQ(std::count(c.slots(0).begin(), c.slots(0).end(), ExpertId{2}), 0);
}

TEST(ExpertCache, AnExpertEvictedWhileItsCopyIsInFlightNeverFlips) {
    // 1 slot, copies land after 3 polls. Step 1 admits 1; step 2 admits 2 into the same slot
    // (1 is not in step 2): 1's copy must not make 1 resident when it lands.
    FakeBackend b(4);
    b.delay = 3;
    ExpertCache c({slots({}, 1, 0)}, 4, 1, adaptive(4, 1, 4), &b);
    std::vector<int32_t> ids = {1};
    c.begin_step(1);
    c.access(0, ids);
    c.commit(0);
    ids = {2};
    c.begin_step(1);
    c.access(0, ids);
    c.commit(0);
    for (int i = 0; i < 6; ++i) {
        c.begin_step(1);
        ids = {3 - (i % 2)};  // 3 and 2 alternately: 1 never again
        c.access(0, std::span<const int32_t>(ids));
        EXPECT_EQ(c.slot_of(0)[1], -1);
        c.commit(0);
    }
}

TEST(ExpertCache, RandomStepsNeverOverwriteASlotTheStepComputes) {
    // Property: every admission's victim is outside the step's selections, and the snapshot maps
    // each resident expert to a slot the policy holds it in.
    std::mt19937 rng(7);
    for (int trial = 0; trial < 20; ++trial) {
        FakeBackend b(3);
        b.delay = trial % 3;
        ResidencyOptions o = adaptive(2, 1 + trial % 3, 3);
        o.policy = trial % 2 ? "lfu" : "lru";
        o.prefill_weight = 0.5 * (trial % 4);
        ExpertCache c({slots({0, 1, 2, 3}, 6, trial % 3), slots({}, 2, 0)}, 16, 3, o, &b);
        for (int step = 0; step < 200; ++step) {
            const int n = step % 17 == 0 ? 5 : 1;
            c.begin_step(n);
            for (int l = 0; l < 2; ++l) {
                std::vector<int32_t> ids;
                for (int t = 0; t < n; ++t) {
                    std::set<int32_t> s;
                    while (s.size() < 3) s.insert(static_cast<int32_t>(std::min<double>(15, std::exponential_distribution<>(0.3)(rng))));
                    ids.insert(ids.end(), s.begin(), s.end());
                }
                const std::vector<ExpertId> before(c.slots(l).begin(), c.slots(l).end());
                const auto st = c.access(l, ids);
                for (const Admission& a : st.admissions) {
                    EXPECT_EQ(std::count(ids.begin(), ids.end(), static_cast<int32_t>(a.evicted)), 0);
                    if (a.evicted != kNoExpert) { EXPECT_EQ(before[static_cast<size_t>(a.slot)], a.evicted); }
                }
                c.commit(l);
                for (int e = 0; e < 16; ++e)
                    if (c.slot_of(l)[static_cast<size_t>(e)] >= 0) {
                        EXPECT_EQ(c.slots(l)[static_cast<size_t>(c.slot_of(l)[static_cast<size_t>(e)])], e);
                    }
            }
        }
        EXPECT_GT(c.total().admissions, 0u);
    }
}

TEST(ExpertCache, BadOptionsAndIdsAreClearErrors) {
    ResidencyOptions o;
    o.static_share = 1.5;
    EXPECT_NE(test::error_of([&] { o.validate(); }).find("--static-slots"), std::string::npos);
    o = {};
    o.policy = "mru";
    EXPECT_NE(test::error_of([&] { o.validate(); }).find("unknown eviction policy 'mru'"), std::string::npos);
    o = {};
    EXPECT_NE(test::error_of([&] { ExpertCache c({slots({0}, 2, 0)}, 4, 1, o, nullptr); }).find("needs a copy backend"),
              std::string::npos);
    o.refresh_every = 0;
    EXPECT_NE(test::error_of([&] { ExpertCache c({slots({0, 0}, 2, 0)}, 4, 1, o, nullptr); }).find("resident twice"),
              std::string::npos);
    o = {};
    FakeBackend b(1);
    ExpertCache c({slots({0}, 2, 0)}, 4, 1, o, &b);
    c.begin_step(1);
    std::vector<int32_t> bad = {9};
    EXPECT_NE(test::error_of([&] { c.access(0, bad); }).find("expert id 9 out of range"), std::string::npos);
}

// Live = simulated. The CPU engine evaluates a prompt in chunks (-u 64) and then decodes; the
// cache is driven the way the GPU engine drives it (begin_step per chunk or token, then each layer
// in order) from the engine's own route events. The same events go to a trace file, which the
// simulator replays (replay_cache with the same setup). Every counter of every layer is equal.
TEST(ExpertCache, LiveRoutingOfTheEngineEqualsTheSimulatorsReplayOfItsTrace) {
    Model model(default_model_path());
    SessionOptions so;
    so.n_ubatch = 64;
    so.n_threads = 2;
    Session s(model, so);
    const int L = static_cast<int>(model.hp().n_layer), E = static_cast<int>(model.hp().n_expert),
              K = static_cast<int>(model.hp().n_expert_used);
    // Setup: 12 slots per layer, the first 12 experts resident, 4 of them static; small buffers so
    // that staging refusals happen too.
    CacheSetup cs;
    cs.opt.policy = "lru";
    cs.opt.refresh_every = 2;
    cs.opt.admit_per_token = 1.0;
    cs.opt.prefill_weight = 1.5;
    cs.opt.staging_buffers = 3;
    for (int l = 0; l < L; ++l) {
        LayerSlots ls;
        for (int e = 0; e < 12; ++e) ls.resident.push_back(e);
        ls.n_static = 4;
        ls.expert_bytes = 4096;
        cs.layers.push_back(ls);
    }
    FakeBackend backend(cs.opt.staging_buffers);
    ExpertCache live(cs.layers, E, K, cs.opt, &backend);

    const std::string trace = test::temp_dir("live-sim") + "/t.nmtr";
    TraceWriter writer(trace, trace_header_from_model(model.gguf(), true));
    auto record = route_record_writer(writer, [](const RouteEvent&) { return 0u; });
    std::vector<std::vector<int32_t>> layer_ids(static_cast<size_t>(L));
    s.set_route_callback([&](const RouteEvent& e) {
        record(e);
        auto& v = layer_ids[static_cast<size_t>(e.layer)];
        v.insert(v.end(), e.experts.begin(), e.experts.end());
    });
    auto step = [&](std::span<const int32_t> toks) {
        for (auto& v : layer_ids) v.clear();
        std::vector<float> logits;
        s.eval(toks, false, logits);
        live.begin_step(static_cast<int64_t>(toks.size()));
        for (int l = 0; l < L; ++l) {
            live.access(l, layer_ids[static_cast<size_t>(l)]);
            live.commit(l);
        }
        int32_t best = 0;
        for (size_t i = 1; i < logits.size(); ++i)
            if (logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
        return best;
    };
    std::vector<int32_t> prompt;
    for (int i = 0; i < 150; ++i) prompt.push_back(100 + (i * 37) % 3000);
    // The engine cuts the prompt into chunks of 64, 64, 22 itself; the cache sees the same chunks.
    int32_t tok = 0;
    for (size_t i = 0; i < prompt.size(); i += 64) {
        const size_t n = std::min<size_t>(64, prompt.size() - i);
        tok = step(std::span<const int32_t>(prompt.data() + i, n));
    }
    for (int i = 0; i < 40; ++i) tok = step(std::span<const int32_t>(&tok, 1));
    s.set_route_callback(nullptr);
    writer.close();

    const ReplayTrace rt = make_replay_trace(read_trace(trace));
    const ReplayResult sim = replay_cache(rt, cs, ReplayOptions{0, 64});
    uint64_t admissions = 0, refused_staging = 0;
    for (int l = 0; l < L; ++l) {
        const CacheCounters& a = live.counters(l);
        const CacheCounters& b = sim.layers[static_cast<size_t>(l)].cache;
        EXPECT_EQ(a.hits, b.hits) << "layer " << l;
        EXPECT_EQ(a.misses, b.misses) << "layer " << l;
        EXPECT_EQ(a.admissions, b.admissions) << "layer " << l;
        EXPECT_EQ(a.evictions, b.evictions) << "layer " << l;
        EXPECT_EQ(a.refused_rate, b.refused_rate) << "layer " << l;
        EXPECT_EQ(a.refused_staging, b.refused_staging) << "layer " << l;
        EXPECT_EQ(a.refused_policy, b.refused_policy) << "layer " << l;
        EXPECT_EQ(a.late_copies, 0u);
        admissions += a.admissions;
        refused_staging += a.refused_staging;
    }
    // The command line does the same from the files an engine run leaves beside its trace
    // (FILE.residency.json, FILE.counters.json): `nitro sim FILE --engine` says live equals simulated.
    {
        std::ofstream(trace + ".residency.json") << setup_to_json(cs).dump();
        nlohmann::json layers = nlohmann::json::array();
        for (int l = 0; l < L; ++l) layers.push_back({{"cache", cache_counters_json(live.counters(l))}});
        std::ofstream(trace + ".counters.json") << nlohmann::json{{"experts", {{"layers", layers}}}}.dump();
        const nlohmann::json out = nlohmann::json::parse(
            test::run_command(std::string(NITRO_BINARY) + " sim " + trace + " --engine -u 64 --json"));
        EXPECT_TRUE(out["live_equals_simulated"].get<bool>()) << out.dump();
        EXPECT_EQ(out["simulated"]["hits"].get<uint64_t>(), live.total().hits);
        // A counter that differs is reported as such.
        layers[1]["cache"]["hits"] = layers[1]["cache"]["hits"].get<uint64_t>() + 1;
        std::ofstream(trace + ".counters.json") << nlohmann::json{{"experts", {{"layers", layers}}}}.dump();
        const nlohmann::json bad = nlohmann::json::parse(
            test::run_command(std::string(NITRO_BINARY) + " sim " + trace + " --engine -u 64 --json"));
        EXPECT_FALSE(bad["live_equals_simulated"].get<bool>());
    }
    // The run exercised the interesting paths.
    EXPECT_GT(admissions, 20u);
    EXPECT_GT(refused_staging, 0u);
    EXPECT_EQ(live.total().hits + live.total().misses, static_cast<uint64_t>(L) * (150 + 40) * static_cast<uint64_t>(K));
}

}  // namespace
}  // namespace nitro
