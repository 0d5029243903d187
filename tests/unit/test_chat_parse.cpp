// Parsing model output into OpenAI messages: the incremental parser (token by token, and code
// point by code point) must equal the one-shot parser, and parse + re-render must give back the
// official template's text. Round trips run on every assistant turn of the golden conversations.
#include "core/error.h"
#include "tokenizer/chat.h"
#include "tokenizer/chat_parse.h"
#include "tokenizer/unicode.h"
#include "tokenizer_fixtures.h"

#include <gtest/gtest.h>

namespace nitro {
namespace {

using json = nlohmann::ordered_json;
using test::read_jsonl;
using test::tokenizer_for;

const char* family_of(ChatFormat f) { return f == ChatFormat::HARMONY ? "gptoss" : "qwen3"; }

/// Parses `text` token by token (tokenized with specials parsed) and one code point at a time,
/// checks both equal the one-shot parse and the applied deltas, and returns the one-shot result.
ParsedMessage parse_all_ways(ChatFormat f, const std::string& text, const ChatParseOptions& opt = {}) {
    const ParsedMessage one_shot = parse_chat_output(f, text, opt);
    const Tokenizer& tok = tokenizer_for(family_of(f));
    EncodeOptions special;
    special.parse_special = true;
    ChatTokenParser by_token(tok, f, opt);
    ParsedMessage from_deltas;
    for (int32_t id : tok.encode(text, special))
        for (const ChatDelta& d : by_token.push(id)) apply_delta(from_deltas, d);
    for (const ChatDelta& d : by_token.finish()) apply_delta(from_deltas, d);
    EXPECT_EQ(by_token.message(), one_shot) << "token-by-token differs from one-shot for: " << text;
    from_deltas.warnings = by_token.message().warnings;
    EXPECT_EQ(from_deltas, one_shot) << "deltas do not add up to the message for: " << text;

    // Code point by code point through the text API (control tokens split out first).
    auto p = make_chat_output_parser(f, opt);
    const std::vector<std::string_view> tags =
        f == ChatFormat::HARMONY
            ? std::vector<std::string_view>{"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>"}
            : std::vector<std::string_view>{"<|im_start|>", "<|im_end|>", "<|endoftext|>"};
    for (size_t i = 0; i < text.size();) {
        bool tag = false;
        for (auto t : tags)
            if (std::string_view(text).substr(i).starts_with(t)) {
                p->push_special(t);
                i += t.size();
                tag = true;
                break;
            }
        if (tag) continue;
        const size_t n = utf8_step(std::string_view(text).substr(i)).len;
        p->push_text(std::string_view(text).substr(i, n));
        i += n;
    }
    p->finish();
    EXPECT_EQ(p->message(), one_shot) << "code-point chunks differ from one-shot for: " << text;
    return one_shot;
}

/// Where the assistant turn that starts at `from` ends in a rendered conversation.
size_t turn_end(ChatFormat f, const std::string& r, size_t from) {
    if (f == ChatFormat::CHATML) {
        const size_t e = r.find("<|im_end|>", from);
        return e == std::string::npos ? r.size() : e + 10;
    }
    for (size_t p = r.find("<|start|>", from); p != std::string::npos; p = r.find("<|start|>", p + 1))
        if (r.compare(p + 9, 9, "assistant") != 0) return p;
    return r.size();
}

class ChatParseGolden : public ::testing::TestWithParam<ChatFormat> {};

TEST_P(ChatParseGolden, AssistantTurnsRoundTripAndIncrementalEqualsOneShot) {
    const ChatFormat f = GetParam();
    int turns = 0, skipped = 0;
    for (const auto& r : read_jsonl(std::string("golden/chat/") + family_of(f) + ".jsonl")) {
        if (r.contains("error")) continue;
        const std::string name = r.at("name");
        const std::string rendered = r.at("rendered");
        ChatOptions opt = ChatOptions::from_kwargs(r.at("kwargs"));
        opt.date = chat_date_from_iso(r.at("now").get<std::string>());
        const json& msgs = r.at("messages");
        for (size_t k = 0; k < msgs.size(); ++k) {
            if (msgs[k].at("role") != "assistant") continue;
            ChatOptions prefix_opt = opt;
            prefix_opt.add_generation_prompt = true;
            const json prefix(msgs.begin(), msgs.begin() + static_cast<ptrdiff_t>(k));
            const std::string p = k == 0 ? std::string() : render_chat(f, prefix, r.at("tools"), prefix_opt);
            if (k == 0 || !rendered.starts_with(p)) {  // history rendered differently once continued
                ++skipped;
                std::printf("[ skipped  ] %s message %zu: its prefix renders differently without the rest\n",
                            name.c_str(), k);
                continue;
            }
            const std::string turn = rendered.substr(p.size(), turn_end(f, rendered, p.size()) - p.size());
            SCOPED_TRACE(name + " message " + std::to_string(k) + ": " + turn);
            const ParsedMessage m = parse_all_ways(f, turn);
            EXPECT_TRUE(m.warnings.empty());
            ++turns;

            // What the golden message says must come back.
            const json& g = msgs[k];
            if (g.contains("tool_calls")) {
                const size_t n_calls = f == ChatFormat::HARMONY ? 1 : g["tool_calls"].size();  // harmony renders one
                ASSERT_EQ(m.tool_calls.size(), n_calls);
                for (size_t c = 0; c < n_calls; ++c) {
                    const json& fn = g["tool_calls"][c]["function"];
                    EXPECT_EQ(m.tool_calls[c].name, fn["name"]);
                    const json want = fn["arguments"].is_string() ? json::parse(fn["arguments"].get<std::string>()) : fn["arguments"];
                    EXPECT_EQ(json::parse(m.tool_calls[c].arguments), want);
                }
            } else {
                std::string want = g.at("content");
                if (const size_t e = want.find("</think>"); e != std::string::npos)
                    want = want.substr(want.find_first_not_of('\n', e + 8));
                EXPECT_EQ(m.content, want);
            }

            // Parse + re-render gives the template's text back.
            json again = msgs;
            json pm = m.to_openai();
            if (f == ChatFormat::HARMONY && pm.contains("reasoning_content")) {
                pm["thinking"] = pm["reasoning_content"];
                pm.erase("reasoning_content");
            }
            again[k] = pm;
            EXPECT_EQ(render_chat(f, again, r.at("tools"), opt), rendered);
        }
    }
    std::printf("[ golden   ] %s: %d assistant turns parsed (incremental == one-shot, re-render equal), %d skipped\n",
                family_of(f), turns, skipped);
    EXPECT_GE(turns, 5);
}

TEST_P(ChatParseGolden, GoldenIdsFedTokenByTokenEqualOneShot) {
    // Every golden conversation, from each point where an assistant turn starts (including the
    // generation prompt) to its end, fed as the golden ids one at a time.
    const ChatFormat f = GetParam();
    const Tokenizer& tok = tokenizer_for(family_of(f));
    const int32_t start = tok.vocab().find_text(f == ChatFormat::HARMONY ? "<|start|>" : "<|im_start|>");
    const std::vector<int32_t> assistant = tok.encode(f == ChatFormat::HARMONY ? "assistant" : "assistant\n");
    int fed = 0;
    for (const auto& r : read_jsonl(std::string("golden/chat/") + family_of(f) + ".jsonl")) {
        if (r.contains("error")) continue;
        const auto ids = r.at("ids").get<std::vector<int32_t>>();
        for (size_t i = 0; i + assistant.size() < ids.size() + 1; ++i) {
            if (ids[i] != start || !std::equal(assistant.begin(), assistant.end(), ids.begin() + static_cast<ptrdiff_t>(i) + 1))
                continue;
            const std::vector<int32_t> out(ids.begin() + static_cast<ptrdiff_t>(i + 1 + assistant.size()), ids.end());
            ChatTokenParser p(tok, f);
            for (int32_t id : out) p.push(id);
            p.finish();
            EXPECT_EQ(p.message(), parse_chat_output(f, tok.decode(out))) << r.at("name") << " from token " << i;
            ++fed;
        }
    }
    std::printf("[ golden   ] %s: %d golden token streams parsed token by token == one-shot\n", family_of(f), fed);
    EXPECT_GE(fed, 17);
}

INSTANTIATE_TEST_SUITE_P(Chat, ChatParseGolden, ::testing::Values(ChatFormat::HARMONY, ChatFormat::CHATML));

// ---- harmony ----

TEST(ChatParseHarmony, AnalysisThenFinal) {
    const auto m = parse_all_ways(ChatFormat::HARMONY,
        "<|channel|>analysis<|message|>User greets.<|end|><|start|>assistant<|channel|>final<|message|>Hello!<|return|>");
    EXPECT_EQ(m.reasoning_content, "User greets.");
    EXPECT_EQ(m.content, "Hello!");
    EXPECT_TRUE(m.tool_calls.empty());
}

TEST(ChatParseHarmony, RecipientBeforeOrAfterChannel) {
    const std::string args = R"({"location":{"city":"Paris"},"unit":"celsius"})";
    const auto after = parse_all_ways(ChatFormat::HARMONY,
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>" + args + "<|call|>");
    const auto before = parse_all_ways(ChatFormat::HARMONY,
        " to=functions.get_weather<|channel|>commentary json<|message|>" + args + "<|call|>");
    for (const auto& m : {after, before}) {
        ASSERT_EQ(m.tool_calls.size(), 1u);
        EXPECT_EQ(m.tool_calls[0].name, "get_weather");
        EXPECT_EQ(m.tool_calls[0].arguments, args);
        EXPECT_EQ(m.tool_calls[0].id, "call_0");
        EXPECT_EQ(m.content, "");
    }
}

TEST(ChatParseHarmony, SeveralToolCallsWithReasoning) {
    const auto m = parse_all_ways(ChatFormat::HARMONY,
        "<|channel|>analysis<|message|>Need both.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.a json<|message|>{\"x\": 1}<|call|>"
        "<|start|>assistant to=functions.b<|channel|>commentary json<|message|>{\"y\": [1, 2]}<|call|>");
    EXPECT_EQ(m.reasoning_content, "Need both.");
    ASSERT_EQ(m.tool_calls.size(), 2u);
    EXPECT_EQ(m.tool_calls[0].name, "a");
    EXPECT_EQ(m.tool_calls[1].name, "b");
    EXPECT_EQ(m.tool_calls[1].arguments, "{\"y\": [1, 2]}");
    EXPECT_EQ(m.tool_calls[1].id, "call_1");
}

TEST(ChatParseHarmony, BareTextIsContentNeverAnError) {
    EXPECT_EQ(parse_all_ways(ChatFormat::HARMONY, "Hello there, no markup at all.").content, "Hello there, no markup at all.");
    EXPECT_EQ(parse_all_ways(ChatFormat::HARMONY, "as").content, "as");  // a prefix of "assistant"
    EXPECT_EQ(parse_all_ways(ChatFormat::HARMONY, "").content, "");
}

TEST(ChatParseHarmony, TruncatedOutputGivesWhatWasProduced) {
    auto m = parse_all_ways(ChatFormat::HARMONY, "<|channel|>analysis<|message|>Thinking ab");
    EXPECT_EQ(m.reasoning_content, "Thinking ab");
    m = parse_all_ways(ChatFormat::HARMONY, "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>fin");
    EXPECT_EQ(m.reasoning_content, "x");
    EXPECT_EQ(m.content, "");
    m = parse_all_ways(ChatFormat::HARMONY, "<|channel|>commentary to=functions.f json<|message|>{\"a\": \"unfini");
    ASSERT_EQ(m.tool_calls.size(), 1u);
    EXPECT_EQ(m.tool_calls[0].arguments, "{\"a\": \"unfini");
    EXPECT_EQ(m.warnings.size(), 1u);
}

TEST(ChatParseHarmony, ReturnAndCallStopGenerationEndDoesNot) {
    const Tokenizer& tok = tokenizer_for("gptoss");
    const auto stops = chat_stop_tokens(ChatFormat::HARMONY, tok);
    auto is_stop = [&](const char* t) {
        return std::find(stops.begin(), stops.end(), tok.vocab().find_text(t)) != stops.end();
    };
    EXPECT_TRUE(is_stop("<|return|>"));
    EXPECT_TRUE(is_stop("<|call|>"));
    EXPECT_FALSE(is_stop("<|end|>"));
    const auto q = chat_stop_tokens(ChatFormat::CHATML, tokenizer_for("qwen3"));
    EXPECT_NE(std::find(q.begin(), q.end(), tokenizer_for("qwen3").vocab().find_text("<|im_end|>")), q.end());
}

// ---- Qwen3 ----

TEST(ChatParseQwen, ThinkThenContent) {
    const auto m = parse_all_ways(ChatFormat::CHATML, "<think>\nThe user asks.\nEasy.\n</think>\n\nParis.<|im_end|>");
    EXPECT_EQ(m.reasoning_content, "The user asks.\nEasy.");
    EXPECT_EQ(m.content, "Paris.");
    const auto open = parse_all_ways(ChatFormat::CHATML, "Still thinking\n</think>\n\nDone.", {.reasoning_open = true});
    EXPECT_EQ(open.reasoning_content, "Still thinking");
    EXPECT_EQ(open.content, "Done.");
}

TEST(ChatParseQwen, SeveralToolCallsWithComplexArgumentsSurviveReRender) {
    // Nested objects, arrays, an enum value and a multi-line source file with quotes, tabs
    // and backslashes.
    const json call1 = json::parse(R"({"path": "src/main.cpp", "content": "#include <cstdio>\n\nint main() {\n\tstd::printf(\"hi\\n\");\n    return 0;\n}\n", "mode": "overwrite", "tags": ["a", "b"], "opts": {"depth": {"max": 3}, "flags": [true, null, 1.5]}})");
    const json call2 = json::parse(R"({"location": {"city": "Oslo", "country": "NO"}, "unit": "fahrenheit"})");
    const json msgs = json::array({
        {{"role", "user"}, {"content", "Do both."}},
        {{"role", "assistant"}, {"content", "Doing both."}, {"tool_calls", json::array({
            {{"id", "c1"}, {"type", "function"}, {"function", {{"name", "write_file"}, {"arguments", call1}}}},
            {{"id", "c2"}, {"type", "function"}, {"function", {{"name", "get_weather"}, {"arguments", call2}}}}})}}});
    ChatOptions opt;
    opt.add_generation_prompt = false;
    const std::string rendered = render_chat(ChatFormat::CHATML, msgs, nullptr, opt);
    const std::string head = "<|im_start|>user\nDo both.<|im_end|>\n<|im_start|>assistant\n";
    ASSERT_TRUE(rendered.starts_with(head));
    const auto m = parse_all_ways(ChatFormat::CHATML, rendered.substr(head.size()));
    EXPECT_EQ(m.content, "Doing both.");
    ASSERT_EQ(m.tool_calls.size(), 2u);
    EXPECT_EQ(json::parse(m.tool_calls[0].arguments), call1);
    EXPECT_EQ(json::parse(m.tool_calls[1].arguments), call2);
    json again = msgs;
    again[1] = m.to_openai();  // arguments as JSON strings, as an OpenAI client sends them back
    EXPECT_EQ(render_chat(ChatFormat::CHATML, again, nullptr, opt), rendered);
}

TEST(ChatParseHarmony, ComplexArgumentsSurviveReRender) {
    const json args = json::parse(R"({"path": "a.py", "content": "def f(x):\n    return \"\\\\\" + x  # tab\there\n", "mode": "append", "list": [[1, 2], {"k": []}]})");
    const json msgs = json::array({
        {{"role", "user"}, {"content", "Write it."}},
        {{"role", "assistant"}, {"thinking", "Call write_file."}, {"tool_calls", json::array({
            {{"id", "c1"}, {"type", "function"}, {"function", {{"name", "write_file"}, {"arguments", args}}}}})}},
        {{"role", "tool"}, {"content", "ok"}}});
    ChatOptions opt;
    opt.date = "2025-08-05";
    const std::string rendered = render_chat(ChatFormat::HARMONY, msgs, nullptr, opt);
    const std::string prefix = render_chat(ChatFormat::HARMONY, json::array({msgs[0]}), nullptr, opt);
    ASSERT_TRUE(rendered.starts_with(prefix));
    const std::string turn = rendered.substr(prefix.size(), turn_end(ChatFormat::HARMONY, rendered, prefix.size()) - prefix.size());
    const auto m = parse_all_ways(ChatFormat::HARMONY, turn);
    EXPECT_EQ(m.reasoning_content, "Call write_file.");
    ASSERT_EQ(m.tool_calls.size(), 1u);
    EXPECT_EQ(json::parse(m.tool_calls[0].arguments), args);
    json again = msgs;
    json pm = m.to_openai();
    pm["thinking"] = pm["reasoning_content"];
    pm.erase("reasoning_content");
    again[1] = pm;
    EXPECT_EQ(render_chat(ChatFormat::HARMONY, again, nullptr, opt), rendered);
}

TEST(ChatParseQwen, MalformedToolCallIsItsTextWithoutTagsWithWarning) {
    const std::string json_text = "{\"name\": \"f\", \"arguments\": {\"a\": 1,,}}";
    const std::string bad = "<tool_call>\n" + json_text + "\n</tool_call>";
    const auto m = parse_all_ways(ChatFormat::CHATML, "Let me try.\n" + bad +
                                  "\n<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call><|im_end|>");
    EXPECT_EQ(m.content, "Let me try.\n" + json_text);
    ASSERT_EQ(m.tool_calls.size(), 1u);
    EXPECT_EQ(m.tool_calls[0].name, "g");
    EXPECT_EQ(m.tool_calls[0].arguments, "{}");
    ASSERT_EQ(m.warnings.size(), 1u);
    EXPECT_NE(m.warnings[0].find("does not parse"), std::string::npos);
    // Not JSON at all, and a call without a name: their text, no tags, no call, no crash.
    EXPECT_EQ(parse_all_ways(ChatFormat::CHATML, "<tool_call>not json</tool_call>").content, "not json");
    const auto no_name = parse_all_ways(ChatFormat::CHATML, "<tool_call>{\"arguments\": {}}</tool_call>");
    EXPECT_EQ(no_name.tool_calls.size(), 0u);
    EXPECT_EQ(no_name.content, "{\"arguments\": {}}");
}

TEST(ChatParseQwen, TruncatedOutputGivesWhatWasProducedWithoutTags) {
    auto m = parse_all_ways(ChatFormat::CHATML, "<think>\nhalf a tho");
    EXPECT_EQ(m.reasoning_content, "half a tho");
    // Cut before the call's name is complete: the call is dropped (no tag or JSON in content).
    m = parse_all_ways(ChatFormat::CHATML, "Answer text\n<tool_call>\n{\"name\": \"f\", \"argu");
    EXPECT_EQ(m.content, "Answer text");
    EXPECT_TRUE(m.tool_calls.empty());
    EXPECT_EQ(m.warnings.size(), 1u);
    // Cut inside the arguments: no call (its arguments would not be JSON; issue 50).
    m = parse_all_ways(ChatFormat::CHATML, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Os");
    EXPECT_EQ(m.content, "");
    EXPECT_TRUE(m.tool_calls.empty());
    EXPECT_EQ(m.warnings.size(), 1u);
    // Cut after the arguments (issue 50: they came out as `{"city": "Paris"}}`, the call's own
    // brace included): the call, with exactly the arguments' JSON, at every cut that keeps them whole.
    const std::string call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    const size_t args_end = call.find("}}") + 1;
    for (size_t cut = call.find("arguments"); cut < call.size(); ++cut) {
        m = parse_all_ways(ChatFormat::CHATML, call.substr(0, cut));
        if (cut < args_end) {
            EXPECT_TRUE(m.tool_calls.empty()) << call.substr(0, cut);
            continue;
        }
        ASSERT_EQ(m.tool_calls.size(), 1u) << call.substr(0, cut);
        EXPECT_EQ(m.tool_calls[0].arguments, "{\"city\": \"Paris\"}") << call.substr(0, cut);
        EXPECT_EQ(m.content, "");
    }
    // A number or word at the very end may be cut inside itself: no call; with more after it, whole.
    EXPECT_TRUE(parse_all_ways(ChatFormat::CHATML, "<tool_call>\n{\"name\": \"f\", \"arguments\": 12").tool_calls.empty());
    m = parse_all_ways(ChatFormat::CHATML, "<tool_call>\n{\"name\": \"f\", \"arguments\": 12}");
    ASSERT_EQ(m.tool_calls.size(), 1u);
    EXPECT_EQ(m.tool_calls[0].arguments, "12");
    m = parse_all_ways(ChatFormat::CHATML, "Ends with a partial tag <tool");
    EXPECT_EQ(m.content, "Ends with a partial tag <tool");
}

TEST(ChatParseQwen, StrayTagsAreDroppedTextAroundThemKept) {
    auto m = parse_all_ways(ChatFormat::CHATML, "<think>\nplan <tool_call>x</tool_call> more\n</think>\n\nA</think>B<think>C</tool_call>D");
    EXPECT_EQ(m.reasoning_content, "plan x more");
    EXPECT_EQ(m.content, "ABCD");
    EXPECT_EQ(m.warnings.size(), 5u);
}

TEST(ChatParseQwen, PlainContentKeepsTagTextOfAJsonAnswer) {
    // response_format: after the reasoning block everything is the answer, tags included.
    const std::string json = "{\"a\": \"<tool_call>{}</tool_call> </think> <think>\", \"b\": \"\\n\"}\n\n";
    const auto m = parse_all_ways(ChatFormat::CHATML, "<think>\nplan\n</think>\n\n" + json + "<|im_end|>", {.plain_content = true});
    EXPECT_EQ(m.reasoning_content, "plan");
    EXPECT_EQ(m.content, json);
    EXPECT_TRUE(m.tool_calls.empty());
    EXPECT_TRUE(m.warnings.empty());
    const auto direct = parse_all_ways(ChatFormat::CHATML, json, {.plain_content = true});
    EXPECT_EQ(direct.content, json);
    // Without the option the same text is a tool call and dropped tags (what a tool-using reply needs).
    EXPECT_NE(parse_all_ways(ChatFormat::CHATML, json).content, json);
}

// ---- what a cut or malformed harmony header yields ----

TEST(ChatParseHarmony, CutOrEndedHeaderAfterExplicitStartYieldsNothing) {
    // The issue's cases: generation cut right after an explicit <|start|>, with or without a recipient.
    for (const char* tail : {"assistant", "assistant to=functions.get-weather", "assistant<|channel|>final", ""}) {
        const std::string head = "<|channel|>final<|message|>Hi.<|end|><|start|>";
        auto m = parse_all_ways(ChatFormat::HARMONY, head + tail);
        EXPECT_EQ(m.content, "Hi.") << tail;
        EXPECT_EQ(m.warnings.size(), 1u) << tail;
        for (const char* end : {"<|end|>", "<|return|>", "<|call|>", "<|start|>"}) {
            m = parse_all_ways(ChatFormat::HARMONY, head + tail + end);
            EXPECT_EQ(m.content, "Hi.") << tail << end;
        }
    }
}

TEST(ChatParseHarmony, HeaderWithTagsEndedBeforeMessageNeverLeaksTags) {
    // (The last one also cuts the empty header its <|start|> opened: a second warning.)
    for (const auto& [text, n_warnings] : std::vector<std::pair<std::string, size_t>>{
             {"<|channel|>commentary to=functions.f <|constrain|>json<|end|>", 1}, {"<|channel|>analysis<|return|>", 1},
             {" to=functions.f<|channel|>commentary json<|call|>", 1}, {"<|constrain|>json<|start|>", 2}}) {
        const auto m = parse_all_ways(ChatFormat::HARMONY, text);
        EXPECT_EQ(m.content, "") << text;
        EXPECT_TRUE(m.tool_calls.empty()) << text;
        EXPECT_EQ(m.warnings.size(), n_warnings) << text;
    }
    // Plain words that only looked like a header start stay content.
    EXPECT_EQ(parse_all_ways(ChatFormat::HARMONY, "as<|end|>").content, "as");
    EXPECT_EQ(parse_all_ways(ChatFormat::HARMONY, "to").content, "to");
    // A recipient in a cut header (no tag) is markup, not content.
    EXPECT_EQ(parse_all_ways(ChatFormat::HARMONY, " to=functions.f").content, "");
}

}  // namespace
}  // namespace nitro
