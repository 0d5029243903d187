#include "runtime/prefill_cost.h"

#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>

namespace nitro {

PrefillCostMode parse_prefill_cost_mode(const std::string& s) {
    if (s == "auto") return PrefillCostMode::Auto;
    if (s == "cpu") return PrefillCostMode::Cpu;
    if (s == "stage") return PrefillCostMode::Stage;
    fail("unknown --prefill-cost-model '{}' (auto, cpu or stage)", s);
}

const char* prefill_cost_mode_name(PrefillCostMode m) {
    switch (m) {
    case PrefillCostMode::Auto: return "auto";
    case PrefillCostMode::Cpu: return "cpu";
    case PrefillCostMode::Stage: return "stage";
    }
    return "?";
}

double PrefillLayerPlan::est_ms() const { return std::max({est_cpu_ms, est_copy_ms, est_gpu_ms}); }

double prefill_cpu_ms(const PrefillRates& r, uint64_t bytes, int64_t rows, double flop_per_row) {
    return static_cast<double>(bytes) / (r.dram_gb_s * 1e6) + static_cast<double>(rows) * flop_per_row / (r.cpu_gflop_s * 1e6);
}

double prefill_copy_ms(const PrefillRates& r, uint64_t bytes, bool alone) { return prefill_copy_ms(r, bytes, 0, alone); }

double prefill_copy_ms(const PrefillRates& r, uint64_t ring_bytes, uint64_t in_place_bytes, bool alone) {
    const double fill = alone && r.fill_alone_gb_s > 0 ? r.fill_alone_gb_s : r.fill_gb_s;
    return std::max(static_cast<double>(ring_bytes + in_place_bytes) / (r.pcie_gb_s * 1e6),
                    ring_bytes ? static_cast<double>(ring_bytes) / (fill * 1e6) : 0.0);
}

double prefill_gpu_ms(const PrefillRates& r, int64_t rows, double flop_per_row, bool grouped) {
    const double rate = grouped && r.gpu_grouped_gflop_s > 0 ? r.gpu_grouped_gflop_s : r.gpu_gflop_s;
    return static_cast<double>(rows) * flop_per_row / (rate * 1e6);
}

PrefillLayerPlan plan_prefill_layer(PrefillCostMode mode, const PrefillRates& r, std::span<const int64_t> rows,
                                    std::span<const uint8_t> resident, uint64_t expert_bytes, double flop_per_row,
                                    std::span<const uint8_t> in_place) {
    if (rows.size() != resident.size()) fail("plan_prefill_layer: {} row counts for {} experts", rows.size(), resident.size());
    if (!in_place.empty() && in_place.size() != rows.size())
        fail("plan_prefill_layer: {} in-place flags for {} experts", in_place.size(), rows.size());
    const bool timed = r.pcie_gb_s > 0 && r.fill_gb_s > 0 && r.dram_gb_s > 0 && r.cpu_gflop_s > 0 && r.gpu_gflop_s > 0;
    if (mode == PrefillCostMode::Auto && !timed) fail("plan_prefill_layer: every measured rate must be positive");
    const size_t X = rows.size();
    PrefillLayerPlan p;
    p.path.assign(X, PrefillPath::None);
    // Non-resident experts with rows, in two lists: [0] pinned in place, [1] through the ring.
    std::vector<int32_t> cand[2];
    double gpu_resident = 0;
    for (size_t e = 0; e < X; ++e) {
        if (rows[e] <= 0) continue;
        if (resident[e]) {
            p.path[e] = PrefillPath::Resident;
            ++p.n_resident;
            if (timed) gpu_resident += prefill_gpu_ms(r, rows[e], flop_per_row, true);
        } else {
            cand[!in_place.empty() && in_place[e] ? 0 : 1].push_back(static_cast<int32_t>(e));
        }
    }
    const auto by_rows = [&](int32_t a, int32_t b) { return rows[static_cast<size_t>(a)] > rows[static_cast<size_t>(b)]; };
    // Per list: the CPU time of its experts from i on, the GPU time of its first i.
    std::vector<double> cpu_suffix[2], gpu_prefix[2];
    for (int l = 0; l < 2; ++l) {
        std::stable_sort(cand[l].begin(), cand[l].end(), by_rows);
        const size_t n = cand[l].size();
        cpu_suffix[l].assign(n + 1, 0.0);
        gpu_prefix[l].assign(n + 1, 0.0);
        if (!timed) continue;
        for (size_t i = n; i-- > 0;)
            cpu_suffix[l][i] = cpu_suffix[l][i + 1] + prefill_cpu_ms(r, expert_bytes, rows[static_cast<size_t>(cand[l][i])], flop_per_row);
        for (size_t i = 0; i < n; ++i)
            gpu_prefix[l][i + 1] = gpu_prefix[l][i] + prefill_gpu_ms(r, rows[static_cast<size_t>(cand[l][i])], flop_per_row);
    }
    const size_t n0 = cand[0].size(), n1 = cand[1].size();
    // Staging the first k0 in-place and the first k1 ring experts; the copies run at the whole
    // team's fill rate when nothing is left to the CPU.
    const auto copy_of = [&](size_t k0, size_t k1) {
        return timed ? prefill_copy_ms(r, k1 * expert_bytes, k0 * expert_bytes, k0 == n0 && k1 == n1) : 0.0;
    };
    const auto est = [&](size_t k0, size_t k1) {
        return std::max({cpu_suffix[0][k0] + cpu_suffix[1][k1], copy_of(k0, k1), gpu_resident + gpu_prefix[0][k0] + gpu_prefix[1][k1]});
    };
    size_t k0 = 0, k1 = 0;
    if (mode == PrefillCostMode::Stage) {
        k0 = n0, k1 = n1;
    } else if (mode == PrefillCostMode::Auto) {
        double best = est(0, 0);
        for (size_t i = 0; i <= n0; ++i)
            for (size_t j = 0; j <= n1; ++j)
                if (const double t = est(i, j); t < best) best = t, k0 = i, k1 = j;  // strictly better: ties keep fewer copies
    }
    for (int l = 0; l < 2; ++l)
        for (size_t i = 0; i < cand[l].size(); ++i) {
            const size_t e = static_cast<size_t>(cand[l][i]);
            if (i < (l == 0 ? k0 : k1)) {
                p.path[e] = PrefillPath::Staged;
                p.staged.push_back(cand[l][i]);
                p.staged_rows += rows[e];
            } else {
                p.path[e] = PrefillPath::Cpu;
                ++p.n_cpu;
                p.cpu_rows += rows[e];
            }
        }
    std::stable_sort(p.staged.begin(), p.staged.end(), [&](int32_t a, int32_t b) { return by_rows(a, b) || (!by_rows(b, a) && a < b); });
    p.est_cpu_ms = cpu_suffix[0][k0] + cpu_suffix[1][k1];
    p.est_copy_ms = copy_of(k0, k1);
    p.est_gpu_ms = gpu_resident + gpu_prefix[0][k0] + gpu_prefix[1][k1];
    return p;
}

uint64_t prefill_pin_auto_bytes(uint64_t off_gpu_bytes, uint64_t mem_total, uint64_t mem_available) {
    return std::min({off_gpu_bytes, mem_total / 4, mem_available / 2});
}

std::string describe_prefill_plan(int layer, const PrefillLayerPlan& p, uint64_t expert_bytes) {
    return fmt::format("layer {}: {} resident, {} staged ({} rows, {:.2f} GB, {:.1f} ms copy), {} on the CPU ({} rows, {:.1f} ms), "
                       "GPU {:.1f} ms (CALCULATED)",
                       layer, p.n_resident, p.staged.size(), p.staged_rows, static_cast<double>(p.staged.size() * expert_bytes) / 1e9,
                       p.est_copy_ms, p.n_cpu, p.cpu_rows, p.est_cpu_ms, p.est_gpu_ms);
}

}  // namespace nitro
