// nitro_cuda_bench MODEL.gguf [--pp N] [--tg N] [--reps N]: GPU-all prefill and decode speed of a
// model, and the kernel-level figures that explain them. Every figure printed is MEASURED on the
// device it runs on (CUDA events or steady_clock around synchronised work), with units.
//   - device-to-device copy bandwidth (read + write bytes / time): the ceiling for GEMVs;
//   - decode GEMV bandwidth per weight type (weight bytes read / kernel time) on 256 MiB
//     matrices (4x the H200's L2), one token;
//   - f16 GEMM rate of cuBLAS (tensor cores) at expert shapes, as in prefill;
//   - pp N and tg N tok/s like llama-bench (prompt from an empty context; decode from a 1-token
//     context), median of --reps runs, and kernel launches per decode step.
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/gpu_session.h"
#include "cuda/ops.h"
#include "quant/types.h"
#include "runtime/model.h"

#include <cuda_runtime.h>

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

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

template <typename F>
double time_ms(cudaStream_t s, int reps, F&& f) {
    cudaEvent_t a, b;
    NITRO_CUDA_CHECK(cudaEventCreate(&a));
    NITRO_CUDA_CHECK(cudaEventCreate(&b));
    f();  // warm-up
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
        NITRO_CUDA_CHECK(cudaEventRecord(a, s));
        f();
        NITRO_CUDA_CHECK(cudaEventRecord(b, s));
        NITRO_CUDA_CHECK(cudaEventSynchronize(b));
        float ms = 0;
        NITRO_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return median(t);
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

    // GEMV bandwidth per type
    std::mt19937 rng(1);
    std::printf("MEASURED decode GEMV (1 token, 256 MiB weight, ne0 4096): type, GB/s, %% of copy bandwidth\n");
    const GgmlType types[] = {GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::MXFP4, GgmlType::Q4_K,
                              GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_XS, GgmlType::F32};
    const int64_t ne0 = 4096;
    float* x = ctx.alloc_n<float>(ne0, "x");
    std::vector<float> hx(ne0);
    for (auto& v : hx) v = std::normal_distribution<float>()(rng);
    NITRO_CUDA_CHECK(cudaMemcpy(x, hx.data(), ne0 * 4, cudaMemcpyHostToDevice));
    for (GgmlType t : types) {
        const size_t rb = row_size(t, ne0);
        const int64_t rows = static_cast<int64_t>((256ull << 20) / rb);
        // valid blocks: quantize one random row and repeat it with varied scales is not needed for
        // timing; quantize a few distinct rows and tile them.
        std::vector<uint8_t> host(rb * 64);
        std::vector<float> f(ne0);
        for (int r = 0; r < 64; ++r) {
            for (auto& v : f) v = 0.05f * std::normal_distribution<float>()(rng);
            quantize(t, f.data(), host.data() + r * rb, ne0);
        }
        auto* d = static_cast<uint8_t*>(ctx.alloc().alloc(rb * rows, "gemv weight"));
        for (int64_t r = 0; r < rows; r += 64)
            NITRO_CUDA_CHECK(cudaMemcpy(d + r * rb, host.data(), rb * std::min<int64_t>(64, rows - r), cudaMemcpyHostToDevice));
        float* out = ctx.alloc_n<float>(static_cast<size_t>(rows), "gemv out");
        DWeight w{t, d, ne0, rows, rb};
        const double t_ms = time_ms(s, 20, [&] { matmul(s, w, x, 1, ne0, out, rows, nullptr, false, nullptr); });
        const double gbs = static_cast<double>(rb * rows) / (t_ms * 1e6);
        std::printf("  %-7s %7.0f GB/s  %5.1f %%\n", type_display_name(t).c_str(), gbs, 100.0 * gbs / copy_gbs);
        ctx.alloc().free(d);
        ctx.alloc().free(out);
    }
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

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: nitro_cuda_bench MODEL.gguf [--pp N] [--tg N] [--reps N] [--no-kernels]\n");
        return 2;
    }
    int pp = 512, tg = 128, reps = 3;
    bool kernels = true;
    for (int i = 2; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--pp" && i + 1 < argc) pp = std::atoi(argv[++i]);
        else if (a == "--tg" && i + 1 < argc) tg = std::atoi(argv[++i]);
        else if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
        else if (a == "--no-kernels") kernels = false;
    }
    try {
        if (kernels) kernel_figures();
        Model model(argv[1]);
        SessionOptions so;
        so.n_ctx = std::max(pp, tg + 1) + 16;
        so.n_ubatch = pp;
        GpuOptions go;
        using C = std::chrono::steady_clock;
        auto t0 = C::now();
        GpuSession gpu(model, so, go);
        std::printf("MEASURED load: %.1f s (%.2f GiB on the GPU)\n", std::chrono::duration<double>(C::now() - t0).count(),
                    gpu.vram_used() / 1073741824.0);
        std::mt19937 rng(7);
        std::vector<int32_t> prompt(static_cast<size_t>(pp));
        for (auto& t : prompt) t = std::uniform_int_distribution<int32_t>(0, static_cast<int32_t>(model.n_vocab()) - 1)(rng);
        std::vector<float> logits;
        std::vector<double> pps, tgs;
        for (int r = 0; r < reps + 1; ++r) {  // first run is the warm-up
            gpu.truncate(0);
            auto a = C::now();
            gpu.eval(prompt, false, logits);
            const double s_pp = std::chrono::duration<double>(C::now() - a).count();
            gpu.truncate(0);
            const int32_t first[1] = {prompt[0]};
            gpu.eval(first, false, logits);
            a = C::now();
            int32_t tok = prompt[1];
            for (int i = 0; i < tg; ++i) {
                const int32_t one[1] = {tok};
                gpu.eval(one, false, logits);
                tok = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
            }
            const double s_tg = std::chrono::duration<double>(C::now() - a).count();
            if (r > 0) {
                pps.push_back(pp / s_pp);
                tgs.push_back(tg / s_tg);
            }
        }
        std::printf("MEASURED %s GPU-all: pp%d %.1f tok/s, tg%d %.1f tok/s (median of %d), %d kernel launches per decode "
                    "token (one CUDA graph)\n",
                    model.hp().name.c_str(), pp, median(pps), tg, median(tgs), reps, gpu.launches_per_token());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
