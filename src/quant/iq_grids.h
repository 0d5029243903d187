// Lookup tables that define the i-quant formats (IQ1_S/M, IQ2_XXS/XS/S, IQ3_XXS/S, IQ4_NL/XS).
//
// These are ggml's format-defining tables (ggml/src/ggml-common.h): the bytes of a GGUF tensor
// index into them, so every value must be exactly ggml's. Each grid entry packs 8 (u64) or 4
// (u32) magnitudes, one per byte, element 0 in the lowest byte.
#pragma once

#include <cstdint>

namespace nitro::quant {

/// IQ2_XXS grid: 256 points of 8 magnitudes in {8, 25, 43}.
extern const uint64_t iq2xxs_grid[256];
/// IQ2_XS grid: 512 points of 8 magnitudes in {8, 25, 43}.
extern const uint64_t iq2xs_grid[512];
/// IQ2_S grid: 1024 points of 8 magnitudes in {8, 25, 43}.
extern const uint64_t iq2s_grid[1024];
/// IQ3_XXS grid: 256 points of 4 magnitudes in {4, 12, 20, 28, 36, 44, 52, 62}.
extern const uint32_t iq3xxs_grid[256];
/// IQ3_S grid: 512 points of 4 magnitudes in {1, 3, 5, ..., 15}.
extern const uint32_t iq3s_grid[512];
/// IQ1_S / IQ1_M grid: 2048 points of 8 signed values in {-1, 0, 1} (int8 bytes).
extern const uint64_t iq1s_grid[2048];

/// 7-bit sign index -> 8 sign bits: bit 7 makes the count of set bits even (ksigns_iq2xs).
extern const uint8_t ksigns_iq2xs[128];
/// Bit j of a sign byte flips element j (kmask_iq2xs).
extern const uint8_t kmask_iq2xs[8];
/// The 16 non-linear levels of IQ4_NL and IQ4_XS (kvalues_iq4nl).
extern const int8_t kvalues_iq4nl[16];

/// Offset added to every IQ1_S / IQ1_M grid value, signed by a per-group bit (IQ1S_DELTA).
inline constexpr float kIq1sDelta = 0.125f;

}  // namespace nitro::quant
