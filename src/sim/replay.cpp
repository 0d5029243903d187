#include "sim/replay.h"

#include "core/error.h"

#include <chrono>

namespace nitro {

uint64_t ReplayTrace::accesses() const {
    uint64_t n = 0;
    for (const auto& l : layers) n += l.ids.size();
    return n;
}

ReplayTrace make_replay_trace(const Trace& trace) {
    ReplayTrace r;
    r.header = trace.header;
    r.k = trace.header.n_expert_used;
    r.layers.resize(trace.header.n_layer);
    const std::vector<uint32_t> step = trace.step_index(&r.n_tokens);
    for (size_t i = 0; i < trace.size(); ++i) {
        LayerStream& s = r.layers[trace.layer[i]];
        const auto ids = trace.record_ids(i);
        s.ids.insert(s.ids.end(), ids.begin(), ids.end());
        s.token.push_back(step[i]);
        s.seq.push_back(trace.seq[i]);
        s.pos.push_back(trace.pos[i]);
    }
    return r;
}

ReplayResult replay(const ReplayTrace& trace, const PolicyFactory& factory, int capacity, const ReplayOptions& opt) {
    ReplayResult res;
    res.layers.resize(trace.layers.size());
    const auto t0 = std::chrono::steady_clock::now();
    const size_t k = trace.k;
    const uint32_t E = trace.header.n_expert;
    std::vector<SlotChange> changes(k);
    std::vector<uint32_t> in_window(E);   // requests of each expert inside the window
    std::vector<uint8_t> cached(E);
    for (size_t l = 0; l < trace.layers.size(); ++l) {
        const LayerStream& s = trace.layers[l];
        LayerCounts& c = res.layers[l];
        if (s.n_steps() == 0) continue;
        std::unique_ptr<ExpertCachePolicy> p = factory(static_cast<uint32_t>(l), capacity);
        NITRO_CHECK(p && p->n_expert() == static_cast<int>(E));
        c.preloaded = p->preloaded();
        const ExpertId* ids = s.ids.data();
        if (opt.ws_window == 0) {
            for (size_t i = 0; i < s.n_steps(); ++i) {
                const StepOutcome o = p->access({ids + i * k, k}, s.token[i]);
                c.hits += o.hits;
                c.admissions += o.admissions;
            }
        } else {
            // Working-set coverage: covered = |cache ∩ W|, kept up to date from the window's
            // entries/exits and the step's admissions/evictions.
            std::fill(in_window.begin(), in_window.end(), 0);
            std::fill(cached.begin(), cached.end(), 0);
            for (ExpertId e : p->slots())
                if (e != kNoExpert) cached[e] = 1;
            uint64_t covered = 0, distinct = 0;
            for (size_t i = 0; i < s.n_steps(); ++i) {
                for (size_t j = 0; j < k; ++j) {
                    const ExpertId e = ids[i * k + j];
                    if (in_window[e]++ == 0) { ++distinct; covered += cached[e]; }
                }
                if (i >= opt.ws_window)
                    for (size_t j = 0; j < k; ++j) {
                        const ExpertId e = ids[(i - opt.ws_window) * k + j];
                        if (--in_window[e] == 0) { --distinct; covered -= cached[e]; }
                    }
                const StepOutcome o = p->access({ids + i * k, k}, s.token[i], changes);
                for (int a = 0; a < o.admissions; ++a) {
                    const SlotChange& ch = changes[a];
                    if (ch.evicted != kNoExpert) { cached[ch.evicted] = 0; covered -= in_window[ch.evicted] > 0; }
                    cached[ch.expert] = 1;
                    covered += in_window[ch.expert] > 0;
                }
                c.hits += o.hits;
                c.admissions += o.admissions;
                c.ws_coverage_sum += static_cast<double>(covered) / static_cast<double>(distinct);
            }
        }
        c.accesses = s.ids.size();
        res.total.hits += c.hits;
        res.total.accesses += c.accesses;
        res.total.admissions += c.admissions;
        res.total.preloaded += c.preloaded;
        res.total.ws_coverage_sum += c.ws_coverage_sum;
    }
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return res;
}

}  // namespace nitro
