// The op-parity harness for the MoE ops (see test_ops.cpp for the thresholds and why): the
// decode and prompt MoE through the slot table with a partial sum from elsewhere, the decode
// fusions against the separate ops, the f16 and integer grouped GEMMs against f64 references,
// and the grouping on the device.
#include "core/error.h"
#include "core/fp16.h"
#include "cpu/matmul.h"
#include "cpu/ops.h"
#include "cuda/mmvq.h"
#include "cuda/moe_gemm.h"
#include "cuda/moe_mmq.h"
#include "cuda/ops.h"
#include "cuda_test_util.h"
#include "ops_test_util.h"
#include "quant/blocks.h"
#include "quant/types.h"
#include "runtime/placement.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

using namespace nitro;
using namespace nitro::cuda;
using namespace nitro::cuda::test;

namespace {

struct HostExperts {
    HostWeight gate, up, down;  // all experts stacked: rows = X * F (gate/up), X * E (down)
    std::vector<float> gb, ub, db;
};

/// CPU reference of the MoE FFN for the experts in `use` (others contribute nothing).
/// round: the inputs of gate/up and of down rounded to their vec-dot types first (as the engine
/// and the CPU experts compute).
std::vector<double> ref_moe(const HostExperts& H, const std::vector<float>& h_in, int64_t n, int64_t E, int64_t F, int K,
                            const std::vector<int32_t>& ids, const std::vector<float>& w, bool oai,
                            const std::vector<bool>& use, bool round = false) {
    const std::vector<float> h = round ? rounded(H.gate.type, h_in, E) : h_in;
    std::vector<double> out(static_cast<size_t>(n * E), 0.0);
    std::vector<float> g(F), u(F), a(F);
    for (int64_t t = 0; t < n; ++t)
        for (int j = 0; j < K; ++j) {
            const int e = ids[t * K + j];
            if (!use[e]) continue;
            for (int64_t f = 0; f < F; ++f) {
                double sg = 0, su = 0;
                for (int64_t i = 0; i < E; ++i) {
                    sg += static_cast<double>(H.gate.deq[(e * F + f) * E + i]) * h[t * E + i];
                    su += static_cast<double>(H.up.deq[(e * F + f) * E + i]) * h[t * E + i];
                }
                g[f] = static_cast<float>(sg) + (H.gb.empty() ? 0.f : H.gb[e * F + f]);
                u[f] = static_cast<float>(su) + (H.ub.empty() ? 0.f : H.ub[e * F + f]);
            }
            if (oai) cpu::swiglu_oai(g.data(), u.data(), F, 1.702f, 7.0f, a.data());
            else cpu::swiglu(g.data(), u.data(), F, a.data());
            if (round) a = rounded(H.down.type, a, F);
            for (int64_t c = 0; c < E; ++c) {
                double s = 0;
                for (int64_t f = 0; f < F; ++f) s += static_cast<double>(H.down.deq[(e * E + c) * F + f]) * a[f];
                s += H.db.empty() ? 0.0 : H.db[e * E + c];
                out[t * E + c] += w[t * K + j] * s;
            }
        }
    return out;
}

}  // namespace

