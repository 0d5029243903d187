// Belady's OPT for one layer: the offline upper bound on hits. It knows the layer's whole future
// request stream, so it lives in the simulator; it still runs through the same
// ExpertCachePolicy::access step semantics as the online policies.
//
// Why it is optimal under the step semantics: linearise each step's requests, soonest next use
// first (a request's "next use" is the position of the same expert's next request in that
// linear order; never = last). Classic Belady MIN with bypass on that sequence is optimal, and
// every execution under the step semantics is a valid execution of the linear sequence, so it
// bounds them all. In that order classic Belady never evicts an expert of the current step (a
// later request of the step has a later next use, so it is bypassed first), so its choices are
// also legal under the step semantics: it is exactly the optimum. The rules that follow:
//   - before the first step the cache holds the C experts whose first request comes soonest;
//   - at each step the hits stay; the other C - |hits| slots go to the experts with the soonest
//     next use among the cached experts not in S and the missed experts of S; a missed expert
//     never requested again is not admitted.
// "Soonest" compares (step of the next request, rank of that request in its step's linear order),
// which breaks ties between experts requested in the same future step by their uses after it.
// The tests check it against an exhaustive search.
#pragma once

#include "cache/expert_cache_policy.h"

#include <span>
#include <vector>

namespace nitro {

class BeladyPolicy : public ExpertCachePolicy {
public:
    /// `stream`: the layer's requests, `k` ids per step in step order, the same ones access() will
    /// be called with (checked). Throws nitro::Error if stream.size() is not a multiple of k.
    BeladyPolicy(int n_expert, int capacity, std::span<const ExpertId> stream, int k);
    std::string name() const override { return "opt"; }

protected:
    void on_step(std::span<const ExpertId> selected, int64_t token) override;
    bool should_admit(ExpertId e, int64_t token) override;
    ExpertId choose_victim(ExpertId incoming) override;
    void on_insert(ExpertId e) override { heap_.set(e, -static_cast<double>(next_[e]), 0); }
    void on_evict(ExpertId e) override { heap_.erase(e); }

private:
    static constexpr uint64_t kNever = ~0ull;
    std::span<const ExpertId> stream_;
    int k_;
    std::vector<uint64_t> next_key_;   // [stream.size()] linear position of the next request of that id
    std::vector<uint64_t> next_;       // [n_expert] next use of each expert after the current step
    std::vector<uint32_t> keep_mark_;  // [n_expert] == steps() if the expert holds a slot after this step
    std::vector<ExpertId> cand_;       // scratch: wanted misses of the current step
    std::vector<ExpertId> victims_;    // victims decided in on_step, handed out by choose_victim
    size_t next_victim_ = 0;
    ExpertHeap heap_;                  // cached experts, farthest next use on top (key = -next use)
};

}  // namespace nitro
