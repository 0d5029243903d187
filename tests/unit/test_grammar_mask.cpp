// Token masks of constrained decoding on real vocabularies: the embedded model's (8,192 tokens,
// harmony), gpt-oss's o200k_harmony (201,088) and Qwen3's (151,936), from the shared fixtures.
//  - The mask (trie walk + loop tables) equals the brute-force definition at every position of
//    harmony and ChatML replies: token t is allowed iff the automaton accepts all of t's bytes
//    (or, for a control token, the token itself), tried one token at a time.
//  - The reasoning budget, the chat envelopes, and the masked sampler.
//  - The time per mask on the gpt-oss vocabulary (printed; bounded).
#include "gguf/gguf.h"
#include "grammar/json_schema.h"
#include "grammar/response_constraint.h"
#include "runtime/sampler.h"
#include "tokenizer/bpe.h"
#include "tokenizer/chat_parse.h"
#include "tokenizer_fixtures.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <random>

namespace nitro::grammar {
namespace {

using json = nlohmann::ordered_json;
using nitro::test::tokenizer_for;

const Tokenizer& embedded_tokenizer() {
    static std::unique_ptr<Tokenizer> t = [] {
        GgufModel m(std::string(NITRO_SOURCE_DIR) + "/models/tiny-moe-pystd.gguf");
        return std::make_unique<Tokenizer>(Tokenizer::from_gguf(m.metadata()));
    }();
    return *t;
}

const char* kPerson = R"({"type":"object","properties":{
    "name":{"type":"string","maxLength":12},"age":{"type":"integer"},"role":{"enum":["admin","user"]},
    "tags":{"type":"array","items":{"type":"string"},"maxItems":3}},
    "required":["name","tags"],"additionalProperties":false})";

std::shared_ptr<Grammar> grammar_for(const Tokenizer& tok, Envelope env, const std::string& schema, bool reasoning_open = false) {
    auto g = std::make_shared<Grammar>();
    const uint32_t root = schema == "json_object" ? kAnyObject : compile_json_schema(json::parse(schema), *g);
    ResponseGrammarOptions o;
    o.envelope = env;
    o.reasoning_open = reasoning_open;
    o.end_of_generation = chat_stop_tokens(env == Envelope::CHATML ? ChatFormat::CHATML : ChatFormat::HARMONY, tok);
    add_response_program(*g, root, tok.vocab(), o);
    return g;
}

/// The mask by definition: each token tried alone.
TokenBits brute_force(const Automaton& a, const VocabIndex& v) {
    TokenBits m(v.n_words(), 0);
    for (int32_t id = 0; id < v.n_vocab(); ++id) {
        const bool ok = (v.is_text_token(id) && a.allows_bytes(v.bytes(id))) || a.allows_special(id);
        if (ok) set_bit(m, id);
    }
    return m;
}

std::vector<int32_t> encode_special(const Tokenizer& tok, const std::string& text) {
    EncodeOptions e;
    e.parse_special = true;
    return tok.encode(text, e);
}

/// Walks the reply token by token: at each of `check_positions` (all if empty) the mask must equal
/// the brute-force one; the reply's own next token must always be allowed; it must end DONE.
void check_reply(const Tokenizer& tok, std::shared_ptr<Grammar> g, const std::string& reply, int64_t budget,
                 std::vector<size_t> check_positions = {}) {
    const VocabIndex v(tok.vocab());
    ResponseConstraint rc(std::make_shared<VocabIndex>(tok.vocab()), g, budget);
    const std::vector<int32_t> ids = encode_special(tok, reply);
    TokenBits mask;
    for (size_t i = 0; i < ids.size(); ++i) {
        rc.allowed_tokens(mask);
        const bool check = check_positions.empty() || std::find(check_positions.begin(), check_positions.end(), i) != check_positions.end();
        if (check) {
            const TokenBits bf = brute_force(rc.automaton(), v);
            for (int32_t id = 0; id < v.n_vocab(); ++id)
                ASSERT_EQ(test_bit(mask, id), test_bit(bf, id))
                    << "position " << i << ", token " << id << " '" << v.bytes(id) << "' (mask says " << test_bit(mask, id) << ")";
        }
        ASSERT_TRUE(test_bit(mask, ids[i])) << "position " << i << ": the reply's token " << ids[i] << " '" << tok.vocab().text(ids[i])
                                            << "' is masked";
        rc.accept(ids[i]);
    }
    EXPECT_TRUE(rc.automaton().done());
}

const std::string kHarmonyReply =
    "<|channel|>analysis<|message|>We need JSON. def f(x):\n    return \"a\" + x<|end|><|start|>assistant"
    "<|channel|>final<|message|>{\"name\": \"Ann \\\"A\\\" \xC3\xA9\", \"age\": -41, \"role\": \"admin\", \"tags\": [\"a\", \"b\\n\"]}<|return|>";

