// The engine switch (--mode): in a build without the CUDA backend, --mode gpu is a clear error.
#include "core/error.h"
#include "core/text.h"
#include "runtime/engine.h"

#include <gtest/gtest.h>

using namespace nitro;

TEST(Engine, ParsesModes) {
    EXPECT_EQ(parse_engine_mode("cpu"), EngineMode::Cpu);
    EXPECT_EQ(parse_engine_mode("gpu"), EngineMode::Gpu);
    EXPECT_EQ(parse_engine_mode("hybrid"), EngineMode::Hybrid);
    EXPECT_EQ(parse_engine_mode("auto"), EngineMode::Auto);
    EXPECT_THROW(parse_engine_mode("tpu"), Error);
    for (EngineMode m : {EngineMode::Cpu, EngineMode::Gpu, EngineMode::Hybrid, EngineMode::Auto})
        EXPECT_EQ(parse_engine_mode(engine_mode_name(m)), m);
}

TEST(Engine, AutoRunsOnTheCpuWithoutAGpu) {
    if (gpu_device_count() > 0) GTEST_SKIP() << "a GPU is visible: auto picks it";
    Model model(std::string(NITRO_SHARED_DIR) + "/fixtures/tiny-qwen3moe-q8.gguf");
    const auto e = make_engine(EngineMode::Auto, model, SessionOptions{}, GpuOptions{});
    EXPECT_EQ(e->describe().rfind("cpu (", 0), 0u) << e->describe();
    EXPECT_EQ(e->expert_counters(), nullptr) << "the CPU engine places no experts";
}

TEST(Engine, DescriptionCountsThreadsInGoodEnglish) {
    EXPECT_EQ(count_noun(1, "thread"), "1 thread");
    EXPECT_EQ(count_noun(2, "thread"), "2 threads");
    EXPECT_EQ(count_noun(0, "thread"), "0 threads");
    Model model(std::string(NITRO_SHARED_DIR) + "/fixtures/tiny-qwen3moe-q8.gguf");
    for (int n : {1, 2}) {
        SessionOptions so;
        so.n_threads = n;
        const auto e = make_engine(EngineMode::Cpu, model, so, GpuOptions{});
        EXPECT_EQ(e->describe().rfind(n == 1 ? "cpu (1 thread, " : "cpu (2 threads, ", 0), 0u) << e->describe();
    }
}

TEST(Engine, GpuModeWithoutCudaIsAClearError) {
    if (gpu_engine_available()) GTEST_SKIP() << "a GPU engine is registered in this binary";
    Model model(std::string(NITRO_SHARED_DIR) + "/fixtures/tiny-qwen3moe-q8.gguf");
    for (EngineMode m : {EngineMode::Gpu, EngineMode::Hybrid}) {
        try {
            make_engine(m, model, SessionOptions{}, GpuOptions{});
            FAIL() << "no error";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("NITRO_CUDA=ON"), std::string::npos) << e.what();
        }
    }
}
