// Matrix products of src/cuda/ops.h: GEMV, dequantize, f16 GEMM (cuBLAS), the MoE op. Numerics notes (docs/cuda.md has the full story):
//  - weights are decoded to f32 exactly as src/quant does (quant.cuh);
//  - activations are rounded to the weight's vec-dot type first, exactly as the CPU engine
//    rounds them (round_acts), when the caller gives the xr scratch (the engine always does);
//  - RMSNorm sums squares in double and RoPE computes its angles with the CPU's operation order.
#include "cuda/ops.h"

#include "cpu/matmul.h"

#include "cuda/common.cuh"
#include "cuda/pdl.cuh"
#include "cuda/mmvq.h"
#include "cuda/moe_gemm.h"
#include "cuda/moe_mmq.h"
#include "cuda/q8dot.cuh"
#include "cuda/quant.cuh"
#include "cuda/route.cuh"

#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <type_traits>
#include <vector>

namespace nitro::cuda {



bool supported_weight_type(GgmlType t) {
    switch (t) {
        case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q8_0: case GgmlType::Q4_0: case GgmlType::MXFP4:
        case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K: case GgmlType::IQ4_XS: return true;
        default: return false;
    }
}

namespace {

constexpr int kRowsPerBlock = 8;  // one warp per output row
/// GEMVs of f32 weights with at most this many rows (routers) take a block per row
/// (gemv_dense_kernel WPR = kRowsPerBlock): where a warp per row would leave most of the GPU idle.
constexpr int64_t kSplitRowsMax = 1024;
constexpr int kGemvThreads = kRowsPerBlock * kWarp;

void check_weight(const DWeight& w, const char* op) {
    if (!supported_weight_type(w.type))
        cfail("CUDA {}: weight type {} is not supported on the GPU", op, type_display_name(w.type));
    if (w.ne0 % 32 != 0) cfail("CUDA {}: rows of {} values are not a multiple of 32", op, w.ne0);
    if (type_traits(w.type).block_size == 256 && w.ne0 % 256 != 0)
        cfail("CUDA {}: {} rows of {} values are not a multiple of 256", op, type_display_name(w.type), w.ne0);
}

// ------------------------------------------------------------------------------ GEMV

template <GgmlType T, int NT>
__global__ void __launch_bounds__(kGemvThreads) gemv_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int n_rows,
                                                            int nsb, const float* __restrict__ x, int64_t ldx, int n_tok,
                                                            float* __restrict__ out, int64_t ldo,
                                                            const float* __restrict__ bias, int accumulate) {
    pdl_begin();
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int r = blockIdx.x * kRowsPerBlock + warp;
    if (r >= n_rows) return;
    const int t0 = blockIdx.y * NT;
    const uint8_t* row = W + static_cast<size_t>(r) * row_bytes;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] = 0.f;
    auto consume = [&](const float* w, int sb) {
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            if (t0 + t < n_tok) {
                const float4* xp = reinterpret_cast<const float4*>(x + (t0 + t) * ldx + sb * 32);
                float a = 0.f;
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const float4 v = xp[i];
                    a = fmaf(w[4 * i], v.x, a);
                    a = fmaf(w[4 * i + 1], v.y, a);
                    a = fmaf(w[4 * i + 2], v.z, a);
                    a = fmaf(w[4 * i + 3], v.w, a);
                }
                acc[t] += a;
            }
        }
    };
    // Two sub-blocks per lane per iteration: both weight loads are issued before either is
    // used, doubling the bytes in flight (the GEMV is bound by memory latency x parallelism).
    int sb = lane;
    for (; sb + kWarp < nsb; sb += 2 * kWarp) {
        float w0[32], w1[32];
        decode32<T>(row, sb, w0);
        decode32<T>(row, sb + kWarp, w1);
        consume(w0, sb);
        consume(w1, sb + kWarp);
    }
    if (sb < nsb) {
        float w0[32];
        decode32<T>(row, sb, w0);
        consume(w0, sb);
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        const float v = warp_sum(acc[t]);
        if (lane == 0 && t0 + t < n_tok) {
            float* o = out + (t0 + t) * ldo + r;
            const float y = v + (bias ? bias[r] : 0.f);
            *o = accumulate ? *o + y : y;
        }
    }
}

/// GEMV of unquantized weights (F16, BF16, F32): lane l reads the row's 16-byte pieces l, l + 32,
/// ... (8 or 4 values each), so a warp's loads of weights and of activations are contiguous; two
/// pieces per iteration keep two loads in flight.
template <GgmlType T>
__device__ __forceinline__ void decode16(const uint4& u, float* w) {
    if constexpr (T == GgmlType::F32) {
        w[0] = __uint_as_float(u.x); w[1] = __uint_as_float(u.y); w[2] = __uint_as_float(u.z); w[3] = __uint_as_float(u.w);
    } else {
        const uint32_t v[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            if constexpr (T == GgmlType::F16) {
                const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&v[k]));
                w[2 * k] = f.x;
                w[2 * k + 1] = f.y;
            } else {
                w[2 * k] = __uint_as_float(v[k] << 16);
                w[2 * k + 1] = __uint_as_float(v[k] & 0xFFFF0000u);
            }
        }
    }
}

/// v rounded to the precision of T's vec-dot type (F16, BF16: round to nearest even), as
/// round_acts rounds it; F32 as it is.
template <GgmlType T>
__device__ __forceinline__ float round_to_vdt(float v) {
    if constexpr (T == GgmlType::F16)
        return __half2float(__float2half_rn(v));
    else if constexpr (T == GgmlType::BF16)
        return __bfloat162float(__float2bfloat16_rn(v));
    else
        return v;
}

/// Sums of row r of a dense weight with NT tokens of x over the lane's pieces p0 + lane, + step,
/// ... (the warp sum is the caller's; step = kWarp: the warp reads the whole row). RX: x rounded to
/// the vec-dot type as it is read (round_to_vdt: the values round_acts would give, without its
/// launch).
template <GgmlType T, int NT, bool RX>
__device__ __forceinline__ void dense_row(const uint4* __restrict__ row, int n_pieces, const float* __restrict__ x,
                                          int64_t ldx, int t0, int n_tok, float (&acc)[NT], int p0 = 0, int step = kWarp) {
    constexpr int V = T == GgmlType::F32 ? 4 : 8;  // values per 16-byte piece
    const int lane = threadIdx.x % kWarp;
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] = 0.f;
    auto consume = [&](const uint4& u, int p) {
        float w[V];
        decode16<T>(u, w);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            if (t0 + t < n_tok) {
                const float4* xp = reinterpret_cast<const float4*>(x + (t0 + t) * ldx + p * V);
                float a = 0.f;
#pragma unroll
                for (int i = 0; i < V / 4; ++i) {
                    float4 v = xp[i];
                    if constexpr (RX) {
                        v.x = round_to_vdt<T>(v.x);
                        v.y = round_to_vdt<T>(v.y);
                        v.z = round_to_vdt<T>(v.z);
                        v.w = round_to_vdt<T>(v.w);
                    }
                    a = fmaf(w[4 * i], v.x, a);
                    a = fmaf(w[4 * i + 1], v.y, a);
                    a = fmaf(w[4 * i + 2], v.z, a);
                    a = fmaf(w[4 * i + 3], v.w, a);
                }
                acc[t] += a;
            }
        }
    };
    // 4 pieces in flight per lane (a 2048-value f32 router row is 16 pieces a lane: 4 round trips,
    // not 8), consumed in order as before, so the sums are the same.
    int p = p0 + lane;
    for (; p + 3 * step < n_pieces; p += 4 * step) {
        const uint4 u0 = __ldg(row + p), u1 = __ldg(row + p + step), u2 = __ldg(row + p + 2 * step),
                    u3 = __ldg(row + p + 3 * step);
        consume(u0, p);
        consume(u1, p + step);
        consume(u2, p + 2 * step);
        consume(u3, p + 3 * step);
    }
    for (; p + step < n_pieces; p += 2 * step) {
        const uint4 u0 = __ldg(row + p), u1 = __ldg(row + p + step);
        consume(u0, p);
        consume(u1, p + step);
    }
    if (p < n_pieces) consume(__ldg(row + p), p);
}

