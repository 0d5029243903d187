// JSON Lines import/export of router traces.
#include "core/error.h"
#include "sim/replay.h"
#include "trace/trace_jsonl.h"
#include "trace/trace_synth.h"

#include <gtest/gtest.h>

#include <sstream>

namespace nitro {
namespace {

Trace import_text(const std::string& text, const JsonlImportOptions& opt = {}) {
    std::istringstream in(text);
    return import_jsonl(in, "t.jsonl", opt);
}

std::string error_of(const std::string& text) {
    try {
        import_text(text);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(TraceJsonl, ImportInfersShapeAndToleratesGaps) {
    // Token 0 has layers 0 and 2, token 1 only layer 1: gaps are fine. Blank lines skipped.
    const Trace t = import_text(
        "{\"problem_id\": 4, \"token_idx\": 0, \"layer\": 0, \"experts\": [5, 1]}\n"
        "\n"
        "{\"problem_id\": 4, \"token_idx\": 0, \"layer\": 2, \"experts\": [0, 6]}\n"
        "{\"problem_id\": 4, \"token_idx\": 1, \"layer\": 1, \"experts\": [2, 3]}\n");
    EXPECT_EQ(t.header.n_layer, 3u);         // highest layer + 1
    EXPECT_EQ(t.header.n_expert, 7u);        // highest id + 1
    EXPECT_EQ(t.header.n_expert_used, 2u);
    EXPECT_FALSE(t.header.has_weights);
    ASSERT_EQ(t.size(), 3u);
    EXPECT_EQ(t.seq[0], 4u);                 // integer problem ids are kept
    EXPECT_EQ(t.record_ids(0)[0], 5);        // router order kept
    EXPECT_EQ(t.phase[0], TracePhase::Decode);
    const ReplayTrace r = make_replay_trace(t);
    EXPECT_EQ(r.n_tokens, 2u);
    EXPECT_EQ(r.layers[1].n_steps(), 1u);
    EXPECT_EQ(r.layers[1].token[0], 1u);     // layer 1's only request is token 1's
}

TEST(TraceJsonl, StepsAreGroupedByProblemAndTokenInFileOrder) {
    // Two problems interleaved: steps are numbered by first appearance of (problem_id, token_idx).
    const Trace t = import_text(
        "{\"problem_id\": \"b\", \"token_idx\": 0, \"layer\": 0, \"experts\": [1]}\n"
        "{\"problem_id\": \"a\", \"token_idx\": 0, \"layer\": 0, \"experts\": [2]}\n"
        "{\"problem_id\": \"b\", \"token_idx\": 0, \"layer\": 1, \"experts\": [3]}\n"
        "{\"problem_id\": \"b\", \"token_idx\": 1, \"layer\": 0, \"experts\": [1]}\n");
    // String ids map to 0, 1, ... in order of first appearance.
    EXPECT_EQ(t.seq[0], 0u);
    EXPECT_EQ(t.seq[1], 1u);
    size_t n = 0;
    const std::vector<uint32_t> step = t.step_index(&n);
    EXPECT_EQ(n, 3u);
    EXPECT_EQ(step, (std::vector<uint32_t>{0, 1, 0, 2}));
}

TEST(TraceJsonl, GatingProbsSelectedOrFullDistribution) {
    const Trace sel = import_text(
        "{\"problem_id\": 0, \"token_idx\": 0, \"layer\": 0, \"experts\": [2, 0], \"gating_probs\": [0.7, 0.3]}\n");
    ASSERT_TRUE(sel.header.has_weights);
    EXPECT_FLOAT_EQ(sel.record_weights(0)[0], 0.7f);
    // Four probabilities for a top-2 record: a full distribution over n_expert = 4.
    const Trace full = import_text(
        "{\"problem_id\": 0, \"token_idx\": 0, \"layer\": 0, \"experts\": [2, 0], "
        "\"gating_probs\": [0.1, 0.2, 0.6, 0.1]}\n");
    EXPECT_EQ(full.header.n_expert, 4u);
    EXPECT_FLOAT_EQ(full.record_weights(0)[0], 0.6f);
    EXPECT_FLOAT_EQ(full.record_weights(0)[1], 0.1f);
}

TEST(TraceJsonl, ErrorsNameTheLine) {
    EXPECT_NE(error_of("{\"problem_id\": 0, \"token_idx\": 0, \"layer\": 0, \"experts\": [1, 2]}\n"
                       "{\"problem_id\": 0, \"token_idx\": 1, \"layer\": 0, \"experts\": [1, 1]}\n")
                  .find("t.jsonl:2: expert id 1 appears twice"),
              std::string::npos);
    EXPECT_NE(error_of("{\"problem_id\": 0, \"token_idx\": 0, \"layer\": 0, \"experts\": [1, 2]}\n"
                       "{\"problem_id\": 0, \"token_idx\": 1, \"layer\": 0, \"experts\": [1]}\n")
                  .find("t.jsonl:2: 1 experts, but the first record has 2"),
              std::string::npos);
    EXPECT_NE(error_of("{\"problem_id\": 0, \"token_idx\": 3, \"layer\": 0, \"experts\": [1]}\n"
                       "{\"problem_id\": 0, \"token_idx\": 2, \"layer\": 0, \"experts\": [1]}\n")
                  .find("t.jsonl:2: position 2 of sequence 0 at layer 0 does not increase (previous 3)"),
              std::string::npos);
    EXPECT_NE(error_of("{\"problem_id\": 0, \"layer\": 0, \"experts\": [1]}\n").find("t.jsonl:1: missing field \"token_idx\""),
              std::string::npos);
    EXPECT_NE(error_of("{\"problem_id\": 0, \"token_idx\": 0, \"layer\": 0, \"experts\": [1]\n").find("t.jsonl:1: not valid JSON"),
              std::string::npos);
    EXPECT_NE(error_of("{\"problem_id\": 0, \"token_idx\": 0, \"layer\": 0, \"experts\": [1], \"gating_probs\": [1]}\n"
                       "{\"problem_id\": 0, \"token_idx\": 1, \"layer\": 0, \"experts\": [1]}\n")
                  .find("t.jsonl:2: gating_probs absent"),
              std::string::npos);
    EXPECT_NE(error_of("").find("no records"), std::string::npos);
    // The largest id a trace can hold is 65533 (n_expert <= 65534): 65534 is refused on its line,
    // not later as "n_expert 65535 is out of range".
    EXPECT_NE(error_of("{\"problem_id\": 0, \"token_idx\": 0, \"layer\": 0, \"experts\": [65534]}\n")
                  .find("t.jsonl:1: expert id 65534 is not an integer in 0..65533"),
              std::string::npos);
    EXPECT_EQ(import_text("{\"problem_id\": 0, \"token_idx\": 0, \"layer\": 0, \"experts\": [65533]}\n").header.n_expert,
              65534u);
}

TEST(TraceJsonl, ModelShapeIsEnforced) {
    TraceHeader model;
    model.model_name = "m";
    model.n_layer = 2;
    model.n_expert = 4;
    model.n_expert_used = 2;
    model.bytes_per_expert_per_layer = {100, 100};
    JsonlImportOptions opt;
    opt.model = &model;
    const Trace t = import_text("{\"problem_id\": 0, \"token_idx\": 0, \"layer\": 1, \"experts\": [3, 0]}\n", opt);
    EXPECT_EQ(t.header.n_expert, 4u);
    EXPECT_EQ(t.header.expert_bytes(1), 100u);
    std::istringstream bad("{\"problem_id\": 0, \"token_idx\": 0, \"layer\": 2, \"experts\": [3, 0]}\n");
    EXPECT_THROW(import_jsonl(bad, "b.jsonl", opt), Error);  // layer 2 >= n_layer 2
}

TEST(TraceJsonl, ExportThenImportIsIdentical) {
    TraceHeader h;
    h.model_name = "x";
    h.n_layer = 3;
    h.n_expert = 16;
    h.n_expert_used = 4;
    SynthOptions o;
    o.n_sequences = 2;
    o.prompt_tokens = 3;
    o.decode_tokens = 10;
    const Trace t = synth_trace(h, o);
    std::ostringstream out;
    export_jsonl(t, out);
    JsonlImportOptions opt;
    opt.n_expert = 16;
    const Trace r = import_text(out.str(), opt);
    EXPECT_EQ(r.seq, t.seq);
    EXPECT_EQ(r.pos, t.pos);
    EXPECT_EQ(r.phase, t.phase);
    EXPECT_EQ(r.layer, t.layer);
    EXPECT_EQ(r.ids, t.ids);
    EXPECT_EQ(r.weights, t.weights);  // floats are written in shortest round-trip form
}

}  // namespace
}  // namespace nitro
