// Helpers of the CUDA tests: fresh random inputs per run (seed printed), device buffers that are
// poisoned (NaN bytes) before each kernel runs, and the normalised error ||out - ref|| / ||ref||.
#pragma once

#include <cstdlib>

#include "cuda/check.h"
#include "cuda/context.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

namespace nitro::cuda::test {

/// One generator per test binary run, seeded from std::random_device (printed once).
inline std::mt19937_64& rng() {
    static std::mt19937_64 g = [] {
        // NITRO_TEST_SEED: rerun a failure with its inputs (the seed is printed)
        const char* env = std::getenv("NITRO_TEST_SEED");
        const uint64_t seed = env ? std::strtoull(env, nullptr, 10)
                                  : (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
        std::printf("[cuda tests] random seed %llu\n", static_cast<unsigned long long>(seed));
        return std::mt19937_64(seed);
    }();
    return g;
}
inline std::vector<float> randn(size_t n, float sigma = 1.f) {
    std::normal_distribution<float> d(0.f, sigma);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng());
    return v;
}
inline int randint(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng()); }

/// Device copy of a host vector (allocated from the context's budgeted allocator).
template <typename T>
T* to_dev(DeviceContext& ctx, const std::vector<T>& v) {
    T* d = ctx.alloc_n<T>(v.size() ? v.size() : 1, "test buffer");
    NITRO_CUDA_CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <typename T>
std::vector<T> to_host(const T* d, size_t n) {
    NITRO_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> v(n);
    NITRO_CUDA_CHECK(cudaMemcpy(v.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
}
/// Fills with 0xFF bytes: NaN as f32, so an element a kernel does not write fails the check.
/// Synchronises before and after: cudaMemset runs on the legacy default stream, which does not
/// order with the engine's non-blocking streams, so without the sync after it the fill could land
/// after the kernel under test (MEASURED on the H200 while other processes loaded the GPU:
/// DequantizeAndGetRowsAreExact and RmsNormMatchesCpu read NaN), and without the sync before it
/// the fill could land while work already enqueued still reads the buffer
/// (FusedDecodeMoeEqualsTheSeparateOpsBitForBit on the H200: the separate path's combine read
/// the poisoned down rows, NaN, because the buffer was poisoned for the fused path right after).
template <typename T>
void poison(T* d, size_t n) {
    NITRO_CUDA_CHECK(cudaDeviceSynchronize());
    NITRO_CUDA_CHECK(cudaMemset(d, 0xFF, n * sizeof(T)));
    NITRO_CUDA_CHECK(cudaDeviceSynchronize());
}

/// ||out - ref|| / ||ref||; +inf if any output is NaN/inf (unwritten or broken).
inline double nerr(const std::vector<float>& out, const std::vector<double>& ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < out.size(); ++i) {
        if (!std::isfinite(out[i])) return INFINITY;
        num += (out[i] - ref[i]) * (out[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return std::sqrt(num / std::max(den, 1e-300));
}
inline double nerr(const std::vector<float>& out, const std::vector<float>& ref) {
    return nerr(out, std::vector<double>(ref.begin(), ref.end()));
}

inline void require_gpu() {
    int n = 0;
    ASSERT_EQ(cudaGetDeviceCount(&n), cudaSuccess) << "no CUDA driver: the `cuda` tests need a GPU";
    ASSERT_GT(n, 0) << "no CUDA device: the `cuda` tests need a GPU";
}

}  // namespace nitro::cuda::test
