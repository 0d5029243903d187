// Expert cache policies: which experts of one MoE layer hold a VRAM slot, and which expert a
// missed one displaces.
//
// One implementation, two users: the simulator (src/sim) replays router traces through these
// classes, and the runtime's slot pool calls the same objects on the token path, so a simulated
// hit rate on a trace is the live hit rate on the same routing (docs/architecture.md, "One cache code path").
//
// Semantics of one step (ExpertCachePolicy::access), exact so results reproduce to the count:
//   1. The layer requests the set S of its selected experts (router order, no duplicates).
//      hits = |S ∩ cache|, accesses = |S|, counted against the cache as it was before the step.
//   2. The policy updates its statistics (on_step): every expert of S gets a recency tick, in router
//      order, whether or not it was cached.
//   3. For every missed expert of S, in router order, the policy decides admission (should_admit).
//      An admitted expert takes a free slot, or, when the cache is full, the slot of a victim
//      (choose_victim) chosen only among cached experts NOT in S. No victim means no admission.
// A policy may preload experts before the first step, pinned (static slots, never evicted) or not.
// Static residency, static + adaptive splits and rate limits are built from these classes by the
// runtime's ExpertCache (cache/expert_cache.h), which owns the per-layer policy objects.
//
// The token path allocates nothing: all state is sized at construction (n_expert, capacity).
// Not thread-safe: one object per layer, driven by one thread.
#pragma once

#include "cache/expert_heap.h"

#include "core/ids.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace nitro {

/// One admission decided during a step: `expert` goes into `slot`, replacing `evicted`
/// (kNoExpert when the slot was free). The slot pool copies the expert's bytes into the slot.
struct SlotChange {
    ExpertId expert = kNoExpert;
    ExpertId evicted = kNoExpert;
    int32_t slot = -1;
};

/// Counts of one step.
struct StepOutcome {
    int32_t hits = 0;            ///< experts of S that were cached before the step
    int32_t admissions = 0;      ///< missed experts inserted during the step
    int32_t refused_limit = 0;   ///< missed experts not considered: the step's admission limit was reached
    int32_t refused_policy = 0;  ///< missed experts the policy did not admit (should_admit, or no victim)
};

/// The arguments of one step beyond the requested set (ExpertCachePolicy::access).
struct StepLimits {
    /// Experts the step also uses without requesting them (no recency tick, no admission): they
    /// may not be evicted in this step either. The runtime passes every expert a prompt chunk
    /// computes here, while only its most selected ones are requested (cache/expert_cache.h).
    std::span<const ExpertId> protect;
    /// At most this many admissions in the step; further misses count as refused_limit.
    int max_admissions = 1 << 30;
};

/// Base class of all policies: owns the slot table (expert <-> slot) and the per-expert recency
/// ticks, and runs the step semantics above; subclasses supply statistics, admission and victim
/// choice through the protected hooks.
class ExpertCachePolicy {
public:
    /// A cache of `capacity` slots for a layer of `n_expert` experts. Throws nitro::Error if
    /// n_expert is not in [1, 65534] or capacity is negative; capacity above n_expert is clamped.
    ExpertCachePolicy(int n_expert, int capacity);
    virtual ~ExpertCachePolicy() = default;
    ExpertCachePolicy(const ExpertCachePolicy&) = delete;
    ExpertCachePolicy& operator=(const ExpertCachePolicy&) = delete;

    /// Runs one step for token `token` (a non-decreasing token counter, used by rate limits) with
    /// the selected experts `selected` (router order; ids < n_expert, no duplicates: the caller
    /// validates routing, e.g. the trace reader). If `changes` is non-empty it receives the
    /// admissions, at most |selected| of them (it must hold that many); the return value says how
    /// many were written.
    StepOutcome access(std::span<const ExpertId> selected, int64_t token,
                       std::span<SlotChange> changes = {});
    /// The same step with `limits` (protected experts, an admission limit).
    StepOutcome access(std::span<const ExpertId> selected, int64_t token, std::span<SlotChange> changes,
                       const StepLimits& limits);

