// Kernel sandbox (issue 15, in the spirit of llm.c's dev/cuda): prompt attention. A CPU reference,
// the variants, and their timing at the attention shapes of gpt-oss-20b and qwen3-30b-a3b.
//
//   build-cuda/tests/dev_attention [reps]
//
//   old   the per-query kernel (attention() with flash = false): one block per (KV head, query),
//         scalar dot products, every key re-read for every query;
//   flash the tensor-core flash-attention kernel in src/cuda (flash_attn.cuh, mma.sync m16n8k16,
//         fragments read with ldmatrix), the one attention() takes for prompt chunks;
//   plain the same kernel with its fragments built from plain shared loads (no ldmatrix): if plain
//         passes and flash fails, the ldmatrix addressing is wrong; if both fail, the mma fragment
//         layout or the softmax is.
//
// Each variant is first checked on small problems covering every feature (sliding window over a
// wrapped ring, sinks, GQA group sizes 1, 6, 8 and 16, a chunk after a prefix, n_q * G not a
// multiple of the 64-row tile, head_dim 64 and 128) against an f64 reference from the same f16
// Q / K / V values: every element within A (2^-11 + 4 d + 1e-5) + 1e-6, where A = sum_j w_j |v_j| /
// sum_j w_j (the f16 rounding of the probabilities costs at most 2^-11 A) and d bounds the f32
// logit error (head_dim 2^-24 scale max_j sum |q k|), and the normalised error below 1e-3
// (expected about 2^-11 / sqrt(3) = 2.8e-4). PASS / FAIL per check; exit status 1 on a FAIL.
// Then timed (CUDA events, median of reps) at 512, 4,096 and 13,000 tokens from position 0, and
// chunks of 16-128 queries after a 4,000-token prefix (where the flash path starts to win):
// TFLOP/s of the useful products (4 head_dim per query head and key in range) and flash / old.
// Every figure printed is MEASURED on the GPU it runs on.
#include "core/fp16.h"
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/event_timing.h"
#include "cuda/flash_attn.cuh"
#include "cuda/flash_attn.h"
#include "cuda/ops.h"
#include "sandbox_fill.cuh"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

using namespace nitro;
using namespace nitro::cuda;

namespace {

using sandbox::fill_f16;
using sandbox::fill_f32;

struct Shape {
    int64_t H, Hkv, hd, window, n_q, pos0, cap;
    bool sinks;
};

struct Problem {
    Shape sh;
    float* q = nullptr;
    uint16_t* kc = nullptr;
    uint16_t* vc = nullptr;
    float* sinks = nullptr;
    int32_t* pos0 = nullptr;
    float* out = nullptr;
    AttnArgs args() const {
        AttnArgs a;
        a.q = q;
        a.k_cache = kc;
        a.v_cache = vc;
        a.capacity = sh.cap;
        a.n_q = sh.n_q;
        a.n_head = sh.H;
        a.n_head_kv = sh.Hkv;
        a.head_dim = sh.hd;
        a.window = sh.window;
        a.sinks = sh.sinks ? sinks : nullptr;
        a.scale = 1.0f / std::sqrt(static_cast<float>(sh.hd));
        a.pos0 = pos0;
        a.out = out;
        return a;
    }
};

Problem alloc_problem(DeviceContext& ctx, const Shape& sh) {
    Problem p{sh};
    p.q = ctx.alloc_n<float>(static_cast<size_t>(sh.n_q * sh.H * sh.hd), "q");
    p.kc = ctx.alloc_n<uint16_t>(static_cast<size_t>(sh.cap * sh.Hkv * sh.hd), "k cache");
    p.vc = ctx.alloc_n<uint16_t>(static_cast<size_t>(sh.cap * sh.Hkv * sh.hd), "v cache");
    p.sinks = ctx.alloc_n<float>(static_cast<size_t>(sh.H), "sinks");
    p.pos0 = ctx.alloc_n<int32_t>(1, "pos0");
    p.out = ctx.alloc_n<float>(static_cast<size_t>(sh.n_q * sh.H * sh.hd), "out");
    const int32_t p0 = static_cast<int32_t>(sh.pos0);
    NITRO_CUDA_CHECK(cudaMemcpy(p.pos0, &p0, 4, cudaMemcpyHostToDevice));
    return p;
}

void free_problem(DeviceContext& ctx, Problem& p) {
    for (void* x : {static_cast<void*>(p.q), static_cast<void*>(p.kc), static_cast<void*>(p.vc), static_cast<void*>(p.sinks),
                    static_cast<void*>(p.pos0), static_cast<void*>(p.out)})
        ctx.alloc().free(x);
}

const char* kName[] = {"old", "flash", "plain"};

template <int HD>
void launch_plain(cudaStream_t s, const AttnArgs& a) {
    using namespace flash_detail;
    const int64_t G = a.n_head / a.n_head_kv;
    const dim3 grid(static_cast<unsigned>((a.n_q * G + kRows - 1) / kRows), static_cast<unsigned>(a.n_head_kv));
    auto kernel = flash_attn_kernel<HD, false>;
    NITRO_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_bytes<HD>())));
    kernel<<<grid, kThreads, smem_bytes<HD>(), s>>>(a.q, reinterpret_cast<const __half*>(a.k_cache),
                                                    reinterpret_cast<const __half*>(a.v_cache), a.capacity,
                                                    static_cast<int>(a.n_q), static_cast<int>(a.n_head),
                                                    static_cast<int>(a.n_head_kv), a.window, a.sinks, a.scale * kLog2e,
                                                    a.pos0, 1, nullptr, a.out);
    NITRO_CUDA_LAUNCH_CHECK();
}

