// The prefill cost model (runtime/prefill_cost.h) against decisions computed by hand.
#include "runtime/prefill_cost.h"

#include "core/error.h"

#include <gtest/gtest.h>

#include <vector>

namespace nitro {
namespace {

// Rates chosen so every cost is a round number (by hand): copy of one 25 MB expert at
// min(50, 25) GB/s = 1 ms; CPU read of it at 50 GB/s = 0.5 ms; a row costs 1 MFLOP: 0.1 ms on a
// 10 GFLOP/s CPU, 0.001 ms on a 1 TFLOP/s GPU.
PrefillRates rates() {
    PrefillRates r;
    r.pcie_gb_s = 50;
    r.fill_gb_s = 25;
    r.dram_gb_s = 50;
    r.cpu_gflop_s = 10;
    r.gpu_gflop_s = 1000;
    return r;
}
constexpr uint64_t kBytes = 25'000'000;
constexpr double kFlop = 1e6;

TEST(PrefillCost, UnitCostsByHand) {
    const PrefillRates r = rates();
    EXPECT_DOUBLE_EQ(prefill_copy_ms(r, kBytes), 1.0);
    EXPECT_DOUBLE_EQ(prefill_cpu_ms(r, kBytes, 20, kFlop), 0.5 + 2.0);
    EXPECT_DOUBLE_EQ(prefill_gpu_ms(r, 20, kFlop), 0.02);
}

TEST(PrefillCost, AutoStagesTheExpertsWithMostRowsUntilTheCpuIsNoLongerTheWall) {
    // Experts 0..5: rows 20, 3, 0, 10, 8, 1; expert 3 resident. Candidates by rows: 0 (CPU 2.5 ms),
    // 4 (1.3), 1 (0.8), 5 (0.6). Staging the first k costs k ms of copy and leaves the rest's CPU
    // time: k=0: 5.2; k=1: max(2.7, 1) = 2.7; k=2: max(1.4, 2) = 2.0; k=3: 3.0; k=4: 4.0. Best k = 2.
    const std::vector<int64_t> rows = {20, 3, 0, 10, 8, 1};
    const std::vector<uint8_t> res = {0, 0, 0, 1, 0, 0};
    const PrefillLayerPlan p = plan_prefill_layer(PrefillCostMode::Auto, rates(), rows, res, kBytes, kFlop);
    EXPECT_EQ(p.staged, (std::vector<int32_t>{0, 4}));
    const std::vector<PrefillPath> want = {PrefillPath::Staged, PrefillPath::Cpu, PrefillPath::None,
                                           PrefillPath::Resident, PrefillPath::Staged, PrefillPath::Cpu};
    EXPECT_EQ(p.path, want);
    EXPECT_EQ(p.n_resident, 1);
    EXPECT_EQ(p.n_cpu, 2);
    EXPECT_EQ(p.cpu_rows, 4);
    EXPECT_EQ(p.staged_rows, 28);
    EXPECT_NEAR(p.est_cpu_ms, 1.4, 1e-12);
    EXPECT_NEAR(p.est_copy_ms, 2.0, 1e-12);
    EXPECT_NEAR(p.est_gpu_ms, 0.038, 1e-12);
    EXPECT_NEAR(p.est_ms(), 2.0, 1e-12);
}

TEST(PrefillCost, TheWholeFillTeamMakesStagingEverythingWin) {
    // The rows of the test above; PCIe no limit (1,000 GB/s), the fill team beside a CPU share at
    // 25 GB/s (1 ms a copy), alone at 100 GB/s (0.25 ms). Split plans cost as above (best k = 2:
    // 2.0 ms); staging all four leaves the CPU nothing, so its copies take the whole team:
    // 4 x 0.25 = 1.0 ms against the GPU's 42 rows x 0.001 = 0.042 ms. Best: all staged.
    PrefillRates r = rates();
    r.pcie_gb_s = 1000;
    r.fill_alone_gb_s = 100;
    EXPECT_DOUBLE_EQ(prefill_copy_ms(r, kBytes), 1.0);
    EXPECT_DOUBLE_EQ(prefill_copy_ms(r, kBytes, true), 0.25);
    const std::vector<int64_t> rows = {20, 3, 0, 10, 8, 1};
    const std::vector<uint8_t> res = {0, 0, 0, 1, 0, 0};
    const PrefillLayerPlan p = plan_prefill_layer(PrefillCostMode::Auto, r, rows, res, kBytes, kFlop);
    EXPECT_EQ(p.staged, (std::vector<int32_t>{0, 4, 1, 5}));
    EXPECT_EQ(p.n_cpu, 0);
    EXPECT_NEAR(p.est_cpu_ms, 0.0, 1e-12);
    EXPECT_NEAR(p.est_copy_ms, 1.0, 1e-12);
    EXPECT_NEAR(p.est_gpu_ms, 0.042, 1e-12);
    // Alone at only 40 GB/s (0.625 ms a copy, 2.5 ms for four) the split plan stays best.
    r.fill_alone_gb_s = 40;
    EXPECT_EQ(plan_prefill_layer(PrefillCostMode::Auto, r, rows, res, kBytes, kFlop).staged, (std::vector<int32_t>{0, 4}));
}

TEST(PrefillCost, FewRowsStageOnlyWhileTheCpuShareIsLonger) {
    // One row each: CPU 0.6 ms per expert, a copy 1 ms: staging any would only add. With 3
    // experts: k=0: 1.8; k=1: max(1.2, 1) = 1.2; k=2: max(0.6, 2) = 2. So one is staged...
    const std::vector<int64_t> rows = {1, 1, 1};
    const std::vector<uint8_t> res = {0, 0, 0};
    PrefillLayerPlan p = plan_prefill_layer(PrefillCostMode::Auto, rates(), rows, res, kBytes, kFlop);
    EXPECT_EQ(p.staged, (std::vector<int32_t>{0}));  // ties in rows: the lower id first
    // ...but with two experts: k=0: 1.2; k=1: max(0.6, 1) = 1.0; k=2: 2. And with one: k=0 0.6, k=1 1.0.
    p = plan_prefill_layer(PrefillCostMode::Auto, rates(), std::vector<int64_t>{1}, std::vector<uint8_t>{0}, kBytes, kFlop);
    EXPECT_TRUE(p.staged.empty());
    EXPECT_EQ(p.path[0], PrefillPath::Cpu);
}

TEST(PrefillCost, InPlaceExpertsCostOnlyThePcieCopy) {
    // A share of 25 MB through the ring and 50 MB in place: the link carries 75 MB at 50 GB/s
    // (1.5 ms), the fill only the ring's 25 MB at 25 GB/s (1 ms): 1.5 ms. In place only: 1 ms.
    const PrefillRates r = rates();
    EXPECT_DOUBLE_EQ(prefill_copy_ms(r, kBytes, 2 * kBytes, false), 1.5);
    EXPECT_DOUBLE_EQ(prefill_copy_ms(r, 0, 2 * kBytes, false), 1.0);
    EXPECT_DOUBLE_EQ(prefill_copy_ms(r, kBytes, 0, false), prefill_copy_ms(r, kBytes));
}

TEST(PrefillCost, InPlaceExpertsWithFewRowsAreWorthStaging) {
    // The rows of AutoStagesTheExpertsWithMostRows (best there: {0, 4}, 2.0 ms), but experts 1 and 5
    // are pinned in place: 0.5 ms of PCIe each and no fill. CPU times: 0: 2.5, 4: 1.3, 1: 0.8,
    // 5: 0.6. Staging i of the in-place list (1, 5) and j of the ring list (0, 4) costs
    // max(CPU of the rest, max((i + j) x 0.5, j x 1.0)), by hand:
    //   (0,0) 5.2  (0,1) 2.7  (0,2) 2.0  (1,0) 4.4  (1,1) 1.9  (1,2) 2.0  (2,0) 3.8  (2,1) 1.5  (2,2) 2.0.
    // Best (2,1): experts 0, 1 and 5 staged (most rows first), expert 4 on the CPU, 1.5 ms.
    const std::vector<int64_t> rows = {20, 3, 0, 10, 8, 1};
    const std::vector<uint8_t> res = {0, 0, 0, 1, 0, 0};
    const std::vector<uint8_t> pinned = {0, 1, 0, 0, 0, 1};
    const PrefillLayerPlan p = plan_prefill_layer(PrefillCostMode::Auto, rates(), rows, res, kBytes, kFlop, pinned);
    EXPECT_EQ(p.staged, (std::vector<int32_t>{0, 1, 5}));
    EXPECT_EQ(p.path[4], PrefillPath::Cpu);
    EXPECT_EQ(p.n_cpu, 1);
    EXPECT_EQ(p.cpu_rows, 8);
    EXPECT_NEAR(p.est_cpu_ms, 1.3, 1e-12);
    EXPECT_NEAR(p.est_copy_ms, 1.5, 1e-12);
    EXPECT_NEAR(p.est_ms(), 1.5, 1e-12);
    // Every candidate in place: staging all costs 4 x 0.5 = 2.0 against k = 2's max(1.4, 1.0) = 1.4.
    const std::vector<uint8_t> all = {1, 1, 1, 1, 1, 1};
    EXPECT_EQ(plan_prefill_layer(PrefillCostMode::Auto, rates(), rows, res, kBytes, kFlop, all).staged, (std::vector<int32_t>{0, 4}));
    EXPECT_NEAR(plan_prefill_layer(PrefillCostMode::Auto, rates(), rows, res, kBytes, kFlop, all).est_ms(), 1.4, 1e-12);
    EXPECT_THROW(plan_prefill_layer(PrefillCostMode::Auto, rates(), rows, res, kBytes, kFlop, std::vector<uint8_t>{1}), Error);
}

TEST(PrefillCost, ResidentExpertsRunAtTheGroupedRate) {
    // Expert 0 resident with 300 rows, expert 1 off the GPU with 20. CPU: 0.5 ms read + 20 x 0.1 =
    // 2.5 ms; staging it: a 1 ms copy and 20 rows of GPU time. GPU at 100 GFLOP/s (0.01 ms a row)
    // for everything: the resident rows alone take 3.0 ms, so k=0: max(2.5, 3.0) = 3.0 beats
    // k=1: max(1.0, 3.0 + 0.2) = 3.2 and the expert goes to the CPU. With the resident experts'
    // grouped GEMM at 1,000 GFLOP/s they take 0.3 ms: k=0: 2.5, k=1: max(1.0, 0.5) = 1.0: staged.
    const std::vector<int64_t> rows = {300, 20};
    const std::vector<uint8_t> res = {1, 0};
    PrefillRates r = rates();
    r.gpu_gflop_s = 100;
    PrefillLayerPlan p = plan_prefill_layer(PrefillCostMode::Auto, r, rows, res, kBytes, kFlop);
    EXPECT_TRUE(p.staged.empty());
    EXPECT_NEAR(p.est_ms(), 3.0, 1e-12);
    r.gpu_grouped_gflop_s = 1000;
    EXPECT_DOUBLE_EQ(prefill_gpu_ms(r, 300, kFlop, true), 0.3);
    EXPECT_DOUBLE_EQ(prefill_gpu_ms(r, 20, kFlop), 0.2);
    p = plan_prefill_layer(PrefillCostMode::Auto, r, rows, res, kBytes, kFlop);
    EXPECT_EQ(p.staged, (std::vector<int32_t>{1}));
    EXPECT_NEAR(p.est_gpu_ms, 0.5, 1e-12);
    EXPECT_NEAR(p.est_ms(), 1.0, 1e-12);
}

TEST(PrefillCost, AutoPinIsBoundedByRam) {
    constexpr uint64_t GiB = 1ull << 30;
    // gpt-oss-120b at 12 GiB on the 128 GiB H200 host: 50 GiB off the GPU, 100 GiB available: RAM / 4.
    EXPECT_EQ(prefill_pin_auto_bytes(50 * GiB, 128 * GiB, 100 * GiB), 32 * GiB);
    // The same model on a 64 GiB desktop with 40 GiB available: RAM / 4 = 16 GiB, available / 2 = 20.
    EXPECT_EQ(prefill_pin_auto_bytes(50 * GiB, 64 * GiB, 40 * GiB), 16 * GiB);
    // Little available: half of it.
    EXPECT_EQ(prefill_pin_auto_bytes(50 * GiB, 64 * GiB, 6 * GiB), 3 * GiB);
    // A small model: its off-GPU experts, no more.
    EXPECT_EQ(prefill_pin_auto_bytes(5 * GiB, 128 * GiB, 100 * GiB), 5 * GiB);
    EXPECT_EQ(prefill_pin_auto_bytes(0, 128 * GiB, 100 * GiB), 0u);
}

TEST(PrefillCost, ForcedModes) {
    const std::vector<int64_t> rows = {5, 0, 2, 9};
    const std::vector<uint8_t> res = {0, 0, 1, 0};
    PrefillLayerPlan p = plan_prefill_layer(PrefillCostMode::Cpu, rates(), rows, res, kBytes, kFlop);
    EXPECT_TRUE(p.staged.empty());
    EXPECT_EQ(p.n_cpu, 2);
    EXPECT_EQ(p.path[2], PrefillPath::Resident);
    p = plan_prefill_layer(PrefillCostMode::Stage, rates(), rows, res, kBytes, kFlop);
    EXPECT_EQ(p.staged, (std::vector<int32_t>{3, 0}));  // most rows first
    EXPECT_EQ(p.n_cpu, 0);
    EXPECT_EQ(p.path[1], PrefillPath::None);
    // The forced modes need no rates (the engine may run before measuring them).
    p = plan_prefill_layer(PrefillCostMode::Stage, PrefillRates{}, rows, res, kBytes, kFlop);
    EXPECT_EQ(p.staged.size(), 2u);
}

TEST(PrefillCost, Errors) {
    const std::vector<int64_t> rows = {1};
    EXPECT_THROW(plan_prefill_layer(PrefillCostMode::Auto, PrefillRates{}, rows, std::vector<uint8_t>{0}, kBytes, kFlop), Error);
    EXPECT_THROW(plan_prefill_layer(PrefillCostMode::Cpu, rates(), rows, std::vector<uint8_t>{0, 0}, kBytes, kFlop), Error);
    EXPECT_EQ(parse_prefill_cost_mode("auto"), PrefillCostMode::Auto);
    EXPECT_EQ(parse_prefill_cost_mode("stage"), PrefillCostMode::Stage);
    EXPECT_STREQ(prefill_cost_mode_name(parse_prefill_cost_mode("cpu")), "cpu");
    try {
        parse_prefill_cost_mode("gpu");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'gpu'"), std::string::npos);
    }
}

}  // namespace
}  // namespace nitro
