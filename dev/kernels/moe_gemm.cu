// Kernel sandbox (issue 15, in the spirit of llm.c's dev/cuda): the prompt MoE's grouped GEMM
// (src/cuda/moe_gemm.h). A CPU reference, the variants, and their timing at real expert shapes.
//
//   build-cuda/tests/dev_moe_gemm [reps]
//
//   v1  the kernel in src/cuda (moe_gemm.cuh): per 64-value step, the activation tile is copied
//       to shared memory, the weight tile decoded there, then the tensor cores multiply;
//   v2  double-buffered: while the warps multiply step s, the activations of step s + 1 travel
//       by cp.async into the other buffer and each thread decodes its weight chunk of step s + 1
//       into registers (its loads in flight during the MMAs), stored after them;
//   ref the former path: per expert, dequantize_f16 then one cuBLAS GEMM.
//
// Each variant is first checked on a small problem against an f64 product of the same f16
// operands (normalised error < 2e-5, as CudaOps' grouped GEMM test), then timed (CUDA events,
// median of reps) at the expert shapes of gpt-oss-20b (MXFP4 2880 x 2880, 32 experts, top-4) and
// qwen3-30b-a3b (Q4_K 768 x 2048, 128 experts, top-8) with 512 and 4,096 tokens routed evenly.
// Every figure printed is MEASURED on the GPU it runs on. A winner is promoted into
// src/cuda/moe_gemm.cuh, where the op-parity harness (CudaOps.*) covers it.
#include "core/fp16.h"
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/event_timing.h"
#include "cuda/moe_gemm.cuh"
#include "quant/types.h"

#include <cuda_pipeline.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

using namespace nitro;
using namespace nitro::cuda;
using namespace nitro::cuda::moe_gemm_detail;

namespace {

// ------------------------------------------------------------------------------ v2

template <GgmlType T, typename Groups>
__global__ void __launch_bounds__(kThreads, 3) moe_gemm_v2(const Groups groups, size_t row_bytes, int N, int K,
                                                           const __half* __restrict__ a, int64_t lda,
                                                           float* __restrict__ out, int64_t ldo) {
    using namespace nvcuda;
    constexpr int kTileA = kBM * kLds, kTileW = kBN * kLds;
    __shared__ __align__(128) __half smem[2 * (kTileA + kTileW)];  // 36,864 bytes; the output tile reuses it
    static_assert(kBM * kLdc * 4 <= 2 * (kTileA + kTileW) * 2);
    Tile tl;
    if (!groups.tile(static_cast<int>(blockIdx.y), tl)) return;
    const int mrows = tl.rows;
    const int n0 = static_cast<int>(blockIdx.x) * kBN;
    const __half* A = a + tl.row0 * lda;
    const int tid = static_cast<int>(threadIdx.x), warp = tid / kWarp;
    const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;
    const int wr = tid / 2, wj = tid % 2;
    const bool wrow_ok = n0 + wr < N;
    const uint8_t* wrow = tl.w + static_cast<size_t>(n0 + wr) * row_bytes;
    auto sA = [&](int b) { return smem + b * kTileA; };
    auto sW = [&](int b) { return smem + 2 * kTileA + b * kTileW; };

    auto load_a = [&](int k0, __half* dst) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int idx = tid + i * kThreads, r = idx / 8, c = (idx % 8) * 8;
            if (r < mrows && k0 + c < K) __pipeline_memcpy_async(&dst[r * kLds + c], A + static_cast<int64_t>(r) * lda + k0 + c, 16);
            else *reinterpret_cast<uint4*>(&dst[r * kLds + c]) = make_uint4(0, 0, 0, 0);
        }
        __pipeline_commit();
    };
    auto decode_w = [&](int k0, __half2 (&h)[16]) {
        const int kc = k0 / 32 + wj;
        if (wrow_ok && kc * 32 < K) {
            float w[32];
            decode32<T>(wrow, kc, w);
#pragma unroll
            for (int q = 0; q < 16; ++q) h[q] = __floats2half2_rn(w[2 * q], w[2 * q + 1]);
        } else {
#pragma unroll
            for (int q = 0; q < 16; ++q) h[q] = __floats2half2_rn(0.f, 0.f);
        }
    };
    auto store_w = [&](const __half2 (&h)[16], __half* dst) {
        uint4* d = reinterpret_cast<uint4*>(&dst[wr * kLds + wj * 32]);
#pragma unroll
        for (int q = 0; q < 4; ++q) d[q] = reinterpret_cast<const uint4*>(h)[q];
    };

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.f);
    __half2 hw[16];
    load_a(0, sA(0));
    decode_w(0, hw);
    store_w(hw, sW(0));
    __pipeline_wait_prior(0);
    __syncthreads();
    int cur = 0;
    for (int k0 = 0; k0 < K; k0 += kBK) {
        const bool more = k0 + kBK < K;
        if (more) {
            load_a(k0 + kBK, sA(cur ^ 1));
            decode_w(k0 + kBK, hw);
        }
        const __half* a_s = sA(cur);
        const __half* w_s = sW(cur);
#pragma unroll
        for (int kk = 0; kk < kBK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(fa[i], &a_s[(wm + 16 * i) * kLds + kk], kLds);
#pragma unroll
            for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], &w_s[(wn + 16 * j) * kLds + kk], kLds);
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
        if (more) store_w(hw, sW(cur ^ 1));
        __pipeline_wait_prior(0);
        __syncthreads();
        cur ^= 1;
    }
    float* sC = reinterpret_cast<float*>(smem);
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j)
            wmma::store_matrix_sync(&sC[(wm + 16 * i) * kLdc + wn + 16 * j], acc[i][j], kLdc, wmma::mem_row_major);
    __syncthreads();
    float* O = out + tl.row0 * ldo + n0;
    for (int idx = tid; idx < kBM * kBN; idx += kThreads) {
        const int r = idx / kBN, c = idx % kBN;
        if (r < mrows && n0 + c < N) O[static_cast<int64_t>(r) * ldo + c] = sC[r * kLdc + c];
    }
}

