// Kernel sandbox (issue 15): the prompt MoE's integer grouped GEMM (src/cuda/moe_mmq.h, llama.cpp's
// MMQ class) against the f16 grouped GEMM it replaces (src/cuda/moe_gemm.h).
//
//   build-cuda/tests/dev_moe_mmq [reps]
//
//   k32  the kernel in src/cuda (moe_mmq.cuh): activations quantized once (quantize_q8, the CPU's
//        quantizer), weight tiles unpacked to int8 in shared memory, one mma.sync.m16n8k32.s8 per
//        32-value block and 16 x 8 piece, block sums scaled in f32;
//   k16  the same kernel with two mma.sync.m16n8k16.s8 per block (the other fragment layout: if
//        k16 passes and k32 fails, the k32 register order is the bug);
//   f16  the grouped f16 GEMM (weights decoded to f16 in shared memory, WMMA) on the same
//        activations rounded to f16, the current library path; timed for the ratio.
//
// Check (every q8_supported type, small problems with partial tiles everywhere: 70 / 5 / 33 / 1 rows
// per group, N = 96, K with a partial 256-value step for the 32-block types, activation rows
// gathered through a permutation): the CPU reference is the f64 sum over k of the weight value
// (src/quant's dequantize: d * q - m, the same int8 block values and scales) times the activation
// value q_x * d_x (the int8 values and scales quantize_q8 produced); normalised error < 2e-6 (only
// the f32 order of the scaled block sums and the weights' f32 rounding differ: ~sqrt(K/32) * 6e-8)
// and rows outside the groups untouched. Prints PASS / FAIL per check; exits non-zero on a FAIL.
// Timing (CUDA events, median of reps) at the expert shapes of gpt-oss-20b (MXFP4 2880 x 2880, 32
// experts, top-4) and qwen3-30b-a3b (Q4_K gate 768 x 2048 and down 2048 x 768, 128 experts, top-8)
// with 512 and 4,096 tokens routed evenly; TFLOP/s and the ratio to f16. Every figure printed is
// MEASURED on the GPU it runs on.
#include "core/fp16.h"
#include "cpu/matmul.h"
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/event_timing.h"
#include "cuda/mmvq.h"
#include "cuda/moe_gemm.h"
#include "cuda/moe_mmq.cuh"
#include "quant/types.h"
#include "runtime/placement.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

using namespace nitro;
using namespace nitro::cuda;

