// Quantized matrix products on the CPU: matrix-vector (decode) and matrix-matrix (prefill), and
// the batched form the MoE layer uses for MUL_MAT_ID (only the selected experts' rows).
//
// Numerics follow llama.cpp's CPU backend (ggml-cpu type_traits_cpu[].vec_dot_type): activations
// are first converted to the weight type's "vec-dot type" (Q8_0 for Q4_0/Q4_1/Q5_x/Q8_0/MXFP4/
// IQ4_NL, Q8_K for the K-quants and IQ4_XS, F16 for F16, BF16 for BF16, F32 for F32), then each
// output is a sum over blocks of scale x integer dot product. The scalar code is the reference;
// AVX2 and AVX-512 versions are chosen at run time and are tested against it.
// Every output value is reduced by one thread in a fixed order: results are identical for any
// thread count.
#pragma once

#include "cpu/thread_pool.h"
#include "gguf/gguf.h"
#include "quant/types.h"

#include <cstddef>
#include <cstdint>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace nitro::cpu {

/// A weight matrix: n_rows rows (outputs) of ne0 values (inputs), rows `row_bytes` apart.
struct WeightView {
    GgmlType type = GgmlType::F32;
    const uint8_t* data = nullptr;
    int64_t ne0 = 0;
    int64_t n_rows = 0;
    size_t row_bytes = 0;
    /// First byte of row r.
    const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
};

/// View of a 2-D tensor [ne0, ne1]. Throws nitro::Error if the tensor is not 2-D (or 1-D).
WeightView weight_view(const GgufTensorInfo& t);
/// View of expert `e` of a 3-D expert tensor [ne0, ne1, n_expert] (ffn_*_exps).
WeightView expert_view(const GgufTensorInfo& t, int64_t e);

/// llama.cpp's vec_dot_type for a weight type. Throws nitro::Error for types without a CPU kernel.
GgmlType vec_dot_type(GgmlType weight);

/// std::allocator with 64-byte alignment (cache lines; aligned SIMD loads of activations).
template <class T>
struct Aligned64 {
    using value_type = T;
    Aligned64() = default;
    template <class U>
    Aligned64(const Aligned64<U>&) {}
    T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64})); }
    void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t{64}); }
    template <class U>
    bool operator==(const Aligned64<U>&) const { return true; }
};

/// Activations [n_tokens, ne0] converted to a vec-dot type, for one weight type.
struct ActBuffer {
    GgmlType type = GgmlType::F32;         ///< the vec-dot type
    GgmlType weight_type = GgmlType::F32;  ///< the weight type these were prepared for
    int64_t ne0 = 0;
    int64_t n_tokens = 0;
    size_t row_bytes = 0;
    std::vector<uint8_t> data;
    /// Q8_0/Q8_1 only (else empty): the f32 value of every block's fp16 scale d, [n_tokens,
    /// ne0 / 32], filled by quantize_acts so the kernels need not convert it for every weight row.
    std::vector<float> block_scales;
    /// The SIMD kernels' views of every row (src/cpu/kernels.h ActLayout, act_layout.cpp): per token
    /// `simd_stride` bytes, the quants permuted for weight_type's kernels and per-lane block scales
    /// and offsets. Derived from `data`; empty for float types.
    std::vector<uint8_t, Aligned64<uint8_t>> simd;
    size_t simd_stride = 0;
    size_t simd_dx = 0, simd_corr = 0, simd_sx = 0;  ///< offsets in a row's views (0: absent)
    /// First byte of token t's row.
    const uint8_t* row(int64_t t) const { return data.data() + static_cast<size_t>(t) * row_bytes; }
};

/// Converts x [n_tokens, ne0] (f32, row stride ne0) to vec_dot_type(weight_type) into `out`
/// (reusing its storage), and fills out.block_scales and out.simd. ne0 must be a multiple of that
/// type's block size. The bytes are exactly src/quant's reference quantizer's (nitro::quantize).
/// The buffer serves every weight type with the same vec-dot type and SIMD layout (matmul_batch
/// checks it).
void quantize_acts(const float* x, int64_t n_tokens, int64_t ne0, GgmlType weight_type, ActBuffer& out);
/// The same, with the rows cut into 1024-value pieces spread over `pool` (same bytes: blocks are
/// independent).
void quantize_acts(ThreadPool& pool, const float* x, int64_t n_tokens, int64_t ne0, GgmlType weight_type,
                   ActBuffer& out);

/// Sizes `out` for `n_tokens` rows of `ne0` activations for `weight_type` (contents undefined
/// until every piece of every row is filled by quantize_act_piece).
void act_buffer_init(ActBuffer& out, int64_t n_tokens, int64_t ne0, GgmlType weight_type);
/// Quantizes values [v0, v0 + nv) of token t's row `x_row` (ne0 floats) into `out`, sized by
/// act_buffer_init: v0 a multiple of 256, nv a multiple of 256 or reaching ne0. Pieces are
/// independent, so any split gives the bytes of quantize_acts.
void quantize_act_piece(ActBuffer& out, int64_t t, const float* x_row, int64_t v0, int64_t nv);

