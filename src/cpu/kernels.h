// Internal to src/cpu: the kernel table shared by the scalar reference and the per-ISA files
// (vec_dot_scalar.cpp, vec_dot_avx2.cpp, kquants_avx2.cpp, vec_dot_avx512.cpp, kquants_avx512.cpp),
// the activations' SIMD layout, and small helpers.
//
// Two kinds of kernel:
// - DotFn: ONE weight row against 1..kDotMaxTokens activation rows (the scalar reference of every
//   type, and the float types F16/BF16/F32 at every level);
// - TileFn (SIMD quantized types): a block of weight rows against 1..kMaxTokens activation rows.
//   Each weight group (16 sub-blocks) is decoded once into registers and used by every token of
//   the call, so the cost per weight byte grows by the integer dot products alone, not by the
//   decode (issue 19). Per token, a SIMD kernel performs exactly the same operations in the same
//   order whatever the row block and token count, so a result never depends on how rows and tokens
//   were grouped (or on the thread that ran it).
#pragma once

#include "quant/types.h"

#include <bit>
#include <cstdint>
#include <cstring>

namespace nitro::cpu {
struct WeightView;  // matmul.h
}  // namespace nitro::cpu

namespace nitro::cpu::kernels {

/// Tokens one TileFn call handles at most.
inline constexpr int kMaxTokens = 16;
/// Tokens one DotFn call handles at most.
inline constexpr int kDotMaxTokens = 4;
/// Table size: GgmlType ids are below this.
inline constexpr int kTypeSlots = 40;

/// Order of the activation quants in the SIMD image (ActRow::img). A row is cut into groups of 16
/// sub-blocks (the unit a weight scale covers: 32 values for the 32-value formats, Q4_K, Q5_K and
/// IQ4_XS; 16 values for Q2_K, Q3_K, Q6_K). A group's image is a run of "slices" of 64 bytes:
/// slice s holds, in dword lane d (bytes 4d..4d+3), values 4s..4s+3 of sub-block sub_of_lane(d).
/// A SIMD kernel decodes its weights into the same slices, so one vpdpbusd (or vpmaddubsw) per
/// slice adds 4 products of each of 16 sub-blocks into that sub-block's own int32 lane: after all
/// slices, lane d holds the exact integer dot of one sub-block, and the scales are applied once
/// per sub-block for all 16 lanes at once. AVX2 reads each group as two halves of 8 lanes
/// (bytes 32h..32h+31 of every slice), which are sub-blocks 8h..8h+7 of the group.
enum class ActOrder : uint8_t {
    None,     ///< float types: no image
    /// 32-value sub-blocks, 8 slices per group (512 values): lane d <-> sub-block
    /// 8 (d / 8) + 2 (d % 4) + (d / 4) % 2 (a 4x4 dword transpose within 128-bit lanes of the
    /// weights' quads [2q, 2q + 1, 8 + 2q, 9 + 2q] makes it). MXFP4, IQ4_NL, Q4_0, Q4_1, Q5_0,
    /// Q5_1, Q8_0, IQ4_XS, Q4_K, Q5_K.
    Slices32,
    /// 16-value sub-blocks, 4 slices per group (256 values = one super-block): lane d <-> sub-block
    /// d. Q2_K, Q3_K, Q6_K.
    Slices16,
};

/// Sub-block (0..15) of the group held by dword lane d (0..15) of a slice.
constexpr int sub_of_lane(ActOrder o, int d) {
    return o == ActOrder::Slices32 ? 8 * (d / 8) + 2 * (d % 4) + (d / 4) % 2 : d;
}
/// Lane of sub-block j of a group (inverse of sub_of_lane).
constexpr int lane_of_sub(ActOrder o, int j) {
    return o == ActOrder::Slices32 ? 8 * (j / 8) + 4 * (j % 2) + (j % 8) / 2 : j;
}

/// Where the SIMD views of one activation row lie in ActBuffer::simd (per token, `stride` bytes,
/// 64-byte aligned). Depends only on the weight type and the row length, never on the ISA, so
/// every level reads the same buffer. Per sub-block (one f32 / int32 per lane, in lane order):
/// - dx: the activation scale (Q8_0/Q8_1: the block's d; Q8_K: the super-block's d);
/// - corr: -off * (sum of the sub-block's quants), for weight types whose SIMD kernels store the
///   weights unsigned as value + off (corr_offset != 0); the kernels start the sub-block's integer
///   dot from it, so it is the exact signed dot;
/// - sx: the min term's activation factor: Q8_1's block sum s (Q4_1, Q5_1); Q8_K: d * (sum of the
///   sub-block's quants) (Q2_K, Q4_K, Q5_K).
/// Rows are padded with zero quants and zero factors to whole groups.
struct ActLayout {
    ActOrder order = ActOrder::None;
    int sub = 0;            ///< values per sub-block (32 or 16)
    int64_t n_sub = 0;      ///< sub-blocks per row, padded to a multiple of 16
    int64_t img_bytes = 0;  ///< n_sub * sub
    int32_t corr_offset = 0;
    size_t img = 0, dx = 0, corr = 0, sx = 0;  ///< byte offsets in the row; 0 = absent (img: order None)
    size_t stride = 0;
};

/// The layout for activations of weight type `w` and rows of `ne0` values.
ActLayout act_layout(GgmlType w, int64_t ne0);

/// Fills values [v0, v0 + nv) of one row's SIMD views from its vec-dot-type bytes `q` (the whole
/// row; v0 and nv on whole sub-blocks, 256-value super-blocks for Q8_K rows) into `simd` (that
/// row's `stride` bytes). Padding past ne0 is zeroed by the piece that ends the row.
void fill_act_simd(const ActLayout& l, GgmlType w, int64_t ne0, const uint8_t* q, int64_t v0, int64_t nv,
                   uint8_t* simd);

/// One activation row as the kernels see it: the vec-dot-type bytes `q`, and for Q8_0/Q8_1 rows the
/// f32 value of every block's fp16 scale (ActBuffer::block_scales; d is nullptr for other types);
/// plus the SIMD views of act_layout() (nullptr where the layout has none).
struct ActRow {
    const uint8_t* q;
    const float* d;
    const int8_t* img = nullptr;
    const float* dx = nullptr;
    const int32_t* corr = nullptr;
    const float* sx = nullptr;
};

/// out[j] = dot(weight row w, activation row a[j]) for j in [0, nt), 1 <= nt <= kDotMaxTokens;
/// n values, a multiple of the weight type's block size; a[j] in vec_dot_type(weight type).
using DotFn = void (*)(int64_t n, const uint8_t* w, const ActRow* a, int nt, float* out);

/// A block of rows against a few tokens: out[t * out_stride + r] = dot(row r, token t) for r in
/// [0, n_rows), t in [0, nt), 1 <= nt <= kMaxTokens; row r at w + r * row_bytes, n values each.
/// The kernel may read weight bytes past a row up to w_end (>= the end of the last row): a last
/// partial group of sub-blocks is decoded in place when it fits before w_end (its extra lanes are
/// dropped), else from a zero-padded copy.
struct TileArgs {
    int64_t n = 0;
    const uint8_t* w = nullptr;
    const uint8_t* w_end = nullptr;
    size_t row_bytes = 0;
    int64_t n_rows = 0;
    const ActRow* a = nullptr;
    int nt = 0;
    float* out = nullptr;
    int64_t out_stride = 0;
};
using TileFn = void (*)(const TileArgs&);

/// acc[i] += w * v[i] for n F16 values v (attention's weighted V sum).
using AxpyF16Fn = void (*)(int64_t n, float w, const uint16_t* v, float* acc);

/// The kernels of one level per weight type id: tile (SIMD quantized types) or dot (scalar level,
/// float types); nullptr where the level has none.
struct Table {
    DotFn dot[kTypeSlots] = {};
    TileFn tile[kTypeSlots] = {};
    AxpyF16Fn axpy_f16 = nullptr;
};

/// Fills the scalar reference kernels (every supported type).
void fill_scalar(Table& t);
/// Overrides the entries with AVX2+FMA+F16C kernels (vec_dot_avx2.cpp, kquants_avx2.cpp).
void fill_avx2(Table& t);
void fill_kquants_avx2(Table& t);
/// Overrides the tile entries with the AVX-VNNI build of the AVX2 kernels (vec_dot_avxvnni.cpp,
/// kquants_avxvnni.cpp: vpdpbusd on ymm), over an AVX2 table.
void fill_avxvnni(Table& t);
void fill_kquants_avxvnni(Table& t);
/// matmul_isa (matmul.h) with the kernels of `table`: for tests that build a table themselves (the
/// AVX-VNNI kernels with vpdpbusd emulated, tests/isa/avxvnni_emulated_*.cpp).
void matmul_table(const Table& table, const WeightView& w, const void* const* arows, int nt, float* out);
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
/// A weight type's kernel at one level: the tile kernel if the level has one, else the row kernel.
struct Kernel {
    TileFn tile = nullptr;
    DotFn dot = nullptr;
};
/// Rows [r0, r1) of job j with kernel k: tokens in tiles of kMaxTokens; each tile is one TileFn
/// call over the rows (or DotFn calls per row and kDotMaxTokens tokens) (matmul.cpp; the job must
/// be valid, see check_matmul_job).
void run_rows(const MatmulJob& j, const Kernel& k, int64_t r0, int64_t r1);
/// Rows [r0, r1) of several jobs of the same row count, in blocks of a few rows across the jobs
/// (rows r..r+3 of job 0, of job 1, ..., then r+4..), so each thread streams all the jobs' weights
/// together instead of switching from one matrix to the next; the same per-token operations as
/// run_rows per job (falls back to it when a job has more than one tile of tokens or there are
/// over 16 jobs).
void run_rows_interleaved(const MatmulJob* const* jobs, const Kernel* ks, int n_jobs, int64_t r0, int64_t r1);
/// The kernels' view of token t of `a` (matmul.cpp).
ActRow act_row(const ActBuffer& a, int64_t t);
/// The kernel of weight type `t` at the level matmul_batch uses (kernel_isa()); throws nitro::Error
/// for a type without one (matmul.cpp).
Kernel active_kernel(GgmlType t);
}  // namespace kernels
}  // namespace nitro::cpu
