// GPU timing for benchmarks and kernel sandboxes (nitro_cuda_bench, dev/kernels/*.cu): the median
// over repetitions of CUDA-event-timed work on one stream. Not used by the engine itself.
#pragma once

#include "cuda/check.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

namespace nitro::cuda {

/// The median of v (the upper one of the two middle values for an even count). v must not be empty.
inline double median_of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

/// Runs f() once (warm-up), then `reps` times between two events on stream s; returns the median
/// of those times in milliseconds. f must enqueue its work on s. Throws nitro::Error on a CUDA error.
template <typename F>
double time_ms(cudaStream_t s, int reps, F&& f) {
    cudaEvent_t a, b;
    NITRO_CUDA_CHECK(cudaEventCreate(&a));
    NITRO_CUDA_CHECK(cudaEventCreate(&b));
    f();
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
        NITRO_CUDA_CHECK(cudaEventRecord(a, s));
        f();
        NITRO_CUDA_CHECK(cudaEventRecord(b, s));
        NITRO_CUDA_CHECK(cudaEventSynchronize(b));
        float ms = 0;
        NITRO_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return median_of(std::move(t));
}

}  // namespace nitro::cuda
