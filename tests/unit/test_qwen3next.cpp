// qwen3next on the CPU engine (Gated DeltaNet layers with a recurrent state), on a `nitro synth
// --arch qwen3next --preset tiny` model (3 DeltaNet layers then 1 gated attention layer; 2 key
// heads shared by 4 value heads):
//   - the layer kinds and the recurrent state's size, computed by hand from the shapes;
//   - a prompt split into chunks at multiples of the delta rule's 64-token block gives bit-identical
//     logits (the conv and delta-rule states carry across chunks exactly);
//   - prefix reuse: truncating to a snapshot position restores it; to any other position restores
//     the newest earlier snapshot and evaluates the held tokens again; decoding afterwards equals,
//     bit for bit, a fresh session that evaluated the same tokens in the same chunks;
//   - several sequences in one batch (server --parallel) equal each sequence alone, bit for bit;
//   - a file with a missing or inconsistent DeltaNet key or tensor is a clear error naming it.
// Agreement with llama.cpp is tests/peer (synth models) and test_qwen3next_fixture (the fixture's
// goldens); the delta rule against its definition is test_delta_net.
#include "arch/synth.h"
#include "core/error.h"
#include "gguf/writer.h"
#include "gguf_bytes.h"
#include "runtime/placement.h"
#include "runtime/session.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

using namespace nitro;

namespace {

class Qwen3Next : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        const std::string dir = test::temp_dir("qwen3next");
        SynthOptions o;
        o.arch = "qwen3next";
        o.preset = "tiny";
        o.out = dir + "/tiny-qwen3next.gguf";
        synth_model(o);
        model_ = new Model(o.out);
    }
    static void TearDownTestSuite() {
        delete model_;
        model_ = nullptr;
    }
    static const Model& model() { return *model_; }
    static Model* model_;
};
Model* Qwen3Next::model_ = nullptr;

std::vector<int32_t> tokens(int n, uint32_t seed, int32_t vocab) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    uint32_t x = seed;
    for (auto& t : v) {
        x = x * 1664525u + 1013904223u;
        t = static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(vocab));
    }
    return v;
}

std::vector<int32_t> slice(const std::vector<int32_t>& v, size_t a, size_t b) {
    return std::vector<int32_t>(v.begin() + static_cast<long>(a), v.begin() + static_cast<long>(b));
}

SessionOptions opts(int64_t n_ubatch = 512) {
    SessionOptions so;
    so.n_threads = 2;
    so.n_ctx = 1024;
    so.n_ubatch = n_ubatch;
    return so;
}

}  // namespace

TEST_F(Qwen3Next, LayerKindsAndStateSize) {
    const Model& m = model();
    Session s(m, opts());
    const ModelSpec& sp = s.spec();
    ASSERT_EQ(sp.n_layer, 4);
    for (int il = 0; il < 3; ++il) {
        EXPECT_EQ(sp.layers[static_cast<size_t>(il)].kind, LayerKind::DeltaNet) << il;
        EXPECT_EQ(sp.layers[static_cast<size_t>(il)].kv_capacity, 0) << il;  // no K/V for a DeltaNet layer
        EXPECT_TRUE(m.layers()[static_cast<size_t>(il)].recurrent());
    }
    EXPECT_EQ(sp.layers[3].kind, LayerKind::Attention);  // (il + 1) % 4 == 0
    EXPECT_EQ(sp.layers[3].kv_capacity, 1024);
    EXPECT_TRUE(sp.attn_gate);
    EXPECT_TRUE(sp.shared_expert);
    EXPECT_EQ(sp.rope.n_rot, 16);  // a quarter of head_dim 64
    // Per DeltaNet layer: conv state (4 - 1) x conv_dim, conv_dim = 2 x 2 key heads x 64 + 4 value
    // heads x 64 = 512; delta state 4 heads x 64 x 64. Three layers, F32, one sequence.
    EXPECT_EQ(sp.ssm.conv_dim(), 512);
    EXPECT_EQ(s.recurrent_bytes(), 3u * (3u * 512u + 4u * 64u * 64u) * 4u);
    // Value heads 0, 1 read key head 0; 2, 3 key head 1 (qwen3next repeats each key head).
    EXPECT_EQ(sp.ssm.k_head(1), 0);
    EXPECT_EQ(sp.ssm.k_head(2), 1);
}

