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
    r.step_seq.assign(r.n_tokens, 0);
    r.step_pos.assign(r.n_tokens, 0);
    r.step_phase.assign(r.n_tokens, TracePhase::Decode);
    std::vector<uint8_t> seen(r.n_tokens, 0);
    for (size_t i = 0; i < trace.size(); ++i) {
        if (!seen[step[i]]) {
            seen[step[i]] = 1;
            r.step_seq[step[i]] = trace.seq[i];
            r.step_pos[step[i]] = trace.pos[i];
            r.step_phase[step[i]] = trace.phase[i];
        }
        LayerStream& s = r.layers[trace.layer[i]];
        const auto ids = trace.record_ids(i);
        s.ids.insert(s.ids.end(), ids.begin(), ids.end());
        s.token.push_back(step[i]);
        s.seq.push_back(trace.seq[i]);
        s.pos.push_back(trace.pos[i]);
    }
    return r;
}

std::vector<CacheStepRange> make_cache_steps(const ReplayTrace& trace, int64_t ubatch) {
    if (ubatch < 1) fail("ubatch {} must be at least 1 token", ubatch);
    std::vector<CacheStepRange> out;
    uint32_t run_start = 0;  // position of the first token of the current prefill run
    for (uint32_t i = 0; i < trace.n_tokens; ++i) {
        const bool prefill = trace.step_phase[i] == TracePhase::Prefill;
        if (prefill && !out.empty()) {
            const uint32_t prev = out.back().first + out.back().n - 1;
            const bool continues = trace.step_phase[prev] == TracePhase::Prefill &&
                                   trace.step_seq[prev] == trace.step_seq[i] && trace.step_pos[i] == trace.step_pos[prev] + 1;
            if (continues) {
                if ((trace.step_pos[i] - run_start) % static_cast<uint64_t>(ubatch) != 0) ++out.back().n;
                else out.push_back({i, 1});  // the next chunk of the same run
                continue;
            }
        }
        if (prefill) run_start = trace.step_pos[i];
        out.push_back({i, 1});
    }
    return out;
}

ReplayResult replay_cache(const ReplayTrace& trace, const CacheSetup& setup, const ReplayOptions& opt) {
    const size_t n_layer = trace.layers.size();
    if (setup.layers.size() != n_layer)
        fail("replay: the cache setup has {} layers, the trace {}", setup.layers.size(), n_layer);
    const uint32_t E = trace.header.n_expert;
    const size_t k = trace.k;
    ReplayResult res;
    res.layers.resize(n_layer);
    const auto t0 = std::chrono::steady_clock::now();
    InstantCopyBackend backend(std::max(0, setup.opt.staging_buffers));
    ExpertCache cache(setup.layers, static_cast<int>(E), static_cast<int>(k), setup.opt,
                      setup.opt.frozen() ? nullptr : &backend);
    const std::vector<CacheStepRange> steps = make_cache_steps(trace, opt.ubatch);
    std::vector<size_t> cursor(n_layer, 0);
    std::vector<int32_t> ids;
    // Working-set coverage per layer (see ReplayOptions): window counts and the cache contents.
    std::vector<std::vector<uint32_t>> in_window(n_layer);
    std::vector<std::vector<uint8_t>> cached(n_layer);
    std::vector<uint64_t> covered(n_layer, 0), distinct(n_layer, 0);
    for (size_t l = 0; l < n_layer; ++l) {
        res.layers[l].preloaded = setup.layers[l].resident.size();
        if (opt.ws_window == 0) continue;
        in_window[l].assign(E, 0);
        cached[l].assign(E, 0);
        for (int32_t e : setup.layers[l].resident) cached[l][static_cast<size_t>(e)] = 1;
    }
    for (const CacheStepRange& st : steps) {
        cache.begin_step(st.n);
        for (size_t l = 0; l < n_layer; ++l) {
            const LayerStream& s = trace.layers[l];
            size_t& cur = cursor[l];
            const size_t r0 = cur;
            while (cur < s.n_steps() && s.token[cur] < st.first + st.n) {
                if (s.token[cur] < st.first)
                    fail("replay: the records of layer {} are not in step order (record {} of the layer)", l, cur);
                ++cur;
            }
            if (cur == r0) continue;
            ids.assign(s.ids.begin() + static_cast<std::ptrdiff_t>(r0 * k), s.ids.begin() + static_cast<std::ptrdiff_t>(cur * k));
            const ExpertCache::LayerStep ls = cache.access(static_cast<int>(l), ids);
            if (opt.ws_window > 0) {
                std::vector<uint32_t>& w = in_window[l];
                std::vector<uint8_t>& c = cached[l];
                for (const Admission& a : ls.admissions) {
                    if (a.evicted != kNoExpert) {
                        c[a.evicted] = 0;
                        covered[l] -= w[a.evicted] > 0;
                    }
                    c[a.expert] = 1;
                    covered[l] += w[a.expert] > 0;
                }
                // Coverage after each record's request enters the window (the cache as it is
                // after this step's admissions), counted once per record.
                for (size_t r = r0; r < cur; ++r) {
                    for (size_t j = 0; j < k; ++j) {
                        const ExpertId e = s.ids[r * k + j];
                        if (w[e]++ == 0) { ++distinct[l]; covered[l] += c[e]; }
                    }
                    if (r >= opt.ws_window)
                        for (size_t j = 0; j < k; ++j) {
                            const ExpertId e = s.ids[(r - opt.ws_window) * k + j];
                            if (--w[e] == 0) { --distinct[l]; covered[l] -= c[e]; }
                        }
                    res.layers[l].ws_coverage_sum += static_cast<double>(covered[l]) / static_cast<double>(distinct[l]);
                }
            }
            cache.commit(static_cast<int>(l));
        }
    }
    for (size_t l = 0; l < n_layer; ++l) {
        LayerCounts& c = res.layers[l];
        c.cache = cache.counters(static_cast<int>(l));
        c.hits = c.cache.hits;
        c.accesses = c.cache.hits + c.cache.misses;
        c.admissions = c.cache.admissions;
        res.total.hits += c.hits;
        res.total.accesses += c.accesses;
        res.total.admissions += c.admissions;
        res.total.preloaded += c.preloaded;
        res.total.ws_coverage_sum += c.ws_coverage_sum;
        res.total.cache.add(c.cache);
    }
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return res;
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
