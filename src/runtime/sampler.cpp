#include "runtime/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace nitro {

int32_t argmax(std::span<const float> logits) {
    int32_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i)
        if (logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
    return best;
}

int32_t argmax_allowed(std::span<const float> logits, const std::vector<uint64_t>& allowed) {
    int32_t best = -1;
    for (size_t w = 0; w < allowed.size(); ++w)
        for (uint64_t bits = allowed[w]; bits; bits &= bits - 1) {
            const size_t i = w * 64 + static_cast<size_t>(std::countr_zero(bits));
            if (i >= logits.size()) break;
            if (best < 0 || logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
        }
    return best;
}

std::vector<TokenProb> top_probs(std::span<const float> logits, int k) {
    const float m = logits[static_cast<size_t>(argmax(logits))];
    double sum = 0.0;
    for (float l : logits) sum += std::exp(static_cast<double>(l - m));
    std::vector<TokenProb> all(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) all[i] = {static_cast<int32_t>(i), logits[i]};
    k = std::min<int>(k, static_cast<int>(all.size()));
    std::partial_sort(all.begin(), all.begin() + k, all.end(),
                      [](const TokenProb& a, const TokenProb& b) { return a.p > b.p || (a.p == b.p && a.id < b.id); });
    all.resize(static_cast<size_t>(k));
    for (auto& t : all) t.p = static_cast<float>(std::exp(static_cast<double>(t.p - m)) / sum);
    return all;
}

Sampler::Sampler(const SamplerParams& p) : p_(p), rng_(p.seed) {}

int32_t Sampler::sample(std::span<const float> logits, const std::vector<uint64_t>* allowed) {
    if (!p_.logit_bias.empty()) {
        biased_.assign(logits.begin(), logits.end());
        for (const auto& [id, bias] : p_.logit_bias)
            if (id >= 0 && static_cast<size_t>(id) < biased_.size()) biased_[static_cast<size_t>(id)] += bias;
        logits = biased_;
    }
    if (p_.temperature <= 0.0f) return allowed ? argmax_allowed(logits, *allowed) : argmax(logits);
    if (allowed) {
        cand_.clear();
        for (size_t w = 0; w < allowed->size(); ++w)
            for (uint64_t bits = (*allowed)[w]; bits; bits &= bits - 1) {
                const size_t i = w * 64 + static_cast<size_t>(std::countr_zero(bits));
                if (i < logits.size()) cand_.push_back({static_cast<int32_t>(i), logits[i]});
            }
        if (cand_.empty()) return -1;
    } else {
        cand_.resize(logits.size());
        for (size_t i = 0; i < logits.size(); ++i) cand_[i] = {static_cast<int32_t>(i), logits[i]};
    }
    auto by_logit = [](const TokenProb& a, const TokenProb& b) { return a.p > b.p || (a.p == b.p && a.id < b.id); };
    size_t n = cand_.size();
    if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < n) {
        std::partial_sort(cand_.begin(), cand_.begin() + p_.top_k, cand_.end(), by_logit);
        n = static_cast<size_t>(p_.top_k);
    } else {
        std::sort(cand_.begin(), cand_.end(), by_logit);
    }
    // Probabilities of the remaining candidates at temperature 1 for the top-p / min-p cuts.
    std::vector<double> prob(n);
    const double m = cand_[0].p;
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) sum += (prob[i] = std::exp(cand_[i].p - m));
    for (auto& q : prob) q /= sum;
    if (p_.top_p < 1.0f) {
        double c = 0.0;
        size_t keep = n;
        for (size_t i = 0; i < n; ++i) {
            c += prob[i];
            if (c >= p_.top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    if (p_.min_p > 0.0f) {
        size_t keep = 1;
        while (keep < n && prob[keep] >= p_.min_p * prob[0]) ++keep;
        n = keep;
    }
    // Temperature, then draw.
    std::vector<double> w(n);
    double tot = 0.0;
    for (size_t i = 0; i < n; ++i) tot += (w[i] = std::exp((cand_[i].p - m) / p_.temperature));
    std::uniform_real_distribution<double> u(0.0, tot);
    double r = u(rng_);
    for (size_t i = 0; i < n; ++i) {
        r -= w[i];
        if (r <= 0.0) return cand_[i].id;
    }
    return cand_[n - 1].id;
}

}  // namespace nitro
