// The kernel table of `nitro bench` (bench/bench.h bench_expert_kernels, docs/cpu-kernels.md
// "Benchmark"): the cells it runs, the bytes it counts per step (checked against the GGUF block
// sizes by hand), and the read probe it makes before each cell over the same memory.
#include "arch/synth.h"
#include "cpu/matmul.h"
#include "gguf/gguf.h"
#include "gguf_bytes.h"
#include "cpu/thread_pool.h"
#include "quant/types.h"
#include "bench/bench.h"
#include "runtime/model.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace nitro {
namespace {

TEST(BenchKernels, CellsBytesAndPerCellProbe) {
    cpu::ThreadPool pool(2);
    KernelBenchOptions o;
    o.n_embd = 300;  // rounded down to whole blocks: MXFP4 288 (blocks of 32), Q4_K 256 (super-blocks of 256)
    o.n_ff = 256;
    o.n_used = 2;
    o.types = {GgmlType::MXFP4, GgmlType::Q4_K};
    o.isas = {"scalar"};
    o.tokens = {1, 3};
    o.pool_bytes = size_t{16} << 20;
    o.seconds = 0.01;
    const std::string before = cpu::kernel_isa();
    const std::vector<KernelBenchRow> rows = bench_expert_kernels(pool, o);
    EXPECT_EQ(cpu::kernel_isa(), before) << "the table must leave the kernel level as it found it";
    ASSERT_EQ(rows.size(), 4u);  // 2 types x 1 level x 2 token counts, types outer
    // By hand: MXFP4 is 17 bytes per 32 values, Q4_K 144 bytes per 256.
    //   MXFP4, E = 288, F = 256: gate/up rows of 288 values = 9 blocks = 153 B, 256 rows each: 39,168 B;
    //     down rows of 256 values = 8 blocks = 136 B, 288 rows: 39,168 B; per expert 117,504 B; 2 experts 235,008 B.
    //   Q4_K, E = F = 256: every row 144 B, 256 rows per matrix: 36,864 B; per expert 110,592 B; 2 experts 221,184 B.
    const double want[2] = {235008.0, 221184.0};
    const int64_t want_e[2] = {288, 256};
    for (size_t i = 0; i < rows.size(); ++i) {
        const KernelBenchRow& r = rows[i];
        SCOPED_TRACE(type_display_name(r.type) + " tokens " + std::to_string(r.tokens));
        EXPECT_EQ(r.type, o.types[i / 2]);
        EXPECT_EQ(r.tokens, o.tokens[i % 2]);
        EXPECT_EQ(r.isa, "scalar");
        EXPECT_EQ(r.n_embd, want_e[i / 2]);
        EXPECT_EQ(r.n_ff, 256);
        EXPECT_EQ(r.bytes_per_step, want[i / 2]);
        EXPECT_GT(r.ms_per_step, 0.0);
        EXPECT_NEAR(r.gb_s, r.bytes_per_step / (r.ms_per_step * 1e-3) / 1e9, 1e-9 * r.gb_s);
        EXPECT_GT(r.read_gb_s, 0.0) << "each cell carries its own read probe";
    }
}

TEST(BenchKernels, DecodeWeightBytesCountEveryMatrixATokenReads) {
    // nitro bench's decode floor divides the read bandwidth by every weight byte a decode token
    // reads; here those bytes are counted by hand from the preset's shapes and the GGUF block sizes
    // (tiny qwen3moe: F16 attention, F32 router, Q4_K experts, Q8_0 token_embd as the LM head).
    SynthOptions o;
    o.arch = "qwen3moe";
    o.preset = "tiny";
    o.expert_type = GgmlType::Q4_K;
    o.out = test::temp_dir("bench-bytes") + "/q.gguf";
    synth_model(o);
    int64_t n_vocab = 0;
    const ModelHparams hp = synth_preset("qwen3moe", "tiny", &n_vocab);
    {
        GgufModel g(o.out);
        n_vocab = g.get("token_embd.weight").ne[1];  // the tokenizer's size (the preset leaves it to the vocabulary)
        ASSERT_GT(n_vocab, 0);
        ASSERT_EQ(g.get("blk.0.attn_q.weight").type, GgmlType::F16);
        ASSERT_EQ(g.get("blk.0.ffn_gate_inp.weight").type, GgmlType::F32);
        ASSERT_EQ(g.get("token_embd.weight").type, GgmlType::Q8_0);  // tied: the LM head reads token_embd
    }
    const Model model(o.out);
    const PhaseTimes b = decode_weight_bytes(model);
    const double E = static_cast<double>(hp.n_embd), q = static_cast<double>(hp.n_head * hp.head_dim),
                 kv = static_cast<double>(hp.n_head_kv * hp.head_dim), L = static_cast<double>(hp.n_layer);
    // F16: 2 bytes a value. q, k, v: [E] -> [q], [kv], [kv]; output: [q] -> [E].
    EXPECT_DOUBLE_EQ(b[static_cast<size_t>(Phase::AttnProj)], L * 2 * E * (q + 2 * kv));
    EXPECT_DOUBLE_EQ(b[static_cast<size_t>(Phase::AttnOut)], L * 2 * q * E);
    EXPECT_DOUBLE_EQ(b[static_cast<size_t>(Phase::Router)], L * 4 * E * static_cast<double>(hp.n_expert));
    // Q4_K: 144 bytes per 256 values; the n_expert_used experts' gate and up ([E] -> [n_ff_exp]) and down.
    const double expert_matrix = static_cast<double>(hp.n_ff_exp) * E / 256 * 144;
    EXPECT_DOUBLE_EQ(b[static_cast<size_t>(Phase::ExpertGateUp)], L * static_cast<double>(hp.n_expert_used) * 2 * expert_matrix);
    EXPECT_DOUBLE_EQ(b[static_cast<size_t>(Phase::ExpertDown)], L * static_cast<double>(hp.n_expert_used) * expert_matrix);
    // Q8_0: 34 bytes per 32 values, n_vocab rows of E.
    EXPECT_DOUBLE_EQ(b[static_cast<size_t>(Phase::LmHead)], static_cast<double>(n_vocab) * E / 32 * 34);
}

}  // namespace
}  // namespace nitro
