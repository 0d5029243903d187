// Adaptive residency on a GPU (label cuda; cache/expert_cache.h, gpu/slot_copier.h):
//   - at every capacity, from one slot per layer up, with aggressive admission (every miss may be
//     admitted), decode steps (the CUDA graph) and prompt chunks give the CPU reference's tokens
//     within model_compare.h's bounds; admissions happen and land (counters);
//   - every slot the cache says holds expert e holds e's bytes exactly (read back from VRAM);
//   - live = simulated: the engine's counters equal `replay_cache` on the routing it captured,
//     with the setup it ran (exact whenever no copy was late);
//   - frozen residency (--refresh-every 0) is bit-identical across runs;
//   - faults: no staging buffer could be pinned (frozen, a warning), one buffer, failing copies:
//     clear behaviour and outputs still within the bounds.
#include "core/error.h"
#include "gpu/gpu_session.h"
#include "cuda_test_util.h"
#include "model_compare.h"
#include "ops/gpu_limits.h"
#include "runtime/placement.h"
#include "runtime/default_model.h"
#include "sim/replay.h"
#include "trace/model_header.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>

using namespace nitro;
using namespace nitro::cuda::test;
using nlohmann::json;

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

/// A budget (GiB) whose plan holds about `per_layer` slots in every layer (as test_hybrid.cpp:
/// the fixed part measured by an engine with a large budget, plus the experts).
double budget_for_slots(const Model& model, const SessionOptions& so, double per_layer) {
    GpuOptions big;
    big.progress = false;
    big.mode = EngineMode::Hybrid;
    big.vram_budget_gib = 8;
    cuda::GpuSession probe(model, so, big);
    const Plan& all = probe.plan();
    const uint64_t fixed = all.dense_bytes + all.expert_biases_bytes + all.kv_bytes + all.compute_bytes + all.overhead_bytes;
    // When some expert stays off the GPU the plan first reserves the prompt-staging slots
    // (PlacementOptions::prefill_stage_slots, each one expert's three matrices 256-byte aligned, and
    // the prompt's expert table, one arena): leave room for them, or a budget meant for one slot
    // per layer holds none (the plan at 8 GiB has every expert resident, so no staging to read).
    const uint64_t X = static_cast<uint64_t>(model.hp().n_expert);
    const uint64_t staging = vram_alloc_size(static_cast<uint64_t>(PlacementOptions{}.prefill_stage_slots) *
                                                 (all.expert_bytes + 3 * 256) +
                                             (X * 4 + 255) / 256 * 256);
    const double experts = per_layer * static_cast<double>(all.n_layer);
    const double bytes = static_cast<double>(fixed + staging) + static_cast<double>(all.n_layer * 3 * 256 + (2 << 20)) +
                         (experts + 0.5) * static_cast<double>(all.expert_bytes);
    return bytes / kGiB;
}

std::vector<std::vector<int32_t>> golden_sequences(const std::string& fixture, std::vector<size_t>& plen, int max_cases) {
    std::ifstream f(shared_dir() + "/fixtures/" + fixture + ".golden.json");
    EXPECT_TRUE(f) << fixture;
    const json g = json::parse(f);
    std::vector<std::vector<int32_t>> out;
    for (const auto& c : g["cases"]) {
        std::vector<int32_t> seq = c["prompt_token_ids"].get<std::vector<int32_t>>();
        plen.push_back(seq.size());
        const auto gen = c["generated_token_ids"].get<std::vector<int32_t>>();
        seq.insert(seq.end(), gen.begin(), gen.end() - 1);
        out.push_back(seq);
        if (static_cast<int>(out.size()) >= max_cases) break;
    }
    return out;
}

/// Aggressive adaptive residency: no static slots, every miss may be admitted each token.
GpuOptions aggressive(double budget) {
    GpuOptions go;
    go.progress = false;
    go.mode = EngineMode::Hybrid;
    go.vram_budget_gib = budget;
    go.adapt.static_share = 0;
    go.adapt.refresh_every = 1;
    go.adapt.admit_per_token = 8;
    go.adapt.staging_buffers = 16;
    return go;
}

