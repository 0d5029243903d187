#include "sim/belady_policy.h"

#include "core/error.h"

#include <algorithm>
#include <numeric>

namespace nitro {

BeladyPolicy::BeladyPolicy(int n_expert, int capacity, std::span<const ExpertId> stream, int k)
    : ExpertCachePolicy(n_expert, capacity), stream_(stream), k_(k), heap_(n_expert) {
    if (k < 1 || stream.size() % k != 0) fail("opt: stream of {} ids is not a whole number of {}-id steps", stream.size(), k);
    const size_t n_steps = stream.size() / k;
    // Backwards over steps: each request's next use, then its rank in its step's linear order
    // (soonest next use first; requests never used again keep router order, last).
    next_key_.assign(stream.size(), kNever);
    std::vector<uint64_t> upcoming(n_expert, kNever);  // linear position of each id's next request
    std::vector<int> order(k);
    for (size_t s = n_steps; s-- > 0;) {
        for (int j = 0; j < k; ++j) {
            const ExpertId e = stream[s * k + j];
            NITRO_CHECK(e < n_expert);
            next_key_[s * k + j] = upcoming[e];
        }
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(),
                         [&](int a, int b) { return next_key_[s * k + a] < next_key_[s * k + b]; });
        for (int r = 0; r < k; ++r) upcoming[stream[s * k + order[r]]] = s * static_cast<uint64_t>(k) + r;
    }
    next_ = upcoming;  // before the first step: the first request of each expert
    keep_mark_.assign(n_expert, 0);
    cand_.reserve(k);
    victims_.reserve(k);
    // Warm start: the C experts requested soonest (only ones requested at all).
    std::vector<ExpertId> experts(n_expert);
    std::iota(experts.begin(), experts.end(), ExpertId{0});
    std::sort(experts.begin(), experts.end(), [&](ExpertId a, ExpertId b) { return next_[a] < next_[b]; });
    for (ExpertId e : experts) {
        if (next_[e] == kNever || size() == this->capacity()) break;
        preload(e);
        heap_.set(e, -static_cast<double>(next_[e]), 0);  // preload runs before this class's hooks
    }
}

void BeladyPolicy::on_step(std::span<const ExpertId> selected, int64_t) {
    const size_t base = (steps() - 1) * static_cast<size_t>(k_);
    NITRO_CHECK(selected.size() == static_cast<size_t>(k_) && base + k_ <= stream_.size());
    for (int j = 0; j < k_; ++j) {
        const ExpertId e = selected[j];
        NITRO_CHECK(stream_[base + j] == e);
        next_[e] = next_key_[base + j];
        if (lookup(e)) heap_.set(e, -static_cast<double>(next_[e]), 0);
    }
    // The slots the hits leave go to the soonest next uses among the cached experts not in S and
    // the missed experts used again: fill free slots with the soonest misses, then let each
    // further miss (soonest first) displace the cached expert with the farthest next use while
    // that one is farther.
    victims_.clear();
    next_victim_ = 0;
    cand_.clear();
    for (ExpertId e : selected)
        if (!lookup(e) && next_[e] != kNever) cand_.push_back(e);
    if (cand_.empty()) return;
    std::sort(cand_.begin(), cand_.end(), [&](ExpertId a, ExpertId b) { return next_[a] < next_[b]; });
    const uint32_t stamp = static_cast<uint32_t>(steps());
    int free = capacity() - size();
    for (ExpertId m : cand_) {
        if (free > 0) {
            --free;
        } else {
            const ExpertId v = heap_min_not_in_step(heap_);
            if (v == kNoExpert || next_[v] <= next_[m]) break;  // later misses are later still
            heap_.erase(v);
            victims_.push_back(v);
        }
        keep_mark_[m] = stamp;
    }
}

bool BeladyPolicy::should_admit(ExpertId e, int64_t) { return keep_mark_[e] == steps(); }

ExpertId BeladyPolicy::choose_victim(ExpertId) {
    NITRO_CHECK(next_victim_ < victims_.size());
    return victims_[next_victim_++];
}

}  // namespace nitro