/// WPR warps per row: 1 (a warp reads a whole row; kRowsPerBlock rows a block) or kRowsPerBlock
/// (the block's warps share one row, piece p to warp (p / 32) % WPR, and their sums are added in
/// warp order: a matrix of few rows, such as a router's 128, spreads over as many blocks as rows
/// instead of rows / 8, with a quarter of the round trips to memory per lane).
template <GgmlType T, int NT, bool RX, int WPR>
__global__ void __launch_bounds__(kGemvThreads)
    gemv_dense_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int n_rows, int n_pieces, const float* __restrict__ x,
                      int64_t ldx, int n_tok, float* __restrict__ out, int64_t ldo, const float* __restrict__ bias,
                      int accumulate) {
    pdl_begin();
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int r = blockIdx.x * (kRowsPerBlock / WPR) + warp / WPR;
    const int part = warp % WPR;
    const int t0 = blockIdx.y * NT;
    float acc[NT];
    if constexpr (WPR == 1) {
        if (r >= n_rows) return;
        dense_row<T, NT, RX>(reinterpret_cast<const uint4*>(W + static_cast<size_t>(r) * row_bytes), n_pieces, x, ldx, t0,
                             n_tok, acc);
    } else {
        __shared__ float red[kRowsPerBlock][NT];
        if (r < n_rows)
            dense_row<T, NT, RX>(reinterpret_cast<const uint4*>(W + static_cast<size_t>(r) * row_bytes), n_pieces, x, ldx,
                                 t0, n_tok, acc, part * kWarp, WPR * kWarp);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            const float v = r < n_rows ? warp_sum(acc[t]) : 0.f;
            if (lane == 0) red[warp][t] = v;
        }
        __syncthreads();
        if (r >= n_rows || part != 0) return;
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            float v = 0.f;
            for (int w = 0; w < WPR; ++w) v += red[warp + w][t];
            acc[t] = v;
        }
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        const float v = WPR == 1 ? warp_sum(acc[t]) : acc[t];
        if (lane == 0 && t0 + t < n_tok) {
            float* o = out + (t0 + t) * ldo + r;
            const float y = v + (bias ? bias[r] : 0.f);
            *o = accumulate ? *o + y : y;
        }
    }
}

/// router_top_k (ops.h): block r computes logit r as gemv_dense_kernel<F32, 1, false, 8> does (the
/// same pieces per warp, the same sums in the same order); the block that finishes last (a ticket
/// from counter after its logit is visible device-wide) routes the token with warp 0.
template <int NPL>
__global__ void __launch_bounds__(kGemvThreads)
    router_top_k_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int n_pieces, const float* __restrict__ x,
                        float* logits, const float* __restrict__ logit_bias, const float* __restrict__ score_bias, int X,
                        int K, GatingSpec g, RouteOut o, uint32_t* counter) {
    pdl_begin();
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int r = blockIdx.x;
    __shared__ float red[kRowsPerBlock];
    __shared__ bool last;
    float acc[1];
    dense_row<GgmlType::F32, 1, false>(reinterpret_cast<const uint4*>(W + static_cast<size_t>(r) * row_bytes), n_pieces, x,
                                       0, 0, 1, acc, warp * kWarp, kRowsPerBlock * kWarp);
    const float v = warp_sum(acc[0]);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float y = 0.f;
        for (int w = 0; w < kRowsPerBlock; ++w) y += red[w];
        logits[r] = y;
        __threadfence();  // the logit reaches L2 before this block's ticket
        last = atomicAdd(counter, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    if (warp == 0) route_token<NPL>(logits, logit_bias, score_bias, 0, X, K, g, o);  // (route_token reads through L2)
    if (threadIdx.x == 0) *counter = 0;  // every block has taken its ticket
}

/// gemv_dense_kernel for up to kMaxDenseMulti matrices of one type on the same x, one launch
/// (outputs overwritten): grid block b belongs to matrix m for first_block[m] <= b < first_block[m + 1].
constexpr int kMaxDenseMulti = 4;
struct DenseMulti {
    const uint8_t* W[kMaxDenseMulti];
    size_t row_bytes[kMaxDenseMulti];
    int n_rows[kMaxDenseMulti];
    float* out[kMaxDenseMulti];
    int64_t ldo[kMaxDenseMulti];
    const float* bias[kMaxDenseMulti];
    int first_block[kMaxDenseMulti + 1];
    int n;
};

template <GgmlType T, int NT, bool RX>
__global__ void __launch_bounds__(kGemvThreads)
    gemv_dense_multi_kernel(const DenseMulti m, int n_pieces, const float* __restrict__ x, int64_t ldx, int n_tok) {
    pdl_begin();
    int mi = 0;
    while (mi + 1 < m.n && static_cast<int>(blockIdx.x) >= m.first_block[mi + 1]) ++mi;
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int r = (static_cast<int>(blockIdx.x) - m.first_block[mi]) * kRowsPerBlock + warp;
    if (r >= m.n_rows[mi]) return;
    const int t0 = blockIdx.y * NT;
    float acc[NT];
    dense_row<T, NT, RX>(reinterpret_cast<const uint4*>(m.W[mi] + static_cast<size_t>(r) * m.row_bytes[mi]), n_pieces, x,
                         ldx, t0, n_tok, acc);
    const float* bias = m.bias[mi];
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        const float v = warp_sum(acc[t]);
        if (lane == 0 && t0 + t < n_tok) m.out[mi][(t0 + t) * m.ldo[mi] + r] = v + (bias ? bias[r] : 0.f);
    }
}

template <GgmlType T, int NT>
void launch_gemv_dense_multi(cudaStream_t s, std::span<const MatmulTo> outs, const float* x, int64_t n_tok, int64_t ldx,
                             bool rx) {
    constexpr int V = T == GgmlType::F32 ? 4 : 8;
    DenseMulti m{};
    m.n = static_cast<int>(outs.size());
    for (int i = 0; i < m.n; ++i) {
        const MatmulTo& o = outs[static_cast<size_t>(i)];
        m.W[i] = o.w->data;
        m.row_bytes[i] = o.w->row_bytes;
        m.n_rows[i] = static_cast<int>(o.w->n_rows);
        m.out[i] = o.out;
        m.ldo[i] = o.ldo;
        m.bias[i] = o.bias;
        m.first_block[i + 1] = m.first_block[i] + ceil_div(o.w->n_rows, kRowsPerBlock);
    }
    const dim3 grid(static_cast<unsigned>(m.first_block[m.n]), ceil_div(n_tok, NT));
    auto kernel = rx ? gemv_dense_multi_kernel<T, NT, true> : gemv_dense_multi_kernel<T, NT, false>;
    launch_pdl(s, grid, kGemvThreads, 0, kernel, m, static_cast<int>(outs[0].w->ne0 / V), x, ldx, static_cast<int>(n_tok));
    NITRO_CUDA_LAUNCH_CHECK();
}

