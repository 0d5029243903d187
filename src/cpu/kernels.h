// Internal to src/cpu: the dot-product kernel table shared by the scalar reference and the
// per-ISA files (vec_dot_scalar.cpp, vec_dot_avx2.cpp, vec_dot_avx512.cpp), and small helpers.
//
// A kernel computes the dots of ONE weight row with up to kMaxTokens activation rows, so a SIMD
// kernel decodes each weight block once and reuses it for every token of the group. Per token
// it performs exactly the same operations in the same order whatever nt is, so a result never
// depends on how tokens were grouped (or on the thread that ran it).
#pragma once

#include "quant/types.h"

#include <bit>
#include <cstdint>
#include <cstring>

namespace nitro::cpu::kernels {

/// Tokens one kernel call handles at most.
inline constexpr int kMaxTokens = 4;
/// Table size: GgmlType ids are below this.
inline constexpr int kTypeSlots = 40;

/// Order of the activation quants in the SIMD image (ActRow::img), chosen per weight type so
/// that a SIMD kernel loads its weights as they lie in the file and the matching activations with
/// plain aligned loads (no shuffles per token). Positions are within a group of values:
enum class ActOrder : uint8_t {
    None,     ///< float types: no image
    Natural,  ///< quants in value order (Q8_0, Q6_K)
    /// per 128 values [0-15, 32-47, 64-79, 96-111, 16-31, 48-63, 80-95, 112-127]: the low nibbles
    /// of four 32-value (sub-)blocks, then their high nibbles (MXFP4, IQ4_NL, Q4_0, Q4_1, Q5_0,
    /// Q5_1, IQ4_XS). Rows are padded with zeros to a multiple of 128 values.
    Half16,
    /// per 128 values [0-31, 64-95, 32-63, 96-127]: low nibbles of 64 qs bytes, then the high
    /// nibbles (Q4_K, Q5_K)
    K4,
    /// per 256 values [0-31, 128-159, 32-63, 160-191, 64-95, 192-223, 96-127, 224-255]: the four
    /// 2-bit planes of 64 qs bytes (Q2_K, Q3_K)
    K2,
};

/// Where the SIMD views of one activation row lie in ActBuffer::simd (per token, `stride` bytes,
/// 64-byte aligned). Depends only on the weight type and the row length, never on the ISA, so
/// every level reads the same buffer.
struct ActLayout {
    ActOrder order = ActOrder::None;
    int64_t img_bytes = 0;  ///< the permuted int8 quants, padded as the order says
    /// Q8_0/Q8_1 activations: `lanes` f32 copies of each block's scale (dx), `lanes` int32 offset
    /// corrections [-off * sum(q), 0, ...] (corr, when the weight type's kernels store weights
    /// unsigned with an offset `off`), and for Q8_1 the block sum s as [s, 0, ...] (sx). IQ4_XS:
    /// corr per 32-value sub-block, 4 lanes, off = 128. Blocks are padded as the image.
    int lanes = 0;
    int32_t corr_offset = 0;
    int64_t n_blocks = 0;  ///< blocks of dx/corr/sx per row (padded)
    size_t img = 0, dx = 0, corr = 0, sx = 0;  ///< byte offsets in the row; 0 = absent (img: order None)
    size_t stride = 0;
};

/// The layout for activations of weight type `w` and rows of `ne0` values.
ActLayout act_layout(GgmlType w, int64_t ne0);

/// Fills values [v0, v0 + nv) of one row's SIMD views from its vec-dot-type bytes `q` (the whole
/// row; v0 and nv on whole groups of the order: 128 values, 256 for K2, or up to the row's end)
/// into `simd` (that row's `stride` bytes). Padding past ne0 is zeroed by the piece that ends the row.
void fill_act_simd(const ActLayout& l, GgmlType w, int64_t ne0, const uint8_t* q, int64_t v0, int64_t nv,
                   uint8_t* simd);

/// One activation row as the kernels see it: the vec-dot-type bytes `q`, and for Q8_0/Q8_1 rows the
/// f32 value of every block's fp16 scale (ActBuffer::block_scales), so a kernel does not convert
/// the same scale again for every weight row (d is nullptr for other types); plus the SIMD views
/// of act_layout() (nullptr where the layout has none).
struct ActRow {
    const uint8_t* q;
    const float* d;
    const int8_t* img = nullptr;
    const float* dx = nullptr;
    const int32_t* corr = nullptr;
    const float* sx = nullptr;
};

/// out[j] = dot(weight row w, activation row a[j]) for j in [0, nt), 1 <= nt <= kMaxTokens;
/// n values, a multiple of the weight type's block size; a[j] in vec_dot_type(weight type).
using DotFn = void (*)(int64_t n, const uint8_t* w, const ActRow* a, int nt, float* out);

/// acc[i] += w * v[i] for n F16 values v (attention's weighted V sum).
using AxpyF16Fn = void (*)(int64_t n, float w, const uint16_t* v, float* acc);

/// One kernel per weight type id (nullptr: no kernel for that type at this level).
struct Table {
    DotFn dot[kTypeSlots] = {};
    AxpyF16Fn axpy_f16 = nullptr;
};

/// Fills the scalar reference kernels (every supported type).
void fill_scalar(Table& t);
/// Overrides the entries with AVX2+FMA+F16C kernels (vec_dot_avx2.cpp, kquants_avx2.cpp).
void fill_avx2(Table& t);
void fill_kquants_avx2(Table& t);
/// Overrides the entries with AVX-512 F/BW/VL/DQ/VNNI kernels (vec_dot_avx512.cpp, kquants_avx512.cpp).
void fill_avx512(Table& t);
void fill_kquants_avx512(Table& t);

/// Scalar reference dot of one row pair (what vec_dot_reference returns); throws for types
/// without a kernel.
float dot_scalar(GgmlType w, int64_t n, const void* wrow, const void* arow);

/// Unpacks the 8 six-bit scales and 8 six-bit mins of a Q4_K/Q5_K super-block (ggml's
/// get_scale_min_k4 for j = 0..7).
inline void unpack_scales_k4(const uint8_t* q, uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 4; ++j) {
        sc[j] = q[j] & 63;
        mn[j] = q[j + 4] & 63;
    }
    for (int j = 4; j < 8; ++j) {
        sc[j] = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        mn[j] = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/// E8M0 byte -> 2^(e - 128), half the MX scale (ggml_e8m0_to_fp32_half). constexpr, so tables of
/// it are built at compile time (no code runs at load time, see simd_x86.h).
constexpr float e8m0_half(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
    return std::bit_cast<float>(bits);
}

/// E2M1 code -> value * 2 (ggml's kvalues_mxfp4).
inline constexpr int8_t kValuesMxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/// The 16 levels of IQ4_NL / IQ4_XS (ggml's kvalues_iq4nl; equal to quant::kvalues_iq4nl, tested),
/// constexpr so the ISA files can build their tables at compile time.
inline constexpr int8_t kValuesIq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/// Reads a little-endian u16 / f32 at an unaligned address.
inline uint16_t load_u16(const uint8_t* p) { uint16_t v; std::memcpy(&v, p, 2); return v; }
inline float load_f32(const uint8_t* p) { float v; std::memcpy(&v, p, 4); return v; }

}  // namespace nitro::cpu::kernels

namespace nitro::cpu {
struct ActBuffer;
struct MatmulJob;
namespace kernels {
/// Rows [r0, r1) of job j with kernel `dot`: tokens in tiles of 64, each weight row read once per
/// tile and used by all its tokens in groups of kMaxTokens (matmul.cpp; the job must be valid,
/// see check_matmul_job).
void run_rows(const MatmulJob& j, DotFn dot, int64_t r0, int64_t r1);
/// Rows [r0, r1) of several jobs of the same row count, row-major across the jobs (row r of job
/// 0, of job 1, ..., then row r + 1), so each thread streams all the jobs' weights together
/// instead of switching from one matrix to the next; the same kernel calls as run_rows per job
/// (falls back to it when a job has more than one tile of tokens or there are over 16 jobs).
void run_rows_interleaved(const MatmulJob* const* jobs, const DotFn* dots, int n_jobs, int64_t r0, int64_t r1);
/// The kernels' view of token t of `a` (matmul.cpp).
ActRow act_row(const ActBuffer& a, int64_t t);
/// The kernel of weight type `t` at the level matmul_batch uses (kernel_isa()); throws nitro::Error
/// for a type without one (matmul.cpp).
DotFn active_kernel(GgmlType t);
}  // namespace kernels
}  // namespace nitro::cpu