TEST_F(Qwen3Next, PromptChunksAtBlockMultiplesAreBitIdentical) {
    const Model& m = model();
    const auto p = tokens(300, 7, static_cast<int32_t>(m.n_vocab()));
    std::vector<float> ref, got;
    {
        Session s(m, opts(512));
        s.eval(p, true, ref);
    }
    for (int64_t ub : {64, 128, 192}) {
        SCOPED_TRACE(ub);
        Session s(m, opts(ub));  // 300 tokens in chunks of ub, each a whole number of 64-token blocks but the last
        s.eval(p, true, got);
        EXPECT_TRUE(got == ref);
    }
    // Two evaluations (64 tokens, then the rest) equal one: the states carry over between calls.
    Session s(m, opts(512));
    std::vector<float> a, b;
    s.eval(slice(p, 0, 64), true, a);
    s.eval(slice(p, 64, 300), true, b);
    a.insert(a.end(), b.begin(), b.end());
    EXPECT_TRUE(a == ref);
}

TEST_F(Qwen3Next, TruncateRestoresOrRecomputesTheState) {
    const Model& m = model();
    const int32_t V = static_cast<int32_t>(m.n_vocab());
    const auto p = tokens(60, 11, V);     // prompt (0..40) and decoded tokens (40..60)
    const auto cont = tokens(20, 12, V);  // what a later request appends
    std::vector<float> l;

    // The served session: a 40-token prompt (snapshot at 40), then 20 single-token steps.
    Session s(m, opts());
    s.eval(slice(p, 0, 40), false, l);
    for (size_t i = 40; i < 60; ++i) s.eval(slice(p, i, i + 1), false, l);
    EXPECT_EQ(s.seq_checkpoints(0), std::vector<int64_t>{40});

    // Reuse a prefix of 47 tokens: no snapshot there, so the state at 40 is restored and tokens
    // 40..46 are evaluated again (one chunk of 7).
    s.truncate(47);
    EXPECT_EQ(s.n_past(), 47);
    EXPECT_EQ(s.recomputed_tokens(), 7);
    std::vector<float> got;
    s.eval(cont, true, got);

    // A fresh session over the same tokens, in the same chunks, gives the same logits bit for bit.
    Session f(m, opts());
    f.eval(slice(p, 0, 40), false, l);
    f.eval(slice(p, 40, 47), false, l);
    std::vector<float> want;
    f.eval(cont, true, want);
    EXPECT_TRUE(got == want);

    // The recurrent state mattered: continuing from the stale state (the last decoded token's)
    // would have given other logits.
    Session stale(m, opts());
    stale.eval(slice(p, 0, 40), false, l);
    for (size_t i = 40; i < 60; ++i) stale.eval(slice(p, i, i + 1), false, l);
    std::vector<float> wrong;
    stale.eval(cont, true, wrong);
    EXPECT_FALSE(wrong == want);

    // Back to the snapshot position itself (40, and 47 has its own snapshot now): no recomputation.
    EXPECT_EQ(s.seq_checkpoints(0), (std::vector<int64_t>{40, 47, 67}));
    const int64_t before = s.recomputed_tokens();
    s.truncate(40);
    EXPECT_EQ(s.recomputed_tokens(), before);
    s.eval(cont, true, got);
    Session f2(m, opts());
    f2.eval(slice(p, 0, 40), false, l);
    f2.eval(cont, true, want);
    EXPECT_TRUE(got == want);

    // Below every snapshot: the initial state, and all 25 tokens again.
    s.truncate(25);
    EXPECT_EQ(s.recomputed_tokens(), before + 25);
    EXPECT_TRUE(s.seq_checkpoints(0) == std::vector<int64_t>{25});
    s.eval(cont, true, got);
    Session f3(m, opts());
    f3.eval(slice(p, 0, 25), false, l);
    f3.eval(cont, true, want);
    EXPECT_TRUE(got == want);

    EXPECT_NE(test::error_of([&] { s.truncate(100); }), "");
}