TEST(GrammarMask, EqualsBruteForceOnTheEmbeddedVocabulary) {
    const Tokenizer& tok = embedded_tokenizer();
    check_reply(tok, grammar_for(tok, Envelope::HARMONY, kPerson), kHarmonyReply, -1);
    check_reply(tok, grammar_for(tok, Envelope::HARMONY, "json_object"),
                "<|channel|>final<|message|>{\"a\": [1, 2.5e3, true, null, {\"b\": \"x y z\"}], \"c\": {}}\n<|return|>", -1);
    check_reply(tok, grammar_for(tok, Envelope::RAW, R"({"type":"array","items":{"anyOf":[{"type":"number"},{"type":"string","maxLength":4}]}})"),
                "[1, \"abcd\", -0.5, \"\"]<|return|>", -1);
}

TEST(GrammarMask, EqualsBruteForceOnGptOssAndQwen3Vocabularies) {
    const Tokenizer& gpt = tokenizer_for("gptoss");
    ASSERT_GT(gpt.vocab().size(), 200000);
    // Positions: the header, analysis text, the final header, a key, inside a string, a number, the end.
    check_reply(gpt, grammar_for(gpt, Envelope::HARMONY, kPerson), kHarmonyReply, -1, {0, 1, 4, 12, 15, 18, 22, 30});
    const Tokenizer& qwen = tokenizer_for("qwen3");
    check_reply(qwen, grammar_for(qwen, Envelope::CHATML, "json_object"),
                "<think>\nThe user wants </thi JSON.\n</think>\n\n{\"k\": \"v <tool_call> w\", \"n\": [0]}<|im_end|>", -1, {0, 1, 3, 8, 12, 16});
    check_reply(qwen, grammar_for(qwen, Envelope::CHATML, kPerson, true),
                "Let me think.\n</think>\n\n{\"name\":\"Bo\",\"tags\":[]}<|im_end|>", -1, {0, 2, 5, 7});
}

TEST(GrammarMask, HarmonyAllowsOnlyTheFinalChannelOrReasoning) {
    const Tokenizer& tok = embedded_tokenizer();
    const VocabIndex v(tok.vocab());
    ResponseConstraint rc(std::make_shared<VocabIndex>(tok.vocab()), grammar_for(tok, Envelope::HARMONY, kPerson), -1);
    TokenBits m;
    rc.allowed_tokens(m);
    // Only <|channel|> may open the reply.
    const int32_t channel = tok.vocab().find_text("<|channel|>");
    EXPECT_EQ(std::count_if(m.begin(), m.end(), [](uint64_t w) { return w != 0; }), 1);
    EXPECT_TRUE(test_bit(m, channel));
    rc.accept(channel);
    rc.allowed_tokens(m);
    for (int32_t id = 0; id < v.n_vocab(); ++id) {
        if (!test_bit(m, id)) continue;
        const std::string_view b = v.bytes(id);
        EXPECT_TRUE(std::string_view("final").starts_with(b) || std::string_view("analysis").starts_with(b)) << b;
    }
    // The commentary channel (tool calls, preambles) cannot be opened.
    EXPECT_FALSE(rc.automaton().allows_bytes("commentary"));
}

TEST(GrammarMask, ReasoningBudget) {
    const Tokenizer& tok = embedded_tokenizer();
    const VocabIndex v(tok.vocab());
    const int32_t channel = tok.vocab().find_text("<|channel|>"), end = tok.vocab().find_text("<|end|>");
    TokenBits m;
    {  // Budget 0: straight to the final channel.
        ResponseConstraint rc(std::make_shared<VocabIndex>(tok.vocab()), grammar_for(tok, Envelope::HARMONY, kPerson), 0);
        rc.accept(channel);
        EXPECT_FALSE(rc.automaton().allows_bytes("analysis"));
        EXPECT_TRUE(rc.automaton().allows_bytes("final"));
    }
    {  // Budget 3: three tokens of analysis, then <|end|> only, then only the final channel.
        ResponseConstraint rc(std::make_shared<VocabIndex>(tok.vocab()), grammar_for(tok, Envelope::HARMONY, kPerson), 3);
        for (int32_t id : encode_special(tok, "<|channel|>analysis<|message|>")) rc.accept(id);
        const std::vector<int32_t> text = tok.encode("one two three four five");
        ASSERT_GE(text.size(), 4u);
        for (size_t i = 0; i < 3; ++i) {
            rc.allowed_tokens(m);
            ASSERT_TRUE(test_bit(m, text[i]));
            ASSERT_TRUE(test_bit(m, end));
            rc.accept(text[i]);
        }
        EXPECT_EQ(rc.reasoning_tokens(), 3);
        rc.allowed_tokens(m);
        EXPECT_EQ(std::count_if(m.begin(), m.end(), [](uint64_t w) { return w != 0; }), 1);
        EXPECT_TRUE(test_bit(m, end));
        for (int32_t id : encode_special(tok, "<|end|><|start|>assistant<|channel|>")) rc.accept(id);
        EXPECT_FALSE(rc.automaton().allows_bytes("analysis"));
        EXPECT_TRUE(rc.automaton().allows_bytes("final"));
    }
    {  // ChatML with the prompt inside <think> and a budget of 2: then "</think>" is forced.
        const Tokenizer& q = tokenizer_for("qwen3");
        const VocabIndex qv(q.vocab());
        ResponseConstraint rc(std::make_shared<VocabIndex>(q.vocab()), grammar_for(q, Envelope::CHATML, kPerson, true), 2);
        for (int32_t id : q.encode("Hmm, well")) {
            if (rc.reasoning_tokens() == 2) break;
            rc.accept(id);
        }
        rc.allowed_tokens(m);
        int n = 0;
        for (int32_t id = 0; id < qv.n_vocab(); ++id)
            if (test_bit(m, id)) {
                ++n;
                EXPECT_TRUE(std::string_view("</think>").starts_with(qv.bytes(id))) << qv.bytes(id);
            }
        EXPECT_GT(n, 0);
        for (int32_t id : q.encode("</think>")) rc.accept(id);
        EXPECT_TRUE(rc.automaton().allows_bytes("\n\n{\"name\""));
    }
}

