// Device-side fills of the kernel sandboxes (dev/kernels/*.cu): variance-1 uniform values from a
// hash of the element index, so big timing buffers need no host loop or copy.
#pragma once

#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

namespace nitro::cuda::sandbox {

/// Uniform in [-sqrt(3), sqrt(3)] (variance 1) from a hash of (i, seed).
__device__ inline float hash_val(uint64_t i, uint32_t seed) {
    uint32_t x = static_cast<uint32_t>(i) * 0x9E3779B1u ^ static_cast<uint32_t>(i >> 32) * 0x85EBCA77u ^ seed;
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    x ^= x >> 16;
    return (static_cast<float>(x) * 2.3283064e-10f * 2.f - 1.f) * 1.7320508f;
}
/// p[0, n) = hash_val(i, seed) (grid-stride).
__global__ inline void fill_f32(float* p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x)
        p[i] = hash_val(i, seed);
}
/// p[0, n) = hash_val(i, seed) rounded to f16 (grid-stride).
__global__ inline void fill_f16(__half* p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x)
        p[i] = __float2half_rn(hash_val(i, seed));
}

}  // namespace nitro::cuda::sandbox