TEST_F(Qwen3Next, SnapshotsAreBounded) {
    const Model& m = model();
    SessionOptions so = opts();
    so.n_checkpoints = 2;
    Session s(m, so);
    const auto p = tokens(30, 3, static_cast<int32_t>(m.n_vocab()));
    std::vector<float> l;
    s.eval(slice(p, 0, 10), false, l);
    s.eval(slice(p, 10, 20), false, l);
    s.eval(slice(p, 20, 21), false, l);  // a decode step takes none
    s.eval(slice(p, 21, 30), false, l);
    EXPECT_EQ(s.seq_checkpoints(0), (std::vector<int64_t>{20, 30}));
    // 2 snapshots of 3 layers x (3 x 512 + 4 x 64 x 64) floats besides the live state.
    EXPECT_EQ(s.recurrent_bytes(), 3u * 3u * (3u * 512u + 4u * 64u * 64u) * 4u);
}

TEST_F(Qwen3Next, BatchedSequencesEqualEachAlone) {
    const Model& m = model();
    const int32_t V = static_cast<int32_t>(m.n_vocab());
    // Per step, how many tokens each of 3 sequences appends (0: it waits); rows of the sequences
    // interleave in the batch.
    const std::vector<std::vector<int>> steps = {{9, 1, 70}, {1, 1, 0}, {1, 5, 1}, {0, 1, 1}, {3, 1, 1}};
    std::vector<std::vector<int32_t>> seqs;
    for (uint32_t q = 0; q < 3; ++q) seqs.push_back(tokens(100, 20 + q, V));

    SessionOptions so = opts();
    so.n_seq = 3;
    Session b(m, so);
    std::vector<std::unique_ptr<Session>> own;
    for (int q = 0; q < 3; ++q) own.push_back(std::make_unique<Session>(m, opts()));
    std::vector<size_t> done(3, 0);
    for (const auto& st : steps) {
        std::vector<int32_t> tok, sq;
        std::vector<uint8_t> want;
        // Interleave: one row of each sequence in turn while any has rows left in this step.
        std::vector<int> left = st;
        for (bool any = true; any;) {
            any = false;
            for (int q = 0; q < 3; ++q)
                if (left[static_cast<size_t>(q)] > 0) {
                    tok.push_back(seqs[static_cast<size_t>(q)][done[static_cast<size_t>(q)]++]);
                    sq.push_back(q);
                    want.push_back(1);
                    --left[static_cast<size_t>(q)];
                    any = true;
                }
        }
        std::vector<float> lb;
        b.eval_batch(SeqBatch{tok, sq, want}, lb);
        // Each sequence alone: the same tokens as one evaluation, all logits.
        for (int q = 0; q < 3; ++q) {
            const size_t k = static_cast<size_t>(st[static_cast<size_t>(q)]);
            if (k == 0) continue;
            const size_t end = done[static_cast<size_t>(q)];
            std::vector<float> la;
            own[static_cast<size_t>(q)]->eval(slice(seqs[static_cast<size_t>(q)], end - k, end), true, la);
            // Rows of sequence q in the batch, in order.
            size_t j = 0;
            for (size_t r = 0; r < sq.size(); ++r) {
                if (sq[r] != q) continue;
                const size_t Vs = static_cast<size_t>(V);
                EXPECT_TRUE(std::equal(lb.begin() + static_cast<long>(r * Vs), lb.begin() + static_cast<long>((r + 1) * Vs),
                                       la.begin() + static_cast<long>(j * Vs)))
                    << "sequence " << q << " row " << r;
                ++j;
            }
        }
    }
    for (int q = 0; q < 3; ++q) EXPECT_EQ(b.seq_n_past(q), static_cast<int64_t>(done[static_cast<size_t>(q)]));
}