/// Teacher-forced through decode steps: the prompt as one chunk, then every further token of `seq`
/// as a single-token step (the CUDA graph with the CPU team and admissions), against the CPU
/// reference's logits of the whole sequence; the bounds and near-tie rules of model_compare.h.
void decode_steps_match_cpu(const Model& model, cuda::GpuSession& gpu, const std::vector<int32_t>& seq, size_t plen, Stats& st) {
    SessionOptions so;
    so.n_threads = 2;
    Session cpu(model, so);
    const int64_t V = model.n_vocab();
    std::vector<float> lc, lg;
    std::vector<float> router_margin(seq.size(), INFINITY);
    std::vector<std::vector<std::vector<int32_t>>> cpu_sets(seq.size()), gpu_sets(seq.size());
    std::vector<std::vector<float>> cpu_margins(seq.size());
    auto record = [](std::vector<std::vector<std::vector<int32_t>>>& sets, const RouteEvent& e) {
        auto& pl = sets[static_cast<size_t>(e.pos)];
        if (pl.size() <= static_cast<size_t>(e.layer)) pl.resize(static_cast<size_t>(e.layer) + 1);
        pl[static_cast<size_t>(e.layer)].assign(e.experts.begin(), e.experts.end());
        std::sort(pl[static_cast<size_t>(e.layer)].begin(), pl[static_cast<size_t>(e.layer)].end());
    };
    cpu.set_route_callback([&](const RouteEvent& e) {
        router_margin[static_cast<size_t>(e.pos)] = std::min(router_margin[static_cast<size_t>(e.pos)], e.margin);
        record(cpu_sets, e);
        auto& m = cpu_margins[static_cast<size_t>(e.pos)];
        if (m.size() <= static_cast<size_t>(e.layer)) m.resize(static_cast<size_t>(e.layer) + 1, INFINITY);
        m[static_cast<size_t>(e.layer)] = e.margin;
    });
    cpu.eval(seq, true, lc);
    gpu.truncate(0);
    gpu.set_route_callback([&](const RouteEvent& e) { record(gpu_sets, e); });
    std::vector<float> all(seq.size() * static_cast<size_t>(V));
    gpu.eval(std::span<const int32_t>(seq.data(), plen), false, lg);
    std::memcpy(&all[(plen - 1) * static_cast<size_t>(V)], lg.data(), static_cast<size_t>(V) * 4);
    for (size_t p = plen; p < seq.size(); ++p) {
        gpu.eval(std::span<const int32_t>(&seq[p], 1), false, lg);
        std::memcpy(&all[p * static_cast<size_t>(V)], lg.data(), static_cast<size_t>(V) * 4);
    }
    gpu.set_route_callback(nullptr);
    for (size_t p = plen - 1; p < seq.size(); ++p) {
        bool diverged = false;
        for (size_t l = 0; l < cpu_sets[p].size() && l < gpu_sets[p].size(); ++l)
            if (cpu_sets[p][l] != gpu_sets[p][l]) {
                diverged = true;
                ++st.router_divergences;
                EXPECT_LT(cpu_margins[p][l], kRouterDivergeMax) << "position " << p << " layer " << l;
                break;
            }
        const Top c = top_of(&lc[p * static_cast<size_t>(V)], V), g = top_of(&all[p * static_cast<size_t>(V)], V);
        const bool tie = router_margin[p] < kRouterTie || diverged;
        ++st.steps;
        st.agree += c.best == g.best;
        if (c.margin >= kMargin && !tie) {
            ++st.checked;
            EXPECT_EQ(g.best, c.best) << "position " << p << " cpu margin " << c.margin;
        }
        for (auto [id, pc] : c.top5) {
            const double pg = prob_of(&all[p * static_cast<size_t>(V)], V, id);
            if (!tie) st.max_dp = std::max(st.max_dp, std::abs(pg - pc));
            EXPECT_NEAR(pg, pc, tie ? kProbTolTie : kProbTol) << "position " << p << " token " << id;
        }
    }
}

