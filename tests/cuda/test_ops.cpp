// Op parity harness (like llama.cpp's test-backend-ops): every CUDA op x weight type x several
// shapes against the CPU reference, with fresh random inputs each run and outputs poisoned
// before each kernel. Thresholds (normalised error ||gpu - ref|| / ||ref||), and why:
//   - dequantize / get_rows / kv_store: exact (0): the decoders reproduce ggml bit for bit and
//     f32 -> f16 rounds to nearest even on both sides;
//   - GEMV (<= 8 tokens; f32 activations, f32 accumulation) vs an f64 product of the exactly
//     dequantized weights: 2e-5 (f32 sums of <= 4096 terms: about sqrt(n) * 6e-8 = 4e-6);
//   - GEMV vs the CPU engine's matmul (cpu::matmul, whose activations are rounded to its vec-dot
//     type, Q8_0/Q8_K 8-bit: relative rms error about 1/(127*sqrt(12)) = 2.3e-3 per value): 1e-2;
//   - f16 GEMM path (> 8 tokens; activations and weights rounded to f16, 11-bit mantissa, f32
//     accumulation in the tensor cores): relative rms about 2^-11 per operand -> 3e-3 bound;
//   - rms_norm, rope, attention, router weights, decode MoE: f32 with different summation
//     order / libm ulps: 1e-5 (MoE decode 1e-4: two chained products and an activation);
//   - router ids: identical (ties go to the lower id on both sides); prefill MoE: 5e-3 (f16);
//   - round_acts (activations rounded to the vec-dot type, as the engine runs): exact against
//     src/quant's quantize + dequantize; GEMV and decode MoE with it vs the CPU's rounded
//     arithmetic (cpu::matmul, ref_moe on rounded inputs): 2e-5 / 1e-4 as above, where the
//     unrounded products are ~7e-3 away (the discriminating bound).
#include "cpu/matmul.h"
#include "cpu/moe.h"
#include "cpu/ops.h"
#include "core/fp16.h"
#include "core/error.h"
#include <chrono>
#include <cstring>
#include <thread>
#include "cuda/mmvq.h"
#include "cuda/flash_attn.h"
#include "cuda/moe_gemm.h"
#include "cuda/moe_mmq.h"
#include "cuda/ops.h"
#include "cuda_test_util.h"
#include "ops_test_util.h"
#include "quant/blocks.h"
#include "quant/types.h"
#include "runtime/placement.h"

#include <algorithm>
#include <numeric>
#include <tuple>

using namespace nitro;
using namespace nitro::cuda;
using namespace nitro::cuda::test;


TEST_F(CudaOps, DequantizeAndGetRowsAreExact) {
    for (GgmlType t : kTypes)
        for (auto [ne0, rows] : kShapes) {
            if (!shape_ok(t, ne0)) continue;
            SCOPED_TRACE(type_display_name(t) + " " + std::to_string(ne0) + "x" + std::to_string(rows));
            HostWeight w = make_weight(t, ne0, rows);
            DWeight d = dev_weight(*ctx, w);
            float* out = ctx->alloc_n<float>(w.deq.size(), "out");
            poison(out, w.deq.size());
            dequantize_f32(ctx->compute(), d, 0, rows, out);
            auto got = to_host(out, w.deq.size());
            EXPECT_EQ(std::memcmp(got.data(), w.deq.data(), got.size() * 4), 0) << "dequantize differs from src/quant";
            std::vector<int32_t> ids = {static_cast<int32_t>(rows - 1), 0, static_cast<int32_t>(rows / 2)};
            int32_t* dids = to_dev(*ctx, ids);
            poison(out, ids.size() * ne0);
            get_rows(ctx->compute(), d, dids, 3, out);
            auto gr = to_host(out, ids.size() * ne0);
            for (size_t i = 0; i < ids.size(); ++i)
                EXPECT_EQ(std::memcmp(gr.data() + i * ne0, w.deq.data() + ids[i] * ne0, ne0 * 4), 0) << "get_rows row " << i;
            ctx->alloc().free(out);
            ctx->alloc().free(dids);
            ctx->alloc().free(const_cast<uint8_t*>(d.data));
        }
}

TEST_F(CudaOps, MatmulGemvMatchesReference) {
    cpu::ThreadPool pool(2);
    double worst = 0, worst_cpu = 0, worst_rounded = 0;
    for (GgmlType t : kTypes)
        for (auto [ne0, rows] : kShapes) {
            if (!shape_ok(t, ne0)) continue;
            HostWeight w = make_weight(t, ne0, rows);
            DWeight d = dev_weight(*ctx, w);
            for (int64_t n : {1, 3, 8}) {
                SCOPED_TRACE(type_display_name(t) + " " + std::to_string(ne0) + "x" + std::to_string(rows) + " n=" +
                             std::to_string(n));
                auto x = randn(static_cast<size_t>(n * ne0));
                auto bias = randn(static_cast<size_t>(rows));
                float* dx = to_dev(*ctx, x);
                float* db = to_dev(*ctx, bias);
                float* out = ctx->alloc_n<float>(static_cast<size_t>(n * rows), "out");
                poison(out, static_cast<size_t>(n * rows));
                matmul(ctx->compute(), d, dx, n, ne0, out, rows, nullptr, false, nullptr);
                auto got = to_host(out, static_cast<size_t>(n * rows));
                auto ref = ref_matmul(w, x, n);
                const double e = nerr(got, ref);
                worst = std::max(worst, e);
                EXPECT_LT(e, 2e-5);
                // the CPU engine's own matmul (activations in its vec-dot type)
                cpu::ActBuffer acts;
                cpu::quantize_acts(x.data(), n, ne0, t, acts);
                std::vector<float> cref(static_cast<size_t>(n * rows));
                cpu::WeightView wv{t, w.bytes.data(), ne0, rows, row_size(t, ne0)};
                cpu::matmul(pool, wv, acts, cref.data());
                // Bound: the CPU rounds activations to 8 bits per block (Q8_0/Q8_K: amax/127 steps),
                // about 3.2/127/sqrt(12) = 0.73% rms of a Gaussian row, and the products inherit it;
                // small shapes (96 rows, 1 token) scatter around that (1.02% MEASURED once for Q5_K).
                const double ec = nerr(got, cref);
                worst_cpu = std::max(worst_cpu, ec);
                EXPECT_LT(ec, 2e-2);
                // bias + accumulate
                matmul(ctx->compute(), d, dx, n, ne0, out, rows, db, true, nullptr);
                auto got2 = to_host(out, static_cast<size_t>(n * rows));
                for (int64_t i = 0; i < n * rows; ++i) ref[i] = 2 * ref[i] + bias[i % rows];
                EXPECT_LT(nerr(got2, ref), 2e-5) << "accumulate + bias";
                // activations rounded to the vec-dot type first (the engine's path): the CPU's products,
                // by integer dot products on 8-bit activations (int8_dot, mmvq.h) and by the f32
                // kernel on the rounded values; with bias and accumulation too
                GemmScratch rs;
                rs.xr_elems = static_cast<size_t>(n * ne0);
                rs.xr = ctx->alloc_n<float>(rs.xr_elems, "xr");
                for (bool int8 : {true, false}) {
                    SCOPED_TRACE(int8 ? "int8 dot products" : "f32 on rounded activations");
                    rs.int8_dot = int8;
                    poison(out, static_cast<size_t>(n * rows));
                    matmul(ctx->compute(), d, dx, n, ne0, out, rows, nullptr, false, &rs);
                    const double er = nerr(to_host(out, static_cast<size_t>(n * rows)), cref);
                    worst_rounded = std::max(worst_rounded, er);
                    EXPECT_LT(er, 2e-5) << "rounded activations vs cpu::matmul";
                    matmul(ctx->compute(), d, dx, n, ne0, out, rows, db, true, &rs);
                    std::vector<double> cref2(cref.size());
                    for (int64_t i = 0; i < n * rows; ++i) cref2[i] = 2.0 * cref[i] + bias[i % rows];
                    EXPECT_LT(nerr(to_host(out, static_cast<size_t>(n * rows)), cref2), 2e-5) << "accumulate + bias";
                }
                ctx->alloc().free(rs.xr);
                for (void* p : {static_cast<void*>(dx), static_cast<void*>(db), static_cast<void*>(out)}) ctx->alloc().free(p);
            }
            ctx->alloc().free(const_cast<uint8_t*>(d.data));
        }
    std::printf("GEMV: worst normalised error %.2e vs f64 reference, %.2e vs cpu::matmul; with rounded activations %.2e vs "
                "cpu::matmul\n", worst, worst_cpu, worst_rounded);
}