/// One product of a batch: for t in [0, n_tokens), r in [0, w.n_rows):
///   out[t * out_stride + r] = dot(w.row(r), acts->row(token_ids ? token_ids[t] : t)).
struct MatmulJob {
    WeightView w;
    const ActBuffer* acts = nullptr;
    const int32_t* token_ids = nullptr;
    int64_t n_tokens = 1;
    float* out = nullptr;
    int64_t out_stride = 0;
};

/// Throws nitro::Error if matmul_batch would refuse `j` (sizes, types, activation buffer).
void check_matmul_job(const MatmulJob& j);

/// Runs all jobs in one parallel region (rows of all jobs cut into one contiguous run per thread,
/// with stealing at the end), e.g. several projections of a layer at once.
void matmul_batch(ThreadPool& pool, std::span<const MatmulJob> jobs);

/// out [n_tokens, w.n_rows] = acts [n_tokens, ne0] x w^T.
void matmul(ThreadPool& pool, const WeightView& w, const ActBuffer& acts, float* out);

/// sum_i a[i] * b[i] over n F16 values, accumulated in F32 by the F16 x F16 vec-dot kernel of
/// kernel_isa() (the attention score of an F16 query against an F16 K cache row).
float dot_f16(int64_t n, const uint16_t* a, const uint16_t* b);
/// acc[i] += w * v[i] for n F16 values (the weighted sum of F16 V cache rows), kernel_isa()'s kernel.
void axpy_f16(int64_t n, float w, const uint16_t* v, float* acc);

/// Dot product of one weight row (type w, n values) with one activation row of vec_dot_type(w).
/// The scalar reference, used by tests; kernels may reassociate within a block.
float vec_dot_reference(GgmlType w, int64_t n, const void* wrow, const void* arow);

/// Name of the instruction set the kernels use on this machine ("avx512", "avxvnni", "avx2",
/// "scalar"). NITRO_ISA=scalar|avx2|avxvnni|avx512 in the environment forces a lower level (the
/// best one this CPU has at or below it; for tests); it is read once, on the first matmul.
/// "avx512" needs AVX-512 F/BW/VL/DQ and VNNI (without VNNI: AVX2); "avxvnni" needs AVX2, FMA,
/// F16C and AVX-VNNI (Alder Lake and later with AVX-512 off, Zen 5 has AVX-512).
const char* kernel_isa();

/// Switches the level every later product uses (one of available_isas(); throws nitro::Error
/// otherwise). For benchmarks that compare levels in one process: it must not be called while a
/// product runs, and kernels fetched before (dot_f16's) keep their level.
void set_kernel_isa(std::string_view isa);

/// Default software-prefetch distance of the kernels in the weight stream, bytes (3072: with the
/// tile kernels every one-token cell of the 2026-12-03 device sweep read 5-8 points more of the
/// read probe than at 1536, docs/cpu-kernels.md).
inline constexpr int64_t kDefaultPrefetchBytes = 3072;
/// Sets the distance (0 = prefetch the line being read, i.e. none ahead; at most 64 KiB). For
/// benchmarks and tuning (`nitro bench --prefetch-bytes`): not while a product runs.
void set_prefetch_bytes(int64_t bytes);
int64_t prefetch_bytes();
/// The cache level the one-token kernels prefetch their weight stream into: "t0" (L1, the default),
/// "t1" (L2), "t2", "nta" (x86 prefetch hints). Throws nitro::Error for another name. For
/// benchmarks and tuning (`nitro bench --prefetch-hint`): not while a product runs.
void set_prefetch_hint(std::string_view hint);
const char* prefetch_hint();

/// Instruction sets whose kernels this CPU can run, lowest first ("scalar", then "avx2",
/// "avxvnni", "avx512" where supported), whatever NITRO_ISA says. For tests and benchmarks.
std::vector<std::string> available_isas();

/// out[t * w.n_rows + r] = dot(w.row(r), arows[t]) for every row and t in [0, nt), 1 <= nt <= 16,
/// with the kernels of `isa` (one of available_isas(); types without a SIMD kernel at that level use
/// the next lower one), as matmul_batch runs them: one tile of tokens over the rows. The rows arows
/// are bare vec_dot_type(w.type) bytes. Throws nitro::Error for an unknown or unsupported isa or
/// type. For tests and benchmarks; matmul_batch uses kernel_isa()'s kernels.
void matmul_isa(std::string_view isa, const WeightView& w, const void* const* arows, int nt, float* out);

/// Dots of one weight row with `nt` activation rows (1 <= nt <= 16): matmul_isa on that row alone,
/// out[j] = dot(wrow, arows[j]).
void vec_dot_isa(std::string_view isa, GgmlType w, int64_t n, const void* wrow, const void* const* arows, int nt,
                 float* out);

}  // namespace nitro::cpu