// ------------------------------------------------------------------------------ harness

struct Problem {
    GgmlType t;
    int64_t K, N, X, rows_per_expert;
    uint8_t* pool = nullptr;  // X experts, N rows of K values each
    size_t row_bytes = 0, expert_bytes = 0;
    __half* a = nullptr;      // [X * rows_per_expert, K]
    float* out = nullptr;     // [X * rows_per_expert, N]
};

GroupTable table(const Problem& p, int first, int n) {
    GroupTable tab{};
    for (int g = 0; g < n; ++g) {
        tab.w[g] = p.pool + static_cast<size_t>(first + g) * p.expert_bytes;
        tab.row0[g] = static_cast<int64_t>(first + g) * p.rows_per_expert;
        tab.rows[g] = static_cast<int32_t>(p.rows_per_expert);
        tab.tile0[g + 1] = tab.tile0[g] + static_cast<int32_t>((p.rows_per_expert + kBM - 1) / kBM);
    }
    tab.n = n;
    return tab;
}

/// Launches variant v over every expert of p (in tables of kMaxGroups).
void run(int v, cudaStream_t s, const Problem& p) {
    for (int first = 0; first < p.X; first += kMaxGroups) {
        const int n = static_cast<int>(std::min<int64_t>(kMaxGroups, p.X - first));
        const GroupTable tab = table(p, first, n);
        const dim3 grid(static_cast<unsigned>((p.N + kBN - 1) / kBN), static_cast<unsigned>(tab.tile0[n]));
        dispatch_type(p.t, [&]<GgmlType T>() {
            if (v == 1)
                moe_gemm_kernel<T, HostGroups><<<grid, kThreads, 0, s>>>(HostGroups{tab}, p.row_bytes, static_cast<int>(p.N),
                                                                       static_cast<int>(p.K), p.a, p.K, p.out, p.N);
            else
                moe_gemm_v2<T, HostGroups><<<grid, kThreads, 0, s>>>(HostGroups{tab}, p.row_bytes, static_cast<int>(p.N),
                                                                   static_cast<int>(p.K), p.a, p.K, p.out, p.N);
        });
        NITRO_CUDA_LAUNCH_CHECK();
    }
}

Problem make(DeviceContext& ctx, GgmlType t, int64_t K, int64_t N, int64_t X, int64_t rows, std::vector<uint8_t>* host_w,
             std::vector<uint16_t>* host_a) {
    Problem p{t, K, N, X, rows};
    p.row_bytes = row_size(t, K);
    p.expert_bytes = p.row_bytes * N;
    std::mt19937 rng(11);
    std::normal_distribution<float> nd;
    std::vector<uint8_t> w(p.expert_bytes * X);
    std::vector<float> f(static_cast<size_t>(K));
    for (int64_t r = 0; r < N * X; ++r) {
        for (auto& v : f) v = 0.1f * nd(rng);
        quantize(t, f.data(), w.data() + r * p.row_bytes, K);
    }
    std::vector<uint16_t> a(static_cast<size_t>(X * rows * K));
    for (auto& v : a) v = f32_to_fp16(nd(rng));
    p.pool = static_cast<uint8_t*>(ctx.alloc().alloc(w.size(), "pool"));
    p.a = reinterpret_cast<__half*>(ctx.alloc_n<uint16_t>(a.size(), "a"));
    p.out = ctx.alloc_n<float>(static_cast<size_t>(X * rows * N), "out");
    NITRO_CUDA_CHECK(cudaMemcpy(p.pool, w.data(), w.size(), cudaMemcpyHostToDevice));
    NITRO_CUDA_CHECK(cudaMemcpy(p.a, a.data(), a.size() * 2, cudaMemcpyHostToDevice));
    if (host_w) *host_w = std::move(w);
    if (host_a) *host_a = std::move(a);
    return p;
}