/// Every slot the cache maps an expert to holds exactly that expert's bytes from the file.
void slots_hold_their_experts(const Model& model, const cuda::GpuSession& gpu) {
    const ExpertCache* cache = gpu.expert_cache();
    ASSERT_NE(cache, nullptr);
    int checked = 0;
    for (int l = 0; l < cache->n_layer(); ++l) {
        const LayerWeights& L = model.layers()[static_cast<size_t>(l)];
        const auto table = cache->slot_of(l);
        for (size_t e = 0; e < table.size(); ++e) {
            if (table[e] < 0) continue;
            std::vector<uint8_t> want;
            for (const GgufTensorInfo* t : {L[TensorId::ffn_gate_exps], L[TensorId::ffn_up_exps], L[TensorId::ffn_down_exps]}) {
                const size_t per = t->n_bytes / static_cast<size_t>(t->ne[2]);
                want.insert(want.end(), t->data + e * per, t->data + (e + 1) * per);
            }
            EXPECT_EQ(gpu.slot_bytes(l, table[e]), want) << "layer " << l << " expert " << e << " slot " << table[e];
            ++checked;
        }
    }
    EXPECT_GT(checked, 0);
}

void adaptive_matches_cpu(const std::string& fixture) {
    cuda::test::require_gpu();
    Model model(shared_dir() + "/fixtures/" + fixture + ".gguf");
    SessionOptions so;
    so.n_threads = 2;
    std::vector<size_t> plen;
    const auto seqs = golden_sequences(fixture, plen, 4);
    const int X = static_cast<int>(model.hp().n_expert);
    for (double per_layer : {1.0, 2.0, 0.25 * X, 0.5 * X}) {
        SCOPED_TRACE(fixture + ": about " + std::to_string(per_layer) + " slots per layer");
        GpuOptions go = aggressive(budget_for_slots(model, so, per_layer));
        cuda::GpuSession gpu(model, so, go);
        Stats st;
        for (size_t i = 0; i < seqs.size(); ++i) decode_steps_match_cpu(model, gpu, seqs[i], plen[i], st);
        const CacheCounters t = gpu.expert_counters()->total().cache;
        std::printf("  %s %.0f slots/layer (%lld resident): argmax %d/%d (%d checked), max |dp| %.5f, divergences %d; "
                    "hit rate %.1f%%, %llu admissions, %llu flips, %llu evictions, %llu late, %llu refused (staging)\n",
                    fixture.c_str(), per_layer, static_cast<long long>(gpu.plan().n_resident()), st.agree, st.steps, st.checked,
                    st.max_dp, st.router_divergences, 100 * t.hit_rate(), static_cast<unsigned long long>(t.admissions),
                    static_cast<unsigned long long>(t.flips), static_cast<unsigned long long>(t.evictions),
                    static_cast<unsigned long long>(t.late_copies), static_cast<unsigned long long>(t.refused_staging));
        EXPECT_GT(st.checked, st.steps / 2);
        EXPECT_GT(t.admissions, 0u) << "adaptive residency never admitted an expert";
        EXPECT_GT(t.flips, 0u) << "no admitted expert ever became resident";
        EXPECT_EQ(t.failed_copies, 0u);
        slots_hold_their_experts(model, gpu);
        // Prompt chunks with admissions too (chunks of 7 tokens, model_compare's teacher-forced path).
        Stats sc;
        compare(model, seqs[0], plen[0], 6, 7, sc, go);
        EXPECT_GT(sc.checked, sc.steps / 2);
    }
}

}  // namespace