TEST(GrammarMask, SamplerDrawsFromTheAllowedTokensOnly) {
    const std::vector<float> logits = {0.0f, 1.0f, 2.0f, 3.0f, -1.0f};
    std::vector<uint64_t> allowed = {0b00101};  // tokens 0 and 2
    SamplerParams p;
    p.temperature = 0;
    EXPECT_EQ(Sampler(p).sample(logits, &allowed), 2);
    p.temperature = 1;
    p.top_k = 0;
    p.seed = 7;
    Sampler s(p);
    const int n = 20000;
    int zeros = 0;
    for (int i = 0; i < n; ++i) {
        const int32_t t = s.sample(logits, &allowed);
        ASSERT_TRUE(t == 0 || t == 2) << t;
        zeros += t == 0;
    }
    // softmax over the allowed tokens only: e^0 / (e^0 + e^2) = 0.1192 (hand computation).
    EXPECT_NEAR(static_cast<double>(zeros) / n, 0.1192, 0.01);
    p.top_k = 1;
    Sampler k1(p);
    for (int i = 0; i < 100; ++i) EXPECT_EQ(k1.sample(logits, &allowed), 2);
    p.top_k = 0;
    p.min_p = 0.5f;  // min-p after masking: token 0 has 0.135 of token 2's probability
    Sampler mp(p);
    for (int i = 0; i < 100; ++i) EXPECT_EQ(mp.sample(logits, &allowed), 2);
}

/// Random walks: tokens drawn uniformly from each mask (the masked sampler on flat logits) until
/// the end-of-generation token; returns the text of every walk that ended within `max_steps`.
std::vector<std::string> random_walks(const Tokenizer& tok, const std::string& schema, int walks, int max_steps) {
    auto vi = std::make_shared<VocabIndex>(tok.vocab());
    const std::vector<float> flat(static_cast<size_t>(tok.vocab().size()), 0.0f);
    std::vector<std::string> out;
    TokenBits m;
    for (int w = 0; w < walks; ++w) {
        ResponseConstraint rc(vi, grammar_for(tok, Envelope::RAW, schema), -1);
        SamplerParams p;
        p.temperature = 1;
        p.top_k = 0;
        p.seed = static_cast<uint64_t>(w);
        Sampler s(p);
        std::string text;
        for (int i = 0; i < max_steps && !rc.automaton().done(); ++i) {
            rc.allowed_tokens(m);
            const int32_t id = s.sample(flat, &m);
            EXPECT_GE(id, 0);
            if (id < 0) break;
            rc.accept(id);
            if (vi->is_text_token(id)) text += vi->bytes(id);
        }
        if (rc.automaton().done()) out.push_back(text);
    }
    return out;
}

