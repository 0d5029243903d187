// Placement as data (runtime/placement.h), without a GPU: plans for real model shapes (synth
// presets) at several budgets, llama.cpp-style overrides, hot sets, and the errors.
#include "arch/synth.h"
#include "core/error.h"
#include "gguf_bytes.h"
#include "runtime/model.h"
#include "runtime/placement.h"
#include "runtime/session.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <set>

namespace nitro {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

ModelLayout gptoss120b() { return synth_layout("gpt-oss", "gpt-oss-120b", GgmlType::MXFP4, SessionOptions{}); }

PlacementOptions budget(double gib) {
    PlacementOptions o;
    o.vram_budget_gib = gib;
    return o;
}

using test::error_of;

TEST(Placement, ExpertBytesAreTheFormatsArithmetic) {
    // gpt-oss MXFP4: a row of 2880 values is 90 blocks of 17 bytes; gate, up: 2880 rows of n_embd
    // 2880; down: 2880 rows of n_ff_exp 2880 (hand computation; PEERS.md quotes 13.2 MB).
    const Plan p = plan_placement(gptoss120b(), budget(200));
    EXPECT_EQ(p.expert_bytes, 3ull * 2880 * 90 * 17);
    EXPECT_EQ(p.mode(), "gpu") << "200 GiB holds all of gpt-oss-120b";
    EXPECT_EQ(p.n_resident(), 36 * 128);
    // qwen3-30b-a3b Q8_0: gate/up 768 rows of 2048 (64 blocks of 34 bytes), down 2048 rows of 768 (24 blocks).
    const Plan q = plan_placement(synth_layout("qwen3moe", "qwen3-30b-a3b", GgmlType::Q8_0, SessionOptions{}), budget(100));
    EXPECT_EQ(q.expert_bytes, 2ull * 768 * 64 * 34 + 2048ull * 24 * 34);
}

TEST(Placement, SynthLayoutEqualsTheFileSynthWrites) {
    // The layout computed from the tables must be the bytes of the file nitro synth writes.
    for (const char* arch : {"gpt-oss", "qwen3moe"}) {
        SynthOptions so;
        so.arch = arch;
        so.preset = "tiny";
        so.expert_type = GgmlType::Q4_K;
        so.out = test::temp_dir(std::string("plan-") + arch) + "/m.gguf";
        so.vocab_from = std::string(NITRO_SHARED_DIR) + (std::string(arch) == "gpt-oss" ? "/fixtures/tiny-gptoss-mxfp4.gguf"
                                                                                         : "/fixtures/tiny-qwen3moe-q8.gguf");
        synth_model(so);
        Model m(so.out);
        const ModelLayout from_file = model_layout(m, make_model_spec(m, SessionOptions{}));
        // synth_layout plans tiny presets with a 256-token vocabulary: compare everything else.
        const ModelLayout from_tables = synth_layout(arch, "tiny", GgmlType::Q4_K, SessionOptions{});
        ASSERT_EQ(from_file.experts.size(), from_tables.experts.size()) << arch;
        for (size_t il = 0; il < from_file.experts.size(); ++il)
            for (int k = 0; k < 3; ++k) {
                EXPECT_EQ(from_file.experts[il][static_cast<size_t>(k)].name, from_tables.experts[il][static_cast<size_t>(k)].name);
                EXPECT_EQ(from_file.experts[il][static_cast<size_t>(k)].bytes, from_tables.experts[il][static_cast<size_t>(k)].bytes);
            }
        std::map<std::string, uint64_t> dense;
        for (const auto& t : from_tables.dense) dense[t.name] = t.bytes;
        for (const auto& t : from_file.dense) {
            if (t.name == "token_embd.weight" || t.name == "output.weight") continue;  // vocabulary-sized
            ASSERT_TRUE(dense.count(t.name)) << arch << " " << t.name;
            EXPECT_EQ(dense[t.name], t.bytes) << arch << " " << t.name;
        }
        EXPECT_EQ(from_file.expert_biases.size(), from_tables.expert_biases.size()) << arch;
    }
}

TEST(Placement, BudgetLadderFillsWhatIsLeftEvenly) {
    const ModelLayout L = gptoss120b();
    int64_t prev = -1;
    for (double gib : {4.5, 6.0, 8.0, 12.0, 16.0, 24.0, 48.0, 64.0}) {
        const Plan p = plan_placement(L, budget(gib));
        EXPECT_LE(p.total_bytes(), p.budget_bytes) << gib << " GiB";
        const uint64_t fixed = p.dense_bytes + p.expert_biases_bytes + p.kv_bytes + p.compute_bytes + p.overhead_bytes;
        // Hand computation: whole experts in what is left after the fixed part and the slot arena's
        // rounding (3 x 256 bytes per layer, 2 MiB for the arena)...
        const uint64_t left = p.budget_bytes - fixed - 36 * 3 * 256 - (2u << 20);
        const bool all_fit = left / p.expert_bytes >= 36 * 128;
        // ...and, when they do not all fit, after 4 prompt staging slots: one MXFP4 expert matrix
        // of 2880 x 2880 is 2880 rows x 90 blocks x 17 bytes = 4,406,400 bytes, 4,406,528 aligned to
        // 256; three of them per slot; 4 slots = 52,878,336 bytes, + the prompt's expert table (128
        // int32 = 512 bytes): 52,878,848 bytes, 26 pages of 2 MiB = 54,525,952.
        const uint64_t stage = all_fit ? 0 : 54'525'952;
        EXPECT_EQ(p.stage_bytes, stage) << gib << " GiB";
        EXPECT_EQ(p.stage_slots, all_fit ? 0 : 4) << gib << " GiB";
        // ...and the layer-major prompt group (auto: 4 x n_ubatch tokens, at most an eighth of the
        // budget). Per token, by hand: x, h and the CPU's partial sum 3 x 2880 floats (34,560 B),
        // ids and weights 2 x 4 x 4 B, margin and token 8 B, 4 expert outputs of 2880 floats
        // (46,080 B), 3 grouping int32 x 4 (48 B), 4 f16 expert inputs of 2880 (23,040 B): 103,768
        // bytes; plus one block's h overhang (n_o 4096 - 2880 floats per row), the 256-byte
        // alignment of 13 pieces and the 2 MiB page rounding.
        const int64_t ub = L.spec.n_ubatch;
        const uint64_t group = all_fit ? 0 : p.group_bytes;
        EXPECT_EQ(p.group_tokens > 0, !all_fit) << gib << " GiB";
        if (!all_fit) {
            const int64_t G = p.group_tokens;
            EXPECT_GT(G, ub) << gib << " GiB";
            EXPECT_LE(G, 4 * ub) << gib << " GiB";
            const uint64_t lo = static_cast<uint64_t>(G) * 103'768 + static_cast<uint64_t>(ub) * 1216 * 4;
            EXPECT_GE(p.group_bytes, lo) << gib << " GiB";
            EXPECT_LE(p.group_bytes, lo + 13 * 256 + 4 * 64 + (2u << 20)) << gib << " GiB";
            EXPECT_LE(p.group_bytes, p.budget_bytes / 8) << gib << " GiB";
            // shrunk only as far as the eighth of the budget needs
            if (G < 4 * ub) { EXPECT_GT(static_cast<uint64_t>(G + ub / 16) * 103'768, p.budget_bytes / 8) << gib << " GiB"; }
        }
        const int64_t want = std::min<int64_t>(36 * 128, static_cast<int64_t>((left - stage - group) / p.expert_bytes));
        EXPECT_EQ(p.n_resident(), want) << gib << " GiB";
        EXPECT_GT(p.n_resident(), prev) << "more budget, more resident experts";
        prev = p.n_resident();
        size_t lo = 1000, hi = 0;
        for (const auto& lp : p.layers) {
            lo = std::min(lo, lp.resident.size());
            hi = std::max(hi, lp.resident.size());
            std::set<int32_t> uniq(lp.resident.begin(), lp.resident.end());
            EXPECT_EQ(uniq.size(), lp.resident.size()) << "an expert twice in one layer";
        }
        EXPECT_LE(hi - lo, 1u) << "even fill: layers differ by at most one slot (" << gib << " GiB)";
    }
    // 12 GiB: the 12 GiB-class configuration of PEERS.md; the dense core is about 3.1 GiB there.
    const Plan p12 = plan_placement(L, budget(12));
    EXPECT_EQ(p12.mode(), "hybrid");
    EXPECT_GT(p12.n_resident(), 600);
    EXPECT_LT(p12.n_resident(), 700);
    EXPECT_EQ(p12.group_tokens, 4 * L.spec.n_ubatch);  // 2,048 tokens at -u 512: 203 MiB, well inside the eighth
    // At -u 4096 the auto group is cut to an eighth of the 12 GiB (1.5 GiB, about 15,100 tokens).
    SessionOptions so4k;
    so4k.n_ubatch = 4096;
    so4k.n_ctx = 32768;
    const Plan p4k = plan_placement(synth_layout("gpt-oss", "gpt-oss-120b", GgmlType::MXFP4, so4k), budget(12));
    EXPECT_GT(p4k.group_tokens, 15'000);
    EXPECT_LT(p4k.group_tokens, 4 * 4096);
    EXPECT_LE(p4k.group_bytes, p4k.budget_bytes / 8);
    // Never more than the context holds: at -c 4096 a -u 4096 block is the longest prompt.
    so4k.n_ctx = 4096;
    EXPECT_EQ(plan_placement(synth_layout("gpt-oss", "gpt-oss-120b", GgmlType::MXFP4, so4k), budget(12)).group_tokens, 0);
    so4k.n_ctx = 6000;
    EXPECT_EQ(plan_placement(synth_layout("gpt-oss", "gpt-oss-120b", GgmlType::MXFP4, so4k), budget(12)).group_tokens, 6000);
    PlacementOptions off = budget(12);
    off.prefill_group = 0;
    EXPECT_EQ(plan_placement(L, off).group_tokens, 0) << "--prefill-group 0: blocks run alone";
    EXPECT_NEAR(p12.cpu_bytes_per_token_uniform(),
                36.0 * 4 * (1.0 - p12.n_resident() / (36.0 * 128)) * static_cast<double>(p12.expert_bytes), 1.0);
    EXPECT_NE(plan_summary_line(p12).find("experts: " + std::to_string(p12.n_resident()) + " resident slots"), std::string::npos);
}

TEST(Placement, TooSmallABudgetNamesTheShortfall) {
    const std::string e = error_of([] { plan_placement(gptoss120b(), budget(2)); });
    EXPECT_NE(e.find("--vram-budget 2.00 GiB is too small"), std::string::npos) << e;
    EXPECT_NE(e.find("dense core needs"), std::string::npos) << e;
    EXPECT_NE(e.find("MiB short"), std::string::npos) << e;
    // A longer context needs more K/V: the same budget that fits at 4k fails at 128k.
    SessionOptions big;
    big.n_ctx = 131072;
    const ModelLayout L = synth_layout("gpt-oss", "gpt-oss-120b", GgmlType::MXFP4, big);
    EXPECT_NE(error_of([&] { plan_placement(L, budget(4)); }).find("K/V cache"), std::string::npos);
    EXPECT_NE(error_of([] { plan_placement(gptoss120b(), budget(0)); }).find("budget is needed"), std::string::npos);
}

TEST(Placement, KvBytesCountEverySequence) {
    // nitro serve --parallel N: each sequence has its own K/V region (and recurrent state) in VRAM.
    // gpt-oss-120b at -c 4096 -u 512: 18 full-attention layers of 4,096 positions and 18 sliding
    // layers of 128 + 512 - 1 = 639, K and V of 8 heads x 64 dims in F16 = 2,048 bytes per position:
    // 18 x (4,096 + 639) x 2,048 = 174,551,040 bytes per sequence (CALCULATED by hand).
    SessionOptions so;
    const Plan p1 = plan_placement(synth_layout("gpt-oss", "gpt-oss-120b", GgmlType::MXFP4, so), budget(100));
    so.n_seq = 4;
    const Plan p4 = plan_placement(synth_layout("gpt-oss", "gpt-oss-120b", GgmlType::MXFP4, so), budget(100));
    const double per_seq = 174551040.0;
    EXPECT_GE(static_cast<double>(p1.kv_bytes), per_seq);
    EXPECT_NEAR(static_cast<double>(p4.kv_bytes - p1.kv_bytes), 3 * per_seq, 4 << 20);  // page rounding
    // qwen3next: the recurrent state is per sequence too (attention layers' K/V plus DeltaNet state).
    SessionOptions q;
    const Plan r1 = plan_placement(synth_layout("qwen3next", "qwen3-next-80b-a3b", GgmlType::Q4_K, q), budget(100));
    q.n_seq = 3;
    const ModelLayout l3 = synth_layout("qwen3next", "qwen3-next-80b-a3b", GgmlType::Q4_K, q);
    const Plan r3 = plan_placement(l3, budget(100));
    const ModelSpec& sp = l3.spec;
    double state = 0, kv = 0;
    for (const LayerSpec& L : sp.layers) {
        kv += static_cast<double>(L.kv_capacity) * static_cast<double>(sp.n_k() + sp.n_v()) * 2;
        if (L.kind == LayerKind::DeltaNet) state += static_cast<double>(sp.ssm.conv_state_size() + sp.ssm.delta_state_size()) * 4;
    }
    EXPECT_GT(state, 0);
    EXPECT_NEAR(static_cast<double>(r3.kv_bytes - r1.kv_bytes), 2 * (kv + state), 4 << 20);
    // A budget too small for N sequences says so.
    SessionOptions many;
    many.n_seq = 64;
    many.n_ctx = 131072;
    const std::string e = error_of([&] { plan_placement(synth_layout("gpt-oss", "gpt-oss-120b", GgmlType::MXFP4, many), budget(80)); });
    EXPECT_NE(e.find("(-c 131072 x 64 sequence(s))"), std::string::npos) << e;
    EXPECT_NE(e.find("--parallel"), std::string::npos) << e;
}

TEST(Placement, RoundedActivationScratchHoldsTheDecodeMoesEightBitActivations) {
    // qwen3-30b-a3b (n_embd 2048, n_ff_exp 768, 8 experts per token): xr holds n_ubatch rows of the
    // largest matrix input (n_head 32 x head_dim 128 = 4096, attn_output's), or the integer decode
    // MoE's 8-bit activations of min(n_ubatch, 8) x 8 rows of 4096 values with one f32 scale per 32,
    // whichever is larger. Hand computation: -u 512: 512 x 4096 = 2,097,152 floats. -u 1: 8 rows:
    // 8 x 4096 = 32,768 bytes (a multiple of 256) + 8 x 128 x 4 = 4,096 bytes of scales = 36,864
    // bytes = 9,216 floats (more than 1 x 4096). -u 2: 16 rows: 73,728 bytes = 18,432 floats.
    SessionOptions so;
    so.n_ubatch = 512;
    EXPECT_EQ(gpu_scratch_sizes(synth_layout("qwen3moe", "qwen3-30b-a3b", GgmlType::Q4_K, so).spec).xr, 2097152);
    so.n_ubatch = 1;
    EXPECT_EQ(gpu_scratch_sizes(synth_layout("qwen3moe", "qwen3-30b-a3b", GgmlType::Q4_K, so).spec).xr, 9216);
    so.n_ubatch = 2;
    EXPECT_EQ(gpu_scratch_sizes(synth_layout("qwen3moe", "qwen3-30b-a3b", GgmlType::Q4_K, so).spec).xr, 18432);
    EXPECT_EQ(q8_act_bytes(3, 96), 512u + 3 * 3 * 4) << "values padded to 256 bytes, then the scales";
}

/// gpt-oss-120b's shape with its first three layers turned into dense FFN layers (as DeepSeek-V3's
/// are): the layout a model with leading dense layers has.
ModelLayout with_dense_layers(ModelLayout L, int n_dense) {
    for (int il = 0; il < n_dense; ++il) {
        LayerSpec& ls = L.spec.layers[static_cast<size_t>(il)];
        ls.ffn = FfnKind::Dense;
        ls.n_expert = 0;
        L.experts[static_cast<size_t>(il)] = {};
    }
    return L;
}

TEST(Placement, LayersWithoutRoutedExpertsHaveNothingToPlace) {
    const ModelLayout all = gptoss120b();
    const ModelLayout L = with_dense_layers(all, 3);
    // Every expert fits: 33 layers of 128, none for the dense layers.
    Plan p = plan_placement(L, budget(80));
    EXPECT_EQ(p.n_experts(), 33 * 128);
    EXPECT_EQ(p.n_resident(), 33 * 128);
    EXPECT_EQ(p.mode(), "gpu");
    for (int il = 0; il < 36; ++il) {
        const LayerPlacement& lp = p.layers[static_cast<size_t>(il)];
        EXPECT_EQ(lp.n_expert, il < 3 ? 0 : 128) << il;
        EXPECT_EQ(lp.resident.size(), il < 3 ? 0u : 128u) << il;
    }
    EXPECT_NE(p.layers[0].why.find("dense FFN"), std::string::npos) << p.layers[0].why;
    // The slot arena: 33 layers' pools, each rounded to 256 bytes, the arena to 2 MiB pages.
    EXPECT_EQ(p.slots_bytes, vram_alloc_size(33 * 3 * 128 * 4'406'400ull)) << "three 4,406,400-byte matrices per expert";
    // At 12 GiB the even fill spreads the slots over the 33 MoE layers only, and the CPU's
    // uniform-routing bytes per token count those layers only (by hand: 4 used x (1 - r/128) x
    // 13,219,200 bytes per layer).
    p = plan_placement(L, budget(12));
    const Plan q = plan_placement(all, budget(12));
    EXPECT_EQ(p.n_resident(), q.n_resident()) << "the same bytes are left for slots";
    EXPECT_GT(p.layers[3].resident.size(), q.layers[3].resident.size()) << "spread over 33 layers instead of 36";
    double cpu = 0;
    for (int il = 3; il < 36; ++il) {
        const size_t r = p.layers[static_cast<size_t>(il)].resident.size();
        EXPECT_LE(r, 128u);
        cpu += 4.0 * (1.0 - static_cast<double>(r) / 128.0) * 13'219'200.0;
    }
    for (int il = 0; il < 3; ++il) EXPECT_TRUE(p.layers[static_cast<size_t>(il)].resident.empty());
    EXPECT_DOUBLE_EQ(p.cpu_bytes_per_token_uniform(), cpu);
    // Overrides and --n-cpu-moe do not reach the dense layers, whatever they match.
    PlacementOptions o = budget(80);
    o.overrides = {parse_tensor_override(".*=CPU")};
    EXPECT_NE(error_of([&] { plan_placement(L, o); }).find("keeps the dense core"), std::string::npos);
    o.overrides = {parse_tensor_override("exps=CPU")};
    p = plan_placement(L, o);
    EXPECT_EQ(p.n_resident(), 0);
    EXPECT_EQ(p.mode(), "cpu-experts");
    EXPECT_NE(p.layers[1].why.find("dense FFN"), std::string::npos);
    o = budget(80);
    o.source = ResidencySource::Layers;
    p = plan_placement(L, budget(80));
    EXPECT_EQ(plan_to_json(p)["layers"][0]["n_expert"], 0);
    EXPECT_EQ(plan_to_json(p)["layers"][5]["n_expert"], 128);
    // A model without any routed experts has nothing to place.
    EXPECT_NE(error_of([&] { plan_placement(with_dense_layers(all, 36), budget(80)); }).find("no routed experts"),
              std::string::npos);
}

TEST(Placement, LlamaCppOverrides) {
    const ModelLayout L = gptoss120b();
    PlacementOptions o = budget(12);
    o.cpu_moe = true;
    Plan p = plan_placement(L, o);
    EXPECT_EQ(p.n_resident(), 0);
    EXPECT_EQ(p.mode(), "cpu-experts");
    EXPECT_EQ(p.layers[7].why, "--cpu-moe");

    o = budget(13);
    o.n_cpu_moe = 31;  // llama.cpp: the experts of the first 31 layers on the CPU
    p = plan_placement(L, o);
    for (int il = 0; il < 36; ++il) EXPECT_EQ(p.layers[static_cast<size_t>(il)].resident.size(), il < 31 ? 0u : 128u) << il;
    o.n_cpu_moe = 20;  // 16 whole layers do not fit 13 GiB
    const std::string e = error_of([&] { plan_placement(L, o); });
    EXPECT_NE(e.find("--n-cpu-moe 20"), std::string::npos) << e;
    EXPECT_NE(e.find("MiB short"), std::string::npos) << e;

    o = budget(12);
    o.overrides = {parse_tensor_override("blk\\.(1[0-9])\\.ffn_.*_exps=CPU"), parse_tensor_override("nothing_like_this=CPU")};
    p = plan_placement(L, o);
    for (int il = 10; il < 20; ++il) EXPECT_TRUE(p.layers[static_cast<size_t>(il)].resident.empty()) << il;
    EXPECT_FALSE(p.layers[0].resident.empty());
    EXPECT_NE(p.layers[12].why.find("-ot"), std::string::npos);
    ASSERT_EQ(p.warnings.size(), 1u);
    EXPECT_NE(p.warnings[0].find("nothing_like_this"), std::string::npos);

    o.overrides = {parse_tensor_override("attn_q=CPU")};
    EXPECT_NE(error_of([&] { plan_placement(L, o); }).find("keeps the dense core"), std::string::npos);
    o.overrides = {parse_tensor_override("blk\\.3\\.ffn_.*_exps=CUDA0")};
    p = plan_placement(L, o);
    EXPECT_EQ(p.layers[3].resident.size(), 128u) << "forced onto the GPU";

    EXPECT_NE(error_of([] { parse_tensor_override("exps"); }).find("REGEX=DEVICE"), std::string::npos);
    EXPECT_NE(error_of([] { parse_tensor_override("exps=TPU"); }).find("unknown device"), std::string::npos);
    EXPECT_NE(error_of([] { parse_tensor_override("ex(ps=CPU"); }).find("not a valid regular expression"), std::string::npos);
}

TEST(Placement, HotSetAndWholeLayers) {
    const ModelLayout L = gptoss120b();
    const std::string dir = test::temp_dir("hotset");
    // Layer il ranks its experts (il + 5 k) mod 128: the plan must take each layer's first ones.
    std::vector<std::vector<int32_t>> ranked(36);
    std::vector<std::vector<uint64_t>> counts(36);
    for (int il = 0; il < 36; ++il)
        for (int k = 0; k < 128; ++k) {
            ranked[static_cast<size_t>(il)].push_back((il + 5 * k) % 128);
            counts[static_cast<size_t>(il)].push_back(static_cast<uint64_t>(1000 - k));
        }
    write_hot_set(dir + "/h.json", ranked, counts, "test");
    const HotSet hs = read_hot_set(dir + "/h.json", 36, 128);
    PlacementOptions o = budget(12);
    o.hot_set = &hs;
    const Plan p = plan_placement(L, o);
    EXPECT_EQ(p.n_resident(), plan_placement(L, budget(12)).n_resident()) << "same slots, other experts";
    for (int il = 0; il < 36; ++il) {
        const auto& r = p.layers[static_cast<size_t>(il)].resident;
        ASSERT_FALSE(r.empty());
        for (size_t k = 0; k < r.size(); ++k) EXPECT_EQ(r[k], ranked[static_cast<size_t>(il)][k]) << il << " " << k;
        EXPECT_EQ(p.layers[static_cast<size_t>(il)].why, "hot set");
    }
    // Whole layers, last first (llama.cpp's shape for the same budget).
    o = budget(12);
    o.source = ResidencySource::Layers;
    const Plan w = plan_placement(L, o);
    EXPECT_EQ(w.layers[35].resident.size(), 128u);
    EXPECT_EQ(w.layers[0].resident.size(), 0u);
    EXPECT_EQ(w.n_resident() % 128, 0);
    // Bad hot-set files.
    std::ofstream(dir + "/bad.json") << "{\"format\": \"nitro-hot-set\", \"layers\": [[0, 999]]}";
    EXPECT_NE(error_of([&] { read_hot_set(dir + "/bad.json", 1, 128); }).find("names expert 999"), std::string::npos);
    std::ofstream(dir + "/bad2.json") << "[1, 2, 3]";
    EXPECT_NE(error_of([&] { read_hot_set(dir + "/bad2.json", 1, 128); }).find("not a hot-set file"), std::string::npos);
    EXPECT_NE(error_of([&] { read_hot_set(dir + "/h.json", 24, 128); }).find("has 36 layers"), std::string::npos);
}

TEST(Placement, PlanCommandPrintsAndExportsThePlan) {
    const std::string out =
        test::run_command(std::string(NITRO_BINARY) + " plan --synth gpt-oss:gpt-oss-120b --vram-budget 12 --json");
    const nlohmann::json j = nlohmann::json::parse(out);
    const Plan p = plan_placement(gptoss120b(), budget(12));
    EXPECT_EQ(j.at("n_resident").get<int64_t>(), p.n_resident());
    EXPECT_EQ(j.at("mode"), "hybrid");
    EXPECT_EQ(j.at("layers").size(), 36u);
    EXPECT_GT(j.at("cpu_decode_floor_tok_s").get<double>(), 0);
    // A budget that cannot hold the dense core is an error with exit status 1, not a crash.
    EXPECT_NE(std::system((std::string(NITRO_BINARY) + " plan --synth gpt-oss:gpt-oss-120b --vram-budget 1 >/dev/null 2>&1").c_str()), 0);
}

TEST(Placement, TooSmallABudgetNamesTheLargestContextThatFits) {
    // qwen3-30b-a3b at -c 40960 does not fit 5 GiB. Its K/V costs 48 layers x (4 + 4 heads x 128)
    // x 2 bytes = 98,304 bytes per position (CALCULATED by hand), so the largest context is what is
    // left of the budget after the dense core, buffers and runtime over that, within the 2 MiB page
    // rounding of the arena (21 positions) and the compute buffers' dependence on the context.
    SessionOptions so;
    so.n_ctx = 40960;
    const ModelLayout L = synth_layout("qwen3moe", "qwen3-30b-a3b", GgmlType::Q8_0, so);
    const std::string e = error_of([&] { plan_placement(L, budget(5)); });
    const size_t at = e.find("the largest context that fits this budget is -c ");
    ASSERT_NE(at, std::string::npos) << e;
    const int64_t fits = std::stoll(e.substr(at + std::string("the largest context that fits this budget is -c ").size()));
    const Plan big = plan_placement(L, budget(100));  // the same dense core and runtime, everything fitting
    const double left = 5 * kGiB - static_cast<double>(big.dense_bytes + big.expert_biases_bytes + big.compute_bytes + big.overhead_bytes);
    EXPECT_NEAR(static_cast<double>(fits), left / 98304.0, 64) << e;
    // The answer is exact: that context plans, one more position does not.
    SessionOptions at_fit = so;
    at_fit.n_ctx = fits;
    EXPECT_NO_THROW(plan_placement(synth_layout("qwen3moe", "qwen3-30b-a3b", GgmlType::Q8_0, at_fit), budget(5)));
    at_fit.n_ctx = fits + 1;
    EXPECT_THROW(plan_placement(synth_layout("qwen3moe", "qwen3-30b-a3b", GgmlType::Q8_0, at_fit), budget(5)), Error);
    // A budget below the dense core says that no context fits.
    EXPECT_NE(error_of([&] { plan_placement(L, budget(2)); }).find("no context fits"), std::string::npos);
}

TEST(Placement, SetContextGivesSlidingLayersTheirWindow) {
    // gpt-oss-120b at -c 16384 -u 512: the sliding layers keep 128 + 512 - 1 = 639 positions, the
    // others 16384; kv_cache_bytes is 18 x (16,384 + 639) x 2,048 bytes plus 36 slot tables of 512
    // bytes, rounded up to 2 MiB (CALCULATED by hand: 627,554,304 -> 629,145,600 bytes).
    ModelLayout L = gptoss120b();
    set_context(L.spec, 16384);
    int64_t full = 0, sliding = 0;
    for (const LayerSpec& ls : L.spec.layers) (ls.window > 0 ? sliding : full) += ls.kv_capacity;
    EXPECT_EQ(full, 18 * 16384);
    EXPECT_EQ(sliding, 18 * 639);
    EXPECT_EQ(kv_cache_bytes(L.spec), 629145600u);
}

TEST(Placement, PlanCommandPrintsTheContextLadder) {
    const std::string out = test::run_command(std::string(NITRO_BINARY) +
                                              " plan --synth gpt-oss-120b --vram-budget 12 --ctx-ladder --json");
    const nlohmann::json j = nlohmann::json::parse(out).at("ladder");
    ASSERT_EQ(j.size(), 5u);  // 4K, 16K, 32K, 64K, and gpt-oss's limit of 131,072
    std::vector<int64_t> ctx;
    for (const auto& e : j) ctx.push_back(e.at("n_ctx").get<int64_t>());
    EXPECT_EQ(ctx, (std::vector<int64_t>{4096, 16384, 32768, 65536, 131072})) << out;
    // Each step matches the plan made at that context, and longer contexts leave fewer slots.
    for (const auto& e : j) {
        SessionOptions so;
        so.n_ctx = e.at("n_ctx").get<int64_t>();
        const Plan p = plan_placement(synth_layout("gpt-oss", "gpt-oss-120b", GgmlType::MXFP4, so), budget(12));
        EXPECT_EQ(e.at("kv_bytes").get<uint64_t>(), p.kv_bytes);
        EXPECT_EQ(e.at("n_resident").get<int64_t>(), p.n_resident());
    }
    EXPECT_GT(j[0].at("n_resident").get<int64_t>(), j[4].at("n_resident").get<int64_t>());
}

// The decode attention's split room, by hand: one split per 128 keys, at least 1, at most 64.
TEST(Placement, AttentionMaxSplitIsOnePer128KeysUpTo64) {
    EXPECT_EQ(attention_max_split(1), 1);
    EXPECT_EQ(attention_max_split(128), 1);
    EXPECT_EQ(attention_max_split(129), 2);
    EXPECT_EQ(attention_max_split(4096), 32);
    EXPECT_EQ(attention_max_split(8193), 64);
    EXPECT_EQ(attention_max_split(131072), 64);
}

}  // namespace
}  // namespace nitro