TEST_F(CudaOps, QuantizeQ8EqualsTheCpuQuantizersAndMmvqSumsBlocks) {
    // The integer path's activations (mmvq.h) are src/quant's Q8_0 / Q8_K blocks: the same int8
    // values and scales.
    for (GgmlType w : {GgmlType::MXFP4, GgmlType::Q4_K}) {
        const GgmlType vdt = cpu::vec_dot_type(w);
        SCOPED_TRACE(type_display_name(vdt));
        const int64_t n = 512, rows = 3;
        auto x = randn(static_cast<size_t>(n * rows), 2.f);
        for (int64_t i = 0; i < 256; ++i) x[static_cast<size_t>(n + i)] = 0.f;
        float* dx = to_dev(*ctx, x);
        const size_t bytes = q8_act_bytes(rows, n);
        float* buf = ctx->alloc_n<float>((bytes + 3) / 4, "q8");
        const Q8Acts a = quantize_q8(ctx->compute(), w, dx, n, rows, n, buf, bytes);
        NITRO_CUDA_CHECK(cudaStreamSynchronize(ctx->compute()));
        std::vector<int8_t> q(static_cast<size_t>(n * rows));
        std::vector<float> d(static_cast<size_t>(rows * n / 32));
        NITRO_CUDA_CHECK(cudaMemcpy(q.data(), a.q, q.size(), cudaMemcpyDeviceToHost));
        NITRO_CUDA_CHECK(cudaMemcpy(d.data(), a.d, d.size() * 4, cudaMemcpyDeviceToHost));
        const size_t rb = row_size(vdt, n);
        std::vector<uint8_t> ref(rb);
        int bad = 0;
        for (int64_t r = 0; r < rows; ++r) {
            quantize(vdt, x.data() + r * n, ref.data(), n);
            for (int64_t i = 0; i < n; ++i) {
                int8_t rq;
                float rd;
                if (vdt == GgmlType::Q8_0) {
                    const auto* b = reinterpret_cast<const quant::BlockQ8_0*>(ref.data()) + i / 32;
                    rq = b->qs[i % 32];
                    rd = fp16_to_f32(b->d);
                } else {
                    const auto* b = reinterpret_cast<const quant::BlockQ8_K*>(ref.data()) + i / 256;
                    rq = b->qs[i % 256];
                    rd = b->d;
                }
                if ((q[r * n + i] != rq || d[(r * n + i) / 32] != rd) && bad++ < 5)
                    ADD_FAILURE() << "row " << r << " value " << i << ": q " << int(q[r * n + i]) << " vs " << int(rq)
                                  << ", d " << d[(r * n + i) / 32] << " vs " << rd;
            }
        }
        EXPECT_EQ(bad, 0);
        ctx->alloc().free(dx);
        ctx->alloc().free(buf);
    }
    // A hand-computed product: Q8_0 weights of all 3s with scale 0.5, activations of all 2s
    // (scale 2/127 after rounding to fp16): every output is 512 * 1.5 * 2 = 1536 up to the scales'
    // fp16 rounding.
    const int64_t n = 512, rows = 40;
    std::vector<uint8_t> wb(row_size(GgmlType::Q8_0, n) * rows);
    for (size_t b = 0; b < wb.size() / 34; ++b) {
        auto* blk = reinterpret_cast<quant::BlockQ8_0*>(wb.data()) + b;
        blk->d = f32_to_fp16(0.5f);
        for (auto& v : blk->qs) v = 3;
    }
    DWeight dw{GgmlType::Q8_0, to_dev(*ctx, wb), n, rows, row_size(GgmlType::Q8_0, n)};
    float* dx = to_dev(*ctx, std::vector<float>(static_cast<size_t>(n), 2.f));
    GemmScratch gs;
    gs.xr_elems = static_cast<size_t>(n);
    gs.xr = ctx->alloc_n<float>(gs.xr_elems, "xr");
    float* out = ctx->alloc_n<float>(static_cast<size_t>(rows), "out");
    poison(out, static_cast<size_t>(rows));
    matmul(ctx->compute(), dw, dx, 1, n, out, rows, nullptr, false, &gs);
    const auto got = to_host(out, static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) EXPECT_NEAR(got[r], 1536.f, 1.f) << "row " << r;
    for (void* p : {static_cast<void*>(const_cast<uint8_t*>(dw.data)), static_cast<void*>(dx), static_cast<void*>(gs.xr),
                    static_cast<void*>(out)})
        ctx->alloc().free(p);
}

TEST_F(CudaOps, MatmulSameInputEqualsSeparateProductsBitForBit) {
    // One rounding / quantization of the input for several weights (decode q, k, v) must give
    // exactly the products of separate matmul calls; mixed vec-dot types take separate calls.
    const std::vector<std::vector<GgmlType>> sets = {{GgmlType::F16, GgmlType::F16, GgmlType::F16},
                                                     {GgmlType::MXFP4, GgmlType::Q8_0, GgmlType::Q4_0},
                                                     {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::IQ4_XS},
                                                     {GgmlType::Q8_0, GgmlType::Q6_K}, {GgmlType::BF16, GgmlType::F32},
                                                     // one type: one launch (mmvq_multi) in decode
                                                     {GgmlType::Q8_0, GgmlType::Q8_0, GgmlType::Q8_0},
                                                     {GgmlType::MXFP4, GgmlType::MXFP4}, {GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q4_K}};
    const int64_t ne0 = 512;
    for (const auto& set : sets)
        for (int64_t n : {1, 5, 20}) {
            SCOPED_TRACE(type_display_name(set[0]) + "+" + type_display_name(set[1]) + " n=" + std::to_string(n));
            std::vector<HostWeight> hw;
            std::vector<DWeight> dw;
            for (size_t i = 0; i < set.size(); ++i) {
                hw.push_back(make_weight(set[i], ne0, 64 + 32 * static_cast<int64_t>(i)));
                dw.push_back(dev_weight(*ctx, hw.back()));
            }
            auto x = randn(static_cast<size_t>(n * ne0));
            float* dx = to_dev(*ctx, x);
            GemmScratch gs;
            gs.cublas = ctx->cublas();
            gs.act_elems = static_cast<size_t>(n * ne0);
            gs.act = ctx->alloc_n<uint16_t>(gs.act_elems, "act");
            gs.w_elems = static_cast<size_t>(ne0 * 128);
            gs.w = ctx->alloc_n<uint16_t>(gs.w_elems, "w");
            gs.xr_elems = static_cast<size_t>(n * ne0);
            gs.xr = ctx->alloc_n<float>(gs.xr_elems, "xr");
            std::vector<float*> sep, one, bias;
            for (size_t i = 0; i < set.size(); ++i) {
                const size_t m = static_cast<size_t>(n * dw[i].n_rows);
                sep.push_back(ctx->alloc_n<float>(m, "sep"));
                one.push_back(ctx->alloc_n<float>(m, "one"));
                bias.push_back(i == 1 ? nullptr : to_dev(*ctx, randn(static_cast<size_t>(dw[i].n_rows))));  // q and v have biases
                poison(one.back(), m);
                matmul(ctx->compute(), dw[i], dx, n, ne0, sep[i], dw[i].n_rows, bias[i], false, &gs);
            }
            if (set.size() == 3)
                matmul_same_input(ctx->compute(), {{&dw[0], one[0], dw[0].n_rows, bias[0]}, {&dw[1], one[1], dw[1].n_rows, bias[1]},
                                                   {&dw[2], one[2], dw[2].n_rows, bias[2]}}, dx, n, ne0, &gs);
            else
                matmul_same_input(ctx->compute(), {{&dw[0], one[0], dw[0].n_rows, bias[0]}, {&dw[1], one[1], dw[1].n_rows, bias[1]}},
                                  dx, n, ne0, &gs);
            for (size_t i = 0; i < set.size(); ++i) {
                const size_t m = static_cast<size_t>(n * dw[i].n_rows);
                const auto a = to_host(sep[i], m), b = to_host(one[i], m);
                EXPECT_EQ(std::memcmp(a.data(), b.data(), m * 4), 0) << "product " << i;
                ctx->alloc().free(sep[i]);
                ctx->alloc().free(one[i]);
                ctx->alloc().free(const_cast<uint8_t*>(dw[i].data));
            }
            for (void* p : {static_cast<void*>(dx), static_cast<void*>(gs.act), static_cast<void*>(gs.w), static_cast<void*>(gs.xr)})
                ctx->alloc().free(p);
        }
}

TEST_F(CudaOps, DenseGemvRoundsItsInputAsRoundActsBitForBit) {
    // The F16 / BF16 decode GEMV rounds x to the vec-dot type as it reads it (no round_acts launch):
    // the same bits as round_acts (RoundActsEqualsTheCpuQuantizers) into a buffer, then the GEMV
    // with no scratch (which rounds nothing). One matrix (gemv_dense) and three (gemv_dense_multi).
    for (GgmlType t : {GgmlType::F16, GgmlType::BF16})
        for (int64_t ne0 : {512, 2048})
            for (int64_t n : {1, 3, 8}) {
                SCOPED_TRACE(type_display_name(t) + " ne0=" + std::to_string(ne0) + " n=" + std::to_string(n));
                std::vector<HostWeight> hw;
                std::vector<DWeight> dw;
                for (int64_t rows : {96, 32, 64}) {
                    hw.push_back(make_weight(t, ne0, rows));
                    dw.push_back(dev_weight(*ctx, hw.back()));
                }
                auto x = randn(static_cast<size_t>(n * ne0), 3.f);
                float* dx = to_dev(*ctx, x);
                GemmScratch gs;
                gs.xr_elems = static_cast<size_t>(n * ne0);
                gs.xr = ctx->alloc_n<float>(gs.xr_elems, "xr");
                float* xr = ctx->alloc_n<float>(gs.xr_elems, "rounded x");
                round_acts(ctx->compute(), t, dx, ne0, nullptr, n, ne0, xr, ne0);
                std::vector<float*> fused, ref, multi;
                for (const DWeight& w : dw) {
                    const size_t m = static_cast<size_t>(n * w.n_rows);
                    for (auto* v : {&fused, &ref, &multi}) {
                        v->push_back(ctx->alloc_n<float>(m, "out"));
                        poison(v->back(), m);
                    }
                    matmul(ctx->compute(), w, dx, n, ne0, fused.back(), w.n_rows, nullptr, false, &gs);
                    matmul(ctx->compute(), w, xr, n, ne0, ref.back(), w.n_rows, nullptr, false, nullptr);
                }
                matmul_same_input(ctx->compute(), {{&dw[0], multi[0], dw[0].n_rows, nullptr}, {&dw[1], multi[1], dw[1].n_rows, nullptr},
                                                   {&dw[2], multi[2], dw[2].n_rows, nullptr}}, dx, n, ne0, &gs);
                for (size_t i = 0; i < dw.size(); ++i) {
                    const size_t m = static_cast<size_t>(n * dw[i].n_rows);
                    const auto r = to_host(ref[i], m), f = to_host(fused[i], m), u = to_host(multi[i], m);
                    EXPECT_EQ(std::memcmp(r.data(), f.data(), m * 4), 0) << "gemv_dense, matrix " << i;
                    EXPECT_EQ(std::memcmp(r.data(), u.data(), m * 4), 0) << "gemv_dense_multi, matrix " << i;
                    for (float* p : {ref[i], fused[i], multi[i]}) ctx->alloc().free(p);
                    ctx->alloc().free(const_cast<uint8_t*>(dw[i].data));
                }
                for (void* p : {static_cast<void*>(dx), static_cast<void*>(gs.xr), static_cast<void*>(xr)}) ctx->alloc().free(p);
            }
}