template <GgmlType T, int NT>
void launch_gemv(cudaStream_t s, const DWeight& w, const float* x, int64_t n_tok, int64_t ldx, float* out, int64_t ldo,
                 const float* bias, bool acc, bool rx) {
    dim3 grid(ceil_div(w.n_rows, kRowsPerBlock), ceil_div(n_tok, NT));
    if constexpr (T == GgmlType::F16 || T == GgmlType::BF16 || T == GgmlType::F32) {
        constexpr int V = T == GgmlType::F32 ? 4 : 8;
        // A product of few f32 rows (a router): the block's 8 warps on one row, a block per row, for
        // every token count (a row's sum must not depend on how many tokens share the launch: batch
        // rows equal their sequence alone; router_top_k's logits equal these). F16 / BF16 keep a
        // warp per row: their sums must equal gemv_dense_multi's.
        const bool split = T == GgmlType::F32 && w.n_rows <= kSplitRowsMax;
        if (split) grid.x = static_cast<unsigned>(w.n_rows);
        auto kernel = split ? (rx && T != GgmlType::F32 ? gemv_dense_kernel<T, NT, true, kRowsPerBlock>
                                                        : gemv_dense_kernel<T, NT, false, kRowsPerBlock>)
                            : (rx && T != GgmlType::F32 ? gemv_dense_kernel<T, NT, true, 1> : gemv_dense_kernel<T, NT, false, 1>);
        launch_pdl(s, grid, kGemvThreads, 0, kernel, w.data, w.row_bytes, static_cast<int>(w.n_rows),
                   static_cast<int>(w.ne0 / V), x, ldx, static_cast<int>(n_tok), out, ldo, bias, acc ? 1 : 0);
    } else {
        launch_pdl(s, grid, kGemvThreads, 0, gemv_kernel<T, NT>, w.data, w.row_bytes, static_cast<int>(w.n_rows),
                   static_cast<int>(w.ne0 / 32), x, ldx, static_cast<int>(n_tok), out, ldo, bias, acc ? 1 : 0);
    }
    NITRO_CUDA_LAUNCH_CHECK();
}

// ------------------------------------------------------------------------------ dequantize

template <GgmlType T>
__global__ void dequant_f16_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int64_t r0, int64_t n_rows, int nsb,
                                   __half* __restrict__ out) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= n_rows * nsb) return;
    const int64_t r = i / nsb;
    const int sb = static_cast<int>(i % nsb);
    float w[32];
    decode32<T>(W + static_cast<size_t>(r0 + r) * row_bytes, sb, w);
    uint4* o = reinterpret_cast<uint4*>(out + r * nsb * 32 + sb * 32);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        __half2 h[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) h[j] = __floats2half2_rn(w[8 * k + 2 * j], w[8 * k + 2 * j + 1]);
        o[k] = *reinterpret_cast<uint4*>(h);
    }
}

template <GgmlType T>
__global__ void dequant_f32_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int64_t r0, int64_t n_rows, int nsb,
                                   float* __restrict__ out) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= n_rows * nsb) return;
    const int64_t r = i / nsb;
    const int sb = static_cast<int>(i % nsb);
    float w[32];
    decode32<T>(W + static_cast<size_t>(r0 + r) * row_bytes, sb, w);
    float* o = out + r * nsb * 32 + sb * 32;
#pragma unroll
    for (int k = 0; k < 32; ++k) o[k] = w[k];
}

template <GgmlType T>
__global__ void get_rows_kernel(const uint8_t* __restrict__ W, size_t row_bytes, const int32_t* __restrict__ ids, int nsb,
                                float* __restrict__ out) {
    pdl_begin();
    const int t = blockIdx.x;
    const uint8_t* row = W + static_cast<size_t>(ids[t]) * row_bytes;
    for (int sb = threadIdx.x; sb < nsb; sb += blockDim.x) {
        float w[32];
        decode32<T>(row, sb, w);
        float* o = out + static_cast<int64_t>(t) * nsb * 32 + sb * 32;
#pragma unroll
        for (int k = 0; k < 32; ++k) o[k] = w[k];
    }
}

/// f32 rows (optionally gathered through idx) -> f16.
__global__ void to_f16_kernel(const float* __restrict__ x, int64_t ldx, const int32_t* __restrict__ idx, int64_t n_rows,
                              int64_t ne0, __half* __restrict__ out) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= n_rows * ne0) return;
    const int64_t r = i / ne0, c = i % ne0;
    const int64_t src = idx ? idx[r] : r;
    out[i] = __float2half_rn(x[src * ldx + c]);
}

/// Rounds activations to the values the CPU engine's vec-dot type holds (cpu::quantize_acts,
/// src/quant's reference quantizers, bit for bit): Q8_0 blocks of 32 (d = amax / 127 as fp16,
/// q = roundf(x / d)), Q8_K blocks of 256 (d = max / -127 as f32, q = nearest-even, clamped to 127),
/// F16 or BF16 (round to nearest even). One CTA of 256 threads per 256 values of a row; thread i
/// holds value i. OutT is float or __half (the f16 GEMM input). x and out may alias (each value is
/// read and written by the same thread, the reductions in between).
template <GgmlType VDT, typename OutT>
__global__ void __launch_bounds__(256) round_acts_kernel(const float* x, int64_t ldx, const int32_t* __restrict__ idx,
                                                         int64_t n, OutT* out, int64_t ldo) {
    pdl_begin();
    const int64_t r = blockIdx.y;
    const int64_t c = blockIdx.x * 256LL + threadIdx.x;
    const int64_t src = idx ? idx[r] : r;
    const bool in = c < n;
    const float v = in ? x[src * ldx + c] : 0.f;
    float y = v;
    if constexpr (VDT == GgmlType::Q8_0 || VDT == GgmlType::Q8_K) {
        // through an integer, as the CPU stores q in an int8: no -0.0 where q rounds to 0
        int q;
        float d;
        q8_value<VDT>(v, q, d);
        y = static_cast<float>(q) * d;
    } else if constexpr (VDT == GgmlType::F16) {
        y = __half2float(__float2half_rn(v));
    } else if constexpr (VDT == GgmlType::BF16) {
        y = __bfloat162float(__float2bfloat16_rn(v));
    }
    if (!in) return;
    if constexpr (std::is_same_v<OutT, __half>) out[r * ldo + c] = __float2half_rn(y);
    else out[r * ldo + c] = y;
}

template <typename OutT>
void launch_round_acts(cudaStream_t s, GgmlType weight, const float* x, int64_t ldx, const int32_t* idx, int64_t n_rows,
                       int64_t n, OutT* out, int64_t ldo) {
    if (n_rows <= 0) return;
    const dim3 grid(ceil_div(n, 256), static_cast<unsigned>(n_rows));
    const GgmlType vdt = cpu::vec_dot_type(weight);
    if ((vdt == GgmlType::Q8_0 && n % 32 != 0) || (vdt == GgmlType::Q8_K && n % 256 != 0))
        cfail("CUDA round_acts: rows of {} values are not whole {} blocks", n, type_display_name(vdt));
    switch (vdt) {
        case GgmlType::Q8_0:
            launch_pdl(s, grid, 256, 0, round_acts_kernel<GgmlType::Q8_0, OutT>, x, ldx, idx, n, out, ldo);
            break;
        case GgmlType::Q8_K:
            launch_pdl(s, grid, 256, 0, round_acts_kernel<GgmlType::Q8_K, OutT>, x, ldx, idx, n, out, ldo);
            break;
        case GgmlType::F16:
            launch_pdl(s, grid, 256, 0, round_acts_kernel<GgmlType::F16, OutT>, x, ldx, idx, n, out, ldo);
            break;
        case GgmlType::BF16:
            launch_pdl(s, grid, 256, 0, round_acts_kernel<GgmlType::BF16, OutT>, x, ldx, idx, n, out, ldo);
            break;
        default:
            launch_pdl(s, grid, 256, 0, round_acts_kernel<GgmlType::F32, OutT>, x, ldx, idx, n, out, ldo);
            break;
    }
    NITRO_CUDA_LAUNCH_CHECK();
}