TEST_F(CudaOps, MoeThroughSlotTableWithPartialSum) {
    struct Cfg { GgmlType t; int64_t E, F, X; int K; bool oai, biases; };
    const Cfg cfgs[] = {{GgmlType::MXFP4, 256, 512, 8, 4, true, true},
                        {GgmlType::Q4_K, 512, 256, 16, 8, false, false},
                        {GgmlType::Q8_0, 256, 256, 8, 2, false, true},
                        {GgmlType::Q6_K, 256, 256, 8, 4, true, false},
                        {GgmlType::IQ4_XS, 256, 256, 8, 4, false, false},
                        {GgmlType::Q5_K, 256, 256, 8, 4, false, false}};
    for (const Cfg& c : cfgs) {
        HostExperts H{make_weight(c.t, c.E, c.X * c.F, 0.1f), make_weight(c.t, c.E, c.X * c.F, 0.1f),
                      make_weight(c.t, c.F, c.X * c.E, 0.1f), {}, {}, {}};
        if (c.biases) {
            H.gb = randn(static_cast<size_t>(c.X * c.F), 0.1f);
            H.ub = randn(static_cast<size_t>(c.X * c.F), 0.1f);
            H.db = randn(static_cast<size_t>(c.X * c.E), 0.1f);
        }
        // Slot pool in a shuffled order: expert e lives in slot perm[e]; experts with odd ids
        // are "not resident" in the second pass.
        std::vector<int32_t> perm(static_cast<size_t>(c.X));
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng());
        auto pool_bytes = [&](const HostWeight& w, int64_t rows_per_expert) {
            const size_t eb = row_size(w.type, w.ne0) * rows_per_expert;
            std::vector<uint8_t> p(w.bytes.size());
            for (int64_t e = 0; e < c.X; ++e) std::memcpy(p.data() + perm[e] * eb, w.bytes.data() + e * eb, eb);
            return std::make_pair(p, eb);
        };
        auto [gp, gstride] = pool_bytes(H.gate, c.F);
        auto [upb, ustride] = pool_bytes(H.up, c.F);
        auto [dp, dstride] = pool_bytes(H.down, c.E);
        ExpertSlots ex;
        ex.gate = {c.t, to_dev(*ctx, gp), c.E, c.F, row_size(c.t, c.E)};
        ex.up = {c.t, to_dev(*ctx, upb), c.E, c.F, row_size(c.t, c.E)};
        ex.down = {c.t, to_dev(*ctx, dp), c.F, c.E, row_size(c.t, c.F)};
        ex.gate_stride = gstride; ex.up_stride = ustride; ex.down_stride = dstride;
        ex.gate_b = c.biases ? to_dev(*ctx, H.gb) : nullptr;
        ex.up_b = c.biases ? to_dev(*ctx, H.ub) : nullptr;
        ex.down_b = c.biases ? to_dev(*ctx, H.db) : nullptr;
        ex.n_expert = c.X;
        ex.oai_act = c.oai;
        for (int64_t n : {1, 3, 40}) {
            SCOPED_TRACE(type_display_name(c.t) + " n=" + std::to_string(n));
            auto h = randn(static_cast<size_t>(n * c.E));
            std::vector<int32_t> ids(static_cast<size_t>(n * c.K));
            std::vector<float> w(ids.size());
            for (int64_t t = 0; t < n; ++t) {
                std::vector<int32_t> all(static_cast<size_t>(c.X));
                std::iota(all.begin(), all.end(), 0);
                std::shuffle(all.begin(), all.end(), rng());
                for (int j = 0; j < c.K; ++j) ids[t * c.K + j] = all[j], w[t * c.K + j] = std::uniform_real_distribution<float>(0.1f, 1.f)(rng());
            }
            auto x0 = randn(static_cast<size_t>(n * c.E));
            MoeScratch sc;
            const int64_t R = n * c.K;
            sc.act_bytes = std::max<size_t>(static_cast<size_t>(R * c.F) * 4, q8_act_bytes(R, c.F));
            sc.act = static_cast<float*>(static_cast<void*>(ctx->alloc_n<uint8_t>(sc.act_bytes, "act")));
            sc.gate = ctx->alloc_n<float>(static_cast<size_t>(R * c.F), "gate");
            sc.up = ctx->alloc_n<float>(static_cast<size_t>(R * c.F), "up");
            sc.down = ctx->alloc_n<float>(static_cast<size_t>(R * c.E), "down");
            sc.group_tok = ctx->alloc_n<int32_t>(static_cast<size_t>(R), "g");
            sc.row_of = ctx->alloc_n<int32_t>(static_cast<size_t>(R), "g");
            sc.group_exp = ctx->alloc_n<int32_t>(static_cast<size_t>(R), "g");
            sc.group_off = ctx->alloc_n<int32_t>(static_cast<size_t>(2 * (c.X + 1)), "g");
            void* dummy;
            sc.host_idx = static_cast<int32_t*>(ctx->host_mapped(static_cast<size_t>(3 * R) * 4, &dummy));
            sc.gemm.cublas = ctx->cublas();
            sc.gemm.act_elems = static_cast<size_t>(R * std::max(c.E, c.F));
            sc.gemm.act = ctx->alloc_n<uint16_t>(sc.gemm.act_elems, "act16");
            sc.gemm.w_elems = static_cast<size_t>(c.E * c.F);
            sc.gemm.w = ctx->alloc_n<uint16_t>(sc.gemm.w_elems, "w16");
            poison(sc.act, static_cast<size_t>(R * c.F));
            poison(sc.down, static_cast<size_t>(R * c.E));
            float* dh = to_dev(*ctx, h);
            int32_t* dids = to_dev(*ctx, ids);
            float* dw = to_dev(*ctx, w);
            const double tol = n > kGemvMaxTokens ? 5e-3 : 1e-4;
            // the engine's size: rounded inputs, or the decode path's 8-bit activations (mmvq.h)
            const size_t xr_elems = std::max<size_t>(static_cast<size_t>(n * c.E),
                                                     (moe_decode_q8_bytes(n, c.E, c.K, c.F) + 3) / 4);
            float* xr = ctx->alloc_n<float>(xr_elems, "xr");
            for (int pass = 0; pass < 4; ++pass) {
                // pass 0: f32 activations, all resident; passes 1-3: activations rounded to the
                // vec-dot types (the engine's path), decode by integer dot products (1: half the
                // experts resident, 2: all) and by the f32 kernels (3: all)
                const bool round = pass >= 1;
                sc.gemm.xr = round ? xr : nullptr;
                sc.gemm.xr_elems = round ? xr_elems : 0;
                sc.gemm.int8_dot = pass != 3;
                std::vector<int32_t> slot_of(perm);
                std::vector<bool> use(static_cast<size_t>(c.X), true), missing(static_cast<size_t>(c.X), false);
                if (pass == 1)
                    for (int64_t e = 1; e < c.X; e += 2) slot_of[e] = -1, use[e] = false, missing[e] = true;
                int32_t* dslot = to_dev(*ctx, slot_of);
                ex.slot_of = dslot;
                // pass 1: the missing experts' sum comes in as the partial, computed "by the CPU"
                float* dpartial = nullptr;
                if (pass == 1) {
                    auto part = ref_moe(H, h, n, c.E, c.F, c.K, ids, w, c.oai, missing, round);
                    dpartial = to_dev(*ctx, std::vector<float>(part.begin(), part.end()));
                }
                float* dx = to_dev(*ctx, x0);
                // chunks above the GEMV size: grouped by expert on the host (passes 0, 2) or on the
                // device (passes 1, 3: no host ids); passes 1 and 2 take the integer grouped GEMM
                // (moe_mmq.h), passes 0 and 3 the f16 one
                const bool host_grouping = n > kGemvMaxTokens && (pass == 0 || pass == 2);
                // integer products (decode, and prompts through moe_mmq) compute the CPU's block
                // sums: the decode MoE's 1e-4; the f16 prompt path 5e-3. Plus two flips of the GLU
                // output's 8-bit rounding: the GPU's f32 gate/up sums and the reference's can sit on
                // either side of a rounding edge, and one flip moves one activation by a quantum,
                // amax / 127 ~ 3.5 / 127 of its block's rms for Gaussian values, i.e. its token's
                // output by ~0.028 / sqrt(K F) and nerr over n tokens by that / sqrt(n)
                // (CALCULATED; MEASURED once: Q5_K n=40, 1.63e-4, seed 15962385267799209382).
                const bool int8 = round && sc.gemm.int8_dot && q8_supported(c.t);
                const double flip = 0.028 / std::sqrt(static_cast<double>(c.K * c.F * n));
                const double tol_pass = int8 ? 1e-4 + 2 * flip : tol;
                moe_ffn(ctx->compute(), ex, dh, n, c.E, c.K, dids, dw, host_grouping ? ids.data() : nullptr,
                        slot_of.data(), dpartial, dx, sc);
                auto got = to_host(dx, x0.size());
                auto full = ref_moe(H, h, n, c.E, c.F, c.K, ids, w, c.oai, std::vector<bool>(c.X, true), round);
                std::vector<float> delta(got.size());
                for (size_t i = 0; i < got.size(); ++i) delta[i] = got[i] - x0[i];
                EXPECT_LT(nerr(delta, full), tol_pass) << (host_grouping ? "grouped on the host; " : "") <<
                                                     (pass == 1 ? "rounded, int8, half the experts resident + CPU partial"
                                                      : pass == 2  ? "rounded activations, int8 dot products"
                                                      : round      ? "rounded activations, f32"
                                                                   : "all resident");
            }
            ctx->alloc().free(xr);
        }
    }
}

