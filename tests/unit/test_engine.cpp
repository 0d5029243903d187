// The engine switch (--mode): in a build without the CUDA backend, --mode gpu is a clear error.
#include "core/error.h"
#include "runtime/engine.h"

#include <gtest/gtest.h>

using namespace nitro;

TEST(Engine, ParsesModes) {
    EXPECT_EQ(parse_engine_mode("cpu"), EngineMode::Cpu);
    EXPECT_EQ(parse_engine_mode("gpu"), EngineMode::Gpu);
    EXPECT_THROW(parse_engine_mode("tpu"), Error);
}

TEST(Engine, GpuModeWithoutCudaIsAClearError) {
    if (gpu_engine_available()) GTEST_SKIP() << "a GPU engine is registered in this binary";
    Model model(std::string(NITRO_SHARED_DIR) + "/fixtures/tiny-qwen3moe-q8.gguf");
    try {
        make_engine(EngineMode::Gpu, model, SessionOptions{}, GpuOptions{});
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("NITRO_CUDA=ON"), std::string::npos) << e.what();
    }
}
