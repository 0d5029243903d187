#include "cache/expert_cache_policy.h"

#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace nitro {

// ---------------------------------------------------------------------------------------------
// Base: slot table and step semantics

ExpertCachePolicy::ExpertCachePolicy(int n_expert, int capacity) : n_expert_(n_expert) {
    if (n_expert < 1 || n_expert >= kNoExpert)
        fail("expert cache: n_expert {} is out of range (expected 1..{})", n_expert, kNoExpert - 1);
    if (capacity < 0) fail("expert cache: capacity {} slots is negative", capacity);
    capacity_ = std::min(capacity, n_expert);
    slot_of_.assign(n_expert, -1);
    slot_expert_.assign(capacity_, kNoExpert);
    free_slots_.reserve(capacity_);
    for (int s = capacity_ - 1; s >= 0; --s) free_slots_.push_back(s);
    step_mark_.assign(n_expert, 0);
    pinned_.assign(n_expert, 0);
    last_tick_.assign(n_expert, 0);
    last_step_.assign(n_expert, 0);
    held_.reserve(64);
}

bool ExpertCachePolicy::preload(ExpertId e, bool pinned) {
    if (e >= n_expert_) fail("expert cache: preload of expert {} in a layer of {} experts", e, n_expert_);
    if (step_count_ != 0) fail("expert cache: preload after the first step");
    if (slot_of_[e] >= 0) {
        pinned_[e] = pinned_[e] || pinned;
        return true;
    }
    if (free_slots_.empty()) return false;
    const int32_t s = free_slots_.back();
    free_slots_.pop_back();
    slot_of_[e] = s;
    slot_expert_[s] = e;
    ++size_;
    ++preloaded_;
    pinned_[e] = pinned;
    on_insert(e);
    return true;
}

void ExpertCachePolicy::drop(ExpertId e) {
    NITRO_CHECK(e < n_expert_);
    const int32_t s = slot_of_[e];
    if (s < 0) return;
    slot_of_[e] = -1;
    slot_expert_[s] = kNoExpert;
    free_slots_.push_back(s);
    --size_;
    on_evict(e);
    pinned_[e] = 0;
}

StepOutcome ExpertCachePolicy::access(std::span<const ExpertId> selected, int64_t token,
                                      std::span<SlotChange> changes) {
    return access(selected, token, changes, StepLimits{});
}

StepOutcome ExpertCachePolicy::access(std::span<const ExpertId> selected, int64_t token, std::span<SlotChange> changes,
                                      const StepLimits& limits) {
    StepOutcome out;
    ++step_count_;
    if (++step_stamp_ == 0) {  // wrapped: clear marks so no stale stamp matches
        std::fill(step_mark_.begin(), step_mark_.end(), 0);
        step_stamp_ = 1;
    }
    for (ExpertId e : selected) {
        step_mark_[e] = step_stamp_;
        out.hits += slot_of_[e] >= 0;
        last_tick_[e] = ++tick_;
        last_step_[e] = step_count_;
    }
    for (ExpertId e : limits.protect) step_mark_[e] = step_stamp_;
    on_step(selected, token);
    if (out.hits == static_cast<int32_t>(selected.size())) return out;
    if (capacity_ == 0) {
        out.refused_policy = static_cast<int32_t>(selected.size()) - out.hits;
        return out;
    }
    for (ExpertId e : selected) {
        if (slot_of_[e] >= 0) continue;
        if (out.admissions >= limits.max_admissions) {
            ++out.refused_limit;
            continue;
        }
        if (!should_admit(e, token)) {
            ++out.refused_policy;
            continue;
        }
        int32_t slot;
        ExpertId victim = kNoExpert;
        if (!free_slots_.empty()) {
            slot = free_slots_.back();
            free_slots_.pop_back();
        } else {
            victim = choose_victim(e);
            if (victim == kNoExpert) {
                ++out.refused_policy;
                continue;
            }
            NITRO_CHECK(slot_of_[victim] >= 0 && evictable(victim));
            slot = slot_of_[victim];
            slot_of_[victim] = -1;
            --size_;
            on_evict(victim);
        }
        slot_of_[e] = slot;
        slot_expert_[slot] = e;
        ++size_;
        on_insert(e);
        if (!changes.empty()) {
            NITRO_CHECK(static_cast<size_t>(out.admissions) < changes.size());
            changes[out.admissions] = SlotChange{e, victim, slot};
        }
        ++out.admissions;
    }
    return out;
}

ExpertId ExpertCachePolicy::heap_min_not_in_step(ExpertHeap& heap) {
    ExpertId found = kNoExpert;
    held_.clear();
    while (!heap.empty()) {
        const ExpertId e = heap.top();
        if (evictable(e)) {
            found = e;
            break;
        }
        held_.push_back({e, heap.top_key(), heap.top_tick()});
        heap.pop();
    }
    for (const Held& h : held_) heap.set(h.e, h.key, h.tick);
    return found;
}

// ---------------------------------------------------------------------------------------------
// LRU