// The decode MoE as GpuSession runs it with the issue-15 fusions against the separate ops, bit
// for bit: h = rms_norm(x) (rms_norm_q8: h and its 8-bit blocks in one launch, which moe_experts
// takes instead of quantizing h) and the down product + combine in one launch
// (MoeScratch::fuse_down -> moe_down_combine_q8), vs rms_norm, moe_experts (quantize h, gate/up,
// quantize, down into scratch.down) and moe_combine. Every q8_supported type at the expert shapes
// of gpt-oss (2880 <-> 2880, K 4, swiglu_oai, biases), qwen3moe (2048 <-> 768, K 8) and qwen3next
// (2048 <-> 512, K 10), 1-8 tokens; all experts resident, and hybrid: some experts not resident
// (slot -1) with a partial sum from elsewhere.
TEST_F(CudaOps, FusedDecodeMoeEqualsTheSeparateOpsBitForBit) {
    struct Cfg { int64_t E, F, X; int K; bool oai, biases; };
    const Cfg cfgs[] = {{2880, 2880, 6, 4, true, true}, {2048, 768, 11, 8, false, false}, {2048, 512, 13, 10, false, false}};
    for (GgmlType t : kTypes) {
        if (!q8_supported(t)) continue;
        for (const Cfg& c : cfgs) {
            if (!shape_ok(t, c.E) || !shape_ok(t, c.F)) continue;
            const HostWeight hg = make_weight(t, c.E, c.X * c.F, 0.1f), hu = make_weight(t, c.E, c.X * c.F, 0.1f),
                             hd = make_weight(t, c.F, c.X * c.E, 0.1f);
            // slots in reverse expert order: expert e in slot X - 1 - e
            auto pool = [&](const HostWeight& w, int64_t rows) {
                const size_t eb = row_size(t, w.ne0) * static_cast<size_t>(rows);
                std::vector<uint8_t> p(w.bytes.size());
                for (int64_t e = 0; e < c.X; ++e)
                    std::memcpy(p.data() + (c.X - 1 - e) * eb, w.bytes.data() + e * eb, eb);
                return std::make_pair(p, eb);
            };
            auto [gp, gstride] = pool(hg, c.F);
            auto [up, ustride] = pool(hu, c.F);
            auto [dp, dstride] = pool(hd, c.E);
            ExpertSlots ex;
            ex.gate = {t, to_dev(*ctx, gp), c.E, c.F, row_size(t, c.E)};
            ex.up = {t, to_dev(*ctx, up), c.E, c.F, row_size(t, c.E)};
            ex.down = {t, to_dev(*ctx, dp), c.F, c.E, row_size(t, c.F)};
            ex.gate_stride = gstride;
            ex.up_stride = ustride;
            ex.down_stride = dstride;
            ex.gate_b = c.biases ? to_dev(*ctx, randn(static_cast<size_t>(c.X * c.F), 0.1f)) : nullptr;
            ex.up_b = c.biases ? to_dev(*ctx, randn(static_cast<size_t>(c.X * c.F), 0.1f)) : nullptr;
            ex.down_b = c.biases ? to_dev(*ctx, randn(static_cast<size_t>(c.X * c.E), 0.1f)) : nullptr;
            ex.n_expert = c.X;
            ex.oai_act = c.oai;
            for (int64_t n : {1, 2, 5, 8})
                for (bool hybrid : {false, true}) {
                    SCOPED_TRACE(type_display_name(t) + " E=" + std::to_string(c.E) + " F=" + std::to_string(c.F) +
                                 " n=" + std::to_string(n) + (hybrid ? " hybrid" : ""));
                    const int64_t R = n * c.K;
                    std::vector<int32_t> slot_of(static_cast<size_t>(c.X)), ids(static_cast<size_t>(R));
                    for (int64_t e = 0; e < c.X; ++e) slot_of[e] = hybrid && e % 3 == 1 ? -1 : static_cast<int32_t>(c.X - 1 - e);
                    std::vector<float> wts(static_cast<size_t>(R));
                    for (int64_t tk = 0; tk < n; ++tk) {
                        std::vector<int32_t> all(static_cast<size_t>(c.X));
                        std::iota(all.begin(), all.end(), 0);
                        std::shuffle(all.begin(), all.end(), rng());
                        for (int j = 0; j < c.K; ++j)
                            ids[tk * c.K + j] = all[j], wts[tk * c.K + j] = std::uniform_real_distribution<float>(0.1f, 1.f)(rng());
                    }
                    ex.slot_of = to_dev(*ctx, slot_of);
                    int32_t* dids = to_dev(*ctx, ids);
                    float* dw = to_dev(*ctx, wts);
                    float* dpartial = hybrid ? to_dev(*ctx, randn(static_cast<size_t>(n * c.E), 0.3f)) : nullptr;
                    auto xin = randn(static_cast<size_t>(n * c.E)), x0 = randn(static_cast<size_t>(n * c.E));
                    float *dxin = to_dev(*ctx, xin), *dnorm = to_dev(*ctx, randn(static_cast<size_t>(c.E)));
                    float *x1 = to_dev(*ctx, x0), *x2 = to_dev(*ctx, x0);
                    float *h1 = ctx->alloc_n<float>(static_cast<size_t>(n * c.E), "h1"), *h2 = ctx->alloc_n<float>(static_cast<size_t>(n * c.E), "h2");
                    MoeScratch sc;
                    sc.act_bytes = static_cast<size_t>(R * c.F) * 4;
                    sc.act = ctx->alloc_n<float>(static_cast<size_t>(R * c.F), "act");
                    sc.down = ctx->alloc_n<float>(static_cast<size_t>(R * c.E), "down");
                    sc.gemm.xr_elems = std::max<size_t>(static_cast<size_t>(n * c.E), (moe_decode_q8_bytes(n, c.E, c.K, c.F) + 3) / 4);
                    sc.gemm.xr = ctx->alloc_n<float>(sc.gemm.xr_elems, "xr");
                    const size_t qb = q8_act_bytes(n, c.E);
                    auto* hqb = ctx->alloc_n<uint8_t>(qb, "hq");
                    cudaStream_t st = ctx->compute();
                    // separate ops
                    rms_norm(st, dxin, dnorm, n, c.E, c.E, 1e-6f, h1, c.E);
                    moe_experts(st, ex, h1, n, c.E, c.K, dids, nullptr, slot_of.data(), sc);
                    ASSERT_EQ(sc.pending_q, nullptr);
                    moe_combine(st, ex, n, c.E, c.K, dids, dw, nullptr, dpartial, x1, sc);
                    // fused
                    poison(sc.down, static_cast<size_t>(R * c.E));
                    Q8Input hq;
                    ASSERT_TRUE(rms_norm_q8(st, dxin, dnorm, n, c.E, c.E, 1e-6f, h2, c.E, nullptr, t, hqb, qb, hq));
                    NITRO_CUDA_CHECK(cudaMemsetAsync(sc.gemm.xr, 0xff, sc.gemm.xr_elems * 4, st));  // h's blocks must come from hq
                    sc.fuse_down = true;
                    moe_experts(st, ex, h2, n, c.E, c.K, dids, nullptr, slot_of.data(), sc, &hq);
                    ASSERT_NE(sc.pending_q, nullptr);
                    moe_combine(st, ex, n, c.E, c.K, dids, dw, nullptr, dpartial, x2, sc);
                    EXPECT_EQ(sc.pending_q, nullptr);
                    auto a = to_host(x1, x0.size()), b = to_host(x2, x0.size());
                    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(f32_to_bits(a[i]), f32_to_bits(b[i])) << "x " << i;
                    EXPECT_GT(nerr(a, x0), 1e-3);  // the experts added something
                    // the fused path wrote no per-pair down rows (all still the poison)
                    const auto dn = to_host(sc.down, static_cast<size_t>(R * c.E));
                    EXPECT_TRUE(std::all_of(dn.begin(), dn.end(), [](float v) { return std::isnan(v); }));
                    // Every chunks-in-flight setting of the integer kernels (mmvq_chunks) gives the
                    // default's bits, fused and separate.
                    if (n == 1 || n == 5)
                        for (int ch : {1, 2, 4}) {
                            SCOPED_TRACE("mmvq_chunks " + std::to_string(ch));
                            set_mmvq_chunks(ch);
                            float *x3 = to_dev(*ctx, x0), *x4 = to_dev(*ctx, x0);
                            sc.fuse_down = false;
                            moe_experts(st, ex, h1, n, c.E, c.K, dids, nullptr, slot_of.data(), sc);
                            moe_combine(st, ex, n, c.E, c.K, dids, dw, nullptr, dpartial, x3, sc);
                            Q8Input hq3;
                            ASSERT_TRUE(rms_norm_q8(st, dxin, dnorm, n, c.E, c.E, 1e-6f, h2, c.E, nullptr, t, hqb, qb, hq3));
                            sc.fuse_down = true;
                            moe_experts(st, ex, h2, n, c.E, c.K, dids, nullptr, slot_of.data(), sc, &hq3);
                            moe_combine(st, ex, n, c.E, c.K, dids, dw, nullptr, dpartial, x4, sc);
                            set_mmvq_chunks(0);
                            const auto a3 = to_host(x3, x0.size()), b4 = to_host(x4, x0.size());
                            for (size_t i = 0; i < a.size(); ++i) {
                                ASSERT_EQ(f32_to_bits(a3[i]), f32_to_bits(a[i])) << "separate, x " << i;
                                ASSERT_EQ(f32_to_bits(b4[i]), f32_to_bits(b[i])) << "fused, x " << i;
                            }
                            ctx->alloc().free(x3);
                            ctx->alloc().free(x4);
                        }
                    for (void* p : {static_cast<void*>(sc.act), static_cast<void*>(sc.down), static_cast<void*>(sc.gemm.xr),
                                    static_cast<void*>(hqb), static_cast<void*>(h1), static_cast<void*>(h2)})
                        ctx->alloc().free(p);
                }
        }
    }
}

