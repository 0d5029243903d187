// nitro_cuda_bench MODEL.gguf [--pp N] [--tg N] [--depth D1,D2,..] [--reps N] [--no-kernels]: GPU-all prefill and decode
// speed of a model, and the kernel-level figures that explain them. Every figure printed is MEASURED on the device it runs
// on (CUDA events or steady_clock around synchronised work), with units.
//   - device-to-device copy bandwidth (read + write bytes / time): the ceiling for GEMVs;
//   - decode GEMV bandwidth per weight type (weight bytes read / kernel time) on 256 MiB
//     matrices (4x the H200's L2), one token (Q4_K / Q5_K also with chunk pairs off: mmvq_pairs);
//   - the decode MoE at gpt-oss's (MXFP4) and qwen3-30b-a3b's (Q4_K) expert shapes;
//   - f16 GEMM rate of cuBLAS (tensor cores) at expert shapes;
//   - the prefill MoE's grouped GEMM (moe_gemm.h) at the expert shapes of gpt-oss and
//     qwen3-30b-a3b with 512 and 4,096 tokens, against the former way (per expert: dequantize to
//     f16, then one cuBLAS GEMM);
//   - pp N and tg N tok/s like llama-bench (prompt from an empty context; decode from a 1-token
//     context, and after each D tokens of --depth D1,D2,.. as llama-bench -d), median of --reps
//     runs, and kernel launches per decode step;
//   - with --ops: where a decode step's GPU time goes, per op of the forward pass (op_profile.h:
//     timing events inside the decode graph), with its kernel launches.
// nitro_cuda_bench MODEL.gguf --staging [--threads 4,8,16]: the ways a hybrid prompt could bring
// experts of the mapped file to the GPU (issue 14, docs/hybrid.md "Prompts"), each over distinct
// (cold) experts: CPU copy into write-combined or cached pinned buffers with memcpy or with
// non-temporal 16-byte stores, per fill team size; the host-to-device copy from each buffer kind;
// and registering each expert's pages for a direct copy (cudaHostRegister, no CPU copy).
#include "cpu/thread_pool.h"
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/event_timing.h"
#include "gpu/gpu_session.h"
#include "cuda/moe_gemm.h"
#include "cuda/mmvq.h"
#include "cuda/moe_mmq.h"
#include "gpu/op_profile.h"
#include "cuda/ops.h"
#include "quant/types.h"
#include "runtime/model.h"
#include "runtime/placement.h"

#include <cuda_runtime.h>
#include <emmintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace nitro;
using namespace nitro::cuda;