LruPolicy::LruPolicy(int n_expert, int capacity)
    : ExpertCachePolicy(n_expert, capacity),
      prev_(n_expert + 1),
      next_(n_expert + 1),
      sentinel_(static_cast<ExpertId>(n_expert)) {
    prev_[sentinel_] = next_[sentinel_] = sentinel_;
}

void LruPolicy::unlink(ExpertId e) {
    next_[prev_[e]] = next_[e];
    prev_[next_[e]] = prev_[e];
}

void LruPolicy::on_step(std::span<const ExpertId> selected, int64_t) {
    // Ticks were given in router order, so appending hits in that order keeps the list sorted.
    for (ExpertId e : selected) {
        if (!lookup(e) || !tracked(e)) continue;
        unlink(e);
        const ExpertId tail = prev_[sentinel_];
        prev_[e] = tail;
        next_[e] = sentinel_;
        next_[tail] = e;
        prev_[sentinel_] = e;
    }
}

void LruPolicy::on_insert(ExpertId e) {
    if (!tracked(e)) return;
    // Insert after the last node whose tick is older than e's (at most |S| steps from the tail).
    ExpertId after = prev_[sentinel_];
    while (after != sentinel_ && last_tick(after) > last_tick(e)) after = prev_[after];
    const ExpertId before = next_[after];
    prev_[e] = after;
    next_[e] = before;
    next_[after] = e;
    prev_[before] = e;
}

void LruPolicy::on_evict(ExpertId e) {
    if (tracked(e)) unlink(e);
}

ExpertId LruPolicy::choose_victim(ExpertId) {
    for (ExpertId e = head(); e != sentinel_; e = next_[e])
        if (evictable(e)) return e;
    return kNoExpert;
}

// ---------------------------------------------------------------------------------------------
// LFU

LfuPolicy::LfuPolicy(int n_expert, int capacity)
    : ExpertCachePolicy(n_expert, capacity), freq_(n_expert, 0), heap_(n_expert) {}

void LfuPolicy::on_step(std::span<const ExpertId> selected, int64_t) {
    for (ExpertId e : selected) {
        ++freq_[e];
        if (lookup(e)) heap_.set(e, static_cast<double>(freq_[e]), last_tick(e));
    }
}

void LfuPolicy::on_insert(ExpertId e) { heap_.set(e, static_cast<double>(freq_[e]), last_tick(e)); }
void LfuPolicy::on_evict(ExpertId e) { heap_.erase(e); }
ExpertId LfuPolicy::choose_victim(ExpertId) { return heap_min_not_in_step(heap_); }

// ---------------------------------------------------------------------------------------------
// LRU-FREQ

LruFreqPolicy::LruFreqPolicy(int n_expert, int capacity)
    : ExpertCachePolicy(n_expert, capacity), freq_(n_expert, 0.0), heap_(n_expert) {}

void LruFreqPolicy::on_step(std::span<const ExpertId> selected, int64_t) {
    for (ExpertId e : selected) freq_[e] += 1.0;
    const uint64_t period = 2 * static_cast<uint64_t>(capacity());
    bool decayed = false;
    if (period != 0)
        for (ExpertId e : selected) {
            if (lookup(e)) continue;
            if (++misses_ % period == 0) {
                for (double& f : freq_) f *= 0.75;
                decayed = true;
            }
        }
    if (decayed) heap_.rekey_all([&](ExpertId e) { return key(e); });
    for (ExpertId e : selected)
        if (lookup(e)) heap_.set(e, key(e), last_tick(e));
}

void LruFreqPolicy::on_insert(ExpertId e) { heap_.set(e, key(e), last_tick(e)); }
void LruFreqPolicy::on_evict(ExpertId e) { heap_.erase(e); }
ExpertId LruFreqPolicy::choose_victim(ExpertId) { return heap_min_not_in_step(heap_); }

// ---------------------------------------------------------------------------------------------
// FREQ-DECAY

FreqDecayPolicy::FreqDecayPolicy(int n_expert, int capacity, double half_life_steps)
    : ExpertCachePolicy(n_expert, capacity), half_life_(half_life_steps), v_(n_expert, 0.0), heap_(n_expert) {
    if (!(half_life_steps > 0) || !std::isfinite(half_life_steps))
        fail("freq-decay: half-life {} steps must be a positive number", half_life_steps);
    growth_ = std::exp2(1.0 / half_life_steps);
}

std::string FreqDecayPolicy::name() const { return fmt::format("freq-decay:{}", half_life_); }

void FreqDecayPolicy::on_step(std::span<const ExpertId> selected, int64_t) {
    // Instead of multiplying every score by 1/growth each step, a request's weight grows by
    // `growth` each step; ratios (and so victim choice) are the same. Rescale before overflow.
    weight_ *= growth_;
    if (weight_ > 1e150) {
        for (double& x : v_) x /= weight_;
        weight_ = 1.0;
        heap_.rekey_all([&](ExpertId e) { return v_[e]; });
    }
    for (ExpertId e : selected) {
        v_[e] += weight_;
        if (lookup(e)) heap_.set(e, v_[e], last_tick(e));
    }
}

ExpertId FreqDecayPolicy::choose_victim(ExpertId) { return heap_min_not_in_step(heap_); }

}  // namespace nitro