    /// Places `e` in a free slot before the first step (an initial resident). `pinned`: it is never
    /// evicted (a static slot). Returns false if no slot is free. Throws nitro::Error after the
    /// first step or for an id out of range.
    bool preload(ExpertId e, bool pinned);
    /// Removes `e` from its slot (the slot becomes free), e.g. when its copy failed. No-op if `e`
    /// holds no slot. Pinned experts can be dropped too.
    void drop(ExpertId e);
    /// Whether `e` is pinned (preloaded with pinned = true).
    bool pinned(ExpertId e) const { return pinned_[e] != 0; }

    /// Whether `e` holds a slot.
    bool lookup(ExpertId e) const { return slot_of_[e] >= 0; }
    /// The slot of `e`, or -1.
    int slot_of(ExpertId e) const { return slot_of_[e]; }
    /// Expert in each slot (kNoExpert for a free slot); size = capacity().
    std::span<const ExpertId> slots() const { return slot_expert_; }
    int capacity() const { return capacity_; }
    int n_expert() const { return n_expert_; }
    /// Slots in use.
    int size() const { return size_; }
    /// Experts placed by preload (before the first step): the static slots.
    int preloaded() const { return preloaded_; }
    /// A short name for tables ("lru", "rate:1/4", ...).
    virtual std::string name() const = 0;

protected:
    /// Updates statistics for step S (called after hits are counted, before admissions;
    /// lookup() still shows the cache as it was before the step). Default: nothing.
    virtual void on_step(std::span<const ExpertId> selected, int64_t token) {}
    /// Whether the missed expert `e` may be inserted now. Default: always.
    virtual bool should_admit(ExpertId e, int64_t token) { return true; }
    /// When the cache is full: the cached expert to evict for `incoming`, chosen among cached
    /// experts with in_step(x) == false, or kNoExpert to leave `incoming` out.
    virtual ExpertId choose_victim(ExpertId incoming) = 0;
    /// Notifications after the slot table changed.
    virtual void on_insert(ExpertId e) {}
    virtual void on_evict(ExpertId e) {}

    /// Places `e` in a free slot before the first step (static slots). Returns false if full.
    bool preload(ExpertId e) { return preload(e, false); }
    /// Whether `e` is in the step being processed (requested or protected).
    bool in_step(ExpertId e) const { return step_mark_[e] == step_stamp_; }
    /// Whether `e` may be chosen as a victim now: not in the step and not pinned. Every
    /// choose_victim implementation returns only evictable experts.
    bool evictable(ExpertId e) const { return !in_step(e) && !pinned_[e]; }
    /// Recency tick of `e`'s last request (0 = never); ticks increase by one per requested expert.
    uint64_t last_tick(ExpertId e) const { return last_tick_[e]; }
    /// Index (1-based) of the last step that requested `e` (0 = never).
    uint64_t last_step(ExpertId e) const { return last_step_[e]; }
    /// Steps run so far, the current one included.
    uint64_t steps() const { return step_count_; }
    /// The smallest (key, tick) expert of `heap` that is evictable, or kNoExpert.
    /// Entries in the step are lifted off and put back (at most |S| of them).
    ExpertId heap_min_not_in_step(ExpertHeap& heap);

private:
    int n_expert_;
    int capacity_;
    int size_ = 0;
    int preloaded_ = 0;
    std::vector<int32_t> slot_of_;       // [n_expert] slot or -1
    std::vector<ExpertId> slot_expert_;  // [capacity] expert or kNoExpert
    std::vector<int32_t> free_slots_;    // stack of free slot indices
    std::vector<uint32_t> step_mark_;    // [n_expert] == step_stamp_ while in the current step
    std::vector<uint8_t> pinned_;        // [n_expert] 1 = never evicted
    std::vector<uint64_t> last_tick_;    // [n_expert]
    std::vector<uint64_t> last_step_;    // [n_expert]
    uint32_t step_stamp_ = 0;
    uint64_t tick_ = 0;
    uint64_t step_count_ = 0;
    struct Held {
        ExpertId e;
        double key;
        uint64_t tick;
    };
    std::vector<Held> held_;             // scratch of heap_min_not_in_step
};