TEST_F(CudaOps, RoundActsEqualsTheCpuQuantizers) {
    // Every vec-dot type the GPU's weight types use, rows with a zero block, ties of magnitude
    // with both signs (Q8_K keeps the first) and values that land on .5 steps.
    for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::F16, GgmlType::BF16, GgmlType::F32}) {
        SCOPED_TRACE(type_display_name(t));
        const int64_t n = 512, rows = 5;
        auto x = randn(static_cast<size_t>(n * rows), 3.f);
        for (int64_t i = 0; i < 256; ++i) x[static_cast<size_t>(n + i)] = 0.f;  // row 1: a zero block
        x[2 * n + 7] = 5.f;
        x[2 * n + 9] = -5.f;                                                     // row 2: equal magnitudes
        for (int64_t i = 0; i < 32; ++i) x[static_cast<size_t>(3 * n + i)] = 0.5f * static_cast<float>(i - 16);  // exact steps
        float* dx = to_dev(*ctx, x);
        float* out = ctx->alloc_n<float>(x.size(), "out");
        poison(out, x.size());
        round_acts(ctx->compute(), t, dx, n, nullptr, rows, n, out, n);
        auto got = to_host(out, x.size());
        auto ref = rounded(t, x, n);
        EXPECT_EQ(std::memcmp(got.data(), ref.data(), got.size() * 4), 0);
        round_acts(ctx->compute(), t, dx, n, nullptr, rows, n, dx, n);  // in place
        EXPECT_EQ(std::memcmp(to_host(dx, x.size()).data(), ref.data(), got.size() * 4), 0) << "in place";
        ctx->alloc().free(dx);
        ctx->alloc().free(out);
    }
}

TEST_F(CudaOps, MatmulGemmMatchesReference) {
    GemmScratch gs;
    gs.cublas = ctx->cublas();
    gs.act_elems = 300 * 4096;
    gs.act = ctx->alloc_n<uint16_t>(gs.act_elems, "act");
    double worst = 0;
    for (GgmlType t : kTypes) {
        if (t == GgmlType::F32) continue;  // F32 weights always take the GEMV path
        for (auto [ne0, rows] : kShapes) {
            if (!shape_ok(t, ne0)) continue;
            HostWeight w = make_weight(t, ne0, rows);
            DWeight d = dev_weight(*ctx, w);
            // a weight scratch of ~1/3 of the matrix forces the row-chunk loop
            gs.w_elems = static_cast<size_t>(std::max<int64_t>(ne0, ne0 * rows / 3));
            gs.w = ctx->alloc_n<uint16_t>(gs.w_elems, "w");
            for (int64_t n : {9, 64, 200}) {
                SCOPED_TRACE(type_display_name(t) + " " + std::to_string(ne0) + "x" + std::to_string(rows) + " n=" +
                             std::to_string(n));
                auto x = randn(static_cast<size_t>(n * ne0));
                auto bias = randn(static_cast<size_t>(rows));
                float* dx = to_dev(*ctx, x);
                float* db = to_dev(*ctx, bias);
                float* out = ctx->alloc_n<float>(static_cast<size_t>(n * rows), "out");
                poison(out, static_cast<size_t>(n * rows));
                matmul(ctx->compute(), d, dx, n, ne0, out, rows, db, false, &gs);
                auto got = to_host(out, static_cast<size_t>(n * rows));
                auto ref = ref_matmul(w, x, n);
                for (int64_t i = 0; i < n * rows; ++i) ref[i] += bias[i % rows];
                const double e = nerr(got, ref);
                worst = std::max(worst, e);
                EXPECT_LT(e, 3e-3);
                for (void* p : {static_cast<void*>(dx), static_cast<void*>(db), static_cast<void*>(out)}) ctx->alloc().free(p);
            }
            ctx->alloc().free(gs.w);
            ctx->alloc().free(const_cast<uint8_t*>(d.data));
        }
    }
    std::printf("GEMM (f16, cuBLAS): worst normalised error %.2e vs f64 reference\n", worst);
}

TEST_F(CudaOps, MmvqChunksInFlightGiveTheSameBits) {
    // mmvq_chunks (mmvq.h) changes how many chunks a lane loads before it multiplies, never the
    // order of its sums: mmvq and mmvq_multi give the default's bits at every setting, with Q4_K /
    // Q5_K chunk pairs on (the default) and off. Pairs on and off sum the same exact integer block
    // terms in another f32 order: they agree within the bound of the GEMV test against cpu::matmul
    // (2e-5 normalised), and for Q4_K / Q5_K they must differ somewhere (the paired path ran).
    for (GgmlType t : kTypes) {
        if (!q8_supported(t)) continue;
        for (auto [ne0, rows] : kShapes) {
            if (!shape_ok(t, ne0)) continue;
            HostWeight w = make_weight(t, ne0, rows), w2 = make_weight(t, ne0, rows);
            DWeight d = dev_weight(*ctx, w), d2 = dev_weight(*ctx, w2);
            for (int64_t n : {1, 3, 8}) {
                SCOPED_TRACE(type_display_name(t) + " " + std::to_string(ne0) + "x" + std::to_string(rows) + " n=" +
                             std::to_string(n));
                auto x = randn(static_cast<size_t>(n * ne0));
                float* dx = to_dev(*ctx, x);
                const size_t qb = q8_act_bytes(n, ne0);
                auto* buf = ctx->alloc_n<uint8_t>(qb, "q8");
                const Q8Acts q = quantize_q8(ctx->compute(), t, dx, ne0, n, ne0, buf, qb);
                const size_t on = static_cast<size_t>(n * rows);
                float *o = ctx->alloc_n<float>(on, "o"), *m1 = ctx->alloc_n<float>(on, "m1"), *m2 = ctx->alloc_n<float>(on, "m2");
                std::vector<float> by_pairs[2];
                for (bool pairs : {true, false}) {
                    set_mmvq_pairs(pairs);
                    std::vector<float> ref, ref1, ref2;
                    for (int ch : {0, 1, 2, 4}) {
                        set_mmvq_chunks(ch);
                        mmvq(ctx->compute(), d, q, n, o, rows, nullptr, false);
                        const MatmulTo outs[2] = {{&d, m1, rows, nullptr}, {&d2, m2, rows, nullptr}};
                        mmvq_multi(ctx->compute(), outs, q, n);
                        set_mmvq_chunks(0);
                        auto g = to_host(o, on), g1 = to_host(m1, on), g2 = to_host(m2, on);
                        if (ch == 0) {
                            ref = g, ref1 = g1, ref2 = g2;
                            continue;
                        }
                        for (size_t i = 0; i < on; ++i) {
                            ASSERT_EQ(f32_to_bits(g[i]), f32_to_bits(ref[i]))
                                << "pairs " << pairs << " chunks " << ch << ", mmvq " << i;
                            ASSERT_EQ(f32_to_bits(g1[i]), f32_to_bits(ref1[i])) << "chunks " << ch << ", mmvq_multi " << i;
                            ASSERT_EQ(f32_to_bits(g2[i]), f32_to_bits(ref2[i])) << "chunks " << ch << ", mmvq_multi " << i;
                        }
                        // mmvq_multi's rows are mmvq's
                        for (size_t i = 0; i < on; ++i)
                            ASSERT_EQ(f32_to_bits(g1[i]), f32_to_bits(ref[i])) << "multi vs mmvq " << i;
                    }
                    by_pairs[pairs ? 0 : 1] = ref;
                }
                set_mmvq_pairs(true);
                const std::vector<double> off(by_pairs[1].begin(), by_pairs[1].end());
                EXPECT_LT(nerr(by_pairs[0], off), 2e-5) << "pairs on vs off";
                size_t differ = 0;
                for (size_t i = 0; i < on; ++i) differ += f32_to_bits(by_pairs[0][i]) != f32_to_bits(by_pairs[1][i]);
                const bool paired = t == GgmlType::Q4_K || t == GgmlType::Q5_K;
                if (paired && rows * n >= 300) {
                    EXPECT_GT(differ, 0u) << "Q4_K / Q5_K rows summed in the same order with pairs on and off";
                } else if (!paired) {
                    EXPECT_EQ(differ, 0u) << "the pairs setting changed a type without pairs";
                }
                for (void* p : {static_cast<void*>(dx), static_cast<void*>(buf), static_cast<void*>(o), static_cast<void*>(m1),
                                static_cast<void*>(m2)})
                    ctx->alloc().free(p);
            }
            ctx->alloc().free(const_cast<uint8_t*>(d.data));
            ctx->alloc().free(const_cast<uint8_t*>(d2.data));
        }
    }
    EXPECT_THROW(set_mmvq_chunks(3), Error);
}

TEST_F(CudaOps, MatmulPromptOfQ8TypesIsTheCpusIntegerProduct) {
    // Prompt chunks (more than kGemvMaxTokens rows) of 8-bit-block weight types take the integer GEMM
    // (moe_mmq with one group) on the CPU quantizer's blocks: cpu::matmul's block sums, so the bound
    // is the rounded GEMV's (2e-5: f32 summation order only), not the f16 GEMM's 3e-3. Row counts
    // that are not whole 64-row tiles (9, 200) cover the partial tiles; bias and accumulate the
    // epilogue (out + (product + bias), mmvq's order).
    cpu::ThreadPool pool(2);
    GemmScratch gs;
    gs.cublas = ctx->cublas();
    gs.act_elems = 300 * 4096;
    gs.act = ctx->alloc_n<uint16_t>(gs.act_elems, "act");
    gs.xr_elems = 300 * 4096;
    gs.xr = ctx->alloc_n<float>(gs.xr_elems, "xr");
    double worst = 0;
    int checked = 0;
    for (GgmlType t : kTypes) {
        if (!q8_supported(t)) continue;
        for (auto [ne0, rows] : kShapes) {
            if (!shape_ok(t, ne0)) continue;
            HostWeight w = make_weight(t, ne0, rows);
            DWeight d = dev_weight(*ctx, w);
            gs.w_elems = static_cast<size_t>(ne0 * rows);
            gs.w = ctx->alloc_n<uint16_t>(gs.w_elems, "w");
            for (int64_t n : {9, 64, 200}) {
                SCOPED_TRACE(type_display_name(t) + " " + std::to_string(ne0) + "x" + std::to_string(rows) + " n=" +
                             std::to_string(n));
                auto x = randn(static_cast<size_t>(n * ne0));
                auto bias = randn(static_cast<size_t>(rows));
                float* dx = to_dev(*ctx, x);
                float* db = to_dev(*ctx, bias);
                float* out = ctx->alloc_n<float>(static_cast<size_t>(n * rows), "out");
                cpu::ActBuffer acts;
                cpu::quantize_acts(x.data(), n, ne0, t, acts);
                std::vector<float> cref(static_cast<size_t>(n * rows));
                cpu::WeightView wv{t, w.bytes.data(), ne0, rows, row_size(t, ne0)};
                cpu::matmul(pool, wv, acts, cref.data());
                poison(out, static_cast<size_t>(n * rows));
                matmul(ctx->compute(), d, dx, n, ne0, out, rows, nullptr, false, &gs);
                const double e = nerr(to_host(out, static_cast<size_t>(n * rows)), cref);
                worst = std::max(worst, e);
                EXPECT_LT(e, 2e-5) << "integer prompt GEMM vs cpu::matmul";
                matmul(ctx->compute(), d, dx, n, ne0, out, rows, db, true, &gs);
                std::vector<double> cref2(cref.size());
                for (int64_t i = 0; i < n * rows; ++i) cref2[i] = 2.0 * cref[i] + bias[i % rows];
                EXPECT_LT(nerr(to_host(out, static_cast<size_t>(n * rows)), cref2), 2e-5) << "accumulate + bias";
                ++checked;
                for (void* p : {static_cast<void*>(dx), static_cast<void*>(db), static_cast<void*>(out)}) ctx->alloc().free(p);
            }
            ctx->alloc().free(gs.w);
            ctx->alloc().free(const_cast<uint8_t*>(d.data));
        }
    }
    EXPECT_GE(checked, 7 * 3) << "every q8_supported type at one shape at least";
    std::printf("prompt GEMM (integer, q8 types): worst normalised error %.2e vs cpu::matmul over %d cases\n", worst,
                checked);
    ctx->alloc().free(gs.xr);
    ctx->alloc().free(gs.act);
}