__global__ void add_bias_kernel(float* __restrict__ out, int64_t ldo, const float* __restrict__ b, int64_t n_tok,
                                int64_t n) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= n_tok * n) return;
    out[(i / n) * ldo + i % n] += b[i % n];
}

void gemm_f16(cublasHandle_t h, const __half* W, int64_t rows, int64_t k, int64_t ldw, const __half* A, int64_t n_tok,
              float* out, int64_t ldo, bool acc) {
    const float alpha = 1.f, beta = acc ? 1.f : 0.f;
    const cublasStatus_t st =
        cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), static_cast<int>(n_tok), static_cast<int>(k),
                     &alpha, W, CUDA_R_16F, static_cast<int>(ldw), A, CUDA_R_16F, static_cast<int>(k), &beta, out,
                     CUDA_R_32F, static_cast<int>(ldo), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) {
        std::fprintf(stderr, "%s:%d: cublasGemmEx failed (%d)\n", __FILE__, __LINE__, static_cast<int>(st));
        std::abort();
    }
}

}  // namespace

void dequantize_f16(cudaStream_t s, const DWeight& w, int64_t r0, int64_t n, uint16_t* out) {
    check_weight(w, "dequantize");
    const int nsb = static_cast<int>(w.ne0 / 32);
    dispatch_type(w.type, [&]<GgmlType T>() {
        dequant_f16_kernel<T><<<ceil_div(n * nsb, 256), 256, 0, s>>>(w.data, w.row_bytes, r0, n, nsb,
                                                                      reinterpret_cast<__half*>(out));
    });
    NITRO_CUDA_LAUNCH_CHECK();
}

void dequantize_f32(cudaStream_t s, const DWeight& w, int64_t r0, int64_t n, float* out) {
    check_weight(w, "dequantize");
    const int nsb = static_cast<int>(w.ne0 / 32);
    dispatch_type(w.type, [&]<GgmlType T>() {
        dequant_f32_kernel<T><<<ceil_div(n * nsb, 256), 256, 0, s>>>(w.data, w.row_bytes, r0, n, nsb, out);
    });
    NITRO_CUDA_LAUNCH_CHECK();
}

void get_rows(cudaStream_t s, const DWeight& w, const int32_t* ids, int64_t n, float* out) {
    check_weight(w, "get_rows");
    const int nsb = static_cast<int>(w.ne0 / 32);
    dispatch_type(w.type, [&]<GgmlType T>() {
        launch_pdl(s, static_cast<unsigned>(n), 128, 0, get_rows_kernel<T>, w.data, w.row_bytes, ids, nsb, out);
    });
    NITRO_CUDA_LAUNCH_CHECK();
}

void round_acts(cudaStream_t s, GgmlType weight, const float* x, int64_t ldx, const int32_t* idx, int64_t n_rows,
                int64_t n, float* out, int64_t ldo) {
    launch_round_acts<float>(s, weight, x, ldx, idx, n_rows, n, out, ldo);
}

void matmul(cudaStream_t s, const DWeight& w, const float* x, int64_t n_tok, int64_t ldx, float* out, int64_t ldo,
            const float* bias, bool accumulate, const GemmScratch* scratch, const Q8Input* pre) {
    check_weight(w, "matmul");
    if (n_tok <= 0) return;
    const bool gemv = n_tok <= kGemvMaxTokens || !scratch || !scratch->cublas || w.type == GgmlType::F32;
    if (gemv && n_tok <= kGemvMaxTokens && scratch && scratch->xr && scratch->int8_dot && q8_supported(w.type)) {
        const Q8Acts* ready = q8_ready(pre, x, ldx, n_tok, w.type);
        const Q8Acts q =
            ready ? *ready : quantize_q8(s, w.type, x, ldx, n_tok, w.ne0, scratch->xr, scratch->xr_elems * sizeof(float));
        mmvq(s, w, q, n_tok, out, ldo, bias, accumulate);
        return;
    }
    if (!gemv && scratch->xr && scratch->int8_dot && q8_supported(w.type)) {
        // Prompt product of an 8-bit-block type: the integer GEMM (moe_mmq, one group of every row) on
        // the activations quantized by the CPU's quantizer, so prompts get the CPU engine's block sums
        // as decode does (llama.cpp's CUDA backend likewise takes MMQ for quantized weights).
        const Q8Acts* ready = q8_ready(pre, x, ldx, n_tok, w.type);
        const Q8Acts q =
            ready ? *ready : quantize_q8(s, w.type, x, ldx, n_tok, w.ne0, scratch->xr, scratch->xr_elems * sizeof(float));
        const MoeGemmGroup all{w.data, 0, n_tok};
        moe_mmq(s, w, {&all, 1}, q, nullptr, out, ldo, bias, accumulate);
        return;
    }
    const bool dense = w.type == GgmlType::F16 || w.type == GgmlType::BF16;
    bool rx = false;  // the dense GEMV rounds x as it reads it (round_to_vdt), without round_acts' launch
    if (scratch && scratch->xr && cpu::vec_dot_type(w.type) != GgmlType::F32) {
        NITRO_CUDA_ASSERT(static_cast<size_t>(n_tok * w.ne0) <= scratch->xr_elems);
        if (gemv && dense) {
            rx = true;
        } else if (gemv || w.type != GgmlType::F16) {
            round_acts(s, w.type, x, ldx, nullptr, n_tok, w.ne0, scratch->xr, w.ne0);
            x = scratch->xr;
            ldx = w.ne0;
        }  // F16 GEMM: the f16 conversion below is the rounding
    }
    if (gemv) {
        dispatch_type(w.type, [&]<GgmlType T>() {
            if (n_tok == 1)
                launch_gemv<T, 1>(s, w, x, n_tok, ldx, out, ldo, bias, accumulate, rx);
            else if (n_tok == 2)
                launch_gemv<T, 2>(s, w, x, n_tok, ldx, out, ldo, bias, accumulate, rx);
            else if (n_tok <= 4)
                launch_gemv<T, 4>(s, w, x, n_tok, ldx, out, ldo, bias, accumulate, rx);
            else
                launch_gemv<T, 8>(s, w, x, n_tok, ldx, out, ldo, bias, accumulate, rx);
        });
        return;
    }
    NITRO_CUDA_ASSERT(static_cast<size_t>(n_tok * w.ne0) <= scratch->act_elems);
    auto* act = reinterpret_cast<__half*>(scratch->act);
    to_f16_kernel<<<ceil_div(n_tok * w.ne0, 256), 256, 0, s>>>(x, ldx, nullptr, n_tok, w.ne0, act);
    NITRO_CUDA_LAUNCH_CHECK();
    if (w.type == GgmlType::F16) {
        gemm_f16(scratch->cublas, reinterpret_cast<const __half*>(w.data), w.n_rows, w.ne0,
                 static_cast<int64_t>(w.row_bytes / 2), act, n_tok, out, ldo, accumulate);
    } else {
        const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(scratch->w_elems) / w.ne0);
        NITRO_CUDA_ASSERT(chunk >= 1 && static_cast<size_t>(w.ne0) <= scratch->w_elems);
        for (int64_t r0 = 0; r0 < w.n_rows; r0 += chunk) {
            const int64_t nr = std::min(chunk, w.n_rows - r0);
            dequantize_f16(s, w, r0, nr, scratch->w);
            gemm_f16(scratch->cublas, reinterpret_cast<const __half*>(scratch->w), nr, w.ne0, w.ne0, act, n_tok, out + r0,
                     ldo, accumulate);
        }
    }
    if (bias) {
        add_bias_kernel<<<ceil_div(n_tok * w.n_rows, 256), 256, 0, s>>>(out, ldo, bias, n_tok, w.n_rows);
        NITRO_CUDA_LAUNCH_CHECK();
    }
}