namespace {

/// The grouped-GEMM problems: [N, K] expert matrices (the gpt-oss, qwen3moe gate/down and
/// qwen3next gate/down shapes) with each group's row count (0, 1, tile edges 64/65, 130).
struct GroupedCfg {
    int64_t K, N;
    std::vector<int64_t> rows;
};
const GroupedCfg kGroupedCfgs[] = {{2880, 2880, {65, 1}}, {2048, 768, {13, 130, 0, 65, 2}}, {768, 2048, {5, 64, 33}},
                                   {2048, 512, {1, 17, 64, 3}}, {512, 2048, {40, 9}}};

/// One random expert of type t per group of c, and their bytes back to back (a slot pool).
std::pair<std::vector<HostWeight>, std::vector<uint8_t>> group_experts(GgmlType t, const GroupedCfg& c) {
    std::vector<HostWeight> W;
    std::vector<uint8_t> pool;
    for (size_t g = 0; g < c.rows.size(); ++g) {
        W.push_back(make_weight(t, c.K, c.N, 0.1f));
        pool.insert(pool.end(), W.back().bytes.begin(), W.back().bytes.end());
    }
    return {std::move(W), std::move(pool)};
}

}  // namespace

// The grouped MoE GEMM of prompts (moe_gemm.h) against an f64 product of the same f16 operands
// (weights decoded by src/quant and rounded to f16 on the host, activations f16), at the expert
// shapes of gpt-oss (2880 x 2880), qwen3moe (2048 <-> 768) and qwen3next (2048 <-> 512), every
// weight type, groups of 0-130 rows (tile edges at 64). Only the f32 summation order differs, so
// the bound is the GEMV harness's 2e-5 (sqrt(K) * 6e-8 ~ 3e-6 expected), with each element also
// inside the worst-case f32 bound K * 2^-22 * sum |a_k w_k|. Rows outside the groups stay
// untouched, and each group alone gives the same bits as the grouped launch (the hybrid's staged
// experts run one per launch).
TEST_F(CudaOps, MoeGroupedGemmMatchesF16ReferenceAndDoesNotDependOnGrouping) {
    for (GgmlType t : kTypes) {
        for (const GroupedCfg& c : kGroupedCfgs) {
            if (!shape_ok(t, c.K)) continue;
            SCOPED_TRACE(type_display_name(t) + " K=" + std::to_string(c.K) + " N=" + std::to_string(c.N));
            const int64_t G = static_cast<int64_t>(c.rows.size());
            const int64_t R = std::accumulate(c.rows.begin(), c.rows.end(), int64_t{0}) + 3;  // 3 rows in no group
            const auto [W, pool] = group_experts(t, c);
            const size_t stride = W[0].bytes.size();
            auto a32 = randn(static_cast<size_t>(R * c.K));
            std::vector<uint16_t> a16(a32.size());
            for (size_t i = 0; i < a32.size(); ++i) a16[i] = f32_to_fp16(a32[i]);
            const uint8_t* dpool = to_dev(*ctx, pool);
            const auto* da = reinterpret_cast<const __half*>(to_dev(*ctx, a16));
            float* dout = ctx->alloc_n<float>(static_cast<size_t>(R * c.N), "out");
            std::vector<MoeGemmGroup> groups;
            int64_t row = 2;  // rows 0, 1 and the last are in no group
            for (int64_t g = 0; g < G; ++g) {
                groups.push_back({dpool + static_cast<size_t>(g) * stride, row, c.rows[static_cast<size_t>(g)]});
                row += c.rows[static_cast<size_t>(g)];
            }
            const DWeight shape{t, dpool, c.K, c.N, row_size(t, c.K)};
            poison(dout, static_cast<size_t>(R * c.N));
            moe_gemm_f16(ctx->compute(), shape, groups, da, c.K, dout, c.N);
            auto got = to_host(dout, static_cast<size_t>(R * c.N));
            std::vector<float> sub;
            std::vector<double> ref;
            double worst = 0;
            for (int64_t g = 0; g < G; ++g) {
                std::vector<float> w16(W[g].deq.size());
                for (size_t i = 0; i < w16.size(); ++i) w16[i] = fp16_to_f32(f32_to_fp16(W[g].deq[i]));
                for (int64_t m = 0; m < groups[g].rows; ++m) {
                    const int64_t r = groups[g].row0 + m;
                    for (int64_t n = 0; n < c.N; ++n) {
                        double sum = 0, mag = 0;
                        for (int64_t k = 0; k < c.K; ++k) {
                            const double p = static_cast<double>(w16[n * c.K + k]) * fp16_to_f32(a16[r * c.K + k]);
                            sum += p;
                            mag += std::fabs(p);
                        }
                        const float y = got[r * c.N + n];
                        sub.push_back(y);
                        ref.push_back(sum);
                        worst = std::max(worst, std::fabs(y - sum) / (c.K * std::ldexp(1.0, -22) * mag + 1e-30));
                    }
                }
            }
            EXPECT_LT(nerr(sub, ref), 2e-5);
            EXPECT_LE(worst, 1.0) << "an element outside the worst-case f32 summation bound";
            for (int64_t r : {int64_t{0}, int64_t{1}, R - 1})
                for (int64_t n = 0; n < c.N; ++n) ASSERT_TRUE(std::isnan(got[r * c.N + n])) << "row " << r << " written";
            // each group alone: the same bits
            poison(dout, static_cast<size_t>(R * c.N));
            for (const MoeGemmGroup& g : groups) moe_gemm_f16(ctx->compute(), shape, {&g, 1}, da, c.K, dout, c.N);
            auto alone = to_host(dout, static_cast<size_t>(R * c.N));
            for (int64_t r = 2; r < R - 1; ++r)
                for (int64_t n = 0; n < c.N; ++n)
                    ASSERT_EQ(f32_to_bits(alone[r * c.N + n]), f32_to_bits(got[r * c.N + n])) << "row " << r << " col " << n;
        }
    }
    // More groups than one launch's table (96) holds: 200 groups of 0-5 rows.
    const HostWeight w = make_weight(GgmlType::Q4_K, 256, 96, 0.1f);
    std::vector<uint16_t> a16(static_cast<size_t>(600 * 256));
    auto a32 = randn(a16.size());
    for (size_t i = 0; i < a16.size(); ++i) a16[i] = f32_to_fp16(a32[i]);
    const uint8_t* dw = to_dev(*ctx, w.bytes);
    const auto* da = reinterpret_cast<const __half*>(to_dev(*ctx, a16));
    float* dout = ctx->alloc_n<float>(static_cast<size_t>(600 * 96), "out");
    poison(dout, static_cast<size_t>(600 * 96));
    std::vector<MoeGemmGroup> groups;
    int64_t row = 0;
    for (int g = 0; g < 200; ++g) {
        groups.push_back({dw, row, g % 6});
        row += g % 6;
    }
    moe_gemm_f16(ctx->compute(), DWeight{GgmlType::Q4_K, dw, 256, 96, row_size(GgmlType::Q4_K, 256)}, groups, da, 256, dout, 96);
    auto got = to_host(dout, static_cast<size_t>(600 * 96));
    std::vector<float> sub;
    std::vector<double> ref;
    for (int64_t r = 0; r < row; ++r)
        for (int64_t n = 0; n < 96; ++n) {
            double sum = 0;
            for (int64_t k = 0; k < 256; ++k)
                sum += static_cast<double>(fp16_to_f32(f32_to_fp16(w.deq[n * 256 + k]))) * fp16_to_f32(a16[r * 256 + k]);
            sub.push_back(got[r * 96 + n]);
            ref.push_back(sum);
        }
    EXPECT_LT(nerr(sub, ref), 2e-5);
    EXPECT_TRUE(std::isnan(got[row * 96])) << "the row after the last group was written";
}

