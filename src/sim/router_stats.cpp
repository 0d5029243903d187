#include "sim/router_stats.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <unordered_map>

namespace nitro {

std::string reuse_bucket_label(int b) {
    if (b == 0) return "1";
    if (b == 1) return "2";
    if (b < 11) return fmt::format("{}-{}", (1 << (b - 1)) + 1, 1 << b);
    if (b == 11) return ">1024";
    return "first";
}

namespace {

LayerRouterStats layer_stats(const LayerStream& s, uint32_t E, uint32_t k) {
    LayerRouterStats r;
    r.steps = s.n_steps();
    if (r.steps == 0) return r;
    std::vector<uint64_t> count(E, 0);
    for (ExpertId e : s.ids) ++count[e];
    std::vector<uint64_t> sorted = count;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    const double total = static_cast<double>(s.ids.size());
    const double pct[3] = {0.10, 0.20, 0.30};
    for (int i = 0; i < 3; ++i) {
        const size_t n = std::max<size_t>(1, static_cast<size_t>(std::ceil(pct[i] * E - 1e-9)));
        uint64_t sum = 0;
        for (size_t j = 0; j < n && j < sorted.size(); ++j) sum += sorted[j];
        r.top_share[i] = sum / total;
    }
    // The top-10% set itself (ties by lower id, as the static profile ranks them).
    std::vector<uint32_t> order(E);
    for (uint32_t e = 0; e < E; ++e) order[e] = e;
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return count[a] > count[b]; });
    std::vector<uint8_t> top10(E, 0);
    const size_t n10 = std::max<size_t>(1, static_cast<size_t>(std::ceil(0.10 * E - 1e-9)));
    for (size_t j = 0; j < n10; ++j) top10[order[j]] = 1;
    double h = 0;
    for (uint64_t c : count)
        if (c) h -= (c / total) * std::log(c / total);
    r.entropy = E > 1 ? h / std::log(static_cast<double>(E)) : 0;

    std::vector<uint64_t> last(E, 0);  // 1-based step of the previous request, 0 = none
    uint64_t touching = 0, same_first = 0, overlap = 0;
    struct Prev { uint32_t pos; ExpertId first, second; };
    std::unordered_map<uint32_t, Prev> prev;  // sequence -> its previous record at this layer
    for (size_t i = 0; i < s.n_steps(); ++i) {
        const ExpertId* ids = s.ids.data() + i * k;
        bool touch = false;
        for (uint32_t j = 0; j < k; ++j) {
            const ExpertId e = ids[j];
            touch |= top10[e] != 0;
            if (last[e] == 0) {
                ++r.reuse[kReuseBuckets - 1];
            } else {
                const uint64_t d = i + 1 - last[e];
                const int b = d > 1024 ? 11 : static_cast<int>(std::bit_width(d - 1));
                ++r.reuse[b];
            }
            last[e] = i + 1;
        }
        touching += touch;
        const ExpertId first = ids[0], second = k > 1 ? ids[1] : kNoExpert;
        auto [it, inserted] = prev.try_emplace(s.seq[i], Prev{s.pos[i], first, second});
        if (!inserted) {
            const Prev p = it->second;
            if (s.pos[i] == p.pos + 1) {
                ++r.consecutive_pairs;
                same_first += first == p.first;
                overlap += first == p.first || first == p.second || (second != kNoExpert && (second == p.first || second == p.second));
            }
            it->second = Prev{s.pos[i], first, second};
        }
    }
    r.tokens_touching_top10 = static_cast<double>(touching) / r.steps;
    if (r.consecutive_pairs) {
        r.same_first = static_cast<double>(same_first) / r.consecutive_pairs;
        r.top2_overlap = static_cast<double>(overlap) / r.consecutive_pairs;
    }
    return r;
}

nlohmann::json layer_json(const LayerRouterStats& l) {
    return {{"steps", l.steps},
            {"top10_share", l.top_share[0]},
            {"top20_share", l.top_share[1]},
            {"top30_share", l.top_share[2]},
            {"tokens_touching_top10", l.tokens_touching_top10},
            {"entropy_normalised", l.entropy},
            {"consecutive_pairs", l.consecutive_pairs},
            {"same_first_rate", l.same_first},
            {"top2_overlap_rate", l.top2_overlap},
            {"reuse_histogram", l.reuse}};
}

}  // namespace

RouterStats compute_router_stats(const ReplayTrace& trace) {
    RouterStats s;
    int n = 0;
    uint64_t pairs = 0;
    double same = 0, over = 0;
    for (const LayerStream& l : trace.layers) {
        s.layers.push_back(layer_stats(l, trace.header.n_expert, trace.k));
        const LayerRouterStats& r = s.layers.back();
        s.mean.steps += r.steps;
        for (int b = 0; b < kReuseBuckets; ++b) s.mean.reuse[b] += r.reuse[b];
        s.mean.consecutive_pairs += r.consecutive_pairs;
        same += r.same_first * r.consecutive_pairs;
        over += r.top2_overlap * r.consecutive_pairs;
        pairs += r.consecutive_pairs;
        if (r.steps == 0) continue;
        ++n;
        for (int i = 0; i < 3; ++i) s.mean.top_share[i] += r.top_share[i];
        s.mean.tokens_touching_top10 += r.tokens_touching_top10;
        s.mean.entropy += r.entropy;
    }
    if (n) {
        for (double& x : s.mean.top_share) x /= n;
        s.mean.tokens_touching_top10 /= n;
        s.mean.entropy /= n;
    }
    // Pair rates are pooled over layers (weighted by pairs), not averaged.
    if (pairs) {
        s.mean.same_first = same / pairs;
        s.mean.top2_overlap = over / pairs;
    }
    return s;
}

nlohmann::json router_stats_to_json(const RouterStats& s) {
    nlohmann::json layers = nlohmann::json::array();
    for (const auto& l : s.layers) layers.push_back(layer_json(l));
    std::vector<std::string> labels;
    for (int b = 0; b < kReuseBuckets; ++b) labels.push_back(reuse_bucket_label(b));
    return {{"layers", layers}, {"mean", layer_json(s.mean)}, {"reuse_buckets", labels}};
}

}  // namespace nitro