bool router_top_k(cudaStream_t s, const DWeight& w, const float* x, const RouteArgs& a, const RouterHostOut* host,
                  uint32_t* counter) {
    const int64_t X = w.n_rows;
    if (w.type != GgmlType::F32 || X > kSplitRowsMax || X > 32 * kMaxExpertsPerLane || !counter || a.n != 1 || a.k < 1 ||
        a.k > 32 || a.k > X)
        return false;
    if (a.n_expert != X) cfail("router_top_k: the router has {} rows for {} experts", X, a.n_expert);
    check_weight(w, "router");
    check_route(a);
    const RouteOut o = route_out(a, host);
    with_lanes_per_expert(X, [&]<int NPL>() {
        launch_pdl(s, static_cast<unsigned>(X), kGemvThreads, 0, router_top_k_kernel<NPL>, w.data, w.row_bytes,
                   static_cast<int>(w.ne0 / 4), x, a.logits, a.logit_bias, a.score_bias, static_cast<int>(X), a.k, a.gating, o,
                   counter);
    });
    NITRO_CUDA_LAUNCH_CHECK();
    return true;
}

void matmul_same_input(cudaStream_t s, std::initializer_list<MatmulTo> outs, const float* x, int64_t n_tok, int64_t ldx,
                       const GemmScratch* scratch, const Q8Input* pre) {
    bool shared = n_tok <= kGemvMaxTokens && scratch && scratch->xr && outs.size() > 1;
    const GgmlType t0 = outs.begin()->w->type;
    for (const MatmulTo& o : outs) {
        check_weight(*o.w, "matmul");
        shared = shared && o.w->ne0 == outs.begin()->w->ne0 && cpu::vec_dot_type(o.w->type) == cpu::vec_dot_type(t0) &&
                 q8_supported(o.w->type) == q8_supported(t0);
    }
    if (shared && scratch->int8_dot && q8_supported(t0)) {
        const Q8Acts* ready = q8_ready(pre, x, ldx, n_tok, t0);
        const Q8Acts q = ready ? *ready
                               : quantize_q8(s, t0, x, ldx, n_tok, outs.begin()->w->ne0, scratch->xr,
                                             scratch->xr_elems * sizeof(float));
        bool one_type = outs.size() <= 4;
        for (const MatmulTo& o : outs) one_type = one_type && o.w->type == t0;
        if (one_type) {  // one launch for all of them
            mmvq_multi(s, std::span<const MatmulTo>(outs.begin(), outs.size()), q, n_tok);
            return;
        }
        for (const MatmulTo& o : outs) mmvq(s, *o.w, q, n_tok, o.out, o.ldo, o.bias, false);
        return;
    }
    if (shared && cpu::vec_dot_type(t0) != GgmlType::F32) {
        // rounded once into xr; the products then take it as given (the values matmul would round to)
        const int64_t ne0 = outs.begin()->w->ne0;
        NITRO_CUDA_ASSERT(static_cast<size_t>(n_tok * ne0) <= scratch->xr_elems);
        bool one_dense_type = outs.size() <= static_cast<size_t>(kMaxDenseMulti) &&
                              (t0 == GgmlType::F16 || t0 == GgmlType::BF16);
        for (const MatmulTo& o : outs) one_dense_type = one_dense_type && o.w->type == t0;
        if (one_dense_type) {  // one launch for all of them, the same arithmetic per row as matmul's GEMV
            const std::span<const MatmulTo> os(outs.begin(), outs.size());
            dispatch_type(t0, [&]<GgmlType T>() {  // x rounded as it is read (round_to_vdt), as round_acts would
                if constexpr (T == GgmlType::F16 || T == GgmlType::BF16) {
                    if (n_tok == 1)
                        launch_gemv_dense_multi<T, 1>(s, os, x, n_tok, ldx, true);
                    else if (n_tok == 2)
                        launch_gemv_dense_multi<T, 2>(s, os, x, n_tok, ldx, true);
                    else if (n_tok <= 4)
                        launch_gemv_dense_multi<T, 4>(s, os, x, n_tok, ldx, true);
                    else
                        launch_gemv_dense_multi<T, 8>(s, os, x, n_tok, ldx, true);
                }
            });
            return;
        }
        round_acts(s, t0, x, ldx, nullptr, n_tok, ne0, scratch->xr, ne0);
        for (const MatmulTo& o : outs) matmul(s, *o.w, scratch->xr, n_tok, ne0, o.out, o.ldo, o.bias, false, nullptr);
        return;
    }
    for (const MatmulTo& o : outs) matmul(s, *o.w, x, n_tok, ldx, o.out, o.ldo, o.bias, false, scratch, pre);
}

// ------------------------------------------------------------------------------ MoE

namespace {

/// Decode: gate and up rows of pair r = t*K + j (expert ids[r], in its slot) -> act[r, f].
template <GgmlType T>
__global__ void __launch_bounds__(kGemvThreads) moe_gateup_kernel(
    const uint8_t* __restrict__ gate, const uint8_t* __restrict__ up, size_t gstride, size_t ustride, size_t row_bytes,
    int F, int nsb, const int32_t* __restrict__ ids, const int32_t* __restrict__ slot_of, int K,
    const float* __restrict__ h, int64_t E, const float* __restrict__ gb, const float* __restrict__ ub, int oai,
    float* __restrict__ act) {
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int f = blockIdx.x * kRowsPerBlock + warp;
    const int r = blockIdx.y;
    if (f >= F) return;
    const int e = ids[r];
    const int slot = slot_of[e];
    if (slot < 0) return;
    const float* x = h + (r / K) * E;
    const uint8_t* gr = gate + slot * gstride + static_cast<size_t>(f) * row_bytes;
    const uint8_t* ur = up + slot * ustride + static_cast<size_t>(f) * row_bytes;
    float ag = 0.f, au = 0.f;
    for (int sb = lane; sb < nsb; sb += kWarp) {
        const float4* xp = reinterpret_cast<const float4*>(x + sb * 32);
        float xv[32];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const float4 v = xp[i];
            xv[4 * i] = v.x; xv[4 * i + 1] = v.y; xv[4 * i + 2] = v.z; xv[4 * i + 3] = v.w;
        }
        float w[32];
        decode32<T>(gr, sb, w);
        float a = 0.f;
#pragma unroll
        for (int i = 0; i < 32; ++i) a = fmaf(w[i], xv[i], a);
        ag += a;
        decode32<T>(ur, sb, w);
        a = 0.f;
#pragma unroll
        for (int i = 0; i < 32; ++i) a = fmaf(w[i], xv[i], a);
        au += a;
    }
    ag = warp_sum(ag);
    au = warp_sum(au);
    if (lane == 0) {
        if (gb) ag += gb[static_cast<int64_t>(e) * F + f];
        if (ub) au += ub[static_cast<int64_t>(e) * F + f];
        act[static_cast<int64_t>(r) * F + f] = glu(ag, au, oai);
    }
}