TEST(CudaAdaptive, GptOssAdmissionsAtEveryCapacityMatchCpu) { adaptive_matches_cpu("tiny-gptoss-mxfp4"); }

TEST(CudaAdaptive, Qwen3MoeAdmissionsAtEveryCapacityMatchCpu) { adaptive_matches_cpu("tiny-qwen3moe-q8"); }

// The embedded model is trained: its routing has real temporal locality. The engine's counters
// equal the simulator's replay of the routing the engine itself captured, with its own setup.
TEST(CudaAdaptive, LiveEqualsSimulatedOnTheEmbeddedModel) {
    cuda::test::require_gpu();
    Model model(default_model_path());
    SessionOptions so;
    so.n_threads = 4;
    so.n_ubatch = 64;
    GpuOptions go;
    go.progress = false;
    go.mode = EngineMode::Hybrid;
    go.vram_budget_gib = budget_for_slots(model, so, 12);  // 12 of 64 experts per layer
    go.adapt.refresh_every = 2;
    go.adapt.admit_per_token = 1;
    go.adapt.staging_buffers = 4;
    cuda::GpuSession gpu(model, so, go);
    Trace trace;
    trace.header = trace_header_from_model(model.gguf(), false);
    gpu.set_route_callback([&](const RouteEvent& e) {
        std::vector<ExpertId> ids(e.experts.begin(), e.experts.end());
        trace.append({0, static_cast<uint32_t>(e.pos), e.prefill ? TracePhase::Prefill : TracePhase::Decode,
                      static_cast<uint32_t>(e.layer), ids, {}});
    });
    // A 200-token prompt of Python-like text (chunks of 64), then 120 greedy decode steps.
    std::vector<int32_t> prompt;
    for (int i = 0; i < 200; ++i) prompt.push_back(40 + (i * 53) % 4000);
    std::vector<float> l;
    gpu.eval(prompt, false, l);
    for (int i = 0; i < 120; ++i) {
        const int32_t next = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
        gpu.eval(std::span<const int32_t>(&next, 1), false, l);
    }
    gpu.set_route_callback(nullptr);
    const ExpertCache* cache = gpu.expert_cache();
    ASSERT_NE(cache, nullptr);
    // The engine's prompt steps: layer-major groups of up to plan().group_tokens tokens where it has
    // them (docs/hybrid.md "Layer-major groups": groups while more than a block is left, which is
    // the simulator's fixed-size chunking with that size), else blocks of n_ubatch.
    const int64_t step = gpu.plan().group_tokens > 0 ? gpu.plan().group_tokens : so.n_ubatch;
    const ReplayResult sim = replay_cache(make_replay_trace(trace), cache->setup(), ReplayOptions{0, step});
    const CacheCounters live = gpu.expert_counters()->total().cache;
    CacheCounters simt;
    for (int l = 0; l < cache->n_layer(); ++l)
        if (cache->capacity(l) < static_cast<int>(model.hp().n_expert)) simt.add(sim.layers[static_cast<size_t>(l)].cache);
    std::printf("  live: hit rate %.2f%%, %llu admissions, %llu late copies; simulated: hit rate %.2f%%, %llu admissions\n",
                100 * live.hit_rate(), static_cast<unsigned long long>(live.admissions),
                static_cast<unsigned long long>(live.late_copies), 100 * simt.hit_rate(),
                static_cast<unsigned long long>(simt.admissions));
    EXPECT_GT(live.admissions, 0u);
    if (live.late_copies == 0) {
        for (int l = 0; l < cache->n_layer(); ++l) {
            if (cache->capacity(l) >= static_cast<int>(model.hp().n_expert)) continue;
            const CacheCounters& a = cache->counters(l);
            const CacheCounters& b = sim.layers[static_cast<size_t>(l)].cache;
            EXPECT_EQ(a.hits, b.hits) << "layer " << l;
            EXPECT_EQ(a.misses, b.misses) << "layer " << l;
            EXPECT_EQ(a.admissions, b.admissions) << "layer " << l;
            EXPECT_EQ(a.evictions, b.evictions) << "layer " << l;
            EXPECT_EQ(a.refused_rate + a.refused_staging + a.refused_policy,
                      b.refused_rate + b.refused_staging + b.refused_policy)
                << "layer " << l;
        }
    } else {
        ADD_FAILURE() << live.late_copies << " copies were late: live and simulated may differ by design; a copy of a few "
                                             "hundred KiB should land within one decode step";
    }
    slots_hold_their_experts(model, gpu);
}