/// LRU: the victim is the cached expert (not in S) with the oldest recency tick. O(1) per access
/// (an intrusive list ordered by tick).
class LruPolicy : public ExpertCachePolicy {
public:
    LruPolicy(int n_expert, int capacity);
    std::string name() const override { return "lru"; }

protected:
    /// Whether cached expert `e` is under LRU (subclasses pin some experts outside the list).
    virtual bool tracked(ExpertId e) const { return true; }
    void on_step(std::span<const ExpertId> selected, int64_t token) override;
    ExpertId choose_victim(ExpertId incoming) override;
    void on_insert(ExpertId e) override;
    void on_evict(ExpertId e) override;

private:
    void unlink(ExpertId e);
    // Doubly linked list of cached experts, oldest tick first; index n_expert is the sentinel.
    std::vector<ExpertId> prev_, next_;
    ExpertId head() const { return next_[sentinel_]; }
    ExpertId sentinel_;
};

/// LFU: frequency = requests of the expert since the first step (kept across evictions); the
/// victim has the lowest frequency, ties broken by the oldest recency tick.
class LfuPolicy : public ExpertCachePolicy {
public:
    LfuPolicy(int n_expert, int capacity);
    std::string name() const override { return "lfu"; }

protected:
    void on_step(std::span<const ExpertId> selected, int64_t token) override;
    ExpertId choose_victim(ExpertId incoming) override;
    void on_insert(ExpertId e) override;
    void on_evict(ExpertId e) override;

private:
    std::vector<uint64_t> freq_;  // [n_expert]
    ExpertHeap heap_;             // cached experts by (freq, tick)
};

/// LRU-FREQ as the earlier project defined it: every request adds 1 to the expert's frequency;
/// every 2*C misses (all misses of the layer, admitted or not) all frequencies are multiplied by
/// 0.75; the victim has the lowest score freq*1000 - age, age = steps since the expert's last
/// request; ties broken by the oldest recency tick. Within a step: frequencies of S are
/// incremented first, then each miss of S (router order) is counted and may trigger the decay.
/// (The score is kept as freq*1000 + last_step, which orders experts the same way: the current
/// step is common to all of them.)
class LruFreqPolicy : public ExpertCachePolicy {
public:
    LruFreqPolicy(int n_expert, int capacity);
    std::string name() const override { return "lru-freq"; }
    /// Current (decayed) frequency of `e`.
    double frequency(ExpertId e) const { return freq_[e]; }

protected:
    void on_step(std::span<const ExpertId> selected, int64_t token) override;
    ExpertId choose_victim(ExpertId incoming) override;

    void on_insert(ExpertId e) override;
    void on_evict(ExpertId e) override;

private:
    double key(ExpertId e) const { return freq_[e] * 1000.0 + static_cast<double>(last_step(e)); }
    std::vector<double> freq_;  // [n_expert]
    uint64_t misses_ = 0;
    ExpertHeap heap_;           // cached experts by (score, tick)
};

/// FREQ-DECAY: an exponentially decayed request count per expert: at every step all scores are
/// multiplied by 2^(-1/half_life) and each expert of S adds 1. The victim has the lowest score,
/// ties broken by the oldest recency tick. O(1) per request (scores kept in a scaled domain).
class FreqDecayPolicy : public ExpertCachePolicy {
public:
    /// `half_life_steps` > 0: steps after which a request counts half.
    FreqDecayPolicy(int n_expert, int capacity, double half_life_steps);
    std::string name() const override;

protected:
    void on_step(std::span<const ExpertId> selected, int64_t token) override;
    ExpertId choose_victim(ExpertId incoming) override;

private:
    double half_life_;
    double growth_;           // 2^(1/half_life): weight of a request relative to the previous step
    double weight_ = 1.0;     // weight of a request in the current step (scaled domain)
    std::vector<double> v_;   // [n_expert] score * (weight_ of the current step)
    ExpertHeap heap_;         // cached experts by (v, tick)

protected:
    void on_insert(ExpertId e) override { heap_.set(e, v_[e], last_tick(e)); }
    void on_evict(ExpertId e) override { heap_.erase(e); }
};

}  // namespace nitro