void run(int v, cudaStream_t s, const Problem& p) {
    AttnArgs a = p.args();
    if (v == 0) {
        a.flash = false;
        attention(s, a);
    } else if (v == 1) {
        flash_attention(s, a);
    } else if (p.sh.hd == 64) {
        launch_plain<64>(s, a);
    } else {
        launch_plain<128>(s, a);
    }
}

/// Checks variant v on shape sh against the f64 reference; prints one line; true on PASS.
bool check(DeviceContext& ctx, int v, const Shape& sh, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    std::vector<float> q(static_cast<size_t>(sh.n_q * sh.H * sh.hd)), sinks(static_cast<size_t>(sh.H));
    std::vector<uint16_t> kc(static_cast<size_t>(sh.cap * sh.Hkv * sh.hd)), vc(kc.size());
    for (auto& x : q) x = nd(rng);
    for (auto& x : kc) x = f32_to_fp16(nd(rng));
    for (auto& x : vc) x = f32_to_fp16(nd(rng));
    for (auto& x : sinks) x = 3.f * nd(rng);  // some sinks dominate the row (exp(sink) >> the keys')
    Problem p = alloc_problem(ctx, sh);
    NITRO_CUDA_CHECK(cudaMemcpy(p.q, q.data(), q.size() * 4, cudaMemcpyHostToDevice));
    NITRO_CUDA_CHECK(cudaMemcpy(p.kc, kc.data(), kc.size() * 2, cudaMemcpyHostToDevice));
    NITRO_CUDA_CHECK(cudaMemcpy(p.vc, vc.data(), vc.size() * 2, cudaMemcpyHostToDevice));
    NITRO_CUDA_CHECK(cudaMemcpy(p.sinks, sinks.data(), sinks.size() * 4, cudaMemcpyHostToDevice));
    NITRO_CUDA_CHECK(cudaMemset(p.out, 0xFF, q.size() * 4));  // NaN: an unwritten element fails
    run(v, ctx.compute(), p);
    NITRO_CUDA_CHECK(cudaStreamSynchronize(ctx.compute()));
    std::vector<float> got(q.size());
    NITRO_CUDA_CHECK(cudaMemcpy(got.data(), p.out, got.size() * 4, cudaMemcpyDeviceToHost));
    free_problem(ctx, p);

    const int64_t G = sh.H / sh.Hkv, hd = sh.hd, ld = sh.Hkv * hd;
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    double num = 0, den2 = 0, worst = 0;  // worst: largest |error| / bound
    std::vector<double> qh(static_cast<size_t>(hd)), sc, acc(static_cast<size_t>(hd)), aabs(static_cast<size_t>(hd));
    for (int64_t i = 0; i < sh.n_q; ++i)
        for (int64_t h = 0; h < sh.H; ++h) {
            const int64_t kvh = h / G, pos = sh.pos0 + i;
            const int64_t lo = sh.window > 0 ? std::max<int64_t>(0, pos - sh.window + 1) : 0;
            for (int64_t d = 0; d < hd; ++d) qh[d] = fp16_to_f32(f32_to_fp16(q[(i * sh.H + h) * hd + d]));
            sc.clear();
            double m = sh.sinks ? sinks[h] : -INFINITY, qk_abs = 0;
            for (int64_t j = lo; j <= pos; ++j) {
                const uint16_t* kr = kc.data() + (j % sh.cap) * ld + kvh * hd;
                double dot = 0, da = 0;
                for (int64_t d = 0; d < hd; ++d) {
                    const double pr = qh[d] * fp16_to_f32(kr[d]);
                    dot += pr;
                    da += std::abs(pr);
                }
                qk_abs = std::max(qk_abs, da);
                sc.push_back(dot * scale);
                m = std::max(m, sc.back());
            }
            double den = sh.sinks ? std::exp(sinks[h] - m) : 0;
            std::fill(acc.begin(), acc.end(), 0.0);
            std::fill(aabs.begin(), aabs.end(), 0.0);
            for (int64_t j = lo; j <= pos; ++j) {
                const double w = std::exp(sc[j - lo] - m);
                den += w;
                const uint16_t* vr = vc.data() + (j % sh.cap) * ld + kvh * hd;
                for (int64_t d = 0; d < hd; ++d) {
                    const double vv = fp16_to_f32(vr[d]);
                    acc[d] += w * vv;
                    aabs[d] += w * std::abs(vv);
                }
            }
            const double dl = static_cast<double>(hd) * std::ldexp(1.0, -24) * scale * qk_abs;
            for (int64_t d = 0; d < hd; ++d) {
                const double ref = acc[d] / den, A = aabs[d] / den;
                const double g = got[(i * sh.H + h) * hd + d];
                const double bound = A * (std::ldexp(1.0, -11) + 4 * dl + 1e-5) + 1e-6;
                const double err = std::isfinite(g) ? std::abs(g - ref) : INFINITY;
                worst = std::max(worst, err / bound);
                num += (g - ref) * (g - ref);
                den2 += ref * ref;
            }
        }
    const double ne = std::isfinite(num) ? std::sqrt(num / den2) : INFINITY;
    const bool ok = worst <= 1.0 && ne < 1e-3;
    std::printf("check %-5s H=%3lld/%lld hd=%3lld window=%3lld n_q=%3lld pos0=%4lld cap=%4lld sinks=%d: normalised %.2e, worst error / bound %.3f %s\n",
                kName[v], static_cast<long long>(sh.H), static_cast<long long>(sh.Hkv), static_cast<long long>(sh.hd),
                static_cast<long long>(sh.window), static_cast<long long>(sh.n_q), static_cast<long long>(sh.pos0),
                static_cast<long long>(sh.cap), sh.sinks ? 1 : 0, ne, worst, ok ? "PASS" : "FAIL");
    return ok;
}