TEST(CudaAdaptive, FrozenResidencyIsBitIdenticalAcrossRuns) {
    cuda::test::require_gpu();
    Model model(shared_dir() + "/fixtures/tiny-gptoss-mxfp4.gguf");
    std::vector<size_t> plen;
    const auto seqs = golden_sequences("tiny-gptoss-mxfp4", plen, 1);
    SessionOptions so;
    so.n_threads = 2;
    GpuOptions go = aggressive(budget_for_slots(model, so, 4));
    go.adapt.refresh_every = 0;
    auto run = [&] {
        cuda::GpuSession gpu(model, so, go);
        std::vector<float> all, l;
        gpu.eval(std::span<const int32_t>(seqs[0].data(), plen[0]), true, l);
        all = l;
        for (size_t t = plen[0]; t < seqs[0].size(); ++t) {
            gpu.eval(std::span<const int32_t>(&seqs[0][t], 1), false, l);
            all.insert(all.end(), l.begin(), l.end());
        }
        EXPECT_EQ(gpu.expert_counters()->total().cache.admissions, 0u);
        return all;
    };
    const auto a = run(), b = run();
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
}

TEST(CudaAdaptive, FaultsAreClearAndOutputsStayRight) {
    cuda::test::require_gpu();
    Model model(shared_dir() + "/fixtures/tiny-qwen3moe-q8.gguf");
    std::vector<size_t> plen;
    const auto seqs = golden_sequences("tiny-qwen3moe-q8", plen, 2);
    SessionOptions so;
    so.n_threads = 2;
    const double one_slot = budget_for_slots(model, so, 1);
    struct Fault {
        const char* what;
        int max_pinned, fail_every;
    };
    for (const Fault f : {Fault{"no staging buffer can be pinned", 0, 0}, Fault{"one staging buffer", 1, 0},
                          Fault{"every 3rd copy fails", -1, 3}}) {
        SCOPED_TRACE(f.what);
        GpuOptions go = aggressive(one_slot);  // a slot budget of about one expert per layer
        go.test_max_pinned_buffers = f.max_pinned;
        go.test_fail_copy_every = f.fail_every;
        cuda::GpuSession gpu(model, so, go);
        Stats st;
        for (size_t i = 0; i < seqs.size(); ++i) decode_steps_match_cpu(model, gpu, seqs[i], plen[i], st);
        const CacheCounters t = gpu.expert_counters()->total().cache;
        std::printf("  %s: %llu admissions, %llu failed, %llu refused for staging; argmax %d/%d, max |dp| %.5f\n", f.what,
                    static_cast<unsigned long long>(t.admissions), static_cast<unsigned long long>(t.failed_copies),
                    static_cast<unsigned long long>(t.refused_staging), st.agree, st.steps, st.max_dp);
        if (f.max_pinned == 0) {
            EXPECT_EQ(t.admissions, 0u);
            EXPECT_TRUE(gpu.expert_cache()->options().frozen());
        } else {
            EXPECT_GT(t.admissions, 0u);
        }
        if (f.max_pinned == 1) {
            EXPECT_GT(t.refused_staging, 0u);
        }
        if (f.fail_every > 0) {
            EXPECT_GT(t.failed_copies, 0u);
        }
        if (gpu.expert_cache() && f.max_pinned != 0) slots_hold_their_experts(model, gpu);
    }
}
