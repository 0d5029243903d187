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

double prefill_copy_ms(const PrefillRates& r, uint64_t bytes, bool alone) {
    const double fill = alone && r.fill_alone_gb_s > 0 ? r.fill_alone_gb_s : r.fill_gb_s;
    return static_cast<double>(bytes) / (std::min(r.pcie_gb_s, fill) * 1e6);
}

double prefill_gpu_ms(const PrefillRates& r, int64_t rows, double flop_per_row) {
    return static_cast<double>(rows) * flop_per_row / (r.gpu_gflop_s * 1e6);
}

PrefillLayerPlan plan_prefill_layer(PrefillCostMode mode, const PrefillRates& r, std::span<const int64_t> rows,
                                    std::span<const uint8_t> resident, uint64_t expert_bytes, double flop_per_row) {
    if (rows.size() != resident.size()) fail("plan_prefill_layer: {} row counts for {} experts", rows.size(), resident.size());
    const bool timed = r.pcie_gb_s > 0 && r.fill_gb_s > 0 && r.dram_gb_s > 0 && r.cpu_gflop_s > 0 && r.gpu_gflop_s > 0;
    if (mode == PrefillCostMode::Auto && !timed) fail("plan_prefill_layer: every measured rate must be positive");
    const size_t X = rows.size();
    PrefillLayerPlan p;
    p.path.assign(X, PrefillPath::None);
    std::vector<int32_t> cand;  // non-resident experts with rows
    double gpu_resident = 0;
    for (size_t e = 0; e < X; ++e) {
        if (rows[e] <= 0) continue;
        if (resident[e]) {
            p.path[e] = PrefillPath::Resident;
            ++p.n_resident;
            if (timed) gpu_resident += prefill_gpu_ms(r, rows[e], flop_per_row);
        } else {
            cand.push_back(static_cast<int32_t>(e));
        }
    }
    std::stable_sort(cand.begin(), cand.end(), [&](int32_t a, int32_t b) { return rows[static_cast<size_t>(a)] > rows[static_cast<size_t>(b)]; });
    const size_t n = cand.size();
    // Staging cand[0, k) costs max(CPU of cand[k, n), copy of cand[0, k), GPU of resident + cand[0, k));
    // the copies run at the whole team's fill rate when nothing is left to the CPU (k = n).
    std::vector<double> cpu_suffix(n + 1, 0.0), gpu_prefix(n + 1, gpu_resident);
    if (timed) {
        for (size_t i = n; i-- > 0;)
            cpu_suffix[i] = cpu_suffix[i + 1] + prefill_cpu_ms(r, expert_bytes, rows[static_cast<size_t>(cand[i])], flop_per_row);
        for (size_t i = 0; i < n; ++i) gpu_prefix[i + 1] = gpu_prefix[i] + prefill_gpu_ms(r, rows[static_cast<size_t>(cand[i])], flop_per_row);
    }
    const double copy = timed ? prefill_copy_ms(r, expert_bytes) : 0.0;
    const double copy_alone = timed ? prefill_copy_ms(r, expert_bytes, true) : 0.0;
    const auto copy_of = [&](size_t k) { return static_cast<double>(k) * (k == n ? copy_alone : copy); };
    const auto est = [&](size_t k) { return std::max({cpu_suffix[k], copy_of(k), gpu_prefix[k]}); };
    size_t k = 0;
    if (mode == PrefillCostMode::Stage) {
        k = n;
    } else if (mode == PrefillCostMode::Auto) {
        for (size_t i = 1; i <= n; ++i)
            if (est(i) < est(k)) k = i;  // strictly better: ties keep fewer copies
    }
    for (size_t i = 0; i < n; ++i) {
        const size_t e = static_cast<size_t>(cand[i]);
        if (i < k) {
            p.path[e] = PrefillPath::Staged;
            p.staged.push_back(cand[i]);
            p.staged_rows += rows[e];
        } else {
            p.path[e] = PrefillPath::Cpu;
            ++p.n_cpu;
            p.cpu_rows += rows[e];
        }
    }
    p.est_cpu_ms = cpu_suffix[k];
    p.est_copy_ms = copy_of(k);
    p.est_gpu_ms = gpu_prefix[k];
    return p;
}

std::string describe_prefill_plan(int layer, const PrefillLayerPlan& p, uint64_t expert_bytes) {
    return fmt::format("layer {}: {} resident, {} staged ({} rows, {:.2f} GB, {:.1f} ms copy), {} on the CPU ({} rows, {:.1f} ms), "
                       "GPU {:.1f} ms (CALCULATED)",
                       layer, p.n_resident, p.staged.size(), p.staged_rows, static_cast<double>(p.staged.size() * expert_bytes) / 1e9,
                       p.est_copy_ms, p.n_cpu, p.cpu_rows, p.est_cpu_ms, p.est_gpu_ms);
}

}  // namespace nitro
