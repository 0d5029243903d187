// Facts about the GPU kernels and the CUDA driver that the planner (runtime/placement.h) must know
// to count what the GPU engine allocates, without a GPU: the largest chunk the matrix-vector path
// takes, the 8-bit activation layout of the integer decode products, the flash-decoding split
// count, and how the driver rounds an allocation. The CUDA code (src/cuda) reads them from here
// too, so the plan and the engine cannot disagree.
#pragma once

#include <algorithm>
#include <cstdint>

namespace nitro {

/// Chunks of up to this many rows take the matrix-vector (GEMV) path of the GPU products; larger
/// ones the GEMM path (cuda/ops.h matmul).
inline constexpr int64_t kGemvMaxTokens = 8;

/// The device memory one allocation of `bytes` takes: 256-byte aligned, and large allocations
/// (>= 1 MiB) rounded up to the driver's 2 MiB pages, which is what cudaMalloc reserves for them.
/// The GPU engine's allocator counts allocations with it and the plan adds up with it, so the
/// budget bounds what the device really gives out.
constexpr uint64_t vram_alloc_size(uint64_t bytes) {
    const uint64_t b = (bytes < 1 ? 1 : bytes);
    return b >= (1ull << 20) ? (b + (2ull << 20) - 1) / (2ull << 20) * (2ull << 20) : (b + 255) / 256 * 256;
}

/// Bytes of `rows` rows of `ne0` activations quantized to 8-bit blocks of 32 for the GPU's integer
/// decode products (cuda/mmvq.h): int8 values [rows, ne0], then, 256-byte aligned, one f32 scale per
/// block [rows, ne0 / 32].
constexpr uint64_t q8_act_scales_offset(int64_t rows, int64_t ne0) {
    return (static_cast<uint64_t>(rows * ne0) + 255) / 256 * 256;  ///< where the scales start, bytes
}
constexpr uint64_t q8_act_bytes(int64_t rows, int64_t ne0) {
    return q8_act_scales_offset(rows, ne0) + static_cast<uint64_t>(rows * (ne0 / 32)) * 4;
}

/// The most flash-decoding splits a decode step over `keys` keys (n_ctx, or the window) may use:
/// one per 128 keys (a 32-key tile for each of the decode attention kernel's 4 warps), at most 64.
/// The partial buffer is sized for it; cuda::attention_decode_splits picks within it.
inline int attention_max_split(int64_t keys) { return static_cast<int>(std::clamp<int64_t>((keys + 127) / 128, 1, 64)); }

}  // namespace nitro