/// Decode: down rows of pair r -> down[r, c] (no bias: moe_combine adds it).
template <GgmlType T>
__global__ void __launch_bounds__(kGemvThreads) moe_down_kernel(const uint8_t* __restrict__ down, size_t dstride,
                                                                size_t row_bytes, int E, int nsb,
                                                                const int32_t* __restrict__ ids,
                                                                const int32_t* __restrict__ slot_of,
                                                                const float* __restrict__ act, int64_t F,
                                                                float* __restrict__ out) {
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int c = blockIdx.x * kRowsPerBlock + warp;
    const int r = blockIdx.y;
    if (c >= E) return;
    const int slot = slot_of[ids[r]];
    if (slot < 0) return;
    const float* x = act + r * F;
    const uint8_t* row = down + slot * dstride + static_cast<size_t>(c) * row_bytes;
    float acc = 0.f;
    auto consume = [&](const float* w, int sb) {
        const float4* xp = reinterpret_cast<const float4*>(x + sb * 32);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const float4 v = xp[i];
            acc = fmaf(w[4 * i], v.x, acc);
            acc = fmaf(w[4 * i + 1], v.y, acc);
            acc = fmaf(w[4 * i + 2], v.z, acc);
            acc = fmaf(w[4 * i + 3], v.w, acc);
        }
    };
    int sb = lane;
    for (; sb + kWarp < nsb; sb += 2 * kWarp) {
        float w0[32], w1[32];
        decode32<T>(row, sb, w0);
        decode32<T>(row, sb + kWarp, w1);
        consume(w0, sb);
        consume(w1, sb + kWarp);
    }
    if (sb < nsb) {
        float w0[32];
        decode32<T>(row, sb, w0);
        consume(w0, sb);
    }
    acc = warp_sum(acc);
    if (lane == 0) out[static_cast<int64_t>(r) * E + c] = acc;
}

/// x[t] += partial[t] + sum_j w[t,j] * (down[row(t,j)] + down_b[e]) over resident experts.
__global__ void moe_combine_kernel(float* __restrict__ x, const float* __restrict__ partial, const float* __restrict__ down,
                                   const int32_t* __restrict__ row_of, const float* __restrict__ down_b,
                                   const int32_t* __restrict__ ids, const float* __restrict__ w,
                                   const int32_t* __restrict__ slot_of, int K, int64_t E) {
    pdl_begin();
    const int t = blockIdx.y;
    const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (c >= E) return;
    float acc = 0.f;
    for (int j = 0; j < K; ++j) {
        const int r = t * K + j;
        const int e = ids[r];
        if (slot_of[e] < 0) continue;
        const int64_t row = row_of ? row_of[r] : r;
        float d = down[row * E + c];
        if (down_b) d += down_b[static_cast<int64_t>(e) * E + c];
        acc = fmaf(w[r], d, acc);
    }
    float* xp = x + static_cast<int64_t>(t) * E + c;
    float v = *xp + acc;
    if (partial) v += partial[static_cast<int64_t>(t) * E + c];
    *xp = v;
}

/// Prefill: activation of grouped rows g0 .. g0 + nrows - 1 (expert group_exp[g]) -> f16 (act), or
/// f32 into act32 when act is null (act32 may be gate: each value is read and written by one
/// thread). Rows of experts with slot_of[e] < 0 are skipped; slot_of null computes every row.
__global__ void moe_glu_kernel(const float* gate, const float* __restrict__ up,
                               const int32_t* __restrict__ group_exp, const int32_t* __restrict__ slot_of,
                               const float* __restrict__ gb, const float* __restrict__ ub, int oai, int64_t g0,
                               int64_t nrows, int64_t F, __half* __restrict__ act, float* act32) {
    const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (j >= nrows * F) return;
    const int64_t i = g0 * F + j;
    const int64_t g = i / F, f = i % F;
    const int e = group_exp[g];
    if (slot_of && slot_of[e] < 0) return;
    float gv = gate[i], uv = up[i];
    if (gb) gv += gb[static_cast<int64_t>(e) * F + f];
    if (ub) uv += ub[static_cast<int64_t>(e) * F + f];
    const float y = glu(gv, uv, oai);
    if (act) act[i] = __float2half_rn(y);
    else act32[i] = y;
}

/// Whether the prompt MoE takes the integer grouped GEMM (moe_mmq.h): activations rounded as the
/// CPU rounds them (scratch.gemm.xr), integer products on (GemmScratch::int8_dot), and 8-bit-block
/// types for gate / up and down. Otherwise the f16 grouped GEMM (moe_gemm.h).
bool moe_mmq_on(const ExpertSlots& ex, const MoeScratch& sc) {
    return sc.gemm.xr != nullptr && sc.gemm.int8_dot && q8_supported(ex.gate.type) && q8_supported(ex.down.type);
}

/// The 8-bit expert inputs of a prompt chunk's n tokens (quantized once per token, not per pair: the
/// integer GEMM gathers them through group_tok), in scratch.gemm.act.
Q8Acts moe_q8_input(const MoeScratch& sc, int64_t n, int64_t E) { return q8_acts_view(sc.gemm.act, n, E); }

/// The prefill MoE of one piece: grouped rows [p0, p0 + pn) (the groups' row0 relative to p0), in
/// scratch.gate / up / act rows [0, pn): grouped gate and up GEMMs from the grouped inputs, the GLU
/// (rows whose expert has slot_of < 0 skipped when slot_of is given), its rounding to the down
/// weight's vec-dot type, and the grouped down GEMM into scratch.down rows [p0, p0 + pn). Integer
/// path (moe_mmq_on): the inputs are moe_prefill_begin's 8-bit rows of the n tokens (gathered through
/// group_tok), the GLU output is quantized into a layout of the piece's pn rows in scratch.act; f16
/// path: f16 grouped rows. Every step is row-wise, so a row's result does not depend on the piece.
void moe_prefill_piece(cudaStream_t s, const ExpertSlots& ex, const MoePrefillGroups& g,
                       std::span<const MoeGemmGroup> gate, std::span<const MoeGemmGroup> up,
                       std::span<const MoeGemmGroup> down, const int32_t* slot_of, int64_t p0, int64_t pn,
                       MoeScratch& sc) {
    const int64_t F = g.F, E = g.E;
    const bool round = sc.gemm.xr != nullptr;
    float* down_out = sc.down + p0 * E;
    if (moe_mmq_on(ex, sc)) {
        const Q8Acts hq = moe_q8_input(sc, g.n, E);
        moe_mmq(s, ex.gate, gate, hq, sc.group_tok + p0, sc.gate, F);
        moe_mmq(s, ex.up, up, hq, sc.group_tok + p0, sc.up, F);
        moe_glu_kernel<<<ceil_div(pn * F, 256), 256, 0, s>>>(sc.gate, sc.up, sc.group_exp + p0, slot_of, ex.gate_b, ex.up_b,
                                                            ex.oai_act ? 1 : 0, 0, pn, F, nullptr, sc.gate);
        NITRO_CUDA_LAUNCH_CHECK();
        const Q8Acts aq = quantize_q8_part(s, ex.down.type, sc.gate, F, 0, pn, pn, F, sc.act, sc.act_bytes);
        moe_mmq(s, ex.down, down, aq, nullptr, down_out, E);
        return;
    }
    const auto* hg = reinterpret_cast<const __half*>(sc.gemm.act) + p0 * E;
    auto* act16 = reinterpret_cast<__half*>(sc.act);
    moe_gemm_f16(s, ex.gate, gate, hg, E, sc.gate, F);
    moe_gemm_f16(s, ex.up, up, hg, E, sc.up, F);
    moe_glu_kernel<<<ceil_div(pn * F, 256), 256, 0, s>>>(sc.gate, sc.up, sc.group_exp + p0, slot_of, ex.gate_b, ex.up_b,
                                                        ex.oai_act ? 1 : 0, 0, pn, F, round ? nullptr : act16, sc.gate);
    NITRO_CUDA_LAUNCH_CHECK();
    if (round) launch_round_acts<__half>(s, ex.down.type, sc.gate, F, nullptr, pn, F, act16, F);
    moe_gemm_f16(s, ex.down, down, act16, F, down_out, E);
}

