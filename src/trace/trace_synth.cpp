#include "trace/trace_synth.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace nitro {

namespace {

/// SplitMix64: small, fast and identical everywhere (std distributions are not).
struct Rng {
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
    uint32_t below(uint32_t n) { return static_cast<uint32_t>(uniform() * n); }
};

void shuffle(std::vector<ExpertId>& v, Rng& rng) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.below(static_cast<uint32_t>(i))]);
}

}  // namespace

Trace synth_trace(const TraceHeader& shape, const SynthOptions& opt) {
    shape.validate("synth");
    if (!(opt.zipf_s >= 0) || !std::isfinite(opt.zipf_s)) fail("synth: zipf exponent {} must be >= 0", opt.zipf_s);
    if (!(opt.locality >= 0 && opt.locality <= 1)) fail("synth: locality {} must be in [0, 1]", opt.locality);
    if (!(opt.drift >= 0 && opt.drift <= 1)) fail("synth: drift {} must be in [0, 1]", opt.drift);
    if (opt.n_sequences < 1 || opt.prompt_tokens + opt.decode_tokens < 1)
        fail("synth: need at least one sequence and one token");

    Trace t;
    t.header = shape;
    t.header.has_weights = opt.weights;
    const uint32_t L = shape.n_layer, E = shape.n_expert, k = shape.n_expert_used;
    Rng rng{opt.seed};

    // Cumulative Zipf distribution over popularity ranks.
    std::vector<double> cdf(E);
    double acc = 0;
    for (uint32_t r = 0; r < E; ++r) cdf[r] = (acc += 1.0 / std::pow(r + 1.0, opt.zipf_s));
    for (double& c : cdf) c /= acc;
    // Per layer, which expert holds each rank.
    std::vector<std::vector<ExpertId>> base_rank(L, std::vector<ExpertId>(E));
    for (auto& ranks : base_rank) {
        std::iota(ranks.begin(), ranks.end(), ExpertId{0});
        shuffle(ranks, rng);
    }

    std::vector<std::vector<ExpertId>> rank = base_rank;
    std::vector<std::vector<ExpertId>> prev(L);  // previous token's selection per layer
    std::vector<ExpertId> ids(k);
    std::vector<float> w(k);
    std::vector<uint8_t> chosen(E, 0);
    auto pick = [&](uint32_t layer) {
        std::fill(chosen.begin(), chosen.end(), 0);
        for (uint32_t j = 0; j < k; ++j) {
            ExpertId e = kNoExpert;
            if (!prev[layer].empty() && rng.uniform() < opt.locality) {
                const ExpertId c = prev[layer][rng.below(k)];
                if (!chosen[c]) e = c;
            }
            for (int tries = 0; e == kNoExpert && tries < 64; ++tries) {
                const size_t r = std::upper_bound(cdf.begin(), cdf.end(), rng.uniform()) - cdf.begin();
                const ExpertId c = rank[layer][std::min<size_t>(r, E - 1)];
                if (!chosen[c]) e = c;
            }
            if (e == kNoExpert)  // heavy skew and large k: take the most popular free expert
                for (uint32_t r = 0; r < E && e == kNoExpert; ++r)
                    if (!chosen[rank[layer][r]]) e = rank[layer][r];
            chosen[e] = 1;
            ids[j] = e;
        }
        if (opt.weights) {
            float sum = 0;
            for (float& x : w) sum += (x = static_cast<float>(-std::log(1.0 - rng.uniform()) + 1e-3));
            for (float& x : w) x /= sum;
            std::sort(w.begin(), w.end(), std::greater<float>());
        }
        prev[layer].assign(ids.begin(), ids.end());
    };
    const std::span<const float> no_w;
    for (uint32_t s = 0; s < opt.n_sequences; ++s) {
        rank = base_rank;
        const uint32_t n_swaps = static_cast<uint32_t>(std::lround(opt.drift * E / 2));
        for (auto& r : rank)
            for (uint32_t i = 0; i < n_swaps; ++i) std::swap(r[rng.below(E)], r[rng.below(E)]);
        for (auto& p : prev) p.clear();
        // Prefill: layer-major over the prompt block, as the engine evaluates it.
        for (uint32_t l = 0; l < L; ++l)
            for (uint32_t p = 0; p < opt.prompt_tokens; ++p) {
                pick(l);
                t.append({s, p, TracePhase::Prefill, l, ids, opt.weights ? std::span<const float>(w) : no_w});
            }
        for (uint32_t d = 0; d < opt.decode_tokens; ++d)
            for (uint32_t l = 0; l < L; ++l) {
                pick(l);
                t.append({s, opt.prompt_tokens + d, TracePhase::Decode, l, ids,
                          opt.weights ? std::span<const float>(w) : no_w});
            }
    }
    return t;
}

}  // namespace nitro
