// Hand-computed traces with exact expected hits for every policy (src/cache/expert_cache_policy.h,
// src/sim/belady_policy.h). Every expected number below was worked out on paper, step by step, in
// the comments next to it; ticks are given in router order (t<expert>=<tick>).
#include "cache/expert_cache.h"
#include "cache/expert_cache_policy.h"
#include "sim/belady_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace nitro {
namespace {

using Steps = std::vector<std::vector<ExpertId>>;

struct Counts {
    int hits = 0, admissions = 0;
};

// Runs steps through `p`; step i has token i.
Counts run(ExpertCachePolicy& p, const Steps& steps) {
    Counts c;
    for (size_t i = 0; i < steps.size(); ++i) {
        const StepOutcome o = p.access(steps[i], static_cast<int64_t>(i));
        c.hits += o.hits;
        c.admissions += o.admissions;
    }
    return c;
}

// Runs decode steps through an ExpertCache (5 experts, top-2, one layer, capacity 3) set up with
// `opt` and the initial residents `resident` (the first n_static pinned); returns its counts.
Counts run_cache(const ResidencyOptions& opt, std::vector<int32_t> resident, int n_static, const Steps& steps,
                 std::vector<ExpertId>* final_slots = nullptr) {
    LayerSlots ls;
    ls.resident = std::move(resident);
    ls.capacity = 3;
    ls.n_static = n_static;
    InstantCopyBackend backend(opt.staging_buffers < 0 ? 0 : opt.staging_buffers);
    ExpertCache cache({ls}, 5, 2, opt, opt.frozen() ? nullptr : &backend);
    std::vector<int32_t> ids;
    for (const auto& s : steps) {
        cache.begin_step(1);
        ids.assign(s.begin(), s.end());
        cache.access(0, ids);
        cache.commit(0);
    }
    if (final_slots) final_slots->assign(cache.slots(0).begin(), cache.slots(0).end());
    const CacheCounters& c = cache.counters(0);
    return {static_cast<int>(c.hits), static_cast<int>(c.admissions)};
}

bool holds(const std::vector<ExpertId>& slots, ExpertId e) { return std::find(slots.begin(), slots.end(), e) != slots.end(); }

std::vector<ExpertId> flatten(const Steps& steps) {
    std::vector<ExpertId> v;
    for (const auto& s : steps) v.insert(v.end(), s.begin(), s.end());
    return v;
}

// Trace T: 5 experts, top-2, 8 steps, 16 requests. Capacity 3 in every test below.
const Steps kT = {{0, 1}, {0, 2}, {3, 0}, {1, 4}, {2, 0}, {3, 1}, {0, 4}, {2, 3}};

TEST(PolicyHand, LruOnT) {
    // s1 {0,1}: 0 hits; t0=1 t1=2; admit 0, 1 (free)            cache {0,1}
    // s2 {0,2}: hit 0; t0=3 t2=4; admit 2 (free)                 cache {0,1,2}   H=1
    // s3 {3,0}: hit 0; t3=5 t0=6; 3: victims 1(t2) 2(t4) -> 1    cache {0,2,3}   H=2
    // s4 {1,4}: 0 hits; t1=7 t4=8; 1: 0(t6) 2(t4) 3(t5) -> 2; 4: 0(t6) 3(t5) -> 3   cache {0,1,4}
    // s5 {2,0}: hit 0; t2=9 t0=10; 2: 1(t7) 4(t8) -> 1          cache {0,4,2}   H=3
    // s6 {3,1}: 0 hits; 3: 0(t10) 4(t8) 2(t9) -> 4; 1: 0(t10) 2(t9) -> 2   cache {0,3,1}
    // s7 {0,4}: hit 0; t0=13 t4=14; 4: 3(t11) 1(t12) -> 3       cache {0,1,4}   H=4
    // s8 {2,3}: 0 hits; 2: 0(t13) 1(t12) 4(t14) -> 1; 3: 0(t13) 4(t14) -> 0   cache {4,2,3}
    // hits 4; admissions 2+1+1+2+1+2+1+2 = 12
    LruPolicy p(5, 3);
    const Counts c = run(p, kT);
    EXPECT_EQ(c.hits, 4);
    EXPECT_EQ(c.admissions, 12);
    EXPECT_TRUE(p.lookup(4) && p.lookup(2) && p.lookup(3));
    EXPECT_FALSE(p.lookup(0) || p.lookup(1));
}

TEST(PolicyHand, LfuOnTWithFrequencyTies) {
    // Frequencies count every request since the start; ties go to the older tick.
    // s1 {0,1}: f0=1 f1=1; admit both                                      cache {0,1}
    // s2 {0,2}: hit 0; f0=2 f2=1; admit 2 (free)                           cache {0,1,2}  H=1
    // s3 {3,0}: hit 0; f3=1 f0=3; 3: 1(f1,t2) 2(f1,t4) tie -> 1 (older)    cache {0,2,3}  H=2
    // s4 {1,4}: f1=2 f4=1; 1: 0(f3) 2(f1,t4) 3(f1,t5) -> 2; 4: 0(f3) 3(f1) -> 3   cache {0,1,4}
    // s5 {2,0}: hit 0; f2=2 f0=4; 2: 1(f2) 4(f1) -> 4                      cache {0,1,2}  H=3
    // s6 {3,1}: hit 1; f3=2 f1=3; 3: 0(f4) 2(f2) -> 2                      cache {0,1,3}  H=4
    // s7 {0,4}: hit 0; f0=5 f4=2; 4: 1(f3) 3(f2) -> 3                      cache {0,1,4}  H=5
    // s8 {2,3}: f2=3 f3=3; 2: 0(f5) 1(f3) 4(f2) -> 4; 3: 0(f5) 1(f3) -> 1  cache {0,2,3}
    // hits 5; admissions 2+1+1+2+1+1+1+2 = 11
    LfuPolicy p(5, 3);
    const Counts c = run(p, kT);
    EXPECT_EQ(c.hits, 5);
    EXPECT_EQ(c.admissions, 11);
    EXPECT_TRUE(p.lookup(0) && p.lookup(2) && p.lookup(3));
}

TEST(PolicyHand, LruFreqOnTWithDecayStep) {
    // score = f*1000 - age (age in steps); decay x0.75 of all f at every 2C = 6th miss.
    // s1 {0,1}: f0=1 f1=1; misses m=1,2; admit both                        cache {0,1}
    // s2 {0,2}: hit 0; f0=2 f2=1; m=3; admit 2 (free)                      cache {0,1,2}  H=1
    // s3 {3,0}: hit 0; f3=1 f0=3; m=4; 3: 1 (1000-2=998) 2 (1000-1=999) -> 1   cache {0,2,3}  H=2
    // s4 {1,4}: f1=2 f4=1; m=5, m=6 -> decay: f0=2.25 f1=1.5 f2=0.75 f3=0.75 f4=0.75
    //           1: 0 (2250-1) 2 (750-2=748) 3 (750-1=749) -> 2; 4: 0 (2249) 3 (749) -> 3   cache {0,1,4}
    // s5 {2,0}: hit 0; f2=1.75 f0=3.25; m=7; 2: 1 (1500-1) 4 (750-1) -> 4  cache {0,1,2}  H=3
    // s6 {3,1}: hit 1; f3=1.75 f1=2.5; m=8; 3: 0 (3250-1) 2 (1750-1) -> 2  cache {0,1,3}  H=4
    // s7 {0,4}: hit 0; f0=4.25 f4=1.75; m=9; 4: 1 (2500-1) 3 (1750-1) -> 3 cache {0,1,4}  H=5
    // s8 {2,3}: f2=2.75 f3=2.75; m=10,11; 2: 0 (4249) 1 (2498) 4 (1749) -> 4; 3: 0, 1 -> 1
    // hits 5; admissions 11
    LruFreqPolicy p(5, 3);
    const Steps first4(kT.begin(), kT.begin() + 4);
    Counts c = run(p, first4);
    // Right after the decay in s4 (exact in binary floating point).
    EXPECT_EQ(p.frequency(0), 2.25);
    EXPECT_EQ(p.frequency(1), 1.5);
    EXPECT_EQ(p.frequency(2), 0.75);
    EXPECT_EQ(p.frequency(3), 0.75);
    EXPECT_EQ(p.frequency(4), 0.75);
    EXPECT_TRUE(p.lookup(0) && p.lookup(1) && p.lookup(4));
    for (size_t i = 4; i < kT.size(); ++i) {
        const StepOutcome o = p.access(kT[i], static_cast<int64_t>(i));
        c.hits += o.hits;
        c.admissions += o.admissions;
    }
    EXPECT_EQ(c.hits, 5);
    EXPECT_EQ(c.admissions, 11);
    EXPECT_EQ(p.frequency(2), 2.75);
    EXPECT_EQ(p.frequency(0), 4.25);
    EXPECT_TRUE(p.lookup(0) && p.lookup(2) && p.lookup(3));
}

TEST(PolicyHand, LruFreqDecayPeriodIsTwiceCapacity) {
    // C=1, k=1: decay at every 2nd miss. s1 {0}: f0=1, m=1. s2 {1}: f1=1, m=2 -> decay: f0=0.75
    // f1=0.75. s3 {1}: hit, f1=1.75 (hits do not count). s4 {2}: f2=1, m=3. s5 {0}: f0=1.75,
    // m=4 -> decay: f0=1.3125 f1=1.3125 f2=0.75.
    LruFreqPolicy p(3, 1);
    run(p, {{0}, {1}});
    EXPECT_EQ(p.frequency(0), 0.75);
    EXPECT_EQ(p.frequency(1), 0.75);
    run(p, {{1}, {2}});
    EXPECT_EQ(p.frequency(1), 1.75);
    EXPECT_EQ(p.frequency(2), 1.0);
    run(p, {{0}});
    EXPECT_EQ(p.frequency(0), 1.3125);
    EXPECT_EQ(p.frequency(1), 1.3125);
    EXPECT_EQ(p.frequency(2), 0.75);
}

TEST(PolicyHand, TiesGoToTheOlderTickInRouterOrder) {
    // Trace U: 4 experts, top-2, capacity 3. Equal frequencies and scores everywhere a victim is
    // chosen, so LRU, LFU and LRU-FREQ all fall back to the tick (router order within a step).
    // s1 {0,1}: t0=1 t1=2; admit both                                       cache {0,1}
    // s2 {2,3}: 2 -> free slot; 3: 0 (f1, score 999, t1) 1 (f1, 999, t2) -> 0   cache {1,2,3}
    // s3 {0,1}: hit 1; 0: 2 (f1, 999, t3) 3 (f1, 999, t4) -> 2              cache {1,3,0}  H=1
    // s4 {2,3}: hit 3; misses so far 2+2+1+1 = 6 -> LRU-FREQ decays (f0=f1=1.5, still equal);
    //           2: 1 (f2, t6) 0 (f2, t5) -> 0                              cache {1,3,2}  H=2
    const Steps u = {{0, 1}, {2, 3}, {0, 1}, {2, 3}};
    LruPolicy lru(4, 3);
    LfuPolicy lfu(4, 3);
    LruFreqPolicy lf(4, 3);
    for (ExpertCachePolicy* p : std::vector<ExpertCachePolicy*>{&lru, &lfu, &lf}) {
        const Counts c = run(*p, u);
        EXPECT_EQ(c.hits, 2) << p->name();
        EXPECT_EQ(c.admissions, 6) << p->name();
        EXPECT_TRUE(p->lookup(1) && p->lookup(3) && p->lookup(2)) << p->name();
        EXPECT_FALSE(p->lookup(0)) << p->name();
    }
    EXPECT_EQ(lf.frequency(0), 1.5);
}

TEST(PolicyHand, LruOrdersAnAdmittedMissBeforeALaterHit) {
    // s1 {0,1}: t0=1 t1=2, both admitted. s2 {2,1}: t2=3 (miss, admitted to the free slot) t1=4
    // (hit). s3 {3,0}: hit 0; 3: victims 1 (t4) 2 (t3) -> 2, because 2 came first in s2's router
    // order. s4 {1,2}: hit 1, miss 2. Hits: 1 + 1 + 1 = 3.
    LruPolicy p(4, 3);
    const Counts c = run(p, {{0, 1}, {2, 1}, {3, 0}});
    EXPECT_FALSE(p.lookup(2));
    EXPECT_TRUE(p.lookup(1));
    const StepOutcome o = p.access(std::vector<ExpertId>{1, 2}, 3);
    EXPECT_EQ(c.hits + o.hits, 3);
}

TEST(PolicyHand, FreqDecayHalfLifeOneOnT) {
    // Half-life 1 step: scores halve every step, then +1 per request.
    // s1 {0,1}: sc0=1 sc1=1; admit both
    // s2 {0,2}: sc0=1.5 sc1=.5 sc2=1; hit 0; admit 2                     cache {0,1,2} H=1
    // s3 {3,0}: sc0=1.75 sc1=.25 sc2=.5 sc3=1; hit 0; 3: 1 (.25) 2 (.5) -> 1   cache {0,2,3} H=2
    // s4 {1,4}: sc0=.875 sc1=1.125 sc2=.25 sc3=.5 sc4=1; 1: 0 2 3 -> 2; 4: 0 (.875) 3 (.5) -> 3
    // s5 {2,0}: sc0=1.4375 sc1=.5625 sc2=1.125 sc4=.5; hit 0; 2: 1 (.5625) 4 (.5) -> 4   H=3
    // s6 {3,1}: sc0=.71875 sc1=1.28125 sc2=.5625 sc3=1.125; hit 1; 3: 0 (.71875) 2 (.5625) -> 2  H=4
    // s7 {0,4}: sc0=1.359375 sc1=.640625 sc3=.5625 sc4=1.125; hit 0; 4: 1 (.64) 3 (.5625) -> 3  H=5
    // s8 {2,3}: sc0=.6796875 sc1=.3203125 sc4=.5625; 2: 0 1 4 -> 1; 3: 0 (.68) 4 (.5625) -> 4
    // hits 5; admissions 2+1+1+2+1+1+1+2 = 11; final cache {0,2,3}
    FreqDecayPolicy p(5, 3, 1.0);
    const Counts c = run(p, kT);
    EXPECT_EQ(c.hits, 5);
    EXPECT_EQ(c.admissions, 11);
    EXPECT_TRUE(p.lookup(0) && p.lookup(2) && p.lookup(3));
}

TEST(PolicyHand, StaticOnItsOwnProfileOfT) {
    // Counts on T: 0:5, 1:3, 2:3, 3:3, 4:2. Ranked 0, 1, 2, 3, 4 (ties by id). Top-3 {0,1,2}
    // preloaded: hits 5 + 3 + 3 = 11 of 16, no admissions.
    // Through the ExpertCache: three pinned residents, frozen residency.
    ResidencyOptions o;
    o.refresh_every = 0;
    const Counts c = run_cache(o, {0, 1, 2}, 3, kT);
    EXPECT_EQ(c.hits, 11);
    EXPECT_EQ(c.admissions, 0);
}

TEST(PolicyHand, StaticPlusLruOnT) {
    // 1 static slot {0} (never evicted), 2 LRU slots.
    // s1 {0,1}: hit 0; 1 -> free                                           H=1  cache {0,1}
    // s2 {0,2}: hit 0; 2 -> free                                           H=2  cache {0,1,2}
    // s3 {3,0}: hit 0; 3: adaptive 1 (t2) 2 (t4) -> 1                       H=3  cache {0,2,3}
    // s4 {1,4}: 1: 2 (t4) 3 (t5) -> 2; 4: 3 -> 3                           H=3  cache {0,1,4}
    // s5 {2,0}: hit 0; 2: 1 (t7) 4 (t8) -> 1                                H=4  cache {0,4,2}
    // s6 {3,1}: 3: 4 (t8) 2 (t9) -> 4; 1: 2 -> 2                           H=4  cache {0,3,1}
    // s7 {0,4}: hit 0; 4: 3 (t11) 1 (t12) -> 3                              H=5  cache {0,1,4}
    // s8 {2,3}: 2: 1 (t12) 4 (t14) -> 1; 3: 4 -> 4                          H=5  cache {0,2,3}
    // hits 5; admissions 1+1+1+2+1+2+1+2 = 11
    // Through the ExpertCache: expert 0 pinned, LRU on the rest, no rate limit, instant copies.
    ResidencyOptions o;
    o.policy = "lru";
    o.refresh_every = 1;
    o.admit_per_token = 2;
    o.staging_buffers = -1;
    std::vector<ExpertId> slots;
    const Counts c = run_cache(o, {0}, 1, kT, &slots);
    EXPECT_EQ(c.hits, 5);
    EXPECT_EQ(c.admissions, 11);
    EXPECT_TRUE(holds(slots, 0) && holds(slots, 2) && holds(slots, 3));
}

TEST(PolicyHand, RateLimitedOnT) {
    // At most 1 admission per window of 2 tokens (s1,s2 | s3,s4 | s5,s6 | s7,s8), LRU eviction.
    // s1 {0,1}: 0 admitted (free); 1 refused                               cache {0}
    // s2 {0,2}: hit 0; 2 refused (window used)                             H=1
    // s3 {3,0}: hit 0; 3 admitted (new window, free)                        H=2  cache {0,3}
    // s4 {1,4}: both refused                                               H=2
    // s5 {2,0}: hit 0; 2 admitted (free)                                    H=3  cache {0,3,2}
    // s6 {3,1}: hit 3; 1 refused                                           H=4
    // s7 {0,4}: hit 0; 4 admitted: victims 3 (t11) 2 (t9) -> 2              H=5  cache {0,3,4}
    // s8 {2,3}: hit 3; 2 refused                                           H=6
    // hits 6; admissions 4
    // Through the ExpertCache: 1 admission per window of 2 tokens, cache empty at first.
    ResidencyOptions o;
    o.policy = "lru";
    o.static_share = 0;
    o.refresh_every = 2;
    o.admit_per_token = 0.5;
    o.staging_buffers = -1;
    std::vector<ExpertId> slots;
    const Counts c = run_cache(o, {}, 0, kT, &slots);
    EXPECT_EQ(c.hits, 6);
    EXPECT_EQ(c.admissions, 4);
    EXPECT_TRUE(holds(slots, 0) && holds(slots, 3) && holds(slots, 4));
}

TEST(PolicyHand, BeladyOnT) {
    // Requests: 0 at s1 s2 s3 s5 s7; 1 at s1 s4 s6; 2 at s2 s5 s8; 3 at s3 s6 s8; 4 at s4 s7.
    // Warm start: soonest first requests 0 (s1), 1 (s1), 2 (s2)             cache {0,1,2}
    // s1 {0,1}: 2 hits                                                     H=2
    // s2 {0,2}: 2 hits                                                     H=4
    // s3 {3,0}: hit 0; 3 (next s6): farthest of 1 (s4) 2 (s5) is s5 < s6 -> bypass   H=5
    // s4 {1,4}: hit 1; 4 (next s7): farthest of 0 (s5) 2 (s5) is s5 < s7 -> bypass   H=6
    // s5 {2,0}: 2 hits                                                     H=8
    // s6 {3,1}: hit 1; 3 (next s8): farthest of 0 (s7) 2 (s8) is s8, not > s8 -> bypass  H=9
    // s7 {0,4}: hit 0; 4 never again -> not admitted                       H=10
    // s8 {2,3}: hit 2; 3 never again                                       H=11
    const std::vector<ExpertId> stream = flatten(kT);
    BeladyPolicy p(5, 3, stream, 2);
    EXPECT_EQ(p.preloaded(), 3);
    const Counts c = run(p, kT);
    EXPECT_EQ(c.hits, 11);
    EXPECT_EQ(c.admissions, 0);
}

TEST(PolicyHand, BeladyEvictsTheFarthestNextUse) {
    // 4 experts, top-1, capacity 2: 0 1 2 0 1 2 ... warm start {0,1}.
    // s1 0 hit, s2 1 hit, s3 2: victims 0 (next s4) 1 (next s5) -> 1 (s5 < s6? 2's next is s6:
    // 1's s5 is not farther than s6 -> bypass). s4 0 hit, s5 1 hit, s6 2: never again -> bypass.
    // hits 4, admissions 0. Capacity 1, warm {0}: s1 hit; s2 1 (next s5) vs 0 (next s4): keep 0;
    // s3 2 (next s6) vs 0 (s4): keep; s4 hit; s5 1 never again; s6 2 never again: hits 2.
    const Steps s = {{0}, {1}, {2}, {0}, {1}, {2}};
    const std::vector<ExpertId> stream = flatten(s);
    BeladyPolicy p2(4, 2, stream, 1);
    EXPECT_EQ(run(p2, s).hits, 4);
    BeladyPolicy p1(4, 1, stream, 1);
    EXPECT_EQ(run(p1, s).hits, 2);
    // 0 1 2 2 1 0 with capacity 2: warm {0,1}; s3 2 (next s4): farthest of 0 (s6) 1 (s5) is 0 at
    // s6 > s4 -> evict 0, admit 2. s4 hit 2, s5 hit 1, s6 0 miss. hits: s1 s2 s4 s5 = 4, 1 admission.
    const Steps s2 = {{0}, {1}, {2}, {2}, {1}, {0}};
    const std::vector<ExpertId> stream2 = flatten(s2);
    BeladyPolicy p3(4, 2, stream2, 1);
    const Counts c = run(p3, s2);
    EXPECT_EQ(c.hits, 4);
    EXPECT_EQ(c.admissions, 1);
}

TEST(PolicyHand, SlotChangesReportAdmissionsAndVictims) {
    // LRU, capacity 2, top-2: s1 {0,1} fills slots 0 and 1 (free slots are taken lowest first);
    // s2 {2,0}: hit 0, 2 replaces 1 in 1's slot.
    LruPolicy p(4, 2);
    std::vector<SlotChange> ch(2);
    StepOutcome o = p.access(std::vector<ExpertId>{0, 1}, 0, ch);
    ASSERT_EQ(o.admissions, 2);
    EXPECT_EQ(ch[0].expert, 0);
    EXPECT_EQ(ch[0].slot, 0);
    EXPECT_EQ(ch[0].evicted, kNoExpert);
    EXPECT_EQ(ch[1].expert, 1);
    EXPECT_EQ(ch[1].slot, 1);
    o = p.access(std::vector<ExpertId>{2, 0}, 1, ch);
    EXPECT_EQ(o.hits, 1);
    ASSERT_EQ(o.admissions, 1);
    EXPECT_EQ(ch[0].expert, 2);
    EXPECT_EQ(ch[0].evicted, 1);
    EXPECT_EQ(ch[0].slot, 1);
    EXPECT_EQ(p.slot_of(2), 1);
    EXPECT_EQ(p.slot_of(1), -1);
}

TEST(PolicyHand, CapacityZeroAndCapacityBelowTopK) {
    // Capacity 0: never a hit. Capacity 1 with top-2: only the first missed expert of a step can
    // enter (the other one's only victim would be in S). LRU on {0,1} {1,0} {1,2}: s1: 0 admitted,
    // 1 not (victim 0 in S); s2: hit 0; 1: victim 0 in S -> not admitted; s3 {1,2}: 1 evicts 0, 2
    // finds no victim. Hits 1.
    LruPolicy z(3, 0);
    EXPECT_EQ(run(z, {{0, 1}, {0, 1}}).hits, 0);
    LruPolicy p(3, 1);
    const Counts c = run(p, {{0, 1}, {1, 0}, {1, 2}});
    EXPECT_EQ(c.hits, 1);
    EXPECT_EQ(c.admissions, 2);
    EXPECT_TRUE(p.lookup(1));
}

}  // namespace
}  // namespace nitro