namespace {

/// The decode MoE (moe_experts, gate/up and down; no combine) at an expert shape: n_embd E,
/// n_ff_exp F, X experts all resident, K per token, 1 and 4 tokens: expert bytes read per call /
/// time, int8 dot products vs the f32 kernels on rounded activations, and for Q4_K / Q5_K the int8
/// kernels with chunk pairs off (mmvq_pairs). gpt-oss: 2880 x 2880 MXFP4, 4 of 32 (420 MB);
/// qwen3-30b-a3b: 2048 x 768 Q4_K, 8 of 128 (340 MB): both beyond the 60 MB L2.
void moe_decode_figures(DeviceContext& ctx, double copy_gbs, const char* name, int64_t E, int64_t F, int64_t X, int K,
                        GgmlType t) {
    cudaStream_t s = ctx.compute();
    const size_t rb = row_size(t, E);
    ExpertSlots ex;
    auto pool = [&](int64_t rows_per_expert, int64_t ne0) {
        const size_t bytes = row_size(t, ne0) * rows_per_expert * X;
        auto* p = static_cast<uint8_t*>(ctx.alloc().alloc(bytes, "moe pool"));
        // valid bytes: MXFP4 scale 0x37 with nibbles 7 and 3; K-quant d/dmin 0x3737 (fp16 0.45)
        NITRO_CUDA_CHECK(cudaMemsetAsync(p, 0x37, bytes, s));
        return p;
    };
    ex.gate = {t, pool(F, E), E, F, rb};
    ex.up = {t, pool(F, E), E, F, rb};
    ex.down = {t, pool(E, F), F, E, row_size(t, F)};
    ex.gate_stride = ex.up_stride = rb * F;
    ex.down_stride = row_size(t, F) * E;
    ex.n_expert = X;
    ex.oai_act = t == GgmlType::MXFP4;
    std::vector<int32_t> slots(X);
    for (int64_t e = 0; e < X; ++e) slots[e] = static_cast<int32_t>(e);
    auto* d_slots = ctx.alloc_n<int32_t>(X, "slots");
    NITRO_CUDA_CHECK(cudaMemcpy(d_slots, slots.data(), X * 4, cudaMemcpyHostToDevice));
    ex.slot_of = d_slots;
    const int64_t nmax = 4, R = nmax * K;
    MoeScratch sc;
    sc.act = ctx.alloc_n<float>(static_cast<size_t>(R * F), "act");
    sc.act_bytes = static_cast<size_t>(R * F) * sizeof(float);
    sc.down = ctx.alloc_n<float>(static_cast<size_t>(R * E), "down");
    sc.gemm.xr_elems = static_cast<size_t>(std::max<int64_t>(R * std::max(E, F), nmax * E));
    sc.gemm.xr = ctx.alloc_n<float>(sc.gemm.xr_elems, "xr");
    float* h = ctx.alloc_n<float>(static_cast<size_t>(nmax * E), "h");
    NITRO_CUDA_CHECK(cudaMemsetAsync(h, 0, nmax * E * 4, s));
    auto* ids = ctx.alloc_n<int32_t>(static_cast<size_t>(R), "ids");
    std::vector<int32_t> hid(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) hid[r] = static_cast<int32_t>((r * 7 + r / K) % X);  // distinct within a token
    NITRO_CUDA_CHECK(cudaMemcpy(ids, hid.data(), R * 4, cudaMemcpyHostToDevice));
    std::printf(
        "MEASURED decode MoE, %s expert shape (%lld x %lld %s, %d of %lld experts per token): GB/s of expert bytes\n", name,
        static_cast<long long>(E), static_cast<long long>(F), type_display_name(t).c_str(), K, static_cast<long long>(X));
    const bool pairs_apply = t == GgmlType::Q4_K || t == GgmlType::Q5_K;
    for (int64_t n : {1, 4}) {
        const double bytes = static_cast<double>(n * K) * (2.0 * rb * F + row_size(t, F) * E);
        std::printf("  %lld token(s):", static_cast<long long>(n));
        for (int mode = 0; mode < (pairs_apply ? 3 : 2); ++mode) {
            sc.gemm.int8_dot = mode > 0;
            set_mmvq_pairs(mode != 2);
            const double t_ms =
                time_ms(s, 20, [&] { moe_experts(s, ex, h, n, E, K, ids, nullptr, slots.data(), sc); });
            const double g = bytes / (t_ms * 1e6);
            std::printf("  %s %7.0f GB/s (%4.1f%%, %.1f us)",
                        mode == 0   ? "f32 rounded"
                        : mode == 1 ? "int8 dot"
                                    : "int8 pairs off",
                        g, 100.0 * g / copy_gbs, t_ms * 1e3);
        }
        set_mmvq_pairs(true);
        std::printf("\n");
    }
    for (void* p : {static_cast<void*>(const_cast<uint8_t*>(ex.gate.data)), static_cast<void*>(const_cast<uint8_t*>(ex.up.data)),
                    static_cast<void*>(const_cast<uint8_t*>(ex.down.data)), static_cast<void*>(d_slots),
                    static_cast<void*>(sc.act), static_cast<void*>(sc.down), static_cast<void*>(sc.gemm.xr),
                    static_cast<void*>(h), static_cast<void*>(ids)})
        ctx.alloc().free(p);
}

/// One matrix of the prefill MoE (the gate product) over all experts of a layer, n tokens routed
/// evenly (n * K / X rows per expert): the integer grouped GEMM (moe_mmq.h), the f16 grouped GEMM
/// (one launch, weights decoded in the main loop) and the former path (per expert: dequantize_f16 of
/// the whole matrix, then cuBLAS).
void moe_prefill_figures(DeviceContext& ctx) {
    cudaStream_t s = ctx.compute();
    struct Shape { const char* name; GgmlType t; int64_t K, N, X; int topk; };
    const Shape shapes[] = {{"gpt-oss-20b", GgmlType::MXFP4, 2880, 2880, 32, 4}, {"qwen3-30b-a3b", GgmlType::Q4_K, 2048, 768, 128, 8}};
    std::printf("MEASURED prefill MoE gate product, all experts of one layer (TFLOP/s; time per layer-matrix)\n");
    for (const Shape& sh : shapes) {
        const size_t rb = row_size(sh.t, sh.K), eb = rb * sh.N;
        auto* pool = static_cast<uint8_t*>(ctx.alloc().alloc(eb * sh.X, "moe pool"));
        // valid bytes of every type (fp16 scales 0x3737 ~ 0.45, any nibbles)
        NITRO_CUDA_CHECK(cudaMemsetAsync(pool, 0x37, eb * sh.X, s));
        for (int64_t n : {512, 4096}) {
            const int64_t R = n * sh.topk, per = R / sh.X;
            auto* a16 = ctx.alloc_n<uint16_t>(static_cast<size_t>(R * sh.K), "a16");
            float* a32 = ctx.alloc_n<float>(static_cast<size_t>(R * sh.K), "a32");
            float* out = ctx.alloc_n<float>(static_cast<size_t>(R * sh.N), "out");
            auto* w16 = ctx.alloc_n<uint16_t>(static_cast<size_t>(sh.K * sh.N), "w16");
            NITRO_CUDA_CHECK(cudaMemsetAsync(a16, 0x22, R * sh.K * 2, s));
            NITRO_CUDA_CHECK(cudaMemsetAsync(a32, 0, R * sh.K * 4, s));
            std::vector<MoeGemmGroup> groups;
            for (int64_t e = 0; e < sh.X; ++e) groups.push_back({pool + e * eb, e * per, per});
            const DWeight shape{sh.t, pool, sh.K, sh.N, rb};
            const double flop = 2.0 * static_cast<double>(R) * sh.N * sh.K;
            const double tg = time_ms(s, 10, [&] {
                moe_gemm_f16(s, shape, groups, reinterpret_cast<const __half*>(a16), sh.K, out, sh.N);
            });
            GemmScratch gs{ctx.cublas(), a16, static_cast<size_t>(R * sh.K), nullptr, 0};
            const double tf = time_ms(s, 10, [&] {
                for (int64_t e = 0; e < sh.X; ++e) {
                    dequantize_f16(s, DWeight{sh.t, pool + e * eb, sh.K, sh.N, rb}, 0, sh.N, w16);
                    const DWeight w{GgmlType::F16, reinterpret_cast<const uint8_t*>(w16), sh.K, sh.N, static_cast<size_t>(sh.K * 2)};
                    matmul(s, w, a32 + e * per * sh.K, per, sh.K, out + e * per * sh.N, sh.N, nullptr, false, &gs);
                }
            });
            // the integer grouped GEMM (moe_mmq.h, the engine's path for these types) on the same
            // activations quantized to 8-bit blocks (the quantization's time not included)
            const size_t qb = q8_act_bytes(R, sh.K);
            void* q8 = ctx.alloc().alloc(qb, "q8 acts");
            const Q8Acts qa = quantize_q8(s, sh.t, a32, sh.K, R, sh.K, q8, qb);
            const double ti = time_ms(s, 10, [&] { moe_mmq(s, shape, groups, qa, nullptr, out, sh.N); });
            std::printf("  %-14s %-6s %4lld experts x %4lld rows, %lld x %lld: integer grouped %6.1f TFLOP/s (%.3f ms)  "
                        "f16 grouped %6.1f TFLOP/s (%.3f ms)  per expert dequantize+cuBLAS %6.1f TFLOP/s (%.3f ms)  "
                        "integer/f16 %.2fx\n",
                        sh.name, type_display_name(sh.t).c_str(), static_cast<long long>(sh.X), static_cast<long long>(per),
                        static_cast<long long>(sh.N), static_cast<long long>(sh.K), flop / (ti * 1e9), ti, flop / (tg * 1e9), tg,
                        flop / (tf * 1e9), tf, tg / ti);
            for (void* p : {static_cast<void*>(a16), static_cast<void*>(a32), static_cast<void*>(out), static_cast<void*>(w16), q8})
                ctx.alloc().free(p);
        }
        ctx.alloc().free(pool);
    }
}

void kernel_figures() {
    DeviceContext ctx(0, 0.0);
    cudaStream_t s = ctx.compute();
    std::printf("device: %s\n", ctx.describe().c_str());
    // copy bandwidth
    const size_t cb = 2ull << 30;
    void* a = ctx.alloc().alloc(cb, "copy src");
    void* b = ctx.alloc().alloc(cb, "copy dst");
    NITRO_CUDA_CHECK(cudaMemsetAsync(a, 1, cb, s));
    const double ms = time_ms(s, 10, [&] { NITRO_CUDA_CHECK(cudaMemcpyAsync(b, a, cb, cudaMemcpyDeviceToDevice, s)); });
    const double copy_gbs = 2.0 * cb / (ms * 1e6);
    std::printf("MEASURED device-to-device copy: %.0f GB/s (read + write, 2 GiB, median of 10)\n", copy_gbs);
    ctx.alloc().free(a);
    ctx.alloc().free(b);

    // GEMV bandwidth per type: the f32 kernel on f32 activations (no rounding), the f32 kernel on
    // activations rounded to the vec-dot type (the engine's decode path before mmvq.h), and the
    // integer products on 8-bit activations (the engine's path now; the quantization kernel's
    // time included), for 1 and 4 tokens.
    std::mt19937 rng(1);
    std::printf("MEASURED decode GEMV (256 MiB weight, ne0 4096): GB/s of weight bytes (%% of copy bandwidth)\n");
    std::printf("  %-7s %16s %16s %16s %16s %16s\n", "type", "f32 acts 1 tok", "f32 rounded 1", "int8 dot 1", "f32 rounded 4",
                "int8 dot 4");
    const GgmlType types[] = {GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::MXFP4, GgmlType::Q4_K,
                              GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_XS, GgmlType::F32};
    const int64_t ne0 = 4096;
    float* x = ctx.alloc_n<float>(4 * ne0, "x");
    std::vector<float> hx(4 * ne0);
    for (auto& v : hx) v = std::normal_distribution<float>()(rng);
    NITRO_CUDA_CHECK(cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
    GemmScratch xs;
    xs.xr_elems = 4 * ne0;
    xs.xr = ctx.alloc_n<float>(xs.xr_elems, "xr");
    for (GgmlType t : types) {
        const size_t rb = row_size(t, ne0);
        const int64_t rows = static_cast<int64_t>((256ull << 20) / rb);
        // a few distinct quantized rows, tiled (the values do not matter for timing)
        std::vector<uint8_t> host(rb * 64);
        std::vector<float> f(ne0);
        for (int r = 0; r < 64; ++r) {
            for (auto& v : f) v = 0.05f * std::normal_distribution<float>()(rng);
            quantize(t, f.data(), host.data() + r * rb, ne0);
        }
        auto* d = static_cast<uint8_t*>(ctx.alloc().alloc(rb * rows, "gemv weight"));
        for (int64_t r = 0; r < rows; r += 64)
            NITRO_CUDA_CHECK(cudaMemcpy(d + r * rb, host.data(), rb * std::min<int64_t>(64, rows - r), cudaMemcpyHostToDevice));
        float* out = ctx.alloc_n<float>(static_cast<size_t>(4 * rows), "gemv out");
        DWeight w{t, d, ne0, rows, rb};
        auto gbs = [&](int64_t n, const GemmScratch* sc) {
            const double t_ms = time_ms(s, 20, [&] { matmul(s, w, x, n, ne0, out, rows, nullptr, false, sc); });
            return static_cast<double>(rb * rows) / (t_ms * 1e6);
        };
        auto cell = [&](double g) { std::printf(" %8.0f (%4.1f%%)", g, 100.0 * g / copy_gbs); };
        std::printf("  %-7s", type_display_name(t).c_str());
        cell(gbs(1, nullptr));
        xs.int8_dot = false;
        const double r1 = gbs(1, &xs);
        cell(r1);
        xs.int8_dot = true;
        const double i1 = gbs(1, &xs);
        cell(i1);
        xs.int8_dot = false;
        cell(gbs(4, &xs));
        xs.int8_dot = true;
        cell(gbs(4, &xs));
        if (t == GgmlType::Q4_K || t == GgmlType::Q5_K) {  // the same integer kernels, chunk pairs off
            set_mmvq_pairs(false);
            std::printf("   pairs off: int8 dot 1");
            cell(gbs(1, &xs));
            set_mmvq_pairs(true);
        }
        std::printf("\n");
        ctx.alloc().free(d);
        ctx.alloc().free(out);
    }
    moe_decode_figures(ctx, copy_gbs, "gpt-oss", 2880, 2880, 32, 4, GgmlType::MXFP4);
    moe_decode_figures(ctx, copy_gbs, "qwen3-30b-a3b", 2048, 768, 128, 8, GgmlType::Q4_K);
    moe_prefill_figures(ctx);
    ctx.alloc().free(xs.xr);
    // f16 GEMM (tensor cores via cuBLAS) at gpt-oss expert shape 2880 x 2880 with 64 and 512 tokens
    for (int64_t n : {64, 512, 4096}) {
        const int64_t M = 2880, K = 2880;
        auto* W = ctx.alloc_n<uint16_t>(static_cast<size_t>(M * K), "gemm w");
        auto* A = ctx.alloc_n<uint16_t>(static_cast<size_t>(n * K), "gemm a");
        float* C = ctx.alloc_n<float>(static_cast<size_t>(n * M), "gemm c");
        NITRO_CUDA_CHECK(cudaMemsetAsync(W, 0x11, M * K * 2, s));  // small normal f16 values, not zeros
        NITRO_CUDA_CHECK(cudaMemsetAsync(A, 0x22, n * K * 2, s));
        GemmScratch gs{ctx.cublas(), A, static_cast<size_t>(n * K), nullptr, 0};
        DWeight w{GgmlType::F16, reinterpret_cast<const uint8_t*>(W), K, M, static_cast<size_t>(K * 2)};
        float* xin = ctx.alloc_n<float>(static_cast<size_t>(n * K), "gemm x");
        NITRO_CUDA_CHECK(cudaMemsetAsync(xin, 0, n * K * 4, s));
        const double t_ms = time_ms(s, 20, [&] { matmul(s, w, xin, n, K, C, M, nullptr, false, &gs); });
        std::printf("MEASURED f16 GEMM (cuBLAS, f32 accumulate) %lld x %lld x %lld incl. f32->f16 of activations: %.1f TFLOP/s\n",
                    static_cast<long long>(n), static_cast<long long>(M), static_cast<long long>(K),
                    2.0 * n * M * K / (t_ms * 1e9));
        for (void* p : {static_cast<void*>(W), static_cast<void*>(A), static_cast<void*>(C), static_cast<void*>(xin)}) ctx.alloc().free(p);
    }
    ctx.alloc().free(x);
}

}  // namespace

/// One expert's bytes in the mapped file: its gate, up and down matrices.
struct ExpertRange {
    const uint8_t* part[3];
    size_t bytes[3];
    size_t total() const { return bytes[0] + bytes[1] + bytes[2]; }
};

/// Copies n bytes with 16-byte non-temporal stores (SSE2: every x86-64 CPU) where dst allows.
void stream_copy(uint8_t* dst, const uint8_t* src, size_t n) {
    size_t i = 0;
    while (i < n && (reinterpret_cast<uintptr_t>(dst + i) & 15) != 0) dst[i] = src[i], ++i;
    for (; i + 64 <= n; i += 64) {
        const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
        const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
        const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
    }
    for (; i < n; ++i) dst[i] = src[i];
    _mm_sfence();
}

/// Copies expert r's parts back to back into buf, each thread of the team its share of every part.
void fill_expert(cpu::ThreadPool& team, const ExpertRange& r, uint8_t* buf, int threads, bool nt) {
    team.parallel_for(threads, 1, [&](int64_t tb, int64_t te, int) {
        for (int64_t t = tb; t < te; ++t) {
            size_t off = 0;
            for (int k = 0; k < 3; ++k) {
                const size_t per = (r.bytes[k] / static_cast<size_t>(threads) + 4095) / 4096 * 4096;
                const size_t b = std::min(r.bytes[k], per * static_cast<size_t>(t));
                const size_t e = std::min(r.bytes[k], b + per);
                if (e > b) {
                    if (nt) stream_copy(buf + off + b, r.part[k] + b, e - b);
                    else std::memcpy(buf + off + b, r.part[k] + b, e - b);
                }
                off += r.bytes[k];
            }
        }
    });
}

/// GB/s of filling `buf` with each expert in turn (parts back to back) by a team of `threads`
/// (a persistent cpu::ThreadPool, as the stager's), each thread copying its share of every part.
double fill_rate(const std::vector<ExpertRange>& ex, uint8_t* buf, int threads, bool nt) {
    cpu::ThreadPool team(threads);
    const auto t0 = std::chrono::steady_clock::now();
    size_t bytes = 0;
    for (const ExpertRange& r : ex) {
        fill_expert(team, r, buf, threads, nt);
        bytes += r.total();
    }
    return static_cast<double>(bytes) / (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e9);
}

/// GB/s of the staging pipeline as gpu/prefill_stager.h runs it: each expert filled by the team
/// into one of `bufs` (round robin, after that buffer's previous copy finished) while the DMA
/// copies the previous ones into `dev` on stream s. Fill and copy share the DRAM here.
double pipeline_rate(const std::vector<ExpertRange>& ex, const std::vector<uint8_t*>& bufs, uint8_t* dev, cudaStream_t s,
                     int threads, bool nt) {
    std::vector<cudaEvent_t> done(bufs.size());
    for (auto& e : done) NITRO_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    std::vector<bool> used(bufs.size(), false);
    cpu::ThreadPool team(threads);
    const auto t0 = std::chrono::steady_clock::now();
    size_t bytes = 0;
    for (size_t i = 0; i < ex.size(); ++i) {
        const ExpertRange& r = ex[i];
        const size_t b = i % bufs.size();
        if (used[b]) NITRO_CUDA_CHECK(cudaEventSynchronize(done[b]));
        fill_expert(team, r, bufs[b], threads, nt);
        NITRO_CUDA_CHECK(cudaMemcpyAsync(dev, bufs[b], r.total(), cudaMemcpyHostToDevice, s));
        NITRO_CUDA_CHECK(cudaEventRecord(done[b], s));
        used[b] = true;
        bytes += r.total();
    }
    NITRO_CUDA_CHECK(cudaStreamSynchronize(s));
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (auto& e : done) cudaEventDestroy(e);
    return static_cast<double>(bytes) / (sec * 1e9);
}

int staging_figures(const Model& model, const std::vector<int>& threads) {
    // Distinct experts across layers, round robin, so no fill reads what an earlier one cached.
    std::vector<ExpertRange> all;
    const auto& layers = model.layers();
    const int64_t X = model.hp().n_expert;
    for (int64_t e = 0; e < X && all.size() < 4096; ++e)
        for (const auto& L : layers) {
            ExpertRange r{};
            const GgufTensorInfo* t[3] = {L[TensorId::ffn_gate_exps], L[TensorId::ffn_up_exps], L[TensorId::ffn_down_exps]};
            for (int k = 0; k < 3; ++k) {
                r.bytes[k] = row_size(t[k]->type, t[k]->ne[0]) * static_cast<size_t>(t[k]->ne[1]);
                r.part[k] = t[k]->data + static_cast<size_t>(e) * r.bytes[k];
            }
            all.push_back(r);
        }
    const size_t per = 48;  // experts per measurement (~630 MB for gpt-oss-120b)
    size_t next = 0;
    auto take = [&] {
        std::vector<ExpertRange> v;
        for (size_t i = 0; i < per; ++i) v.push_back(all[next++ % all.size()]);
        return v;
    };
    const size_t slot = all[0].total();
    uint8_t *wc = nullptr, *cached = nullptr, *dev = nullptr;
    NITRO_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&wc), slot, cudaHostAllocPortable | cudaHostAllocWriteCombined));
    NITRO_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&cached), slot, cudaHostAllocPortable));
    NITRO_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&dev), slot));
    std::printf("staging: one expert %.2f MB, %zu experts per figure, distinct and cold\n", slot / 1e6, per);
    for (int t : threads)
        for (const auto& [name, buf] : {std::pair<const char*, uint8_t*>{"write-combined", wc}, {"cached", cached}})
            for (bool nt : {false, true})
                std::printf("MEASURED fill %-14s %-10s %2d threads: %6.1f GB/s\n", name, nt ? "nt-stores" : "memcpy", t,
                            fill_rate(take(), buf, t, nt));
    cudaStream_t s = nullptr;
    NITRO_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (const auto& [name, buf] : {std::pair<const char*, uint8_t*>{"write-combined", wc}, {"cached", cached}}) {
        const double ms = time_ms(s, 5, [&] { NITRO_CUDA_CHECK(cudaMemcpyAsync(dev, buf, slot, cudaMemcpyHostToDevice, s)); });
        std::printf("MEASURED host-to-device from %-14s pinned: %6.1f GB/s\n", name, slot / (ms * 1e6));
    }
    // The pipeline (fill beside the DMA, 6 cached pinned buffers as the stager's default): does a
    // fill without reads for ownership (non-temporal stores) help once the copies share the DRAM?
    {
        auto take4 = [&] {  // 192 experts (~2.5 GB for gpt-oss-120b)
            std::vector<ExpertRange> v;
            for (int i = 0; i < 4; ++i)
                for (const ExpertRange& r : take()) v.push_back(r);
            return v;
        };
        std::vector<uint8_t*> bufs(6);
        for (auto& b : bufs) NITRO_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&b), slot, cudaHostAllocPortable));
        for (int t : threads)
            for (bool nt : {false, true})
                std::printf("MEASURED pipeline fill + copy, 6 cached buffers, %-10s %2d threads: %6.1f GB/s\n",
                            nt ? "nt-stores" : "memcpy", t, pipeline_rate(take4(), bufs, dev, s, t, nt));
        for (uint8_t* b : bufs) cudaFreeHost(b);
    }
    // Registering an expert's pages in place (read-only) and copying from them: no CPU copy.
    {
        const auto t0 = std::chrono::steady_clock::now();
        size_t bytes = 0;
        bool ok = true;
        for (const ExpertRange& r : take()) {
            for (int k = 0; k < 3 && ok; ++k) {
                // whole pages around the part
                const uintptr_t b = reinterpret_cast<uintptr_t>(r.part[k]) & ~uintptr_t{4095};
                const uintptr_t e = (reinterpret_cast<uintptr_t>(r.part[k]) + r.bytes[k] + 4095) & ~uintptr_t{4095};
                void* p = reinterpret_cast<void*>(b);
                if (cudaHostRegister(p, e - b, cudaHostRegisterReadOnly) != cudaSuccess) {
                    std::printf("cudaHostRegister refused the mapped file: %s\n", cudaGetErrorString(cudaGetLastError()));
                    ok = false;
                    break;
                }
                NITRO_CUDA_CHECK(cudaMemcpyAsync(dev, r.part[k], r.bytes[k], cudaMemcpyHostToDevice, s));
                NITRO_CUDA_CHECK(cudaStreamSynchronize(s));
                NITRO_CUDA_CHECK(cudaHostUnregister(p));
                bytes += r.bytes[k];
            }
        }
        if (ok)
            std::printf("MEASURED register + copy + unregister per part, serial: %6.1f GB/s\n",
                        bytes / (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e9));
    }
    cudaStreamDestroy(s);
    cudaFreeHost(wc);
    cudaFreeHost(cached);
    cudaFree(dev);
    return 0;
}

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: nitro_cuda_bench MODEL.gguf [--pp N] [--tg N] [--depth D1,D2,..] [--reps N] [--no-kernels] [--ops] | --staging [--threads 4,8,16]\n");
        return 2;
    }
    int pp = 512, tg = 128, reps = 3;
    std::vector<int> depths = {0};
    bool ops = false;
    bool kernels = true, staging = false;
    std::vector<int> threads = {4, 8, 16};
    for (int i = 2; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--staging") staging = true;
        if (a == "--threads" && i + 1 < argc) {
            threads.clear();
            for (const char* p = argv[++i]; *p;) {
                threads.push_back(std::max(1, std::atoi(p)));
                while (*p && *p != ',') ++p;
                if (*p == ',') ++p;
            }
        }
        if (a == "--pp" && i + 1 < argc) pp = std::atoi(argv[++i]);
        else if (a == "--tg" && i + 1 < argc) tg = std::atoi(argv[++i]);
        else if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
        else if (a == "--depth" && i + 1 < argc) {
            depths = {0};  // tg from an empty context always; then each depth of the list
            for (const char* p = argv[++i]; *p;) {
                if (const int d = std::atoi(p); d > 0) depths.push_back(d);
                while (*p && *p != ',') ++p;
                if (*p == ',') ++p;
            }
        }
        else if (a == "--no-kernels") kernels = false;
        else if (a == "--ops") ops = true;
    }
    try {
        if (staging) return staging_figures(Model(argv[1]), threads);
        if (kernels) kernel_figures();
        if (pp <= 0 || tg <= 0) return 0;  // --pp 0 / --tg 0: the kernel figures only
        Model model(argv[1]);
        SessionOptions so;
        const int max_depth = *std::max_element(depths.begin(), depths.end());
        so.n_ctx = std::max(pp, max_depth + tg + 1) + 16;
        so.n_ubatch = pp;
        GpuOptions go;
        using C = std::chrono::steady_clock;
        auto t0 = C::now();
        GpuSession gpu(model, so, go);
        std::printf("MEASURED load: %.1f s (%.2f GiB on the GPU)\n", std::chrono::duration<double>(C::now() - t0).count(),
                    gpu.vram_used() / 1073741824.0);
        std::mt19937 rng(7);
        std::vector<int32_t> prompt(static_cast<size_t>(std::max(pp, max_depth + 2)));
        for (auto& t : prompt) t = std::uniform_int_distribution<int32_t>(0, static_cast<int32_t>(model.n_vocab()) - 1)(rng);
        std::vector<float> logits;
        // tg steps from a context of d tokens (d = 0: one token, as llama-bench's tg); seconds
        auto decode_run = [&](int d) {
            gpu.truncate(0);
            const size_t ctx0 = static_cast<size_t>(std::max(1, d));
            gpu.eval(std::span<const int32_t>(prompt).first(ctx0), false, logits);
            const auto a = C::now();
            int32_t tok = prompt[ctx0];
            for (int i = 0; i < tg; ++i) {
                const int32_t one[1] = {tok};
                gpu.eval(one, false, logits);
                tok = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
            }
            return std::chrono::duration<double>(C::now() - a).count();
        };
        std::vector<double> pps;
        std::vector<std::vector<double>> tgs(depths.size());
        for (int r = 0; r < reps + 1; ++r) {  // first run is the warm-up
            gpu.truncate(0);
            auto a = C::now();
            gpu.eval(std::span<const int32_t>(prompt).first(static_cast<size_t>(pp)), false, logits);
            const double s_pp = std::chrono::duration<double>(C::now() - a).count();
            if (r > 0) pps.push_back(pp / s_pp);
            for (size_t k = 0; k < depths.size(); ++k) {
                const double s_tg = decode_run(depths[k]);
                if (r > 0) tgs[k].push_back(tg / s_tg);
            }
        }
        std::printf("MEASURED %s GPU-all: pp%d %.1f tok/s, tg%d %.1f tok/s (median of %d), %d kernel launches per decode "
                    "token (one CUDA graph, %d programmatic edges)\n",
                    model.hp().name.c_str(), pp, median_of(pps), tg, median_of(tgs[0]), reps, gpu.launches_per_token(),
                    gpu.pdl_edges_per_token());
        for (size_t k = 1; k < depths.size(); ++k)
            std::printf("MEASURED %s GPU-all: tg%d @ d%d %.1f tok/s (median of %d)\n", model.hp().name.c_str(), tg, depths[k],
                        median_of(tgs[k]), reps);
        if (ops) {  // the same decode steps once more, with timing marks between the ops
            gpu.set_op_profile(true);
            const double wall_ms = 1000.0 * decode_run(depths.back()) / tg;  // at the last depth given
            const OpProfile& p = gpu.op_profile();
            const double step = p.step_ms / static_cast<double>(p.steps);
            std::printf("MEASURED decode step by op (%lld steps with timing marks: GPU %.3f ms per step, wall %.3f ms; "
                        "an op's time runs from its first launch to the next op's, gaps included):\n",
                        static_cast<long long>(p.steps), step, wall_ms);
            std::printf("  %-14s %6s %8s %12s %8s %14s\n", "op", "calls", "kernels", "us per step", "share", "us per kernel");
            for (const OpProfile::Row& r : p.rows) {
                const double us = 1000.0 * r.ms / static_cast<double>(p.steps);
                std::printf("  %-14s %6lld %8lld %12.1f %7.1f%% %14.2f\n", r.op.c_str(), static_cast<long long>(r.calls),
                            static_cast<long long>(r.kernels), us, 100.0 * us / (1000.0 * step),
                            r.kernels > 0 ? us / static_cast<double>(r.kernels) : 0.0);
            }
            gpu.set_op_profile(false);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