// The integer grouped MoE GEMM of prompts (moe_mmq.h) against the CPU engine's arithmetic: an f64
// product of the weights as src/quant decodes them (d * q - m per block: the same int8 values and
// scales the kernel unpacks) and the activations as the CPU rounds them (src/quant's Q8_0 / Q8_K
// quantize + dequantize: the values quantize_q8 produces, bit for bit), at the expert shapes of
// gpt-oss (2880 x 2880), qwen3moe (2048 <-> 768) and qwen3next (2048 <-> 512), every
// q8_supported type, groups of 0-130 rows (tile edges at 64), activation rows gathered through a
// permutation (as group_tok gathers a prompt's tokens). The integer block sums are exact, so only
// the f32 rounding of the scaled block sums (dw * dx, the min term) and their f32 summation over
// the K / 32 <= 90 blocks differ: about 2^-24 * sqrt(K / 64) ~ 4e-7 normalised; the bound 2e-6
// leaves 4x, and the f16 path (5e-4 here) or any fragment-layout error (O(1)) is far outside it.
// Each element is also within 1e-4 of sum_k |w_k x_k| (a wrong tile edge or element shows), rows
// outside the groups stay untouched, and each group alone gives the same bits as the grouped launch.
TEST_F(CudaOps, MoeMmqMatchesCpuArithmeticAndDoesNotDependOnGrouping) {
    for (GgmlType t : kTypes) {
        if (!q8_supported(t)) continue;
        for (const GroupedCfg& c : kGroupedCfgs) {
            if (!shape_ok(t, c.K)) continue;
            SCOPED_TRACE(type_display_name(t) + " K=" + std::to_string(c.K) + " N=" + std::to_string(c.N));
            const int64_t G = static_cast<int64_t>(c.rows.size());
            const int64_t R = std::accumulate(c.rows.begin(), c.rows.end(), int64_t{0}) + 3;  // 3 rows in no group
            const auto [W, pool] = group_experts(t, c);
            const size_t stride = W[0].bytes.size();
            const auto x = randn(static_cast<size_t>(R * c.K));
            const auto xr = rounded(t, x, c.K);  // the CPU's activation values
            std::vector<int32_t> a_row(static_cast<size_t>(R));
            std::iota(a_row.begin(), a_row.end(), 0);
            std::shuffle(a_row.begin(), a_row.end(), rng());
            const uint8_t* dpool = to_dev(*ctx, pool);
            const float* dx = to_dev(*ctx, x);
            const int32_t* drow = to_dev(*ctx, a_row);
            const size_t qbytes = q8_act_bytes(R, c.K);
            void* dq = ctx->alloc().alloc(qbytes, "q8");
            const Q8Acts a = quantize_q8(ctx->compute(), t, dx, c.K, R, c.K, dq, qbytes);
            float* dout = ctx->alloc_n<float>(static_cast<size_t>(R * c.N), "out");
            std::vector<MoeGemmGroup> groups;
            int64_t row = 2;  // rows 0, 1 and the last are in no group
            for (int64_t g = 0; g < G; ++g) {
                groups.push_back({dpool + static_cast<size_t>(g) * stride, row, c.rows[static_cast<size_t>(g)]});
                row += c.rows[static_cast<size_t>(g)];
            }
            const DWeight shape{t, dpool, c.K, c.N, row_size(t, c.K)};
            poison(dout, static_cast<size_t>(R * c.N));
            moe_mmq(ctx->compute(), shape, groups, a, drow, dout, c.N);
            auto got = to_host(dout, static_cast<size_t>(R * c.N));
            std::vector<float> sub;
            std::vector<double> ref;
            double worst = 0;
            for (int64_t g = 0; g < G; ++g)
                for (int64_t m = 0; m < groups[g].rows; ++m) {
                    const int64_t r = groups[g].row0 + m, src = a_row[static_cast<size_t>(r)];
                    for (int64_t n = 0; n < c.N; ++n) {
                        double sum = 0, mag = 0;
                        for (int64_t k = 0; k < c.K; ++k) {
                            const double p = static_cast<double>(W[g].deq[n * c.K + k]) * xr[src * c.K + k];
                            sum += p;
                            mag += std::fabs(p);
                        }
                        const float y = got[r * c.N + n];
                        sub.push_back(y);
                        ref.push_back(sum);
                        worst = std::max(worst, std::fabs(y - sum) / (1e-4 * mag + 1e-30));
                    }
                }
            EXPECT_LT(nerr(sub, ref), 2e-6);
            EXPECT_LE(worst, 1.0) << "an element more than 1e-4 of sum |w x| away from the reference";
            for (int64_t r : {int64_t{0}, int64_t{1}, R - 1})
                for (int64_t n = 0; n < c.N; ++n) ASSERT_TRUE(std::isnan(got[r * c.N + n])) << "row " << r << " written";
            // each group alone: the same bits
            poison(dout, static_cast<size_t>(R * c.N));
            for (const MoeGemmGroup& g : groups) moe_mmq(ctx->compute(), shape, {&g, 1}, a, drow, dout, c.N);
            auto alone = to_host(dout, static_cast<size_t>(R * c.N));
            for (int64_t r = 2; r < R - 1; ++r)
                for (int64_t n = 0; n < c.N; ++n)
                    ASSERT_EQ(f32_to_bits(alone[r * c.N + n]), f32_to_bits(got[r * c.N + n])) << "row " << r << " col " << n;
            ctx->alloc().free(dq);
        }
    }
    // More groups than one launch's table (96) holds: 200 groups of 0-5 rows, no gather.
    const HostWeight w = make_weight(GgmlType::Q4_K, 256, 96, 0.1f);
    const auto x = randn(static_cast<size_t>(600 * 256));
    const auto xr = rounded(GgmlType::Q4_K, x, 256);
    const uint8_t* dw = to_dev(*ctx, w.bytes);
    const size_t qbytes = q8_act_bytes(600, 256);
    void* dq = ctx->alloc().alloc(qbytes, "q8");
    const Q8Acts a = quantize_q8(ctx->compute(), GgmlType::Q4_K, to_dev(*ctx, x), 256, 600, 256, dq, qbytes);
    float* dout = ctx->alloc_n<float>(static_cast<size_t>(600 * 96), "out");
    poison(dout, static_cast<size_t>(600 * 96));
    std::vector<MoeGemmGroup> groups;
    int64_t row = 0;
    for (int g = 0; g < 200; ++g) {
        groups.push_back({dw, row, g % 6});
        row += g % 6;
    }
    moe_mmq(ctx->compute(), DWeight{GgmlType::Q4_K, dw, 256, 96, row_size(GgmlType::Q4_K, 256)}, groups, a, nullptr, dout, 96);
    auto got = to_host(dout, static_cast<size_t>(600 * 96));
    std::vector<float> sub;
    std::vector<double> ref;
    for (int64_t r = 0; r < row; ++r)
        for (int64_t n = 0; n < 96; ++n) {
            double sum = 0;
            for (int64_t k = 0; k < 256; ++k) sum += static_cast<double>(w.deq[n * 256 + k]) * xr[r * 256 + k];
            sub.push_back(got[r * 96 + n]);
            ref.push_back(sum);
        }
    EXPECT_LT(nerr(sub, ref), 2e-6);
    EXPECT_TRUE(std::isnan(got[row * 96])) << "the row after the last group was written";
    ctx->alloc().free(dq);
}

