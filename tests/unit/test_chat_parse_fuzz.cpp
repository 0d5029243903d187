// Token-level fuzz of the chat output parsers (CI, fixed seeds): random sequences over each
// format's control and tag tokens and text pieces that can never spell a tag, fed token by token
// (ChatTokenParser, what the server streams) and parsed in one go from the decoded text. The two
// must agree, the deltas must add up to the message, and no tag text may reach content,
// reasoning or a tool call: a cut or malformed header or call yields nothing or its text without
// markup (docs/server.md, "Output hygiene").
#include "tokenizer/chat_parse.h"
#include "tokenizer_fixtures.h"

#include <gtest/gtest.h>

#include <random>

namespace nitro {
namespace {

using test::tokenizer_for;

struct FuzzAlphabet {
    std::vector<std::string> specials;  ///< control / tag tokens, by text (each one token)
    std::vector<std::string> pieces;    ///< plain text (tokenized without specials)
    std::vector<std::string> tags;      ///< texts that must never appear in the parsed message
};

FuzzAlphabet alphabet(ChatFormat f) {
    FuzzAlphabet a;
    if (f == ChatFormat::HARMONY) {
        a.specials = {"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>"};
        a.pieces = {"assistant", " to=functions.get_weather", "to=", "functions.f", " to=assistant", "commentary", "analysis",
                    "final", " json", "json", "user", "as", "Hello", " world", "{\"a\": 1}", "\n", " ", "<", "|", "é"};
        a.tags = a.specials;
    } else {
        a.specials = {"<|im_end|>", "<|im_start|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>"};
        a.pieces = {"Hello", " world", "\n", "\n\n", " ", "{\"name\": \"f\", \"arguments\": {}}",
                    "{\"name\": \"g\", \"arguments\": {\"x\": [1, 2]}}", "{\"name\": ", "\"f\"", ", \"arguments\": ",
                    "{\"a\": ", "1}", "}", "not json", "<", "assistant", "é"};
        a.tags = a.specials;
    }
    return a;
}

/// Where `m` carries tag text, or "" when it is clean.
std::string leak_in(const ParsedMessage& m, const std::vector<std::string>& tags) {
    auto has = [&](const std::string& s) {
        for (const auto& t : tags)
            if (s.find(t) != std::string::npos) return true;
        return false;
    };
    if (has(m.content)) return "content";
    if (has(m.reasoning_content)) return "reasoning_content";
    for (const auto& c : m.tool_calls)
        if (has(c.name) || has(c.arguments)) return "tool call " + c.name;
    return "";
}

class ChatParseFuzz : public ::testing::TestWithParam<ChatFormat> {};

TEST_P(ChatParseFuzz, StreamedEqualsOneShotAndNoMarkupReachesTheMessage) {
    const ChatFormat f = GetParam();
    const Tokenizer& tok = tokenizer_for(f == ChatFormat::HARMONY ? "gptoss" : "qwen3");
    const FuzzAlphabet a = alphabet(f);
    std::vector<int32_t> special_ids;
    for (const auto& s : a.specials) {
        const int32_t id = tok.vocab().find_text(s);
        ASSERT_GE(id, 0) << s;
        special_ids.push_back(id);
    }
    std::vector<std::vector<int32_t>> piece_ids;
    for (const auto& p : a.pieces) piece_ids.push_back(tok.encode(p));

    const uint64_t seed = f == ChatFormat::HARMONY ? 18001 : 18002;
    std::mt19937_64 rng(seed);
    constexpr int kSequences = 20000;
    int leaks = 0, mismatches = 0, with_calls = 0, with_content = 0;
    std::string first_problem;
    for (int n = 0; n < kSequences; ++n) {
        std::vector<int32_t> ids;
        const int len = 1 + static_cast<int>(rng() % 24);
        for (int k = 0; k < len; ++k) {
            if (rng() % 5 < 2) {
                ids.push_back(special_ids[rng() % special_ids.size()]);
            } else {
                const auto& p = piece_ids[rng() % piece_ids.size()];
                ids.insert(ids.end(), p.begin(), p.end());
            }
        }
        ChatParseOptions opt;
        opt.reasoning_open = f == ChatFormat::CHATML && rng() % 4 == 0;

        ChatTokenParser streamed(tok, f, opt);
        ParsedMessage from_deltas;
        for (int32_t id : ids)
            for (const ChatDelta& d : streamed.push(id)) apply_delta(from_deltas, d);
        for (const ChatDelta& d : streamed.finish()) apply_delta(from_deltas, d);
        const ParsedMessage one_shot = parse_chat_output(f, tok.decode(ids), opt);
        from_deltas.warnings = streamed.message().warnings;

        const std::string text = tok.decode(ids);
        if (!(streamed.message() == one_shot) || !(from_deltas == one_shot)) {
            if (mismatches++ == 0) first_problem = "streamed != one-shot for: " + text;
        }
        const std::string leak = leak_in(one_shot, a.tags);
        if (!leak.empty() && leaks++ == 0) first_problem += "\nmarkup in " + leak + " for: " + text;
        with_calls += !one_shot.tool_calls.empty();
        with_content += !one_shot.content.empty();
    }
    std::printf("[ fuzz     ] %s seed %llu: %d sequences, %d with content, %d with tool calls; %d streamed != one-shot, "
                "%d with markup in the message\n",
                chat_format_name(f), static_cast<unsigned long long>(seed), kSequences, with_content, with_calls, mismatches, leaks);
    EXPECT_EQ(mismatches, 0) << first_problem;
    EXPECT_EQ(leaks, 0) << first_problem;
    // The alphabet reaches every route: plenty of content and of tool calls.
    EXPECT_GT(with_content, kSequences / 10);
    EXPECT_GT(with_calls, kSequences / 200);
}

INSTANTIATE_TEST_SUITE_P(Chat, ChatParseFuzz, ::testing::Values(ChatFormat::HARMONY, ChatFormat::CHATML),
                         [](const auto& info) { return std::string(chat_format_name(info.param)); });

}  // namespace
}  // namespace nitro