namespace {

/// A copy of `src` without the metadata key `drop`, metadata changed by `edit`, tensors filtered by `keep`.
std::string rewrite(const std::string& src, const std::string& out, const std::function<void(GgufMetadata&)>& edit,
                    const std::function<bool(const std::string&)>& keep, const std::string& drop = "") {
    GgufModel in(src);
    GgufWriter w;
    for (const auto& [k, v] : in.metadata().entries())
        if (k != drop) w.metadata().set(k, v);
    edit(w.metadata());
    for (const auto& t : in.tensors())
        if (keep(t.name)) w.add_tensor(t.name, t.type, std::span<const int64_t>(t.ne.data(), static_cast<size_t>(t.n_dims)));
    w.open(out);
    for (const auto& t : in.tensors())
        if (keep(t.name)) w.write_data(t.data, t.n_bytes);
    w.finish();
    return out;
}

}  // namespace

TEST_F(Qwen3Next, BadFilesAreClearErrors) {
    const std::string dir = test::temp_dir("qwen3next-bad");
    const std::string src = model().path();
    auto all = [](const std::string&) { return true; };
    auto err = [](const std::string& path) { return test::error_of([&] { Model m(path); }); };
    // A missing DeltaNet hyperparameter.
    std::string e = err(rewrite(src, dir + "/a.gguf", [](GgufMetadata&) {}, all, "qwen3next.ssm.state_size"));
    EXPECT_NE(e.find("qwen3next.ssm.state_size"), std::string::npos) << e;
    // Value heads not a multiple of key heads.
    e = err(rewrite(src, dir + "/b.gguf", [](GgufMetadata& m) { m.set("qwen3next.ssm.group_count", uint32_t{3}); }, all));
    EXPECT_NE(e.find("ssm.group_count"), std::string::npos) << e;
    // Neither attn_qkv + attn_gate nor ssm_in in a DeltaNet layer.
    e = err(rewrite(src, dir + "/c.gguf", [](GgufMetadata&) {}, [](const std::string& n) { return n != "blk.1.attn_qkv.weight"; }));
    EXPECT_NE(e.find("blk.1.attn_qkv.weight"), std::string::npos) << e;
    // A missing conv kernel.
    e = err(rewrite(src, dir + "/d.gguf", [](GgufMetadata&) {}, [](const std::string& n) { return n != "blk.2.ssm_conv1d.weight"; }));
    EXPECT_NE(e.find("blk.2.ssm_conv1d.weight"), std::string::npos) << e;
    // The interval says layer 1 is attention: its attn_q is missing.
    e = err(rewrite(src, dir + "/e.gguf", [](GgufMetadata& m) { m.set("qwen3next.full_attention_interval", uint32_t{2}); }, all));
    EXPECT_NE(e.find("blk.1.attn_q.weight"), std::string::npos) << e;
}