/// Skewed routing of n tokens to K of X experts (every third token to experts 0..K-1, so those
/// get more than one 64-row tile; the others at random), a slot table with experts e % 5 == 3 not
/// resident and the others in shuffled slots, and moe_group's device grouping of it in sc.
struct SkewedGrouping {
    std::vector<int32_t> ids, slot_of;
    int32_t* dslot = nullptr;
    MoeScratch sc;
};
SkewedGrouping skewed_grouping(DeviceContext& ctx, int64_t X, int64_t n, int K) {
    SkewedGrouping sg;
    sg.ids.resize(static_cast<size_t>(n * K));
    sg.slot_of.resize(static_cast<size_t>(X));
    for (int64_t tok = 0; tok < n; ++tok) {
        std::vector<int32_t> all(static_cast<size_t>(X));
        std::iota(all.begin(), all.end(), 0);
        std::shuffle(all.begin(), all.end(), rng());
        for (int j = 0; j < K; ++j) sg.ids[tok * K + j] = tok % 3 == 0 ? j : all[j];
    }
    for (int64_t e = 0; e < X; ++e) sg.slot_of[e] = e % 5 == 3 ? -1 : static_cast<int32_t>((e * 7) % X);
    const int64_t R = n * K;
    sg.sc.group_tok = ctx.alloc_n<int32_t>(static_cast<size_t>(R), "g");
    sg.sc.row_of = ctx.alloc_n<int32_t>(static_cast<size_t>(R), "g");
    sg.sc.group_exp = ctx.alloc_n<int32_t>(static_cast<size_t>(R), "g");
    sg.sc.group_off = ctx.alloc_n<int32_t>(static_cast<size_t>(2 * (X + 1)), "g");
    sg.dslot = to_dev(ctx, sg.slot_of);
    moe_group(ctx.compute(), to_dev(ctx, sg.ids), n, K, sg.dslot, X, sg.sc);
    return sg;
}