/// Useful flops of a shape: 4 hd per (query head, key in range) (Q K^T and P V).
double flops(const Shape& sh) {
    double keys = 0;
    for (int64_t i = 0; i < sh.n_q; ++i) {
        const int64_t p = sh.pos0 + i;
        keys += static_cast<double>(sh.window > 0 ? std::min(p + 1, sh.window) : p + 1);
    }
    return 4.0 * static_cast<double>(sh.hd) * static_cast<double>(sh.H) * keys;
}

void time_shape(DeviceContext& ctx, const char* name, const Shape& sh, int reps) {
    cudaStream_t s = ctx.compute();
    Problem p = alloc_problem(ctx, sh);
    const size_t nq = static_cast<size_t>(sh.n_q * sh.H * sh.hd), nk = static_cast<size_t>(sh.cap * sh.Hkv * sh.hd);
    fill_f32<<<1024, 256, 0, s>>>(p.q, nq, 1);
    fill_f16<<<1024, 256, 0, s>>>(reinterpret_cast<__half*>(p.kc), nk, 2);
    fill_f16<<<1024, 256, 0, s>>>(reinterpret_cast<__half*>(p.vc), nk, 3);
    fill_f32<<<1, 64, 0, s>>>(p.sinks, static_cast<size_t>(sh.H), 4);
    NITRO_CUDA_LAUNCH_CHECK();
    const double f = flops(sh);
    std::printf("  %-22s n_q %5lld after %4lld:", name, static_cast<long long>(sh.n_q), static_cast<long long>(sh.pos0));
    double ms[3] = {0, 0, 0};
    for (int v : {0, 1, 2}) {
        // the old kernel at 13,000 tokens takes a good part of a second: fewer repetitions
        const int r = v == 0 && sh.n_q * (sh.pos0 + sh.n_q) > 20'000'000 ? std::min(reps, 3) : reps;
        ms[v] = time_ms(s, r, [&] { run(v, s, p); });
        std::printf("  %s %6.1f TFLOP/s (%8.3f ms)", kName[v], f / (ms[v] * 1e9), ms[v]);
    }
    std::printf("  flash/old %.2fx\n", ms[0] / ms[1]);
    free_problem(ctx, p);
}

}  // namespace

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines survive a timeout
    const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 10;
    try {
        DeviceContext ctx(0, 0.0);
        std::printf("device: %s\n", ctx.describe().c_str());
        const Shape checks[] = {
            {64, 8, 64, 128, 200, 300, 327, true},  // gpt-oss window layer, ring of window + n_q - 1 (wrapped)
            {64, 8, 64, 0, 130, 0, 130, true},      // gpt-oss full layer from position 0
            {32, 4, 128, 0, 100, 77, 512, false},   // qwen3 after a 77-token prefix
            {8, 8, 64, 16, 70, 5, 85, true},        // G = 1, window shorter than a tile
            {12, 2, 128, 0, 45, 33, 128, true},     // G = 6: tiles cut through a query's heads
            {64, 8, 64, 128, 3, 500, 130, true},    // 3 queries (one partial tile)
            {32, 4, 128, 40, 97, 10, 136, false},   // head_dim 128 with a window
            {32, 2, 64, 0, 33, 1000, 1100, true},   // G = 16, a long prefix (17 key tiles)
        };
        bool ok = true;
        uint32_t seed = 1;
        for (const Shape& sh : checks)
            for (int v : {0, 1, 2}) ok = check(ctx, v, sh, seed++) && ok;
        std::printf("%s\n", ok ? "ALL CHECKS PASS" : "SOME CHECKS FAIL");

        std::printf("MEASURED TFLOP/s (median of %d; useful products only: 4 hd per query head and key in range)\n", reps);
        for (int64_t n : {512, 4096, 13000}) {
            time_shape(ctx, "gpt-oss-20b full", {64, 8, 64, 0, n, 0, n, true}, reps);
            time_shape(ctx, "gpt-oss-20b window 128", {64, 8, 64, 128, n, 0, n + 127, true}, reps);
            time_shape(ctx, "qwen3-30b-a3b", {32, 4, 128, 0, n, 0, n, false}, reps);
        }
        std::printf("short chunks after a prefix (where attention() switches: kFlashMinQueries = %lld)\n",
                    static_cast<long long>(kFlashMinQueries));
        for (int64_t n : {16, 32, 64, 128}) {
            time_shape(ctx, "gpt-oss-20b full", {64, 8, 64, 0, n, 4000, 4000 + n, true}, reps);
            time_shape(ctx, "qwen3-30b-a3b", {32, 4, 128, 0, n, 4000, 4000 + n, false}, reps);
        }
        return ok ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