TEST_F(CudaOps, RmsNormMatchesCpu) {
    for (auto [rows, n] : {std::pair<int64_t, int64_t>{1, 2880}, {7, 2048}, {33, 64}, {5, 4096}}) {
        auto x = randn(static_cast<size_t>(rows * n), 3.f);
        auto w = randn(static_cast<size_t>(n));
        float* dx = to_dev(*ctx, x);
        float* dw = to_dev(*ctx, w);
        float* out = ctx->alloc_n<float>(static_cast<size_t>(rows * n), "out");
        void* hdev = nullptr;
        auto* host = static_cast<float*>(ctx->host_mapped(rows * n * 4, &hdev));
        poison(out, static_cast<size_t>(rows * n));
        std::memset(host, 0xFF, rows * n * 4);
        rms_norm(ctx->compute(), dx, dw, rows, n, n, 1e-5f, out, n, static_cast<float*>(hdev));
        auto got = to_host(out, static_cast<size_t>(rows * n));
        std::vector<float> ref(static_cast<size_t>(rows * n));
        for (int64_t r = 0; r < rows; ++r) cpu::rms_norm(&x[r * n], w.data(), n, 1e-5f, &ref[r * n]);
        EXPECT_LT(nerr(got, ref), 1e-6) << rows << "x" << n;
        EXPECT_EQ(std::memcmp(host, got.data(), rows * n * 4), 0) << "mapped host copy";
    }
}

TEST_F(CudaOps, RopeMatchesCpuIncludingYarn) {
    for (int variant = 0; variant < 2; ++variant) {
        RopeParams p;
        int64_t heads = 64, hd = 64;
        if (variant == 0) {  // gpt-oss: YaRN x32 from 4096
            p.n_rot = 64; p.freq_base = 150000; p.freq_scale = 1.f / 32; p.ext_factor = 1; p.n_ctx_orig = 4096;
            set_yarn_corr_dims(p, false);
        } else {  // qwen3
            heads = 32; hd = 128; p.n_rot = 128; p.freq_base = 1e6f;
        }
        const int64_t n = 5;
        const int32_t pos0 = randint(0, 60000);
        auto x = randn(static_cast<size_t>(n * heads * hd));
        float* dx = to_dev(*ctx, x);
        int32_t* dpos = to_dev(*ctx, std::vector<int32_t>{pos0});
        rope_neox(ctx->compute(), dx, n, heads, hd, heads * hd, p, dpos);
        auto got = to_host(dx, x.size());
        std::vector<float> cache(static_cast<size_t>(p.n_rot));
        for (int64_t t = 0; t < n; ++t) {
            cpu::rope_cache(p, pos0 + t, cache.data());
            cpu::rope_neox(&x[t * heads * hd], heads, hd, p.n_rot, cache.data());
        }
        EXPECT_LT(nerr(got, x), 1e-5) << "variant " << variant << " pos " << pos0;
    }
}

// The fused decode op (q/k norms, RoPE of q and k, K/V store) against the separate ops in
// sequence, whose own tests compare them with the CPU: the same bits (the same arithmetic, and the
// norms sum in rms_norm's order), at the shapes of gpt-oss (YaRN, no norms), qwen3 (norms) and
// qwen3next (head_dim 256, partial rotation), over a wrapping cache ring.
TEST_F(CudaOps, FusedQkNormRopeKvStoreEqualsTheSeparateOpsBitForBit) {
    struct Cfg { int64_t H, Hkv, hd; int n_rot; bool norms, yarn; };
    const Cfg cfgs[] = {{64, 8, 64, 64, false, true}, {32, 4, 128, 128, true, false}, {16, 2, 256, 64, true, false}};
    for (const Cfg& c : cfgs)
        for (int64_t n : {1, 37}) {
            SCOPED_TRACE("head_dim " + std::to_string(c.hd) + " n " + std::to_string(n));
            RopeParams p;
            p.n_rot = c.n_rot;
            p.freq_base = c.yarn ? 150000.f : 1e6f;
            if (c.yarn) p.freq_scale = 1.f / 32, p.ext_factor = 1, p.n_ctx_orig = 4096, set_yarn_corr_dims(p, false);
            const int64_t nq = c.H * c.hd, nk = c.Hkv * c.hd, nv = nk, cap = 48;
            auto q = randn(static_cast<size_t>(n * nq)), k = randn(static_cast<size_t>(n * nk)), v = randn(static_cast<size_t>(n * nv));
            auto qn = randn(static_cast<size_t>(c.hd)), kn = randn(static_cast<size_t>(c.hd));
            int32_t* dpos = to_dev(*ctx, std::vector<int32_t>{29});  // wraps the ring of 48
            float *q1 = to_dev(*ctx, q), *k1 = to_dev(*ctx, k), *q2 = to_dev(*ctx, q), *k2 = to_dev(*ctx, k), *dv = to_dev(*ctx, v);
            const float* dqn = c.norms ? to_dev(*ctx, qn) : nullptr;
            const float* dkn = c.norms ? to_dev(*ctx, kn) : nullptr;
            uint16_t *kc1 = ctx->alloc_n<uint16_t>(static_cast<size_t>(cap * nk), "kc"), *vc1 = ctx->alloc_n<uint16_t>(static_cast<size_t>(cap * nv), "vc");
            uint16_t *kc2 = ctx->alloc_n<uint16_t>(static_cast<size_t>(cap * nk), "kc"), *vc2 = ctx->alloc_n<uint16_t>(static_cast<size_t>(cap * nv), "vc");
            for (uint16_t* b : {kc1, kc2}) NITRO_CUDA_CHECK(cudaMemset(b, 0, static_cast<size_t>(cap * nk) * 2));
            for (uint16_t* b : {vc1, vc2}) NITRO_CUDA_CHECK(cudaMemset(b, 0, static_cast<size_t>(cap * nv) * 2));
            cudaStream_t st = ctx->compute();
            if (c.norms) {
                rms_norm(st, q1, dqn, n * c.H, c.hd, c.hd, 1e-6f, q1, c.hd);
                rms_norm(st, k1, dkn, n * c.Hkv, c.hd, c.hd, 1e-6f, k1, c.hd);
            }
            rope_neox(st, q1, n, c.H, c.hd, nq, p, dpos);
            rope_neox(st, k1, n, c.Hkv, c.hd, nk, p, dpos);
            kv_store(st, k1, dv, n, nk, nv, kc1, vc1, cap, dpos);
            qk_norm_rope_kv_store(st, q2, k2, dv, n, c.H, c.Hkv, c.hd, nv, dqn, dkn, 1e-6f, p, dpos, kc2, vc2, cap);
            auto a = to_host(q1, q.size()), b = to_host(q2, q.size());
            for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(f32_to_bits(a[i]), f32_to_bits(b[i])) << "q " << i;
            a = to_host(k1, k.size()), b = to_host(k2, k.size());
            for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(f32_to_bits(a[i]), f32_to_bits(b[i])) << "k " << i;
            EXPECT_EQ(to_host(kc1, static_cast<size_t>(cap * nk)), to_host(kc2, static_cast<size_t>(cap * nk)));
            EXPECT_EQ(to_host(vc1, static_cast<size_t>(cap * nv)), to_host(vc2, static_cast<size_t>(cap * nv)));
            if (c.norms) {  // and the norms did something: q differs from plain RoPE of the input
                float* q3 = to_dev(*ctx, q);
                rope_neox(st, q3, n, c.H, c.hd, nq, p, dpos);
                EXPECT_GT(nerr(to_host(q3, q.size()), to_host(q2, q.size())), 1e-3);
            }
        }
}

