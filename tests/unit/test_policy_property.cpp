// Property tests of the cache policies on random traces, and an exhaustive check that Belady's
// OPT is optimal under the step semantics.
#include "sim/belady_policy.h"
#include "sim/policy_spec.h"
#include "sim/replay.h"
#include "trace/trace_synth.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <random>

namespace nitro {
namespace {

ReplayTrace random_trace(uint32_t layers, uint32_t E, uint32_t k, double zipf, double locality, uint64_t seed) {
    TraceHeader h;
    h.n_layer = layers;
    h.n_expert = E;
    h.n_expert_used = k;
    SynthOptions o;
    o.n_sequences = 3;
    o.prompt_tokens = 8;
    o.decode_tokens = 60;
    o.zipf_s = zipf;
    o.locality = locality;
    o.drift = 0.3;
    o.seed = seed;
    o.weights = false;
    return make_replay_trace(synth_trace(h, o));
}

struct Shape {
    uint32_t E, k;
    double zipf, locality;
};
const Shape kShapes[] = {{8, 1, 0.5, 0.0}, {8, 2, 1.0, 0.3}, {12, 3, 0.8, 0.5}, {16, 4, 1.2, 0.2}, {10, 4, 0.0, 0.0}};

TEST(PolicyProperty, OptIsAtLeastEveryPolicyAtEveryCapacity) {
    const std::vector<PolicySpec> all = parse_policy_list("all,freq-decay:4,static+lru:0.25,rate:2/3,rate:0/1");
    for (const Shape& s : kShapes)
        for (uint64_t seed = 1; seed <= 3; ++seed) {
            const ReplayTrace t = random_trace(2, s.E, s.k, s.zipf, s.locality, seed);
            const RoutingProfile prof = make_profile(t);
            PolicySpec opt_spec;
            opt_spec.kind = PolicyKind::Opt;
            for (int c = 0; c <= static_cast<int>(s.E); ++c) {
                const uint64_t opt_hits = replay_policy(t, opt_spec, prof, c).total.hits;
                for (const PolicySpec& p : all) {
                    // Prompt chunks of 8 tokens (the traces' prompts): OPT, record by record, still
                    // bounds the chunked replay (any chunked execution maps to one with as many hits).
                    const uint64_t hits = replay_policy(t, p, prof, c, ReplayOptions{32, 8}).total.hits;
                    EXPECT_LE(hits, opt_hits) << p.name() << " E=" << s.E << " k=" << s.k << " C=" << c
                                              << " seed=" << seed;
                }
            }
        }
}

TEST(PolicyProperty, LruAndOptHitRatesDoNotDecreaseWithCapacity) {
    for (const Shape& s : kShapes)
        for (uint64_t seed = 1; seed <= 3; ++seed) {
            const ReplayTrace t = random_trace(2, s.E, s.k, s.zipf, s.locality, seed + 10);
            const RoutingProfile prof = make_profile(t);
            for (const char* name : {"lru", "opt"}) {
                const PolicySpec spec = parse_policy_list(name).front();
                uint64_t prev = 0;
                for (int c = 0; c <= static_cast<int>(s.E); ++c) {
                    // ubatch 1: every prompt token its own step (the classical per-request model).
                    const uint64_t hits = replay_policy(t, spec, prof, c, ReplayOptions{32, 1}).total.hits;
                    EXPECT_GE(hits, prev) << name << " E=" << s.E << " k=" << s.k << " C=" << c;
                    prev = hits;
                }
                // With every expert cached, LRU misses only the first request of each expert per
                // layer, and OPT (warm start: all experts that are used) misses nothing.
                uint64_t first_requests = 0;
                for (const LayerStream& l : t.layers) {
                    std::vector<uint8_t> seen(s.E, 0);
                    for (ExpertId e : l.ids) first_requests += !seen[e]++;
                }
                EXPECT_EQ(prev, std::string(name) == "opt" ? t.accesses() : t.accesses() - first_requests) << name;
            }
        }
}

TEST(PolicyProperty, StaticOnItsOwnProfileEqualsTheProfileShare) {
    for (const Shape& s : kShapes) {
        const ReplayTrace t = random_trace(3, s.E, s.k, s.zipf, s.locality, 77);
        const RoutingProfile prof = make_profile(t);
        for (int c = 0; c <= static_cast<int>(s.E); ++c) {
            // Profile share: the c largest per-layer selection counts, summed over layers.
            uint64_t share = 0;
            for (const LayerStream& l : t.layers) {
                std::vector<uint64_t> count(s.E, 0);
                for (ExpertId e : l.ids) ++count[e];
                std::sort(count.begin(), count.end(), std::greater<>());
                for (int i = 0; i < c; ++i) share += count[i];
            }
            const ReplayResult r = replay_policy(t, parse_policy_list("static").front(), prof, c);
            EXPECT_EQ(r.total.hits, share) << "E=" << s.E << " C=" << c;
            EXPECT_EQ(r.total.admissions, 0u);
        }
    }
}

// Exhaustive optimum: every reachable cache content at every step (hits cannot be evicted during
// their own step; misses may be admitted in any subset; any non-requested cached expert may be
// dropped; any initial content). This relaxes the policies' rules, so it bounds them all.
uint64_t brute_force_best(const std::vector<std::vector<ExpertId>>& steps, uint32_t E, int C) {
    const uint32_t n_masks = 1u << E;
    std::vector<int64_t> best(n_masks, 0);  // best future hits from a cache state before step i
    for (size_t i = steps.size(); i-- > 0;) {
        uint32_t S = 0;
        for (ExpertId e : steps[i]) S |= 1u << e;
        std::vector<int64_t> cur(n_masks, -1);
        for (uint32_t m = 0; m < n_masks; ++m) {
            if (std::popcount(m) > C) continue;
            const uint32_t hits = m & S, misses = S & ~m, others = m & ~S;
            int64_t b = -1;
            // next = hits | (subset of misses) | (subset of others), |next| <= C.
            for (uint32_t a = misses;; a = (a - 1) & misses) {
                for (uint32_t r = others;; r = (r - 1) & others) {
                    const uint32_t next = hits | a | r;
                    if (std::popcount(next) <= C) b = std::max(b, best[next]);
                    if (r == 0) break;
                }
                if (a == 0) break;
            }
            cur[m] = std::popcount(hits) + b;
        }
        best.swap(cur);
    }
    int64_t top = 0;
    for (uint32_t m = 0; m < n_masks; ++m)
        if (std::popcount(m) <= C) top = std::max(top, best[m]);
    return static_cast<uint64_t>(top);
}

TEST(PolicyProperty, OptMatchesExhaustiveSearchOnTinyTraces) {
    std::mt19937 rng(12345);
    int cases = 0;
    for (uint32_t E : {4u, 5u, 6u})
        for (uint32_t k : {1u, 2u, 3u})
            for (int trial = 0; trial < 12; ++trial) {
                std::vector<std::vector<ExpertId>> steps(9);
                std::vector<ExpertId> flat;
                for (auto& s : steps) {
                    std::vector<ExpertId> all(E);
                    for (uint32_t e = 0; e < E; ++e) all[e] = static_cast<ExpertId>(e);
                    std::shuffle(all.begin(), all.end(), rng);
                    // Skew: prefer low ids half of the time, to get repeats.
                    if (trial % 2) std::sort(all.begin(), all.begin() + std::min<uint32_t>(E, k + 1));
                    s.assign(all.begin(), all.begin() + k);
                    flat.insert(flat.end(), s.begin(), s.end());
                }
                for (int C = 0; C <= static_cast<int>(E); ++C) {
                    BeladyPolicy p(static_cast<int>(E), C, flat, static_cast<int>(k));
                    uint64_t hits = 0;
                    for (size_t i = 0; i < steps.size(); ++i) hits += p.access(steps[i], static_cast<int64_t>(i)).hits;
                    std::string text;
                    for (const auto& st : steps) {
                        text += " {";
                        for (ExpertId e : st) text += std::to_string(e) + ",";
                        text += "}";
                    }
                    EXPECT_EQ(hits, brute_force_best(steps, E, C)) << "E=" << E << " k=" << k << " C=" << C
                                                                   << " trial=" << trial << " steps" << text;
                    ++cases;
                }
            }
    EXPECT_EQ(cases, 3 * 12 * (5 + 6 + 7));  // k values x trials x capacities 0..E
}

}  // namespace
}  // namespace nitro
