// Routing scenarios of nitro bench and the replay of a router trace into the engine's router
// (runtime/route_replay.h, docs/bench.md): the scenario a file gives, bad --routing items, and the
// routing an engine reports (route events, `--trace`) equal to the trace it replays, in router
// order, with the trace's weights, for gpt-oss (biased router, softmax over the selected) and
// qwen3moe (softmax over all, renormalised), across prompt chunks, decode steps and wrap-around.
#include "gguf_bytes.h"

#include "arch/synth.h"
#include "core/error.h"
#include "runtime/route_replay.h"
#include "runtime/session.h"
#include "trace/trace_file.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <random>
#include <sys/wait.h>

namespace nitro {
namespace {

const std::string kShared = NITRO_SHARED_DIR;
const std::string kEmbedded = std::string(NITRO_SOURCE_DIR) + "/models/tiny-moe-pystd.gguf";

/// A random trace of the model's shape: `seqs` sequences of `prefill` prompt tokens then
/// `decode` decode tokens, every layer, distinct experts per record, weights that sum to 1 in
/// decreasing order (as a router writes them), or none.
Trace random_trace(const Model& m, int seqs, int prefill, int decode, bool weights, uint32_t seed) {
    Trace t;
    t.header.n_layer = static_cast<uint32_t>(m.hp().n_layer);
    t.header.n_expert = static_cast<uint32_t>(m.hp().n_expert);
    t.header.n_expert_used = static_cast<uint32_t>(m.hp().n_expert_used);
    t.header.has_weights = weights;
    std::mt19937 rng(seed);
    const int K = static_cast<int>(m.hp().n_expert_used), X = static_cast<int>(m.hp().n_expert);
    std::vector<ExpertId> ids(static_cast<size_t>(K));
    std::vector<float> w(static_cast<size_t>(K));
    for (int s = 0; s < seqs; ++s)
        for (int p = 0; p < prefill + decode; ++p)
            for (int l = 0; l < static_cast<int>(m.hp().n_layer); ++l) {
                std::vector<int> all(static_cast<size_t>(X));
                for (int e = 0; e < X; ++e) all[static_cast<size_t>(e)] = e;
                std::shuffle(all.begin(), all.end(), rng);
                float sum = 0;
                for (int j = 0; j < K; ++j) {
                    ids[static_cast<size_t>(j)] = static_cast<ExpertId>(all[static_cast<size_t>(j)]);
                    sum += w[static_cast<size_t>(j)] = 0.05f + static_cast<float>(rng() % 1000) / 1000.f;
                }
                std::sort(w.begin(), w.end(), std::greater<>());
                for (float& v : w) v /= sum;
                TraceRecordIn r;
                r.seq = static_cast<uint32_t>(s);
                r.pos = static_cast<uint32_t>(p);
                r.phase = p < prefill ? TracePhase::Prefill : TracePhase::Decode;
                r.layer = static_cast<uint32_t>(l);
                r.ids = ids;
                if (weights) r.weights = w;
                t.append(r);
            }
    return t;
}

/// The trace's tokens of one phase, in trace order: [token][layer] -> (ids, weights).
struct PhaseTokens {
    std::vector<std::vector<std::vector<int32_t>>> ids;
    std::vector<std::vector<std::vector<float>>> w;
};
PhaseTokens tokens_of(const Trace& t, TracePhase ph) {
    PhaseTokens out;
    size_t n_steps = 0;
    const auto step = t.step_index(&n_steps);
    std::vector<int64_t> slot(n_steps, -1);
    for (size_t i = 0; i < t.size(); ++i) {
        if (t.phase[i] != ph) continue;
        if (slot[step[i]] < 0) {
            slot[step[i]] = static_cast<int64_t>(out.ids.size());
            out.ids.emplace_back(t.header.n_layer);
            out.w.emplace_back(t.header.n_layer);
        }
        const auto ids = t.record_ids(i);
        out.ids[static_cast<size_t>(slot[step[i]])][t.layer[i]].assign(ids.begin(), ids.end());
        const auto w = t.record_weights(i);
        out.w[static_cast<size_t>(slot[step[i]])][t.layer[i]].assign(w.begin(), w.end());
    }
    return out;
}

/// Runs a session with the replay: a prompt of `prompt` tokens in chunks of `ubatch`, then
/// `decode` single-token steps; checks every route event against the trace token it must take.
void expect_replayed_routing(const std::string& model_path, bool weights) {
    Model m(model_path);
    const Trace t = random_trace(m, 2, 5, 3, weights, 7);
    const PhaseTokens pre = tokens_of(t, TracePhase::Prefill), dec = tokens_of(t, TracePhase::Decode);
    ASSERT_EQ(pre.ids.size(), 10u);
    ASSERT_EQ(dec.ids.size(), 6u);
    SessionOptions so;
    so.n_ctx = 64;
    so.n_ubatch = 4;  // a 13-token prompt runs as chunks of 4, 4, 4 and 1 rows
    so.n_threads = 2;
    Session s(m, so);
    s.set_route_replay(std::make_shared<RouteReplay>(t, m, "random trace"));
    const int K = static_cast<int>(m.hp().n_expert_used);
    int events = 0;
    s.set_route_callback([&](const RouteEvent& e) {
        ++events;
        // Multi-row chunks take prefill tokens in order; single rows take decode tokens. The last
        // prompt chunk has one row: it is a decode step as far as routing knows (13 = 4+4+4+1).
        const bool prefill = e.prefill;
        const int64_t i = prefill ? e.pos : e.pos - 12;
        const PhaseTokens& src = prefill ? pre : dec;
        const size_t k = static_cast<size_t>(i % static_cast<int64_t>(src.ids.size()));
        const auto& want = src.ids[k][static_cast<size_t>(e.layer)];
        ASSERT_EQ(static_cast<int>(e.experts.size()), K);
        for (int j = 0; j < K; ++j)
            EXPECT_EQ(e.experts[static_cast<size_t>(j)], want[static_cast<size_t>(j)])
                << "pos " << e.pos << " layer " << e.layer << " rank " << j;
        for (int j = 0; j < K; ++j) {
            const float w = weights ? src.w[k][static_cast<size_t>(e.layer)][static_cast<size_t>(j)] : 1.0f / K;
            EXPECT_NEAR(e.weights[static_cast<size_t>(j)], w, 2e-3f) << "pos " << e.pos << " layer " << e.layer;
        }
    });
    std::vector<int32_t> prompt(13);
    for (int i = 0; i < 13; ++i) prompt[static_cast<size_t>(i)] = 10 + i;
    std::vector<float> logits;
    s.eval(prompt, false, logits);
    for (int i = 0; i < 8; ++i) {  // 1 + 8 decode rows: more than the trace's 6 decode tokens (wraps)
        const int32_t tok[1] = {20 + i};
        s.eval(tok, false, logits);
        for (float v : logits) ASSERT_TRUE(std::isfinite(v));
    }
    EXPECT_EQ(events, 21 * static_cast<int>(m.hp().n_layer));
    EXPECT_EQ(s.route_replay()->prefill_replayed(), 12);
    EXPECT_EQ(s.route_replay()->decode_replayed(), 9);
}

TEST(RouteReplay, GptOssRoutesAsTheTraceWithItsWeights) { expect_replayed_routing(kShared + "/fixtures/tiny-gptoss-mxfp4.gguf", true); }
TEST(RouteReplay, Qwen3MoeRoutesAsTheTraceWithItsWeights) { expect_replayed_routing(kShared + "/fixtures/tiny-qwen3moe-q8.gguf", true); }
TEST(RouteReplay, ATraceWithoutWeightsGivesEqualWeightsInTraceOrder) {
    expect_replayed_routing(kShared + "/fixtures/tiny-gptoss-mxfp4.gguf", false);
}

TEST(RouteReplay, RefusesATraceOfAnotherShapeOrWithGaps) {
    Model m(kShared + "/fixtures/tiny-gptoss-mxfp4.gguf");
    Model e(kEmbedded);  // 8 layers x 64 experts: another shape
    const Trace te = random_trace(e, 1, 2, 2, true, 1);
    EXPECT_NE(test::error_of([&] { RouteReplay r(te, m, "e.nmtr"); }).find("e.nmtr: routing of 8 layers x 64 experts"),
              std::string::npos);
    Trace gap = random_trace(m, 1, 2, 0, true, 1);
    Trace cut;  // the same without layer 1 of token 0
    cut.header = gap.header;
    for (size_t i = 0; i < gap.size(); ++i)
        if (!(gap.pos[i] == 0 && gap.layer[i] == 1)) cut.append(gap.record(i));
    EXPECT_NE(test::error_of([&] { RouteReplay r(cut, m, "cut"); }).find("has no record for layer 1"), std::string::npos);
    EXPECT_NE(test::error_of([&] { RouteReplay r(std::string("/nonexistent/t.nmtr"), m); }), "");
}

TEST(RouteReplay, ScenarioNamesComeFromTheFile) {
    const std::string dir = test::temp_dir("routing");
    SynthOptions so;
    so.preset = "tiny";
    so.out = dir + "/u.gguf";
    synth_model(so);
    so.router_skew = 0.7;
    so.out = dir + "/z.gguf";
    synth_model(so);
    Model u(dir + "/u.gguf"), z(dir + "/z.gguf"), e(kEmbedded);
    EXPECT_EQ(file_routing(u), "uniform");
    EXPECT_EQ(file_routing(z), "zipf:0.7");
    EXPECT_EQ(file_routing(e), "model");
    EXPECT_EQ(parse_routing_scenarios("file", z)[0].name, "zipf:0.7");
    EXPECT_EQ(parse_routing_scenarios("zipf:0.7", z)[0].name, "zipf:0.7");
    EXPECT_EQ(parse_routing_scenarios("uniform", u)[0].name, "uniform");
    // A scenario the file does not give is refused with the way to get it.
    EXPECT_NE(test::error_of([&] { parse_routing_scenarios("zipf:0.5", u); }).find("nitro synth --router-skew zipf:0.5"),
              std::string::npos);
    EXPECT_NE(test::error_of([&] { parse_routing_scenarios("uniform", z); }).find("routes as 'zipf:0.7'"), std::string::npos);
    EXPECT_NE(test::error_of([&] { parse_routing_scenarios("zipf", u); }).find("expected file, uniform"), std::string::npos);
    EXPECT_NE(test::error_of([&] { parse_routing_scenarios("file,uniform", u); }).find("given twice"), std::string::npos);
    EXPECT_NE(test::error_of([&] { parse_routing_scenarios("replay:", u); }).find("needs a trace"), std::string::npos);
    // A bare name is a committed trace of the checkout, bench/traces/NAME.nmtr.
    EXPECT_NE(test::error_of([&] { parse_routing_scenarios("replay:no-such-trace", u); }).find("bench/traces/no-such-trace.nmtr"),
              std::string::npos);
    // A replay scenario checks its trace against the model at once.
    const Trace t = random_trace(u, 1, 3, 2, false, 3);
    write_trace(dir + "/t.nmtr", t);
    const auto sc = parse_routing_scenarios("file,replay:" + dir + "/t.nmtr", u);
    ASSERT_EQ(sc.size(), 2u);
    EXPECT_EQ(sc[1].name, "replay:" + dir + "/t.nmtr");
    EXPECT_EQ(sc[1].trace, dir + "/t.nmtr");
    EXPECT_NE(test::error_of([&] { parse_routing_scenarios("replay:" + dir + "/t.nmtr", e); }).find("routing of 4 layers"),
              std::string::npos);
}

TEST(RouteReplay, CommittedTracesHaveTheRealRoutingShapes) {
    // bench/traces/NAME.nmtr, found by replay:NAME: the routing shapes of the models they stand for,
    // every layer of every token (what a replay needs), prefill and decode tokens.
    struct Shape {
        const char* name;
        uint32_t n_layer, n_expert, k;
    };
    for (const Shape& sh : {Shape{"gpt-oss-20b", 24, 32, 4}, Shape{"gpt-oss-120b", 36, 128, 4}, Shape{"qwen3-30b-a3b", 48, 128, 8}}) {
        const std::string path = resolve_replay_trace(sh.name);
        EXPECT_NE(path.find("bench/traces/" + std::string(sh.name) + ".nmtr"), std::string::npos) << path;
        const Trace t = read_trace(path);
        EXPECT_EQ(t.header.n_layer, sh.n_layer) << sh.name;
        EXPECT_EQ(t.header.n_expert, sh.n_expert) << sh.name;
        EXPECT_EQ(t.header.n_expert_used, sh.k) << sh.name;
        size_t n_steps = 0;
        (void)t.step_index(&n_steps);
        EXPECT_EQ(t.size(), n_steps * sh.n_layer) << sh.name << ": a token lacks layers";
        size_t decode = 0;
        for (auto p : t.phase) decode += p == TracePhase::Decode;
        EXPECT_EQ(decode, 8u * 256 * sh.n_layer) << sh.name;  // 8 prompts x 256 sampled tokens
        EXPECT_GT(t.size(), decode) << sh.name;              // and prompt tokens
    }
}

TEST(RouteReplay, RunCapturesTheReplayedTraceWithTrace) {
    // nitro run --route-replay T --trace C: the routing captured in C is T's, token for token.
    const std::string dir = test::temp_dir("replay-run");
    const std::string model = kShared + "/fixtures/tiny-gptoss-mxfp4.gguf";
    Model m(model);
    write_trace(dir + "/t.nmtr", random_trace(m, 1, 6, 5, true, 11));
    const std::string out = test::run_command(std::string(NITRO_BINARY) + " run -m " + model +
                                              " --prompt-ids 13225,1588,382,13,14,15 -n 6 --ignore-eos -t 2 -u 8 --route-replay " +
                                              dir + "/t.nmtr --trace " + dir + "/c.nmtr 2>&1");
    EXPECT_NE(out.find("BENCHMARK ONLY"), std::string::npos) << out;
    const Trace t = read_trace(dir + "/t.nmtr"), c = read_trace(dir + "/c.nmtr");
    const PhaseTokens tp = tokens_of(t, TracePhase::Prefill), td = tokens_of(t, TracePhase::Decode);
    const PhaseTokens cp = tokens_of(c, TracePhase::Prefill), cd = tokens_of(c, TracePhase::Decode);
    ASSERT_EQ(cp.ids.size(), 6u);  // the prompt
    ASSERT_EQ(cd.ids.size(), 5u);  // 6 generated tokens, the last never evaluated
    EXPECT_EQ(cp.ids, tp.ids);
    EXPECT_EQ(cd.ids, td.ids);
    for (size_t i = 0; i < cd.w.size(); ++i)
        for (size_t l = 0; l < cd.w[i].size(); ++l)
            for (size_t j = 0; j < cd.w[i][l].size(); ++j) EXPECT_NEAR(cd.w[i][l][j], td.w[i][l][j], 2e-3f);
}

}  // namespace
}  // namespace nitro