// The fused RMSNorm + 8-bit quantization of decode (rms_norm_q8, issue 15) against rms_norm then
// quantize_q8 of its output: the same f32 rows (and host copy) and the same 8-bit blocks, bit for
// bit, for every q8_supported type at the hidden sizes of gpt-oss (2880), qwen3moe / qwen3next
// (2048) and others (rms_norm's 64-, 256- and 512-thread blocks); the products that take the
// quantized rows (matmul_same_input / matmul with `pre`) give the bits they give when they quantize
// themselves, and a stale or mismatched Q8Input is not taken.
TEST_F(CudaOps, FusedRmsNormQ8EqualsRmsNormThenQuantizeBitForBit) {
    for (GgmlType t : kTypes) {
        if (!q8_supported(t)) continue;
        const GgmlType vdt = cpu::vec_dot_type(t);
        for (int64_t E : {2880, 2048, 512, 128, 4096})
            for (int64_t n : {1, 3, 8}) {
                SCOPED_TRACE(type_display_name(t) + " E=" + std::to_string(E) + " n=" + std::to_string(n));
                const int64_t ld = E + 32;  // x rows apart from h's
                auto x = randn(static_cast<size_t>(n * ld)), w = randn(static_cast<size_t>(E));
                for (size_t i = 0; i < x.size(); i += 97) x[i] *= 9.f;  // outliers: block scales differ
                float *dx = to_dev(*ctx, x), *dw = to_dev(*ctx, w);
                float *h1 = ctx->alloc_n<float>(static_cast<size_t>(n * E), "h1"), *h2 = ctx->alloc_n<float>(static_cast<size_t>(n * E), "h2");
                poison(h1, static_cast<size_t>(n * E));
                poison(h2, static_cast<size_t>(n * E));
                void* dev1 = nullptr;
                void* dev2 = nullptr;
                auto* host1 = static_cast<float*>(ctx->host_mapped(static_cast<size_t>(n * E) * 4, &dev1));
                auto* host2 = static_cast<float*>(ctx->host_mapped(static_cast<size_t>(n * E) * 4, &dev2));
                const size_t qb = q8_act_bytes(n, E);
                auto* b1 = ctx->alloc_n<uint8_t>(qb, "q1");
                auto* b2 = ctx->alloc_n<uint8_t>(qb, "q2");
                cudaStream_t st = ctx->compute();
                NITRO_CUDA_CHECK(cudaMemsetAsync(b1, 0x5a, qb, st));
                NITRO_CUDA_CHECK(cudaMemsetAsync(b2, 0xa5, qb, st));
                rms_norm(st, dx, dw, n, E, ld, 1e-6f, h1, E, static_cast<float*>(dev1));
                Q8Input hq;
                const bool whole = E % (vdt == GgmlType::Q8_K ? 256 : 32) == 0;
                const bool fused = rms_norm_q8(st, dx, dw, n, E, ld, 1e-6f, h2, E, static_cast<float*>(dev2), t, b2, qb, hq);
                // every shape the engine quantizes is fused (128 values: rms_norm's 64 threads are
                // not a Q8_K block, but Q8_K needs 256-value rows anyway)
                ASSERT_EQ(fused, whole);
                if (!fused) {
                    EXPECT_EQ(hq.x, nullptr);
                    continue;
                }
                const Q8Acts q1 = quantize_q8(st, t, h1, E, n, E, b1, qb);
                NITRO_CUDA_CHECK(cudaStreamSynchronize(st));
                auto a = to_host(h1, static_cast<size_t>(n * E)), b = to_host(h2, static_cast<size_t>(n * E));
                for (size_t i = 0; i < a.size(); ++i) {
                    ASSERT_EQ(f32_to_bits(a[i]), f32_to_bits(b[i])) << "h " << i;
                    ASSERT_EQ(f32_to_bits(host1[i]), f32_to_bits(host2[i])) << "host copy " << i;
                }
                ASSERT_EQ(hq.x, h2);
                ASSERT_EQ(hq.acts.q, reinterpret_cast<const int8_t*>(b2));
                EXPECT_EQ(to_host(q1.q, static_cast<size_t>(n * E)), to_host(hq.acts.q, static_cast<size_t>(n * E)));
                auto d1 = to_host(q1.d, static_cast<size_t>(n * E / 32)), d2 = to_host(hq.acts.d, static_cast<size_t>(n * E / 32));
                for (size_t i = 0; i < d1.size(); ++i) ASSERT_EQ(f32_to_bits(d1[i]), f32_to_bits(d2[i])) << "scale " << i;
                // a consumer: q/k/v-like products on h, quantizing h themselves or taking hq
                if (E != 2048 && E != 2880) continue;
                const HostWeight hw0 = make_weight(t, E, 96), hw1 = make_weight(t, E, 40);
                const DWeight w0 = dev_weight(*ctx, hw0), w1 = dev_weight(*ctx, hw1);
                GemmScratch gs;
                gs.xr_elems = (q8_act_bytes(n, E) + 3) / 4;
                gs.xr = ctx->alloc_n<float>(gs.xr_elems, "xr");
                float *o1 = ctx->alloc_n<float>(static_cast<size_t>(n * 136), "o1"), *o2 = ctx->alloc_n<float>(static_cast<size_t>(n * 136), "o2");
                poison(o1, static_cast<size_t>(n * 136));
                poison(o2, static_cast<size_t>(n * 136));
                matmul_same_input(st, {{&w0, o1, 136, nullptr}, {&w1, o1 + 96, 136, nullptr}}, h1, n, E, &gs);
                NITRO_CUDA_CHECK(cudaMemsetAsync(gs.xr, 0xff, gs.xr_elems * 4, st));  // (so a product that reads it would fail)
                matmul_same_input(st, {{&w0, o2, 136, nullptr}, {&w1, o2 + 96, 136, nullptr}}, h2, n, E, &gs, &hq);
                a = to_host(o1, static_cast<size_t>(n * 136)), b = to_host(o2, static_cast<size_t>(n * 136));
                for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(f32_to_bits(a[i]), f32_to_bits(b[i])) << "product " << i;
                // matmul alone, accumulating
                matmul(st, w1, h1, n, E, o1, 136, nullptr, true, &gs);
                NITRO_CUDA_CHECK(cudaMemsetAsync(gs.xr, 0xff, gs.xr_elems * 4, st));
                matmul(st, w1, h2, n, E, o2, 136, nullptr, true, &gs, &hq);
                a = to_host(o1, static_cast<size_t>(n * 136)), b = to_host(o2, static_cast<size_t>(n * 136));
                for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(f32_to_bits(a[i]), f32_to_bits(b[i])) << "matmul " << i;
                // not taken for other rows, another input or another vec-dot type
                EXPECT_EQ(q8_ready(&hq, h2, E, n, t), &hq.acts);
                EXPECT_EQ(q8_ready(&hq, h1, E, n, t), nullptr);
                EXPECT_EQ(q8_ready(&hq, h2, E, n - 1, t), nullptr);
                EXPECT_EQ(q8_ready(&hq, h2, E, n, vdt == GgmlType::Q8_0 ? GgmlType::Q4_K : GgmlType::Q8_0), nullptr);
                EXPECT_EQ(q8_ready(&hq, h2, E, n, GgmlType::F16), nullptr);
                ctx->alloc().free(gs.xr);
            }
    }
}

TEST_F(CudaOps, KvStoreIsExact) {
    const int64_t n = 6, dk = 512, dv = 512, cap = 16;
    auto k = randn(static_cast<size_t>(n * dk)), v = randn(static_cast<size_t>(n * dv));
    float *dk_ = to_dev(*ctx, k), *dv_ = to_dev(*ctx, v);
    uint16_t* kc = ctx->alloc_n<uint16_t>(static_cast<size_t>(cap * dk), "kc");
    uint16_t* vc = ctx->alloc_n<uint16_t>(static_cast<size_t>(cap * dv), "vc");
    const int32_t pos0 = 13;  // wraps around the ring
    int32_t* dpos = to_dev(*ctx, std::vector<int32_t>{pos0});
    kv_store(ctx->compute(), dk_, dv_, n, dk, dv, kc, vc, cap, dpos);
    auto hk = to_host(kc, static_cast<size_t>(cap * dk)), hv = to_host(vc, static_cast<size_t>(cap * dv));
    for (int64_t t = 0; t < n; ++t) {
        const int64_t slot = (pos0 + t) % cap;
        for (int64_t d = 0; d < dk; ++d) ASSERT_EQ(hk[slot * dk + d], f32_to_fp16(k[t * dk + d]));
        for (int64_t d = 0; d < dv; ++d) ASSERT_EQ(hv[slot * dv + d], f32_to_fp16(v[t * dv + d]));
    }
}

namespace {

/// session.cpp's attention, for the cache contents given (positions -> ring slots).
std::vector<double> ref_attention(const std::vector<float>& q, const std::vector<uint16_t>& kc, const std::vector<uint16_t>& vc,
                                  int64_t cap, int64_t n_q, int64_t H, int64_t Hkv, int64_t hd, int64_t pos0, int64_t window,
                                  const std::vector<float>* sinks, std::vector<double>* bound = nullptr) {
    // bound (optional): per element, the error allowed to a kernel that rounds the probabilities to
    // f16 for the PV product (the flash path): A (2^-11 + 4 d + 1e-5) + 1e-6 with A = sum_j w_j |v_j|
    // / sum_j w_j (each rounded term is off by at most 2^-11 of itself) and d = hd 2^-24 scale
    // max_j sum_d |q_d k_jd|, the f32 summation bound of a logit (a relative error of each weight, in
    // the numerator and the denominator: 2 d, doubled for the tensor cores' accumulation order);
    // 1e-5 A covers exp2f's ulps and the f32 sums of <= 2,048 weights.
    if (bound) bound->assign(static_cast<size_t>(n_q * H * hd), 0.0);
    std::vector<double> out(static_cast<size_t>(n_q * H * hd));
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    for (int64_t i = 0; i < n_q; ++i)
        for (int64_t h = 0; h < H; ++h) {
            const int64_t kvh = h / (H / Hkv), p = pos0 + i;
            const int64_t lo = window > 0 ? std::max<int64_t>(0, p - window + 1) : 0;
            std::vector<double> sc;
            double m = sinks ? (*sinks)[h] : -INFINITY, qk_abs = 0;
            for (int64_t j = lo; j <= p; ++j) {
                double dot = 0, da = 0;
                for (int64_t d = 0; d < hd; ++d) {
                    const double pr = static_cast<double>(fp16_to_f32(f32_to_fp16(q[(i * H + h) * hd + d]))) *
                                      fp16_to_f32(kc[(j % cap) * Hkv * hd + kvh * hd + d]);
                    dot += pr;
                    da += std::abs(pr);
                }
                qk_abs = std::max(qk_abs, da);
                sc.push_back(dot * scale);
                m = std::max(m, sc.back());
            }
            double den = sinks ? std::exp((*sinks)[h] - m) : 0;
            std::vector<double> acc(static_cast<size_t>(hd), 0.0), aabs(static_cast<size_t>(hd), 0.0);
            for (int64_t j = lo; j <= p; ++j) {
                const double w = std::exp(sc[j - lo] - m);
                den += w;
                for (int64_t d = 0; d < hd; ++d) {
                    const double v = fp16_to_f32(vc[(j % cap) * Hkv * hd + kvh * hd + d]);
                    acc[d] += w * v;
                    aabs[d] += w * std::abs(v);
                }
            }
            const double dl = static_cast<double>(hd) * std::ldexp(1.0, -24) * scale * qk_abs;
            for (int64_t d = 0; d < hd; ++d) {
                out[(i * H + h) * hd + d] = acc[d] / den;
                if (bound) (*bound)[(i * H + h) * hd + d] = aabs[d] / den * (std::ldexp(1.0, -11) + 4 * dl + 1e-5) + 1e-6;
            }
        }
    return out;
}

/// One attention problem with random Q, F16 K/V cache (cap rows) and sinks (scaled by sink_scale),
/// on the host and on the device (args: everything but out, partial and the kernel choice).
struct AttnProblem {
    std::vector<float> q, sinks;
    std::vector<uint16_t> kc, vc;
    AttnArgs args;
};
AttnProblem random_attention(DeviceContext& ctx, int64_t H, int64_t Hkv, int64_t hd, int64_t window, int64_t n_q,
                             int64_t pos0, int64_t cap, bool sinks, float sink_scale) {
    AttnProblem p;
    p.q = randn(static_cast<size_t>(n_q * H * hd));
    auto kf = randn(static_cast<size_t>(cap * Hkv * hd)), vf = randn(static_cast<size_t>(cap * Hkv * hd));
    p.kc.resize(kf.size());
    p.vc.resize(vf.size());
    for (size_t i = 0; i < kf.size(); ++i) p.kc[i] = f32_to_fp16(kf[i]), p.vc[i] = f32_to_fp16(vf[i]);
    p.sinks = randn(static_cast<size_t>(H), sink_scale);
    AttnArgs& a = p.args;
    a.q = to_dev(ctx, p.q);
    a.k_cache = to_dev(ctx, p.kc);
    a.v_cache = to_dev(ctx, p.vc);
    a.capacity = cap;
    a.n_q = n_q; a.n_head = H; a.n_head_kv = Hkv; a.head_dim = hd; a.window = window;
    a.sinks = sinks ? to_dev(ctx, p.sinks) : nullptr;
    a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    a.pos0 = to_dev(ctx, std::vector<int32_t>{static_cast<int32_t>(pos0)});
    return p;
}

/// got against ref_attention with the f16-probability bound of the flash kernel: every element
/// within its bound, the normalised error below 1e-3 and (rounded) above 1e-5: the f16 rounding
/// shows, so the flash kernel ran, not the per-query kernel, which is within 1e-5. (A query with
/// one key has the probability 1, which f16 holds exactly: no rounding to show.)
void expect_flash_bound(const std::vector<float>& got, const AttnProblem& p, int64_t pos0, bool rounded = true) {
    const AttnArgs& a = p.args;
    std::vector<double> bound;
    auto ref = ref_attention(p.q, p.kc, p.vc, a.capacity, a.n_q, a.n_head, a.n_head_kv, a.head_dim, pos0, a.window,
                             a.sinks ? &p.sinks : nullptr, &bound);
    const double e = nerr(got, ref);
    EXPECT_LT(e, 1e-3);
    if (rounded) {
        EXPECT_GT(e, 1e-5) << "f32 probabilities: the per-query kernel ran, not the flash path";
    }
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i)
        if (!(std::abs(got[i] - ref[i]) <= bound[i]) && bad++ < 5)
            ADD_FAILURE() << "element " << i << ": " << got[i] << " vs " << ref[i] << " (bound " << bound[i] << ")";
    EXPECT_EQ(bad, 0u);
}

}  // namespace