namespace {

constexpr GgmlType kTypes[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::MXFP4, GgmlType::Q4_K,
                               GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_XS};

struct Problem {
    GgmlType t;
    int64_t K, N, X;
    std::vector<int64_t> rows;  ///< grouped rows of each expert
    int64_t R = 0;              ///< grouped rows in all (+ 2 rows in no group: 0 and R - 1)
    uint8_t* pool = nullptr;    ///< X experts, N rows of K values each
    size_t row_bytes = 0, expert_bytes = 0;
    void* q8 = nullptr;         ///< quantize_q8 of the activations [R, K]
    Q8Acts a;
    int32_t* a_row = nullptr;   ///< grouped row -> activation row
    __half* a16 = nullptr;      ///< [R, K] the quantized activations as f16, grouped (the f16 path's input)
    float* out = nullptr;       ///< [R, N]
    std::vector<MoeGemmGroup> groups;
};

Problem make(DeviceContext& ctx, GgmlType t, int64_t K, int64_t N, int64_t X, std::vector<int64_t> rows, bool gather,
             std::vector<uint8_t>* host_w, std::vector<int8_t>* host_q, std::vector<float>* host_d,
             std::vector<int32_t>* host_row) {
    Problem p{t, K, N, X, std::move(rows)};
    p.R = std::accumulate(p.rows.begin(), p.rows.end(), int64_t{0}) + 2;
    p.row_bytes = row_size(t, K);
    p.expert_bytes = p.row_bytes * N;
    std::mt19937 rng(11);
    std::normal_distribution<float> nd;
    std::vector<uint8_t> w(p.expert_bytes * X);
    std::vector<float> f(static_cast<size_t>(K));
    // Small problems (the checks): every expert's rows quantized from their own random values. The
    // timing shapes (up to 128 experts x 2048 x 768): expert 0 quantized and copied to the others
    // (the reference quantizer is single-threaded and took minutes for all of them; the kernel's
    // time does not depend on the values, and each copy lies at its own address).
    const int64_t distinct = host_w ? X : 1;
    for (int64_t r = 0; r < N * distinct; ++r) {
        for (auto& v : f) v = 0.1f * nd(rng);
        quantize(t, f.data(), w.data() + r * p.row_bytes, K);
    }
    for (int64_t e = distinct; e < X; ++e)
        std::copy(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(p.expert_bytes), w.begin() + static_cast<std::ptrdiff_t>(e * p.expert_bytes));
    std::vector<float> x(static_cast<size_t>(p.R * K));
    for (auto& v : x) v = nd(rng);
    std::vector<int32_t> a_row(static_cast<size_t>(p.R));
    std::iota(a_row.begin(), a_row.end(), 0);
    if (gather) std::shuffle(a_row.begin(), a_row.end(), rng);

    p.pool = static_cast<uint8_t*>(ctx.alloc().alloc(w.size(), "pool"));
    NITRO_CUDA_CHECK(cudaMemcpy(p.pool, w.data(), w.size(), cudaMemcpyHostToDevice));
    float* dx = ctx.alloc_n<float>(x.size(), "x");
    NITRO_CUDA_CHECK(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    const size_t qbytes = q8_act_bytes(p.R, K);
    p.q8 = ctx.alloc().alloc(qbytes, "q8");
    p.a = quantize_q8(ctx.compute(), t, dx, K, p.R, K, p.q8, qbytes);
    p.a_row = ctx.alloc_n<int32_t>(a_row.size(), "a_row");
    NITRO_CUDA_CHECK(cudaMemcpy(p.a_row, a_row.data(), a_row.size() * 4, cudaMemcpyHostToDevice));
    std::vector<int8_t> q(static_cast<size_t>(p.R * K));
    std::vector<float> d(static_cast<size_t>(p.R * (K / 32)));
    NITRO_CUDA_CHECK(cudaMemcpy(q.data(), p.a.q, q.size(), cudaMemcpyDeviceToHost));
    NITRO_CUDA_CHECK(cudaMemcpy(d.data(), p.a.d, d.size() * 4, cudaMemcpyDeviceToHost));
    // the f16 path's grouped input: the same quantized values rounded to f16 (as the library's f16
    // path rounds them), gathered
    std::vector<uint16_t> a16(static_cast<size_t>(p.R * K));
    for (int64_t g = 0; g < p.R; ++g)
        for (int64_t k = 0; k < K; ++k) {
            const int64_t r = a_row[static_cast<size_t>(g)];
            a16[g * K + k] = f32_to_fp16(static_cast<float>(q[r * K + k]) * d[r * (K / 32) + k / 32]);
        }
    p.a16 = reinterpret_cast<__half*>(ctx.alloc_n<uint16_t>(a16.size(), "a16"));
    NITRO_CUDA_CHECK(cudaMemcpy(p.a16, a16.data(), a16.size() * 2, cudaMemcpyHostToDevice));
    p.out = ctx.alloc_n<float>(static_cast<size_t>(p.R * N), "out");
    ctx.alloc().free(dx);
    int64_t row = 1;  // row 0 and the last row are in no group
    for (int64_t e = 0; e < X; ++e) {
        p.groups.push_back({p.pool + static_cast<size_t>(e) * p.expert_bytes, row, p.rows[static_cast<size_t>(e)]});
        row += p.rows[static_cast<size_t>(e)];
    }
    if (host_w) *host_w = std::move(w);
    if (host_q) *host_q = std::move(q);
    if (host_d) *host_d = std::move(d);
    if (host_row) *host_row = std::move(a_row);
    return p;
}

void free_problem(DeviceContext& ctx, Problem& p) {
    for (void* v : {static_cast<void*>(p.pool), p.q8, static_cast<void*>(p.a_row), static_cast<void*>(p.a16),
                    static_cast<void*>(p.out)})
        ctx.alloc().free(v);
}

/// variant: 0 = k32 (the library's moe_mmq), 1 = k16, 2 = f16 grouped GEMM.
void run(int variant, cudaStream_t s, const Problem& p) {
    const DWeight shape{p.t, p.pool, p.K, p.N, p.row_bytes};
    if (variant == 0) {
        moe_mmq(s, shape, p.groups, p.a, p.a_row, p.out, p.N);
    } else if (variant == 1) {
        using namespace moe_mmq_detail;
        GroupTable tab{};
        auto flush = [&]() {
            if (tab.n == 0) return;
            const dim3 grid(static_cast<unsigned>((p.N + kBN - 1) / kBN), static_cast<unsigned>(tab.tile0[tab.n]));
            launch<false>(s, p.t, HostGroups{tab}, grid, p.row_bytes, static_cast<int>(p.N), static_cast<int>(p.K), p.a,
                          p.a_row, p.out, p.N);
            NITRO_CUDA_LAUNCH_CHECK();
            tab.n = 0;
        };
        for (const MoeGemmGroup& g : p.groups) {
            if (g.rows <= 0) continue;
            tab.w[tab.n] = g.w;
            tab.row0[tab.n] = g.row0;
            tab.rows[tab.n] = static_cast<int32_t>(g.rows);
            tab.tile0[tab.n + 1] = tab.tile0[tab.n] + static_cast<int32_t>((g.rows + kBM - 1) / kBM);
            if (++tab.n == kMaxGroups) flush();
        }
        flush();
    } else {
        moe_gemm_f16(s, shape, p.groups, p.a16, p.K, p.out, p.N);
    }
}

/// Normalised error of the integer variant on a small problem of type t against the f64 reference;
/// untouched: whether the rows in no group kept their NaN poison.
double check(DeviceContext& ctx, int variant, GgmlType t, int64_t K, bool& untouched) {
    const int64_t N = 96;
    std::vector<uint8_t> w;
    std::vector<int8_t> q;
    std::vector<float> d;
    std::vector<int32_t> a_row;
    Problem p = make(ctx, t, K, N, 4, {70, 5, 33, 1}, true, &w, &q, &d, &a_row);
    NITRO_CUDA_CHECK(cudaMemset(p.out, 0xFF, static_cast<size_t>(p.R * N) * 4));
    run(variant, ctx.compute(), p);
    std::vector<float> got(static_cast<size_t>(p.R * N));
    NITRO_CUDA_CHECK(cudaMemcpy(got.data(), p.out, got.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<float> deq(static_cast<size_t>(K));
    double num = 0, den = 0;
    for (size_t e = 0; e < p.groups.size(); ++e)
        for (int64_t n = 0; n < N; ++n) {
            dequantize(t, w.data() + e * p.expert_bytes + n * p.row_bytes, deq.data(), K);
            for (int64_t m = 0; m < p.groups[e].rows; ++m) {
                const int64_t g = p.groups[e].row0 + m, r = a_row[static_cast<size_t>(g)];
                double ref = 0;
                for (int64_t k = 0; k < K; ++k)
                    ref += static_cast<double>(deq[k]) * (static_cast<double>(q[r * K + k]) * d[r * (K / 32) + k / 32]);
                const double diff = got[g * N + n] - ref;
                num += diff * diff;
                den += ref * ref;
            }
        }
    untouched = true;
    for (int64_t r : {int64_t{0}, p.R - 1})
        for (int64_t n = 0; n < N; ++n) untouched = untouched && std::isnan(got[r * N + n]);
    free_problem(ctx, p);
    return std::sqrt(num / den);
}


}  // namespace

int main(int argc, char** argv) {
    const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 10;
    try {
        DeviceContext ctx(0, 0.0);
        cudaStream_t s = ctx.compute();
        std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines as they come (the device call may stop it)
        std::printf("device: %s\n", ctx.describe().c_str());
        bool ok = true;
        for (GgmlType t : kTypes) {
            const bool kq = cpu::vec_dot_type(t) == GgmlType::Q8_K;
            // K: whole 256-value steps, and (32-block types) a partial last step of 25 blocks
            for (int64_t K : kq ? std::vector<int64_t>{512, 768} : std::vector<int64_t>{512, 800})
                for (int v : {0, 1}) {
                    bool untouched = false;
                    const double e = check(ctx, v, t, K, untouched);
                    const bool pass = e < 2e-6 && untouched;
                    std::printf("check %s %-7s K=%4lld normalised error %.2e%s %s\n", v == 0 ? "k32" : "k16",
                                type_display_name(t).c_str(), static_cast<long long>(K), e,
                                untouched ? "" : " (rows outside the groups written)", pass ? "PASS" : "FAIL");
                    ok = ok && pass;
                }
        }
        struct Shape { const char* name; GgmlType t; int64_t K, N, X; int topk; };
        const Shape shapes[] = {{"gpt-oss-20b gate", GgmlType::MXFP4, 2880, 2880, 32, 4},
                                {"qwen3-30b-a3b gate", GgmlType::Q4_K, 2048, 768, 128, 8},
                                {"qwen3-30b-a3b down", GgmlType::Q4_K, 768, 2048, 128, 8}};
        std::printf("MEASURED TFLOP/s (median of %d; one matrix of every expert of a layer, tokens routed evenly)\n", reps);
        for (const Shape& sh : shapes)
            for (int64_t n : {512, 4096}) {
                const int64_t rows = n * sh.topk / sh.X;
                Problem p = make(ctx, sh.t, sh.K, sh.N, sh.X, std::vector<int64_t>(static_cast<size_t>(sh.X), rows), true,
                                 nullptr, nullptr, nullptr, nullptr);
                const double flop = 2.0 * static_cast<double>(sh.X * rows) * sh.N * sh.K;
                std::printf("  %-20s %5lld tokens (%4lld rows/expert):", sh.name, static_cast<long long>(n),
                            static_cast<long long>(rows));
                double ms_v[3] = {0, 0, 0};
                for (int v : {2, 0, 1}) {
                    ms_v[v] = time_ms(s, reps, [&] { run(v, s, p); });
                    std::printf("  %s %6.1f (%.3f ms)", v == 0 ? "k32" : v == 1 ? "k16" : "f16", flop / (ms_v[v] * 1e9),
                                ms_v[v]);
                }
                std::printf("  k32/f16 %.2fx\n", ms_v[2] / ms_v[0]);
                free_problem(ctx, p);
            }
        std::printf("%s\n", ok ? "ALL PASS" : "SOME CHECKS FAILED");
        return ok ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