/// X random experts of [N, Kdim] weights of type t, one after another (a slot pool), on the host.
std::vector<uint8_t> expert_pool(GgmlType t, int64_t Kdim, int64_t N, int64_t X) {
    std::vector<uint8_t> pool;
    for (int64_t e = 0; e < X; ++e) {
        auto w = make_weight(t, Kdim, N, 0.1f);
        pool.insert(pool.end(), w.bytes.begin(), w.bytes.end());
    }
    return pool;
}

/// A slot-table product's rows (h1) against the host-table product of the same groups (h2), both
/// [R, N] and poisoned with NaN before: rows of non-resident experts unwritten, the others equal
/// bit for bit. off: the grouping's row offsets [X + 1].
void expect_slot_rows_equal_host_rows(const std::vector<float>& h1, const std::vector<float>& h2,
                                      const std::vector<int32_t>& off, const std::vector<int32_t>& slot_of, int64_t X,
                                      int64_t N) {
    for (int64_t e = 0; e < X; ++e)
        for (int64_t g = off[e]; g < off[e + 1]; ++g)
            for (int64_t c = 0; c < N; ++c) {
                const size_t i = static_cast<size_t>(g * N + c);
                if (slot_of[e] < 0) {
                    ASSERT_TRUE(std::isnan(h1[i])) << "a row of non-resident expert " << e << " was written";
                } else {
                    ASSERT_FALSE(std::isnan(h1[i]));
                    ASSERT_EQ(f32_to_bits(h1[i]), f32_to_bits(h2[i])) << "expert " << e << " row " << g;
                }
            }
}

