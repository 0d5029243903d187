// The expert counters as nitro run, --json and /metrics report them (runtime/generate.h), with the
// hybrid's prompt counters (docs/hybrid.md "Prompts"): sums and rates against hand computation.
#include "runtime/engine.h"
#include "runtime/generate.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

namespace nitro {
namespace {

ExpertCounters two_layers() {
    ExpertCounters c;
    c.layers.resize(2);
    c.prefill_tokens = 100;
    // layer 0: 300 selections from slots, 60 staged, 40 on the CPU
    ExpertLayerCounters& a = c.layers[0];
    a.gpu_pairs = 300;
    a.staged_pairs = 60;
    a.cpu_pairs = 40;
    a.prompt_resident_experts = 3;
    a.staged_experts = 4;
    a.staged_bytes = 40'000'000;
    a.stage_ms = 4;
    a.prompt_cpu_experts = 2;
    a.cpu_experts = 2;
    a.cpu_bytes = 20'000'000;
    a.cpu_ms = 5;
    a.prompt_cpu_ms = 5;
    a.prompt_idle_ms = 1.5;
    // layer 1: the same shape, other numbers
    ExpertLayerCounters& b = c.layers[1];
    b.gpu_pairs = 100;
    b.staged_pairs = 140;
    b.cpu_pairs = 160;
    b.prompt_resident_experts = 1;
    b.staged_experts = 6;
    b.staged_bytes = 60'000'000;
    b.stage_ms = 6;
    b.prompt_cpu_experts = 5;
    b.cpu_experts = 5;
    b.cpu_bytes = 50'000'000;
    b.cpu_ms = 10;
    b.prompt_cpu_ms = 10;
    b.prompt_idle_ms = 0.5;
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