TEST_F(CudaOps, AttentionMatchesCpu) {
    struct Cfg { int64_t H, Hkv, hd, window, n_q, pos0, cap; bool sinks; int n_split; int hpb = 0; };
    const Cfg cfgs[] = {
        {64, 8, 64, 0, 1, 300, 512, true, 1},     // gpt-oss full layer, decode
        {64, 8, 64, 0, 1, 1000, 1024, true, 8},   // decode, flash-decoding splits
        {64, 8, 64, 128, 1, 700, 128, true, 4},   // sliding window over a ring (wrapped)
        {64, 8, 64, 16, 20, 40, 35, true, 1},     // prefill chunk, window ring of window + ubatch - 1
        {32, 4, 128, 0, 17, 5, 64, false, 1},     // qwen3 prefill, causal
        {32, 4, 128, 0, 1, 2047, 2048, false, 32},
        {4, 2, 32, 16, 9, 30, 24, true, 1},       // the fixtures' tiny heads
        {4, 2, 32, 0, 1, 100, 128, false, 4},
        {32, 4, 128, 0, 1, 5, 4096, false, 32},      // 31 of 32 splits empty: their blocks return, the combine skips them
        {32, 4, 128, 0, 1, 700, 1024, false, 8, 2},  // 2 query heads per block (AttnArgs::heads_per_block)
        {64, 8, 64, 0, 1, 1000, 1024, true, 8, 1},   // 1 query head per block, sinks
    };
    for (const Cfg& c : cfgs) {
        SCOPED_TRACE("H=" + std::to_string(c.H) + " hd=" + std::to_string(c.hd) + " window=" + std::to_string(c.window) +
                     " n_q=" + std::to_string(c.n_q) + " split=" + std::to_string(c.n_split) + " hpb=" + std::to_string(c.hpb));
        auto q = randn(static_cast<size_t>(c.n_q * c.H * c.hd));
        auto kf = randn(static_cast<size_t>(c.cap * c.Hkv * c.hd)), vf = randn(static_cast<size_t>(c.cap * c.Hkv * c.hd));
        std::vector<uint16_t> kc(kf.size()), vc(vf.size());
        for (size_t i = 0; i < kf.size(); ++i) kc[i] = f32_to_fp16(kf[i]), vc[i] = f32_to_fp16(vf[i]);
        auto sinks = randn(static_cast<size_t>(c.H));
        AttnArgs a;
        a.q = to_dev(*ctx, q);
        a.k_cache = to_dev(*ctx, kc);
        a.v_cache = to_dev(*ctx, vc);
        a.capacity = c.cap;
        a.n_q = c.n_q; a.n_head = c.H; a.n_head_kv = c.Hkv; a.head_dim = c.hd; a.window = c.window;
        a.sinks = c.sinks ? to_dev(*ctx, sinks) : nullptr;
        a.scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
        a.pos0 = to_dev(*ctx, std::vector<int32_t>{static_cast<int32_t>(c.pos0)});
        a.n_split = c.n_split;
        a.partial = ctx->alloc_n<float>(attention_partial_floats(c.n_q, c.H, c.hd, c.n_split) + 1, "partial");
        float* out = ctx->alloc_n<float>(q.size(), "out");
        poison(out, q.size());
        a.out = out;
        a.flash = false;  // the per-query kernel (f32 probabilities); the flash path: FlashAttentionMatchesCpu
        a.heads_per_block = c.hpb;
        attention(ctx->compute(), a);
        auto got = to_host(out, q.size());
        auto ref = ref_attention(q, kc, vc, c.cap, c.n_q, c.H, c.Hkv, c.hd, c.pos0, c.window, c.sinks ? &sinks : nullptr);
        EXPECT_LT(nerr(got, ref), 1e-5);
        // A second launch: the same bits (the splits and their combine in a fixed order)
        poison(out, q.size());
        attention(ctx->compute(), a);
        EXPECT_EQ(to_host(out, q.size()), got);
    }
}

// The decode split counts, by hand: one per 128 keys (a 32-key tile for each of 4 warps), within
// [1, max_split] (attention_max_split: the partial buffer's room, at most 64).
TEST(CudaAttentionSplits, ATilePerWarpWithinTheBuffersRoom) {
    EXPECT_EQ(attention_decode_splits(4096, 32), 32);  // n_ctx 4,096
    EXPECT_EQ(attention_decode_splits(8193, 64), 64);  // 65 tiles, capped at 64
    EXPECT_EQ(attention_decode_splits(128, 64), 1);    // a window of 128 keys: one tile per warp
    EXPECT_EQ(attention_decode_splits(200, 64), 2);    // 200 keys: 2 tiles of 128
    EXPECT_EQ(attention_decode_splits(1000, 4), 4);    // the room given
    EXPECT_EQ(attention_decode_splits(100, 0), 1);     // never below 1
    EXPECT_EQ(attention_decode_splits(4096, attention_max_split(4096)), 32);
}

// The depth classes of decode attention by hand (ops.h): a position's keys are pos + 1, the long
// class from 4,096 keys; in it a KV head's whole group per block, in the short class and in window
// layers the kernel's default (0). Host code: it also runs without a GPU.
TEST(CudaAttentionSplits, DepthClassesByHand) {
    EXPECT_EQ(attention_depth_class(0), 0);
    EXPECT_EQ(attention_depth_class(4094), 0);  // 4,095 keys
    EXPECT_EQ(attention_depth_class(4095), 1);  // 4,096 keys
    EXPECT_EQ(attention_decode_heads(32, 4, 0, 4094), 0);
    EXPECT_EQ(attention_decode_heads(32, 4, 0, 4095), 8);       // qwen3-30b-a3b: the group of 8
    EXPECT_EQ(attention_decode_heads(64, 8, 0, 100000), 8);     // gpt-oss full layer
    EXPECT_EQ(attention_decode_heads(64, 8, 128, 100000), 0);   // gpt-oss window layer: 128 keys at most
    EXPECT_EQ(attention_decode_heads(16, 2, 0, 8191), 8);       // qwen3-next (the kernel caps it at 4 for head_dim 256)
}

