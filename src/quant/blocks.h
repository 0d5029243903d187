// ggml block layouts, byte for byte (ggml/src/ggml-common.h, block_* structs).
//
// Every struct here has exactly the size of its ggml counterpart (checked by static_assert), holds
// fp16 scales as raw uint16_t bits and is little-endian, as GGUF files are. Code that reads blocks
// out of a byte buffer copies each block into one of these (std::memcpy), so the buffer needs no
// particular alignment.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace nitro::quant {

static_assert(std::endian::native == std::endian::little, "ggml block formats are little-endian");

/// Values per super-block of the k-quants and most i-quants.
inline constexpr int QK_K = 256;
/// Values per block of the legacy formats, IQ4_NL and MXFP4.
inline constexpr int QK32 = 32;

// ---------------------------------------------------------------- legacy (32 values per block)

/// Q4_0, 18 bytes: d (fp16), qs[16]. Value j (0..15) is the low nibble of qs[j], value j+16 the
/// high nibble; x = d * (q - 8).
struct BlockQ4_0 {
    uint16_t d;
    uint8_t qs[QK32 / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

/// Q4_1, 20 bytes: d, m (fp16), qs[16] as in Q4_0; x = d * q + m.
struct BlockQ4_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qs[QK32 / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

/// Q5_0, 22 bytes: d (fp16), qh (u32, bit j = 5th bit of value j), qs[16] low nibbles as in Q4_0;
/// x = d * (q - 16).
struct BlockQ5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[QK32 / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

/// Q5_1, 24 bytes: d, m (fp16), qh[4], qs[16] as in Q5_0; x = d * q + m.
struct BlockQ5_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[QK32 / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

/// Q8_0, 34 bytes: d (fp16), qs[32] (int8); x = d * q.
struct BlockQ8_0 {
    uint16_t d;
    int8_t qs[QK32];
};
static_assert(sizeof(BlockQ8_0) == 34);

/// Q8_1, 36 bytes: d, s (fp16; s = d * sum(qs)), qs[32] (int8); x = d * q.
struct BlockQ8_1 {
    uint16_t d;
    uint16_t s;
    int8_t qs[QK32];
};
static_assert(sizeof(BlockQ8_1) == 36);

// ---------------------------------------------------------------- k-quants (256 values per block)

/// Q2_K, 84 bytes: scales[16] (low nibble: scale, high nibble: min, of each 16 values),
/// qs[64] (2-bit quants), d, dmin (fp16). x = d*sc * q - dmin*m.
struct BlockQ2_K {
    uint8_t scales[QK_K / 16];
    uint8_t qs[QK_K / 4];
    uint16_t d;
    uint16_t dmin;
};
static_assert(sizeof(BlockQ2_K) == 84);

/// Q3_K, 110 bytes: hmask[32] (high bit of each quant), qs[64] (low 2 bits), scales[12] (16
/// six-bit scales, offset 32), d (fp16). x = d*(sc-32) * (q - 4 if high bit clear).
struct BlockQ3_K {
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[12];
    uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110);

/// Q4_K, 144 bytes: d, dmin (fp16), scales[12] (8 six-bit scales and 8 six-bit mins, packed by
/// get_scale_min_k4), qs[128] (4-bit quants). x = d*sc * q - dmin*m, per 32 values.
struct BlockQ4_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qs[QK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

/// Q5_K, 176 bytes: as Q4_K plus qh[32] (5th bits), before qs[128].
struct BlockQ5_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

/// Q6_K, 210 bytes: ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] (int8), d (fp16).
/// x = d * sc * (q - 32), per 16 values.
struct BlockQ6_K {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

/// Q8_K, 292 bytes: d (f32), qs[256] (int8), bsums[16] (sum of each 16 quants). x = d * q.
/// ggml uses it for intermediate activations only.
struct BlockQ8_K {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
};
static_assert(sizeof(BlockQ8_K) == 292);

// ---------------------------------------------------------------- i-quants

/// IQ2_XXS, 66 bytes: d (fp16), qs[32] (u16). Per 32 values, two u32: the first holds four
/// 8-bit iq2xxs_grid indices, the second four 7-bit sign indices (ksigns) and a 4-bit scale.
struct BlockIQ2_XXS {
    uint16_t d;
    uint16_t qs[QK_K / 8];
};
static_assert(sizeof(BlockIQ2_XXS) == 66);

/// IQ2_XS, 74 bytes: d (fp16), qs[32] (u16: 9-bit iq2xs_grid index | 7-bit sign index << 9),
/// scales[8] (two 4-bit scales per 32 values).
struct BlockIQ2_XS {
    uint16_t d;
    uint16_t qs[QK_K / 8];
    uint8_t scales[QK_K / 32];
};
static_assert(sizeof(BlockIQ2_XS) == 74);

/// IQ2_S, 82 bytes: d (fp16), qs[64] (32 low index bytes, then 32 sign bytes), qh[8] (2 high
/// index bits per group of 8), scales[8] (two 4-bit scales per 32 values). Grid: iq2s_grid.
struct BlockIQ2_S {
    uint16_t d;
    uint8_t qs[QK_K / 4];
    uint8_t qh[QK_K / 32];
    uint8_t scales[QK_K / 32];
};
static_assert(sizeof(BlockIQ2_S) == 82);

/// IQ3_XXS, 98 bytes: d (fp16), qs[96]: 64 iq3xxs_grid indices (4 values each), then per 32
/// values one u32 holding four 7-bit sign indices and a 4-bit scale.
struct BlockIQ3_XXS {
    uint16_t d;
    uint8_t qs[3 * QK_K / 8];
};
static_assert(sizeof(BlockIQ3_XXS) == 98);

/// IQ3_S, 110 bytes: d (fp16), qs[64] (low 8 index bits), qh[8] (9th index bits), signs[32]
/// (one sign bit per value), scales[4] (two 4-bit scales per 64 values). Grid: iq3s_grid.
struct BlockIQ3_S {
    uint16_t d;
    uint8_t qs[QK_K / 4];
    uint8_t qh[QK_K / 32];
    uint8_t signs[QK_K / 8];
    uint8_t scales[QK_K / 64];
};
static_assert(sizeof(BlockIQ3_S) == 110);

/// IQ1_S, 50 bytes: d (fp16), qs[32] (low 8 index bits), qh[8] (u16 per 32 values: 3 high
/// index bits per group of 8, 3-bit scale at bits 12..14, delta sign at bit 15). Grid: iq1s_grid.
struct BlockIQ1_S {
    uint16_t d;
    uint8_t qs[QK_K / 8];
    uint16_t qh[QK_K / 32];
};
static_assert(sizeof(BlockIQ1_S) == 50);

/// IQ1_M, 56 bytes: qs[32] (low 8 index bits), qh[16] (3 high index bits and a delta sign bit
/// per group of 8), scales[8] (3-bit block scales; the fp16 super-scale is spread over the top
/// nibbles of the four u16 words).
struct BlockIQ1_M {
    uint8_t qs[QK_K / 8];
    uint8_t qh[QK_K / 16];
    uint8_t scales[QK_K / 32];
};
static_assert(sizeof(BlockIQ1_M) == 56);

/// IQ4_NL, 18 bytes: d (fp16), qs[16], nibbles as in Q4_0 indexing kvalues_iq4nl; x = d * kv[q].
struct BlockIQ4_NL {
    uint16_t d;
    uint8_t qs[QK32 / 2];
};
static_assert(sizeof(BlockIQ4_NL) == 18);

/// IQ4_XS, 136 bytes: d (fp16), scales_h (2 high bits of each of 8 six-bit scales), scales_l[4]
/// (4 low bits each), qs[128] (per 32 values, 16 bytes of nibbles as in IQ4_NL).
/// x = d * (ls - 32) * kvalues_iq4nl[q].
struct BlockIQ4_XS {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[QK_K / 64];
    uint8_t qs[QK_K / 2];
};
static_assert(sizeof(BlockIQ4_XS) == 136);

// ---------------------------------------------------------------- ternary

/// TQ1_0, 54 bytes: qs[48] (5 trits per byte, base-3 fixed point), qh[4] (4 trits per byte),
/// d (fp16). x = d * (t - 1), t in {0, 1, 2}.
struct BlockTQ1_0 {
    uint8_t qs[(QK_K - 4 * QK_K / 64) / 5];
    uint8_t qh[QK_K / 64];
    uint16_t d;
};
static_assert(sizeof(BlockTQ1_0) == 54);

/// TQ2_0, 66 bytes: qs[64] (2 bits per value), d (fp16). x = d * (q - 1).
struct BlockTQ2_0 {
    uint8_t qs[QK_K / 4];
    uint16_t d;
};
static_assert(sizeof(BlockTQ2_0) == 66);

// ---------------------------------------------------------------- microscaling

/// MXFP4 (OCP MX), 17 bytes: e (E8M0 shared exponent), qs[16] (E2M1 nibbles; value j is the low
/// nibble of qs[j], value j+16 the high nibble).
struct BlockMXFP4 {
    uint8_t e;
    uint8_t qs[QK32 / 2];
};
static_assert(sizeof(BlockMXFP4) == 17);

}  // namespace nitro::quant