TEST(GrammarMask, RandomWalksAreJsonThatNlohmannParsesAndTheSchemaHolds) {
    const Tokenizer& tok = embedded_tokenizer();
    const std::vector<std::string> persons = random_walks(tok, kPerson, 25, 3000);
    EXPECT_GE(persons.size(), 20u) << "walks must end: every string, array and number of kPerson is bounded";
    for (const std::string& t : persons) {
        // nlohmann's parser is the independent judge of JSON; the schema is checked by hand.
        const auto v = nlohmann::json::parse(t, nullptr, false);
        ASSERT_FALSE(v.is_discarded()) << t;
        ASSERT_TRUE(v.is_object()) << t;
        for (const auto& [k, x] : v.items()) EXPECT_TRUE(k == "name" || k == "age" || k == "role" || k == "tags") << k;
        ASSERT_TRUE(v.contains("name") && v["name"].is_string()) << t;
        EXPECT_LE(v["name"].get<std::string>().size(), 12u * 4) << t;  // 12 characters, at most 4 bytes each
        if (v.contains("age")) { EXPECT_TRUE(v["age"].is_number_integer()) << t; }
        if (v.contains("role")) { EXPECT_TRUE(v["role"] == "admin" || v["role"] == "user") << t; }
        ASSERT_TRUE(v.contains("tags") && v["tags"].is_array()) << t;
        EXPECT_LE(v["tags"].size(), 3u) << t;
        for (const auto& x : v["tags"]) EXPECT_TRUE(x.is_string()) << t;
    }
    const char* tree = R"({"$defs":{"n":{"type":"object","properties":{"v":{"enum":[1,2]},"kids":{"type":"array","items":{"$ref":"#/$defs/n"},"maxItems":2}},"required":["v","kids"]}},"$ref":"#/$defs/n"})";
    std::function<void(const nlohmann::json&)> check_tree = [&](const nlohmann::json& n) {
        ASSERT_TRUE(n.is_object());
        ASSERT_EQ(n.size(), 2u) << n.dump();
        EXPECT_TRUE(n["v"] == 1 || n["v"] == 2);
        ASSERT_TRUE(n["kids"].is_array());
        EXPECT_LE(n["kids"].size(), 2u);
        for (const auto& k : n["kids"]) check_tree(k);
    };
    int trees = 0;
    for (const std::string& t : random_walks(tok, tree, 15, 3000)) {
        const auto v = nlohmann::json::parse(t, nullptr, false);
        ASSERT_FALSE(v.is_discarded()) << t;
        check_tree(v);
        ++trees;
    }
    EXPECT_GT(trees, 0);
}

TEST(GrammarMask, TimePerTokenOnTheGptOssVocabulary) {
    const Tokenizer& gpt = tokenizer_for("gptoss");
    auto vi = std::make_shared<VocabIndex>(gpt.vocab());
    // Positions that cover each way a mask is made, on the kHarmonyReply path plus json_object.
    struct Case {
        const char* name;
        std::string schema, prefix;
    };
    const std::vector<Case> cases = {
        {"harmony header", kPerson, ""},
        {"analysis text", kPerson, "<|channel|>analysis<|message|>We need"},
        {"value start", kPerson, "<|channel|>final<|message|>"},
        {"key", kPerson, "<|channel|>final<|message|>{\"name\": \"A\", \""},
        {"string (maxLength)", kPerson, "<|channel|>final<|message|>{\"name\": \"An"},
        {"string in array", kPerson, "<|channel|>final<|message|>{\"name\": \"A\", \"tags\": [\"x"},
        {"number", kPerson, "<|channel|>final<|message|>{\"name\": \"A\", \"age\": 4"},
        {"after value", kPerson, "<|channel|>final<|message|>{\"name\": \"A\", \"age\": 41"},
        {"json_object string", "json_object", "<|channel|>final<|message|>{\"text\": \"Once upon"},
        {"json_object value", "json_object", "<|channel|>final<|message|>{\"a\": "},
    };
    TokenBits m;
    double worst = 0;
    for (const Case& c : cases) {
        ResponseConstraint rc(vi, grammar_for(gpt, Envelope::HARMONY, c.schema), -1);
        for (int32_t id : encode_special(gpt, c.prefix)) rc.accept(id);
        rc.allowed_tokens(m);  // builds the loop tables this state needs (once per vocabulary)
        std::vector<double> ms;
        for (int r = 0; r < 7; ++r) {
            const auto t0 = std::chrono::steady_clock::now();
            rc.allowed_tokens(m);
            ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(ms.begin(), ms.end());
        const double median = ms[ms.size() / 2];
        worst = std::max(worst, median);
        int allowed = 0;
        for (uint64_t w : m) allowed += std::popcount(w);
        std::printf("  mask %-20s %8.3f ms  (%d tokens allowed, %llu trie nodes, %llu walked)\n", c.name, median, allowed,
                    static_cast<unsigned long long>(rc.last_stats().trie_nodes), static_cast<unsigned long long>(rc.last_stats().walked_tokens));
        EXPECT_GT(allowed, 0) << c.name;
    }
    std::printf("  worst median mask time on %d tokens: %.3f ms\n", vi->n_vocab(), worst);
    // A loose bound (this host is small and shared): masking must stay far below a decode step.
    EXPECT_LT(worst, 50.0);
}

}  // namespace
}  // namespace nitro::grammar