TEST(Qwen35Moe, TiledHeadsSeparateBetaAlphaAndRopeSections) {
    // qwen35moe: the qwen3next layers with value heads tiled over the key heads, beta and alpha from
    // ssm_beta / ssm_alpha, and M-RoPE sections that must keep every rotated pair on the text position.
    const std::string dir = test::temp_dir("qwen35moe");
    SynthOptions o;
    o.arch = "qwen35moe";
    o.preset = "tiny";
    o.out = dir + "/q35.gguf";
    synth_model(o);
    Model m(o.out);
    EXPECT_EQ(m.hp().rope_sections, (std::vector<int32_t>{11, 11, 10, 0}));
    EXPECT_TRUE(m.layers()[0][TensorId::ssm_beta] && m.layers()[0][TensorId::ssm_alpha] && !m.layers()[0][TensorId::ssm_ba]);
    Session s(m, opts());
    EXPECT_EQ(s.spec().ssm.k_head(1), 1);  // h % n_k (qwen3next: h / (n_v / n_k) = 0)
    EXPECT_EQ(s.spec().ssm.k_head(2), 0);
    std::vector<float> l;
    s.eval(tokens(20, 5, static_cast<int32_t>(m.n_vocab())), false, l);
    for (float v : l) ASSERT_TRUE(std::isfinite(v));
    // Sections [1, 2, 3, 0] (ggml's interleaved rule: pair i takes section i % 6, a t/h/w section k
    // only while i % 6 < 3 x sections[k]) leave rotated pair 3 (of 8) to the vision position.
    auto sections = std::make_shared<GgufArray>();
    sections->type = GgufType::INT32;
    sections->data = std::vector<int32_t>{1, 2, 3, 0};
    const std::string bad = rewrite(o.out, dir + "/bad.gguf", [&](GgufMetadata& md) { md.set("qwen35moe.rope.dimension_sections", sections); },
                                    [](const std::string&) { return true; });
    const std::string e = test::error_of([&] { Model b(bad); });
    EXPECT_NE(e.find("rope.dimension_sections puts rotated pair 3"), std::string::npos) << e;
    const std::string e2 = test::error_of([&] {
        Model b(rewrite(o.out, dir + "/none.gguf", [](GgufMetadata&) {}, [](const std::string&) { return true; },
                        "qwen35moe.rope.dimension_sections"));
    });
    EXPECT_NE(e2.find("qwen35moe.rope.dimension_sections"), std::string::npos) << e2;
}

TEST(Qwen3NextPlan, EightyBPresetShapesByHand) {
    // nitro plan --synth qwen3next:qwen3-next-80b-a3b:iq4_xs: the real shapes, counted by hand.
    SessionOptions so;
    so.n_ctx = 4096;
    const ModelLayout l = synth_layout("qwen3next", "qwen3-next-80b-a3b", GgmlType::IQ4_XS, so);
    ASSERT_EQ(l.spec.n_layer, 48);
    int deltanet = 0;
    for (const auto& L : l.spec.layers) deltanet += L.kind == LayerKind::DeltaNet;
    EXPECT_EQ(deltanet, 36);  // 3 of every 4
    EXPECT_EQ(l.spec.n_expert, 512);
    EXPECT_EQ(l.spec.n_expert_used, 10);
    EXPECT_EQ(l.spec.rope.n_rot, 64);  // a quarter of head_dim 256
    // One expert: gate, up and down of 2048 x 512 values in IQ4_XS (136 bytes per 256 values).
    const uint64_t per_matrix_expert = 2048ull * 512 / 256 * 136;
    for (const auto& t : l.experts[0]) EXPECT_EQ(t.bytes, 512 * per_matrix_expert) << t.name;
    PlacementOptions po;
    po.vram_budget_gib = 16;
    const Plan p = plan_placement(l, po);
    EXPECT_EQ(p.expert_bytes, 3 * per_matrix_expert);  // 1.59 MiB
    // K/V: 12 attention layers x 4096 positions x 2 heads x 256 x 2 bytes, K and V; slot tables of
    // 512 int32 per layer; DeltaNet state per layer: conv 3 x 8192 and delta 32 x 128 x 128 floats.
    // (The plan counts 256 bytes each for the empty K and V of a DeltaNet layer.)
    const uint64_t kv = 12 * 2 * (4096ull * 512 * 2) + 48 * 2048 + 36 * (2 * 256 + 3 * 8192 * 4 + 32 * 128 * 128 * 4);
    EXPECT_EQ(p.kv_bytes, vram_alloc_size(kv));
}