// The tensor-core path of prompt chunks (cuda/flash_attn.h): through attention() where it takes it
// (n_q >= kFlashMinQueries, checked to be the flash kernel by its f16 rounding: not within 1e-5 of
// the reference, where the per-query kernel is) and through flash_attention() for short chunks.
// Bounds: every element within the f16-probability bound of ref_attention (about 2^-11 of
// sum_j w_j |v_j| / sum_j w_j; a fragment-layout or masking bug is off by O(1) of it), and the
// normalised error below 1e-3 (expected 2^-11 / sqrt(3) = 2.8e-4 for random rounding errors).
TEST_F(CudaOps, FlashAttentionMatchesCpu) {
    struct Cfg { int64_t H, Hkv, hd, window, n_q, pos0, cap; bool sinks; };
    const Cfg cfgs[] = {
        {64, 8, 64, 128, 200, 300, 327, true},  // gpt-oss window layer over a wrapped ring of window + n_q - 1
        {64, 8, 64, 0, 130, 0, 130, true},      // gpt-oss full layer from position 0
        {32, 4, 128, 0, 100, 77, 512, false},   // qwen3, a chunk after a 77-token prefix
        {8, 8, 64, 16, 70, 5, 85, true},        // no GQA, window shorter than a key tile
        {12, 2, 128, 0, 45, 33, 128, true},     // G = 6: row tiles cut through a query's heads
        {64, 8, 64, 128, 3, 500, 130, true},    // 3 queries: one partial row tile
        {32, 4, 128, 40, 97, 10, 136, false},   // head_dim 128 with a window
        {32, 2, 64, 0, 33, 1000, 1100, true},   // G = 16 after a long prefix (17 key tiles)
    };
    for (const Cfg& c : cfgs) {
        SCOPED_TRACE("H=" + std::to_string(c.H) + "/" + std::to_string(c.Hkv) + " hd=" + std::to_string(c.hd) +
                     " window=" + std::to_string(c.window) + " n_q=" + std::to_string(c.n_q) + " pos0=" + std::to_string(c.pos0));
        // some sinks dominate their rows
        AttnProblem p = random_attention(*ctx, c.H, c.Hkv, c.hd, c.window, c.n_q, c.pos0, c.cap, c.sinks, 3.f);
        AttnArgs& a = p.args;
        float* out = ctx->alloc_n<float>(p.q.size(), "out");
        poison(out, p.q.size());
        a.out = out;
        ASSERT_TRUE(flash_attention_supported(a));
        if (c.n_q >= kFlashMinQueries) attention(ctx->compute(), a);
        else flash_attention(ctx->compute(), a);
        expect_flash_bound(to_host(out, p.q.size()), p, c.pos0);
    }
}

// Decode steps on the tensor-core kernel (AttnArgs::flash_decode, NITRO_ATTN_DECODE=flash): one
// query, the KV head's group as the rows, flash-decoding splits of whole 64-key tiles merged by
// the combine kernel (which adds the sinks). The bound is FlashAttentionMatchesCpu's (the same
// f16 probabilities; the splits only shorten the f32 sums). Covers the engine's split counts
// (attention_decode_splits) and others: the split chunk's rounding to a tile (2047 keys over 32
// splits: 64 each; 4,097 over 33: 128 each, two tiles; 10,001 over 64: three tiles), splits with
// no keys yet (their CTAs return; the combine must count the same active splits), window layers
// over a wrapped ring with and without splits, G = 1, 6, 8 and 16, and the first position.
TEST_F(CudaOps, FlashDecodeSplitsMatchCpu) {
    struct Cfg { int64_t H, Hkv, hd, window, pos0, cap; bool sinks; int n_split; };
    const Cfg cfgs[] = {
        {64, 8, 64, 0, 1000, 1024, true, 8},      // gpt-oss full layer
        {64, 8, 64, 128, 700, 128, true, 1},      // gpt-oss window layer (the engine's 1 split): out directly
        {64, 8, 64, 128, 700, 128, true, 4},      // the window in 2 splits of a tile (2 of 4 active)
        {32, 4, 128, 0, 2047, 2048, false, 32},   // qwen3, 32 splits of one tile
        {32, 4, 128, 0, 4096, 4224, false, 33},   // qwen3 at depth 4,096: 33 splits of two tiles
        {32, 4, 128, 0, 10000, 10240, false, 64}, // 53 of 64 splits active, three tiles each
        {32, 4, 128, 0, 5, 4096, false, 32},      // one key tile: 31 of 32 splits empty
        {32, 4, 128, 0, 0, 64, false, 4},         // the first position: one key
        {8, 8, 64, 16, 70, 1024, true, 4},        // G = 1, a window shorter than a tile
        {12, 2, 128, 0, 333, 1024, true, 8},      // G = 6
        {32, 2, 64, 0, 1000, 1100, true, 16},     // G = 16
    };
    for (const Cfg& c : cfgs) {
        SCOPED_TRACE("H=" + std::to_string(c.H) + "/" + std::to_string(c.Hkv) + " hd=" + std::to_string(c.hd) +
                     " window=" + std::to_string(c.window) + " pos0=" + std::to_string(c.pos0) +
                     " split=" + std::to_string(c.n_split));
        AttnProblem p = random_attention(*ctx, c.H, c.Hkv, c.hd, c.window, 1, c.pos0, c.cap, c.sinks, 3.f);
        AttnArgs& a = p.args;
        a.n_split = c.n_split;
        a.partial = ctx->alloc_n<float>(attention_partial_floats(1, c.H, c.hd, c.n_split) + 1, "partial");
        a.flash_decode = true;
        float* out = ctx->alloc_n<float>(p.q.size(), "out");
        poison(out, p.q.size());
        a.out = out;
        attention(ctx->compute(), a);
        const auto got = to_host(out, p.q.size());
        expect_flash_bound(got, p, c.pos0, c.pos0 > 0);
        // a second launch: the same bits (splits and combine in a fixed order)
        poison(out, p.q.size());
        attention(ctx->compute(), a);
        EXPECT_EQ(to_host(out, p.q.size()), got);
    }
}

// NITRO_ATTN_DECODE: read when no override is set; a wrong value is an error naming it.
TEST(CudaAttentionDecodeKnob, EnvironmentAndOverride) {
    set_attn_decode_flash(1);
    EXPECT_TRUE(attn_decode_flash());
    set_attn_decode_flash(0);
    EXPECT_FALSE(attn_decode_flash());
    ::setenv("NITRO_ATTN_DECODE", "flash", 1);
    set_attn_decode_flash(-1);
    EXPECT_TRUE(attn_decode_flash());
    ::setenv("NITRO_ATTN_DECODE", "per-query", 1);
    set_attn_decode_flash(-1);
    EXPECT_FALSE(attn_decode_flash());
    ::setenv("NITRO_ATTN_DECODE", "tensor", 1);
    set_attn_decode_flash(-1);
    try {
        attn_decode_flash();
        ADD_FAILURE() << "NITRO_ATTN_DECODE=tensor was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("NITRO_ATTN_DECODE=tensor"), std::string::npos) << e.what();
    }
    ::unsetenv("NITRO_ATTN_DECODE");
    set_attn_decode_flash(-1);
    EXPECT_FALSE(attn_decode_flash());  // the default: the per-query kernel
}

namespace {

/// The gatings of every architecture: gpt-oss, qwen3moe, GLM-4.5 (sigmoid, score bias, normalised,
/// scaled) and DeepSeek-V3 (the same in 8 groups of which 4 are kept; 4 of 2 for fewer experts).
struct RouterCase {
    const char* name;
    GatingSpec g;
    bool logit_bias;
};
std::vector<RouterCase> router_cases(int64_t X) {
    GatingSpec sig;
    sig.score = GatingSpec::Score::Sigmoid;
    sig.score_bias = true;
    sig.norm_weights = true;
    sig.weights_scale = 2.5f;
    GatingSpec grouped = sig;
    grouped.n_group = X >= 256 ? 8 : 4;
    grouped.topk_group = X >= 256 ? 4 : 2;
    GatingSpec plain_sigmoid;  // no bias, no groups, not normalised (margins in score units)
    plain_sigmoid.score = GatingSpec::Score::Sigmoid;
    return {{"gpt-oss", GatingSpec::softmax_selected(), true},
            {"qwen3moe", GatingSpec::softmax_all_normalized(), false},
            {"glm4moe", sig, false},
            {"deepseek-v3", grouped, false},
            {"sigmoid", plain_sigmoid, false}};
}

}  // namespace

TEST_F(CudaOps, FusedDecodeRouterEqualsMatmulThenTopKBitForBit) {
    // router_top_k: the router product and the top-k in one launch (the last block routes). Its
    // logits, ids, weights and margins must be exactly those of matmul then route (which
    // RouterMatchesCpuRoute checks against the CPU), at every lane count of the top-k and every
    // gating; a second launch proves the block counter went back to 0.
    for (auto [X, K, E] : {std::tuple<int, int, int>{32, 4, 2880}, {128, 8, 2048}, {512, 10, 2048}, {64, 4, 512}, {256, 8, 1024}})
        for (const RouterCase& rc : router_cases(X)) {
            SCOPED_TRACE("X=" + std::to_string(X) + " K=" + std::to_string(K) + " gating " + rc.name);
            const HostWeight hw = make_weight(GgmlType::F32, E, X, 0.5f);
            const DWeight dw = dev_weight(*ctx, hw);
            float* x = to_dev(*ctx, randn(static_cast<size_t>(E)));
            float* db = rc.logit_bias ? to_dev(*ctx, randn(static_cast<size_t>(X), 0.1f)) : nullptr;
            float* dsb = rc.g.score_bias ? to_dev(*ctx, randn(static_cast<size_t>(X), 0.05f)) : nullptr;
            uint32_t* counter = ctx->alloc_n<uint32_t>(1, "counter");
            NITRO_CUDA_CHECK(cudaMemset(counter, 0, 4));
            struct Out { std::vector<float> lg, w, mg; std::vector<int32_t> ids; };
            auto run = [&](bool fused) {
                RouteArgs a;
                a.logits = ctx->alloc_n<float>(static_cast<size_t>(X), "logits");
                a.logit_bias = db;
                a.score_bias = dsb;
                a.n = 1;
                a.n_expert = X;
                a.k = K;
                a.gating = rc.g;
                a.ids = ctx->alloc_n<int32_t>(static_cast<size_t>(K), "ids");
                a.weights = ctx->alloc_n<float>(static_cast<size_t>(K), "w");
                a.margin = ctx->alloc_n<float>(1, "margin");
                poison(a.logits, static_cast<size_t>(X));
                poison(a.ids, static_cast<size_t>(K));
                if (fused) {
                    EXPECT_TRUE(router_top_k(ctx->compute(), dw, x, a, nullptr, counter));
                } else {
                    matmul(ctx->compute(), dw, x, 1, E, a.logits, X, nullptr, false, nullptr);
                    cuda::route(ctx->compute(), a, nullptr);
                }
                Out o{to_host(a.logits, static_cast<size_t>(X)), to_host(a.weights, static_cast<size_t>(K)), to_host(a.margin, 1),
                      to_host(a.ids, static_cast<size_t>(K))};
                for (void* p : {static_cast<void*>(a.logits), static_cast<void*>(a.ids), static_cast<void*>(a.weights),
                                static_cast<void*>(a.margin)})
                    ctx->alloc().free(p);
                return o;
            };
            const Out ref = run(false), a = run(true), b = run(true);
            for (const Out* o : {&a, &b}) {
                EXPECT_EQ(std::memcmp(o->lg.data(), ref.lg.data(), ref.lg.size() * 4), 0) << "logits";
                EXPECT_EQ(o->ids, ref.ids);
                EXPECT_EQ(std::memcmp(o->w.data(), ref.w.data(), ref.w.size() * 4), 0) << "weights";
                EXPECT_EQ(std::memcmp(o->mg.data(), ref.mg.data(), 4), 0) << "margin";
            }
            EXPECT_EQ(to_host(counter, 1)[0], 0u);
            for (void* p : {static_cast<void*>(x), static_cast<void*>(db), static_cast<void*>(dsb), static_cast<void*>(counter),
                            static_cast<void*>(const_cast<uint8_t*>(dw.data))})
                if (p) ctx->alloc().free(p);
        }
    // Not this path: a quantized router, or more rows than a launch of blocks per row takes.
    const HostWeight q = make_weight(GgmlType::Q8_0, 512, 64);
    const DWeight dq = dev_weight(*ctx, q);
    RouteArgs none;
    none.n = 1;
    none.n_expert = 64;
    none.k = 4;
    EXPECT_FALSE(router_top_k(ctx->compute(), dq, nullptr, none, nullptr, reinterpret_cast<uint32_t*>(1)));
    ctx->alloc().free(const_cast<uint8_t*>(dq.data));
}