void free_problem(DeviceContext& ctx, Problem& p) {
    for (void* q : {static_cast<void*>(p.pool), static_cast<void*>(p.a), static_cast<void*>(p.out)}) ctx.alloc().free(q);
}

/// Normalised error of variant v on a small problem of type t against the f64 reference.
double check(DeviceContext& ctx, int v, GgmlType t) {
    const int64_t K = 512, N = 96, X = 3, rows = 70;
    std::vector<uint8_t> w;
    std::vector<uint16_t> a;
    Problem p = make(ctx, t, K, N, X, rows, &w, &a);
    NITRO_CUDA_CHECK(cudaMemset(p.out, 0xFF, static_cast<size_t>(X * rows * N) * 4));
    run(v, ctx.compute(), p);
    std::vector<float> got(static_cast<size_t>(X * rows * N));
    NITRO_CUDA_CHECK(cudaMemcpy(got.data(), p.out, got.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<float> deq(static_cast<size_t>(K));
    double num = 0, den = 0;
    for (int64_t e = 0; e < X; ++e)
        for (int64_t n = 0; n < N; ++n) {
            dequantize(t, w.data() + static_cast<size_t>(e) * p.expert_bytes + n * p.row_bytes, deq.data(), K);
            for (auto& v16 : deq) v16 = fp16_to_f32(f32_to_fp16(v16));
            for (int64_t m = 0; m < rows; ++m) {
                const int64_t r = e * rows + m;
                double ref = 0;
                for (int64_t k = 0; k < K; ++k) ref += static_cast<double>(deq[k]) * fp16_to_f32(a[r * K + k]);
                const double d = got[r * N + n] - ref;
                num += d * d;
                den += ref * ref;
            }
        }
    free_problem(ctx, p);
    return std::sqrt(num / den);
}


}  // namespace

int main(int argc, char** argv) {
    const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 10;
    try {
        DeviceContext ctx(0, 0.0);
        cudaStream_t s = ctx.compute();
        std::printf("device: %s\n", ctx.describe().c_str());
        bool ok = true;
        for (GgmlType t : {GgmlType::MXFP4, GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::IQ4_XS, GgmlType::Q6_K, GgmlType::F16})
            for (int v : {1, 2}) {
                const double e = check(ctx, v, t);
                std::printf("check v%d %-7s normalised error %.2e %s\n", v, type_display_name(t).c_str(), e, e < 2e-5 ? "ok" : "FAIL");
                ok = ok && e < 2e-5;
            }
        struct Shape { const char* name; GgmlType t; int64_t K, N, X; int topk; };
        const Shape shapes[] = {{"gpt-oss-20b gate", GgmlType::MXFP4, 2880, 2880, 32, 4},
                                {"qwen3-30b-a3b gate", GgmlType::Q4_K, 2048, 768, 128, 8},
                                {"qwen3-30b-a3b down", GgmlType::Q4_K, 768, 2048, 128, 8}};
        std::printf("MEASURED TFLOP/s (median of %d; one matrix of every expert of a layer, tokens routed evenly)\n", reps);
        for (const Shape& sh : shapes)
            for (int64_t n : {512, 4096}) {
                const int64_t rows = n * sh.topk / sh.X;
                Problem p = make(ctx, sh.t, sh.K, sh.N, sh.X, rows, nullptr, nullptr);
                const double flop = 2.0 * static_cast<double>(sh.X * rows) * sh.N * sh.K;
                std::printf("  %-20s %5lld tokens (%4lld rows/expert):", sh.name, static_cast<long long>(n),
                            static_cast<long long>(rows));
                for (int v : {1, 2}) {
                    const double ms = time_ms(s, reps, [&] { run(v, s, p); });
                    std::printf("  v%d %6.1f (%.3f ms)", v, flop / (ms * 1e9), ms);
                }
                std::printf("\n");
                free_problem(ctx, p);
            }
        return ok ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
