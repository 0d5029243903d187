// CUDA error checks and small device helpers shared by the kernels of src/cuda.
// Device and programming faults abort with file:line (docs/architecture.md, "Errors"); user-facing limits
// (the VRAM budget) throw nitro::Error from the allocator instead.
#pragma once

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#include "cuda/check.h"

namespace nitro::cuda {

inline constexpr int kWarp = 32;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/// The experts' gated activation of gate g and up u: cpu::swiglu_oai (gpt-oss: alpha 1.702,
/// limit 7, (u + 1)) when oai, else cpu::swiglu (silu(g) * u); the same f32 operations.
__device__ __forceinline__ float glu(float g, float u, int oai) {
    if (oai) {
        g = fminf(g, 7.0f);
        u = fminf(fmaxf(u, -7.0f), 7.0f);
        return __fmul_rn(__fdiv_rn(g, 1.0f + expf(-1.702f * g)), u + 1.0f);
    }
    return __fmul_rn(__fdiv_rn(g, 1.0f + expf(-g)), u);
}

inline int ceil_div(long long a, long long b) { return static_cast<int>((a + b - 1) / b); }

}  // namespace nitro::cuda