TEST_F(CudaOps, RouterMatchesCpuRoute) {
    // cuda::route against the engine's own CPU op with the same RouteArgs, for every gating: the same
    // experts in the same order, weights and margins within float rounding of the exponentials.
    for (auto [X, K] : {std::pair<int, int>{32, 4}, {128, 8}, {16, 4}, {64, 6}, {256, 8}, {512, 10}})
        for (const RouterCase& rc : router_cases(X)) {
            SCOPED_TRACE("X=" + std::to_string(X) + " K=" + std::to_string(K) + " gating " + rc.name);
            const int64_t n = 37;
            auto lg = randn(static_cast<size_t>(n * X));
            auto bias = randn(static_cast<size_t>(X), 0.1f);
            auto score_bias = randn(static_cast<size_t>(X), 0.05f);
            // a forced tie: expert 3 and 5 equal and largest for token 0 (with a score bias the two
            // get the largest bias too, or another expert's sigmoid + bias may pass theirs; their
            // group is then the best)
            lg[3] = lg[5] = 10.f;
            bias[5] = bias[3];  // still a tie after the gpt-oss router bias
            score_bias[3] = score_bias[5] = 1.0f;
            RouteArgs a;
            a.logits = to_dev(*ctx, lg);
            a.logit_bias = rc.logit_bias ? to_dev(*ctx, bias) : nullptr;
            a.score_bias = rc.g.score_bias ? to_dev(*ctx, score_bias) : nullptr;
            a.n = n;
            a.n_expert = X;
            a.k = K;
            a.gating = rc.g;
            a.ids = ctx->alloc_n<int32_t>(static_cast<size_t>(n * K), "ids");
            a.weights = ctx->alloc_n<float>(static_cast<size_t>(n * K), "w");
            a.margin = ctx->alloc_n<float>(static_cast<size_t>(n), "margins");
            poison(a.ids, static_cast<size_t>(n * K));
            poison(a.weights, static_cast<size_t>(n * K));
            cuda::route(ctx->compute(), a, nullptr);
            auto gi = to_host(a.ids, static_cast<size_t>(n * K));
            auto gw = to_host(a.weights, static_cast<size_t>(n * K));
            auto gm = to_host(a.margin, static_cast<size_t>(n));
            std::vector<int32_t> ri(static_cast<size_t>(n * K));
            std::vector<float> rw(static_cast<size_t>(n * K)), rm(static_cast<size_t>(n));
            RouteArgs c = a;
            c.logits = lg.data();
            c.logit_bias = rc.logit_bias ? bias.data() : nullptr;
            c.score_bias = rc.g.score_bias ? score_bias.data() : nullptr;
            c.ids = ri.data();
            c.weights = rw.data();
            c.margin = rm.data();
            cpu::route(c);
            for (int64_t t = 0; t < n; ++t)
                for (int j = 0; j < K; ++j) ASSERT_EQ(gi[t * K + j], ri[t * K + j]) << "token " << t << " rank " << j;
            EXPECT_EQ(gi[0], 3) << "ties go to the lower id";
            EXPECT_LT(nerr(gw, rw), 1e-5);
            for (int64_t t = 0; t < n; ++t)
                EXPECT_NEAR(gm[t], rm[t], 1e-4f * std::max(1.0f, std::abs(rm[t]))) << "token " << t;
            for (const void* p : {static_cast<const void*>(a.logits), static_cast<const void*>(a.logit_bias),
                                  static_cast<const void*>(a.score_bias), static_cast<const void*>(a.ids),
                                  static_cast<const void*>(a.weights), static_cast<const void*>(a.margin)})
                if (p) ctx->alloc().free(const_cast<void*>(p));
        }
}

TEST_F(CudaOps, RouterWritesPinnedHostOutputsAndReadyFlag) {
    const int X = 32, K = 4;
    auto lg = randn(X);
    float* dl = to_dev(*ctx, lg);
    int32_t* ids = ctx->alloc_n<int32_t>(K, "ids");
    float* w = ctx->alloc_n<float>(K, "w");
    void* dev = nullptr;
    auto* host = static_cast<uint8_t*>(ctx->host_mapped(K * 8 + 16, &dev));
    std::memset(host, 0xFF, K * 8 + 16);
    *reinterpret_cast<uint32_t*>(host + K * 8) = 0;
    uint32_t* dstep = to_dev(*ctx, std::vector<uint32_t>{77});
    RouterHostOut ho;
    ho.ids = reinterpret_cast<int32_t*>(static_cast<uint8_t*>(dev));
    ho.w = reinterpret_cast<float*>(static_cast<uint8_t*>(dev) + K * 4);
    ho.ready = reinterpret_cast<volatile uint32_t*>(static_cast<uint8_t*>(dev) + K * 8);
    ho.step = dstep;
    RouteArgs a;
    a.logits = dl;
    a.n = 1;
    a.n_expert = X;
    a.k = K;
    a.gating = GatingSpec::softmax_selected();
    a.ids = ids;
    a.weights = w;
    cuda::route(ctx->compute(), a, &ho);
    // poll the flag as a CPU worker would: no stream synchronisation
    volatile uint32_t* ready = reinterpret_cast<volatile uint32_t*>(host + K * 8);
    for (int spin = 0; spin < 100000000 && *ready != 77; ++spin) {
    }
    ASSERT_EQ(*ready, 77u);
    auto gi = to_host(ids, K);
    auto gw = to_host(w, K);
    EXPECT_EQ(std::memcmp(host, gi.data(), K * 4), 0);
    EXPECT_EQ(std::memcmp(host + K * 4, gw.data(), K * 4), 0);
}

TEST_F(CudaOps, WaitFlagHoldsTheStreamUntilTheCpuSetsTheFlag) {
    void* dev = nullptr;
    auto* host = static_cast<uint32_t*>(ctx->host_mapped(64, &dev));
    host[0] = 4;  // the flag: an older step
    auto* dev_flag = static_cast<uint32_t*>(dev);
    auto* times = reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(dev) + 16);
    uint32_t* dstep = to_dev(*ctx, std::vector<uint32_t>{5});
    float* x = to_dev(*ctx, std::vector<float>{1.f});
    wait_flag(ctx->compute(), dev_flag, dstep, times);
    add(ctx->compute(), x, nullptr, nullptr, 1, 1);  // a kernel queued behind the wait
    cudaEvent_t done;
    ASSERT_EQ(cudaEventCreate(&done), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(done, ctx->compute()), cudaSuccess);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(cudaEventQuery(done), cudaErrorNotReady) << "the stream ran past an unset flag";
    __atomic_store_n(&host[0], 5u, __ATOMIC_RELEASE);
    ASSERT_EQ(cudaEventSynchronize(done), cudaSuccess);
    const auto* t = reinterpret_cast<const uint64_t*>(reinterpret_cast<const uint8_t*>(host) + 16);
    EXPECT_GE(t[1] - t[0], 40'000'000u) << "the wait's own clock saw less than the 50 ms it waited";
    cudaEventDestroy(done);
}

TEST_F(CudaOps, ScratchAllocationsRespectTheBudget) {
    // The budget covers the whole process: the CUDA runtime's share (measured) is not the
    // allocator's. A budget below it is a clear error.
    try {
        DeviceContext tiny(0, 0.01);
        FAIL() << "a 10 MiB budget was accepted";
    } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("budget"), std::string::npos) << e.what();
    }
    const double runtime_gib = static_cast<double>(ctx->runtime_overhead() + DeviceContext::kCublasWorkspace) / (1 << 30);
    DeviceContext small(0, runtime_gib + 0.05);  // the runtime + 51 MiB for the allocator
    void* a = small.alloc().alloc(40ull << 20, "first block");
    EXPECT_NE(a, nullptr);
    try {
        small.alloc().alloc(20ull << 20, "second block");
        FAIL() << "the budget was exceeded without an error";
    } catch (const std::exception& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("budget"), std::string::npos) << m;
        EXPECT_NE(m.find("second block"), std::string::npos) << m;
    }
    small.alloc().free(a);
    EXPECT_EQ(small.alloc().used(), DeviceContext::kCublasWorkspace) << "only cuBLAS's workspace is left";
    EXPECT_NE(small.alloc().alloc(20ull << 20, "after free"), nullptr);
}

TEST_F(CudaOps, StagingRingUploadsPinnedAndPageable) {
    for (bool pageable : {false, true}) {
        const size_t n = (37ull << 20) + 12345;
        std::vector<uint8_t> src(n);
        for (size_t i = 0; i < n; i += 4096) src[i] = static_cast<uint8_t>(randint(0, 255));
        for (size_t i = 0; i < n; ++i) src[i] ^= static_cast<uint8_t>(i * 2654435761u >> 24);
        uint8_t* d = ctx->alloc_n<uint8_t>(n, "upload target");
        {
            StagingRing ring(ctx->copy(), 4ull << 20, 3, pageable);
            EXPECT_EQ(ring.pinned(), !pageable);
            ring.upload(d, src.data(), n);
            ring.finish();
        }
        auto back = to_host(d, n);
        EXPECT_EQ(std::memcmp(back.data(), src.data(), n), 0) << (pageable ? "pageable" : "pinned");
        ctx->alloc().free(d);
    }
}