// The integer GEMM's slot-table form over moe_group's device grouping (activations gathered by
// group_tok, as moe_experts runs it) equals its host-table form over the same groups bit for bit,
// for every q8_supported type (the hybrid's staged experts run the host-table form, GPU-all prompts
// the slot form), and rows of non-resident experts are not written.
TEST_F(CudaOps, MoeMmqSlotFormEqualsHostTableForm) {
    const int64_t X = 64, n = 200, Kdim = 512, N = 160;
    const int K = 8;
    SkewedGrouping sg = skewed_grouping(*ctx, X, n, K);  // experts 0-7: 67 rows and more, two tiles
    const std::vector<int32_t>& slot_of = sg.slot_of;
    const MoeScratch& sc = sg.sc;
    int32_t* dslot = sg.dslot;
    const int64_t R = n * K;
    auto off = to_host(sc.group_off, static_cast<size_t>(X + 1));
    const float* dx = to_dev(*ctx, randn(static_cast<size_t>(n * Kdim)));
    const size_t qbytes = q8_act_bytes(n, Kdim);
    void* dq = ctx->alloc().alloc(qbytes, "q8");
    float* d1 = ctx->alloc_n<float>(static_cast<size_t>(R * N), "o1");
    float* d2 = ctx->alloc_n<float>(static_cast<size_t>(R * N), "o2");
    for (GgmlType t : kTypes) {
        if (!q8_supported(t)) continue;
        SCOPED_TRACE(type_display_name(t));
        const size_t stride = row_size(t, Kdim) * N;
        uint8_t* dpool = to_dev(*ctx, expert_pool(t, Kdim, N, X));
        const Q8Acts a = quantize_q8(ctx->compute(), t, dx, Kdim, n, Kdim, dq, qbytes);
        poison(d1, static_cast<size_t>(R * N));
        poison(d2, static_cast<size_t>(R * N));
        const DWeight shape{t, dpool, Kdim, N, row_size(t, Kdim)};
        moe_mmq_slots(ctx->compute(), shape, stride, dslot, X, sc.group_off, R, a, sc.group_tok, d1, N);
        std::vector<MoeGemmGroup> groups;
        for (int64_t e = 0; e < X; ++e)
            if (slot_of[e] >= 0) groups.push_back({dpool + static_cast<size_t>(slot_of[e]) * stride, off[e], off[e + 1] - off[e]});
        moe_mmq(ctx->compute(), shape, groups, a, sc.group_tok, d2, N);
        expect_slot_rows_equal_host_rows(to_host(d1, static_cast<size_t>(R * N)), to_host(d2, static_cast<size_t>(R * N)), off,
                                         slot_of, X, N);
        ctx->alloc().free(dpool);
        if (HasFatalFailure()) return;
    }
    ctx->alloc().free(dq);
}

// moe_group (the grouping on the device, no host round trip) against the grouping computed here:
// offsets and tile starts exact, every pair in its expert's rows once, and the slot-table GEMM over
// it equal bit for bit to the host-table GEMM of the same groups (the hybrid's staged experts and
// GPU-all prompts then give the same rows).
TEST_F(CudaOps, MoeGroupOnTheDeviceMatchesTheHostGrouping) {
    const int64_t X = 128, n = 300, Kdim = 256, N = 192;
    const int K = 8;
    const GgmlType t = GgmlType::Q4_K;
    SkewedGrouping sg = skewed_grouping(*ctx, X, n, K);  // experts 0-7: 100 rows each, two tiles
    const std::vector<int32_t>& ids = sg.ids;
    const std::vector<int32_t>& slot_of = sg.slot_of;
    const MoeScratch& sc = sg.sc;
    int32_t* dslot = sg.dslot;
    const int64_t R = n * K;
    auto off = to_host(sc.group_off, static_cast<size_t>(2 * (X + 1)));
    auto gtok = to_host(sc.group_tok, static_cast<size_t>(R));
    auto gexp = to_host(sc.group_exp, static_cast<size_t>(R));
    auto row_of = to_host(sc.row_of, static_cast<size_t>(R));
    std::vector<int64_t> cnt(static_cast<size_t>(X), 0);
    for (int32_t e : ids) ++cnt[static_cast<size_t>(e)];
    int64_t o = 0, tiles = 0, big = 0;
    for (int64_t e = 0; e < X; ++e) {
        ASSERT_EQ(off[e], o) << "offset of expert " << e;
        ASSERT_EQ(off[X + 1 + e], tiles) << "first tile of expert " << e;
        o += cnt[e];
        tiles += slot_of[e] >= 0 ? (cnt[e] + 63) / 64 : 0;
        big += cnt[e] > 64;
    }
    ASSERT_EQ(off[X], R);
    ASSERT_EQ(off[2 * X + 1], tiles);
    ASSERT_LE(tiles, moe_max_tiles(R, X));
    EXPECT_GT(big, 0) << "the routing should give some expert more than one tile";
    std::vector<int> seen(static_cast<size_t>(R), 0);
    for (int64_t r = 0; r < R; ++r) {
        const int32_t g = row_of[r];
        ASSERT_TRUE(g >= 0 && g < R);
        ++seen[static_cast<size_t>(g)];
        EXPECT_EQ(gexp[g], ids[r]);
        EXPECT_EQ(gtok[g], r / K);
        EXPECT_TRUE(g >= off[ids[r]] && g < off[ids[r] + 1]);
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), R) << "row_of is not a permutation";

    // The slot-table GEMM over this grouping vs the host-table GEMM of the same groups.
    const size_t stride = row_size(t, Kdim) * N;
    const uint8_t* dpool = to_dev(*ctx, expert_pool(t, Kdim, N, X));
    auto a32 = randn(static_cast<size_t>(R * Kdim));
    std::vector<uint16_t> a16(a32.size());
    for (size_t i = 0; i < a16.size(); ++i) a16[i] = f32_to_fp16(a32[i]);
    const auto* da = reinterpret_cast<const __half*>(to_dev(*ctx, a16));
    float* d1 = ctx->alloc_n<float>(static_cast<size_t>(R * N), "o1");
    float* d2 = ctx->alloc_n<float>(static_cast<size_t>(R * N), "o2");
    poison(d1, static_cast<size_t>(R * N));
    poison(d2, static_cast<size_t>(R * N));
    const DWeight shape{t, dpool, Kdim, N, row_size(t, Kdim)};
    moe_gemm_f16_slots(ctx->compute(), shape, stride, dslot, X, sc.group_off, R, da, Kdim, d1, N);
    std::vector<MoeGemmGroup> groups;
    for (int64_t e = 0; e < X; ++e)
        if (slot_of[e] >= 0) groups.push_back({dpool + static_cast<size_t>(slot_of[e]) * stride, off[e], off[e + 1] - off[e]});
    moe_gemm_f16(ctx->compute(), shape, groups, da, Kdim, d2, N);
    expect_slot_rows_equal_host_rows(to_host(d1, static_cast<size_t>(R * N)), to_host(d2, static_cast<size_t>(R * N)), off,
                                     slot_of, X, N);
}