/// The prefill MoE of the given groups (one entry per expert, its weights and grouped rows, all
/// inside [g0, g0 + nrows)), in pieces of at most scratch.piece_rows grouped rows (0: one piece),
/// so gate / up / act need only hold a piece (a layer-major prompt group has more rows than they
/// hold); groups are cut at piece boundaries.
void moe_prefill_groups(cudaStream_t s, const ExpertSlots& ex, const MoePrefillGroups& g,
                        std::span<const MoeGemmGroup> gate, std::span<const MoeGemmGroup> up,
                        std::span<const MoeGemmGroup> down, const int32_t* slot_of, int64_t g0, int64_t nrows,
                        MoeScratch& sc) {
    const int64_t P = sc.piece_rows > 0 ? sc.piece_rows : nrows;
    std::vector<MoeGemmGroup> pg, pu, pd;
    for (int64_t p0 = g0; p0 < g0 + nrows; p0 += P) {
        const int64_t pn = std::min(P, g0 + nrows - p0);
        pg.clear(), pu.clear(), pd.clear();
        for (size_t i = 0; i < gate.size(); ++i) {
            const int64_t a = std::max(gate[i].row0, p0), b = std::min(gate[i].row0 + gate[i].rows, p0 + pn);
            if (a >= b) continue;
            pg.push_back({gate[i].w, a - p0, b - a});
            pu.push_back({up[i].w, a - p0, b - a});
            pd.push_back({down[i].w, a - p0, b - a});
        }
        if (!pg.empty()) moe_prefill_piece(s, ex, g, pg, pu, pd, slot_of, p0, pn, sc);
    }
}

}  // namespace

void moe_experts(cudaStream_t s, const ExpertSlots& ex, const float* h, int64_t n, int64_t E, int K, const int32_t* ids,
                 const int32_t* host_ids, const int32_t* host_slot_of, MoeScratch& sc, const Q8Input* hq) {
    sc.pending_q = nullptr;  // (set again below only by the fused decode path)
    sc.pending_d = nullptr;
    const int64_t F = ex.gate.n_rows;
    check_weight(ex.gate, "moe");
    check_weight(ex.down, "moe");
    if (ex.up.type != ex.gate.type || ex.up.row_bytes != ex.gate.row_bytes)
        cfail("CUDA moe: gate and up experts must have the same type ({} vs {})", type_display_name(ex.gate.type),
             type_display_name(ex.up.type));
    const int64_t R = n * K;
    const bool decode = n <= kGemvMaxTokens;
    // Activations rounded as the CPU's experts round them (matmul's note): the expert input per
    // token, and the GLU output per (token, expert) pair.
    const bool round = sc.gemm.xr != nullptr;
    if (decode && round && sc.gemm.int8_dot && q8_supported(ex.gate.type) && q8_supported(ex.down.type)) {
        moe_decode_q8(s, ex, h, n, E, K, ids, sc, hq);
        return;
    }
    if (decode) {
        if (round) {
            NITRO_CUDA_ASSERT(static_cast<size_t>(n * E) <= sc.gemm.xr_elems);
            round_acts(s, ex.gate.type, h, E, nullptr, n, E, sc.gemm.xr, E);
            h = sc.gemm.xr;
        }
        dispatch_type(ex.gate.type, [&]<GgmlType T>() {
            moe_gateup_kernel<T><<<dim3(ceil_div(F, kRowsPerBlock), static_cast<unsigned>(R)), kGemvThreads, 0, s>>>(
                ex.gate.data, ex.up.data, ex.gate_stride, ex.up_stride, ex.gate.row_bytes, static_cast<int>(F),
                static_cast<int>(ex.gate.ne0 / 32), ids, ex.slot_of, K, h, E, ex.gate_b, ex.up_b, ex.oai_act ? 1 : 0,
                sc.act);
        });
        NITRO_CUDA_LAUNCH_CHECK();
        if (round) round_acts(s, ex.down.type, sc.act, F, nullptr, R, F, sc.act, F);
        dispatch_type(ex.down.type, [&]<GgmlType T>() {
            moe_down_kernel<T><<<dim3(ceil_div(E, kRowsPerBlock), static_cast<unsigned>(R)), kGemvThreads, 0, s>>>(
                ex.down.data, ex.down_stride, ex.down.row_bytes, static_cast<int>(E), static_cast<int>(ex.down.ne0 / 32),
                ids, ex.slot_of, sc.act, F, sc.down);
        });
        NITRO_CUDA_LAUNCH_CHECK();
        return;
    }

    if (host_ids) {  // grouped on the host (the caller has the ids there already)
        MoePrefillGroups g;
        moe_prefill_begin(s, ex, h, n, E, K, host_ids, sc, g);
        moe_prefill_resident(s, ex, g, host_slot_of, sc);
        return;
    }
    // Grouped on the device: no host round trip (the grid covers every expert's tiles at most).
    moe_group(s, ids, n, K, ex.slot_of, ex.n_expert, sc);
    const int32_t* off = sc.group_off;
    if (moe_mmq_on(ex, sc)) {
        // Integer products (moe_mmq.h): each token's input quantized once, gathered by group_tok.
        const Q8Acts hq = quantize_q8(s, ex.gate.type, h, E, n, E, sc.gemm.act, sc.gemm.act_elems * sizeof(uint16_t));
        moe_mmq_slots(s, ex.gate, ex.gate_stride, ex.slot_of, ex.n_expert, off, R, hq, sc.group_tok, sc.gate, F);
        moe_mmq_slots(s, ex.up, ex.up_stride, ex.slot_of, ex.n_expert, off, R, hq, sc.group_tok, sc.up, F);
        moe_glu_kernel<<<ceil_div(R * F, 256), 256, 0, s>>>(sc.gate, sc.up, sc.group_exp, ex.slot_of, ex.gate_b, ex.up_b,
                                                           ex.oai_act ? 1 : 0, 0, R, F, nullptr, sc.gate);
        NITRO_CUDA_LAUNCH_CHECK();
        const Q8Acts aq = quantize_q8(s, ex.down.type, sc.gate, F, R, F, sc.act, sc.act_bytes);
        moe_mmq_slots(s, ex.down, ex.down_stride, ex.slot_of, ex.n_expert, off, R, aq, nullptr, sc.down, E);
        return;
    }
    auto* hg = reinterpret_cast<__half*>(sc.gemm.act);
    auto* act16 = reinterpret_cast<__half*>(sc.act);
    NITRO_CUDA_ASSERT(static_cast<size_t>(R * E) <= sc.gemm.act_elems);
    if (round) {
        launch_round_acts<__half>(s, ex.gate.type, h, E, sc.group_tok, R, E, hg, E);
    } else {
        to_f16_kernel<<<ceil_div(R * E, 256), 256, 0, s>>>(h, E, sc.group_tok, R, E, hg);
        NITRO_CUDA_LAUNCH_CHECK();
    }
    moe_gemm_f16_slots(s, ex.gate, ex.gate_stride, ex.slot_of, ex.n_expert, off, R, hg, E, sc.gate, F);
    moe_gemm_f16_slots(s, ex.up, ex.up_stride, ex.slot_of, ex.n_expert, off, R, hg, E, sc.up, F);
    moe_glu_kernel<<<ceil_div(R * F, 256), 256, 0, s>>>(sc.gate, sc.up, sc.group_exp, ex.slot_of, ex.gate_b, ex.up_b,
                                                       ex.oai_act ? 1 : 0, 0, R, F, round ? nullptr : act16, sc.gate);
    NITRO_CUDA_LAUNCH_CHECK();
    if (round) launch_round_acts<__half>(s, ex.down.type, sc.gate, F, nullptr, R, F, act16, F);
    moe_gemm_f16_slots(s, ex.down, ex.down_stride, ex.slot_of, ex.n_expert, off, R, act16, F, sc.down, E);
}

