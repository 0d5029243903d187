// The expert counters as nitro run, --json and /metrics report them (runtime/generate.h), with the
// hybrid's prompt counters (docs/hybrid.md "Prompts"): sums and rates against hand computation.
#include "runtime/engine.h"
#include "runtime/generate.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

namespace nitro {
namespace {

/// One layer's counters of prompt chunks: selections by path, experts by path, bytes and times.
ExpertLayerCounters layer(uint64_t slot_pairs, uint64_t staged_pairs, uint64_t cpu_pairs, uint64_t resident, uint64_t staged,
                          uint64_t cpu, double stage_ms, double cpu_ms, double idle_ms) {
    ExpertLayerCounters L;
    L.gpu_pairs = slot_pairs;
    L.staged_pairs = staged_pairs;
    L.cpu_pairs = cpu_pairs;
    L.prompt_resident_experts = resident;
    L.staged_experts = staged;
    L.staged_bytes = staged * 10'000'000;  // 10 MB experts
    L.stage_ms = stage_ms;
    L.prompt_cpu_experts = L.cpu_experts = cpu;
    L.cpu_bytes = cpu * 10'000'000;
    L.cpu_ms = L.prompt_cpu_ms = cpu_ms;
    L.prompt_idle_ms = idle_ms;
    return L;
}

ExpertCounters two_layers() {
    ExpertCounters c;
    c.prefill_tokens = 100;
    c.layers.push_back(layer(300, 60, 40, 3, 4, 2, 4, 5, 1.5));
    c.layers.push_back(layer(100, 140, 160, 1, 6, 5, 6, 10, 0.5));
    return c;
}

TEST(ExpertCounters, PromptPathsAddUpInTheTotal) {
    const ExpertLayerCounters t = two_layers().total();
    EXPECT_EQ(t.staged_experts, 10u);
    EXPECT_EQ(t.staged_pairs, 200u);
    EXPECT_EQ(t.staged_bytes, 100'000'000u);
    EXPECT_DOUBLE_EQ(t.stage_ms, 10.0);
    EXPECT_EQ(t.prompt_resident_experts, 4u);
    EXPECT_EQ(t.prompt_cpu_experts, 7u);
    EXPECT_DOUBLE_EQ(t.prompt_cpu_ms, 15.0);
    EXPECT_DOUBLE_EQ(t.prompt_idle_ms, 2.0);
}

TEST(ExpertCounters, LineAndJsonReportThePromptPaths) {
    const ExpertCounters c = two_layers();
    const std::string line = expert_counters_line(c);
    // 800 selections: 400 from slots (50.0%), 200 on the CPU (25.0%), 200 staged (25.0%);
    // 0.10 GB staged in 10 ms = 10.0 GB/s.
    EXPECT_NE(line.find("50.0% of 800 selections on the GPU, 25.0% on the CPU, 25.0% staged to the GPU"), std::string::npos) << line;
    EXPECT_NE(line.find("prompt experts: 4 resident, 10 staged (0.10 GB host-to-device in 10 ms: 10.0 GB/s), 7 on the CPU (15 ms); "
                        "GPU idle 2 ms"),
              std::string::npos)
        << line;
    const nlohmann::json j = expert_counters_json(c);
    EXPECT_EQ(j["prompt"]["staged_experts"], 10);
    EXPECT_EQ(j["prompt"]["staged_bytes"], 100'000'000);
    EXPECT_DOUBLE_EQ(j["prompt"]["staged_gb_s"].get<double>(), 10.0);
    EXPECT_EQ(j["layers"][1]["prompt"]["cpu_experts"], 5);
    EXPECT_DOUBLE_EQ(j["layers"][0]["prompt"]["gpu_idle_ms"].get<double>(), 1.5);
    // No prompt chunk staged or computed anything on the CPU: no prompt line.
    ExpertCounters d;
    d.layers.resize(1);
    d.layers[0].gpu_pairs = 8;
    d.decode_steps = 2;
    EXPECT_EQ(expert_counters_line(d).find("prompt experts"), std::string::npos);
}

}  // namespace
}  // namespace nitro
