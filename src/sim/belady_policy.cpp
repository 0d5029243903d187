#include "sim/belady_policy.h"

#include "core/error.h"

#include <algorithm>
#include <numeric>

namespace nitro {

BeladyPolicy::BeladyPolicy(int n_expert, int capacity, std::span<const ExpertId> stream, int k)
    : ExpertCachePolicy(n_expert, capacity), stream_(stream), k_(k) {
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
    cand_.reserve(static_cast<size_t>(this->capacity()) + k);
    // Warm start: the C experts requested soonest (only ones requested at all).
    std::vector<ExpertId> experts(n_expert);
    std::iota(experts.begin(), experts.end(), ExpertId{0});
    std::sort(experts.begin(), experts.end(), [&](ExpertId a, ExpertId b) { return next_[a] < next_[b]; });
    for (ExpertId e : experts) {
        if (next_[e] == kNever || size() == this->capacity()) break;
        preload(e);
    }
}

void BeladyPolicy::on_step(std::span<const ExpertId> selected, int64_t) {
    const size_t base = (steps() - 1) * static_cast<size_t>(k_);
    NITRO_CHECK(selected.size() == static_cast<size_t>(k_) && base + k_ <= stream_.size());
    for (int j = 0; j < k_; ++j) {
        NITRO_CHECK(stream_[base + j] == selected[j]);
        next_[selected[j]] = next_key_[base + j];
    }
    // Candidates for the slots the hits leave: cached experts not in S, missed experts used again.
    cand_.clear();
    int hits = 0, wanted_misses = 0;
    for (ExpertId e : selected) {
        if (lookup(e)) ++hits;
        else if (next_[e] != kNever) { cand_.push_back(e); ++wanted_misses; }
    }
    if (wanted_misses == 0) return;
    const uint32_t stamp = static_cast<uint32_t>(steps());
    if (wanted_misses <= capacity() - size()) {  // free slots for all of them: nothing to displace
        for (ExpertId e : cand_) keep_mark_[e] = stamp;
        return;
    }
    for (ExpertId e : slots())
        if (e != kNoExpert && !in_step(e)) cand_.push_back(e);
    const size_t keep = std::min<size_t>(static_cast<size_t>(capacity() - hits), cand_.size());
    // Distinct experts have distinct next-use keys unless both are never used again.
    std::nth_element(cand_.begin(), cand_.begin() + keep, cand_.end(),
                     [&](ExpertId a, ExpertId b) { return next_[a] != next_[b] ? next_[a] < next_[b] : a < b; });
    for (size_t i = 0; i < keep; ++i) keep_mark_[cand_[i]] = stamp;
}

bool BeladyPolicy::should_admit(ExpertId e, int64_t) { return keep_mark_[e] == steps(); }

ExpertId BeladyPolicy::choose_victim(ExpertId) {
    // Any cached expert outside S that lost its slot in on_step; take the farthest next use.
    ExpertId best = kNoExpert;
    for (ExpertId e : slots())
        if (e != kNoExpert && !in_step(e) && keep_mark_[e] != steps() && (best == kNoExpert || next_[e] > next_[best]))
            best = e;
    return best;
}

}  // namespace nitro