void moe_prefill_begin(cudaStream_t s, const ExpertSlots& ex, const float* h, int64_t n, int64_t E, int K,
                       const int32_t* host_ids, MoeScratch& sc, MoePrefillGroups& g) {
    // Group (token, j) pairs by expert on the host (ids are there already): expert e's pairs are
    // grouped rows [off[e], off[e + 1]), in token order.
    const int64_t R = n * K;
    g.R = R;
    g.F = ex.gate.n_rows;
    g.E = E;
    g.off.assign(static_cast<size_t>(ex.n_expert) + 1, 0);
    for (int64_t r = 0; r < R; ++r) ++g.off[static_cast<size_t>(host_ids[r]) + 1];
    for (int64_t e = 0; e < ex.n_expert; ++e) g.off[static_cast<size_t>(e) + 1] += g.off[static_cast<size_t>(e)];
    std::vector<int64_t> fill(g.off.begin(), g.off.end() - 1);
    int32_t* group_tok = sc.host_idx;
    int32_t* group_exp = sc.host_idx + R;
    int32_t* row_of = sc.host_idx + 2 * R;
    for (int64_t r = 0; r < R; ++r) {
        const int32_t e = host_ids[r];
        const int64_t gi = fill[static_cast<size_t>(e)]++;
        group_tok[gi] = static_cast<int32_t>(r / K);
        group_exp[gi] = e;
        row_of[r] = static_cast<int32_t>(gi);
    }
    NITRO_CUDA_CHECK(cudaMemcpyAsync(sc.group_tok, group_tok, R * sizeof(int32_t), cudaMemcpyHostToDevice, s));
    NITRO_CUDA_CHECK(cudaMemcpyAsync(sc.group_exp, group_exp, R * sizeof(int32_t), cudaMemcpyHostToDevice, s));
    NITRO_CUDA_CHECK(cudaMemcpyAsync(sc.row_of, row_of, R * sizeof(int32_t), cudaMemcpyHostToDevice, s));
    g.n = n;
    if (moe_mmq_on(ex, sc)) {
        // Integer products: each token's input quantized once (moe_q8_input), gathered by group_tok.
        quantize_q8(s, ex.gate.type, h, E, n, E, sc.gemm.act, sc.gemm.act_elems * sizeof(uint16_t));
        return;
    }
    NITRO_CUDA_ASSERT(static_cast<size_t>(R * E) <= sc.gemm.act_elems);
    // The expert input of every pair, rounded as the CPU's experts round it (matmul's note), f16.
    auto* hg = reinterpret_cast<__half*>(sc.gemm.act);
    if (sc.gemm.xr) {
        launch_round_acts<__half>(s, ex.gate.type, h, E, sc.group_tok, R, E, hg, E);
    } else {
        to_f16_kernel<<<ceil_div(R * E, 256), 256, 0, s>>>(h, E, sc.group_tok, R, E, hg);
        NITRO_CUDA_LAUNCH_CHECK();
    }
}

void moe_prefill_resident(cudaStream_t s, const ExpertSlots& ex, const MoePrefillGroups& g, const int32_t* host_slot_of,
                          MoeScratch& sc) {
    std::vector<MoeGemmGroup> gate, up, down;
    for (int64_t e = 0; e < ex.n_expert; ++e) {
        const int64_t b = g.off[static_cast<size_t>(e)], c = g.off[static_cast<size_t>(e) + 1] - b;
        const int slot = host_slot_of[e];
        if (c == 0 || slot < 0) continue;
        gate.push_back({ex.gate.data + static_cast<size_t>(slot) * ex.gate_stride, b, c});
        up.push_back({ex.up.data + static_cast<size_t>(slot) * ex.up_stride, b, c});
        down.push_back({ex.down.data + static_cast<size_t>(slot) * ex.down_stride, b, c});
    }
    if (gate.empty()) return;
    const int64_t lo = gate.front().row0, hi = gate.back().row0 + gate.back().rows;  // (groups in row order)
    moe_prefill_groups(s, ex, g, gate, up, down, ex.slot_of, lo, hi - lo, sc);
}

void moe_prefill_expert(cudaStream_t s, const ExpertSlots& ex, const MoePrefillGroups& g, int e, const uint8_t* gate,
                        const uint8_t* up, const uint8_t* down, MoeScratch& sc) {
    const int64_t b = g.off[static_cast<size_t>(e)], c = g.off[static_cast<size_t>(e) + 1] - b;
    if (c == 0) return;
    // The same arithmetic as moe_prefill_resident for these rows (every step is row-wise).
    const MoeGemmGroup gg{gate, b, c}, ug{up, b, c}, dg{down, b, c};
    moe_prefill_groups(s, ex, g, {&gg, 1}, {&ug, 1}, {&dg, 1}, nullptr, b, c, sc);
}

void moe_combine(cudaStream_t s, const ExpertSlots& ex, int64_t n, int64_t E, int K, const int32_t* ids, const float* w,
                 const int32_t* host_ids, const float* partial, float* x, MoeScratch& sc) {
    (void)host_ids;  // grouped rows (row_of) for every chunk above the GEMV size, grouped on either side
    const bool decode = n <= kGemvMaxTokens;
    if (sc.pending_q) {  // moe_experts left the down product here (MoeScratch::fuse_down)
        NITRO_CUDA_ASSERT(decode);
        Q8Acts act;
        act.q = sc.pending_q;
        act.d = sc.pending_d;
        act.ne0 = ex.down.ne0;
        sc.pending_q = nullptr;
        sc.pending_d = nullptr;
        moe_down_combine_q8(s, ex, n, E, K, ids, w, act, partial, x);
        return;
    }
    launch_pdl(s, dim3(ceil_div(E, 256), static_cast<unsigned>(n)), 256, 0, moe_combine_kernel, x, partial, sc.down,
               decode ? nullptr : sc.row_of, ex.down_b, ids, w, ex.slot_of, K, E);
    NITRO_CUDA_LAUNCH_CHECK();
}

void moe_ffn(cudaStream_t s, const ExpertSlots& ex, const float* h, int64_t n, int64_t E, int K, const int32_t* ids,
             const float* w, const int32_t* host_ids, const int32_t* host_slot_of, const float* partial, float* x,
             MoeScratch& sc) {
    moe_experts(s, ex, h, n, E, K, ids, host_ids, host_slot_of, sc);
    moe_combine(s, ex, n, E, K, ids, w, host_ids, partial, x, sc);
}

}  // namespace nitro::cuda
