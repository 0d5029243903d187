// The server's response layer fed scripted token ids (no model): chat deltas for harmony and
// ChatML (reasoning, content, tool calls streamed as OpenAI streams them), stop sequences,
// max_tokens cuts mid-header, UTF-8 split across tokens, parallel_tool_calls, legacy completions,
// request validation errors, and the scheduler's prefix reuse on a real fixture model.
#include "runtime/generate.h"
#include "runtime/model.h"
#include "server/chat_completion.h"
#include "server/completion.h"
#include "server/openai_schema.h"
#include "server/scheduler.h"
#include "tokenizer_fixtures.h"

#include <gtest/gtest.h>

#include <future>

namespace nitro::server {
namespace {

using json = nlohmann::json;
using test::tokenizer_for;

std::vector<int32_t> ids_of(const Tokenizer& tok, const std::string& text) {
    EncodeOptions enc;
    enc.parse_special = true;
    return tok.encode(text, enc);
}

/// What a streaming client ends up with.
struct Streamed {
    std::string content, reasoning;
    std::vector<json> tool_calls;  // merged per index
    std::vector<json> tool_chunks; // raw tool_call deltas in order
    std::string finish_reason;
    json usage;
    int n_chunks = 0;
};

Streamed apply_chunks(const std::vector<json>& chunks) {
    Streamed s;
    for (const auto& c : chunks) {
        // Every chunk must serialise strictly (valid UTF-8, no replacement needed).
        EXPECT_NO_THROW((void)c.dump()) << "chunk is not valid UTF-8";
        ++s.n_chunks;
        if (c.contains("usage") && !c["usage"].is_null()) s.usage = c["usage"];
        if (c["choices"].empty()) continue;
        const json& ch = c["choices"][0];
        if (!ch["finish_reason"].is_null()) s.finish_reason = ch["finish_reason"];
        const json& d = ch["delta"];
        if (d.contains("content")) s.content += d["content"].get<std::string>();
        if (d.contains("reasoning_content")) s.reasoning += d["reasoning_content"].get<std::string>();
        if (d.contains("tool_calls"))
            for (const auto& t : d["tool_calls"]) {
                s.tool_chunks.push_back(t);
                const size_t i = t["index"];
                if (s.tool_calls.size() <= i) s.tool_calls.resize(i + 1, json{{"function", {{"arguments", ""}}}});
                if (t.contains("id")) s.tool_calls[i]["id"] = t["id"];
                if (t.contains("function") && t["function"].contains("name")) s.tool_calls[i]["function"]["name"] = t["function"]["name"];
                if (t.contains("function") && t["function"].contains("arguments"))
                    s.tool_calls[i]["function"]["arguments"] = s.tool_calls[i]["function"]["arguments"].get<std::string>() +
                                                               t["function"]["arguments"].get<std::string>();
            }
    }
    return s;
}

struct RunResult {
    Streamed stream;
    json body;          // non-streaming response
    int stopped_at = -1;  // index of the token on_token returned false for
};

/// Feeds `ids` (the last one as end-of-generation when `eog`) to a streaming and a non-streaming
/// builder, with `cause` at the end (LENGTH when the ids were cut).
RunResult run_chat(ChatFormat f, const std::vector<int32_t>& ids, bool eog, ChatResponseConfig cfg = {}) {
    const Tokenizer& tok = tokenizer_for(f == ChatFormat::HARMONY ? "gptoss" : "qwen3");
    cfg.format = f;
    cfg.id = "chatcmpl-test";
    cfg.model = "m";
    RunResult r;
    for (bool stream : {true, false}) {
        cfg.stream = stream;
        cfg.include_usage = stream;
        ChatResponseBuilder b(tok, cfg);
        std::vector<json> chunks;
        b.begin(chunks);
        FinishCause cause = eog ? FinishCause::END_OF_GENERATION : FinishCause::LENGTH;
        for (size_t i = 0; i < ids.size(); ++i) {
            TokenStep s;
            s.id = ids[i];
            s.end_of_generation = eog && i + 1 == ids.size();
            if (!b.on_token(s, chunks)) {
                if (stream) r.stopped_at = static_cast<int>(i);
                cause = FinishCause::SINK_STOP;
                break;
            }
        }
        Usage u;
        u.prompt_tokens = 10;
        u.completion_tokens = static_cast<int64_t>(ids.size());
        b.finish(cause, u, chunks);
        if (stream) r.stream = apply_chunks(chunks);
        else {
            EXPECT_TRUE(chunks.empty()) << "a non-streaming builder must not produce chunks";
            r.body = b.response();
        }
    }
    // The concatenation of the streamed deltas equals the non-streamed message.
    const json& msg = r.body["choices"][0]["message"];
    EXPECT_EQ(r.stream.content, msg["content"].is_null() ? "" : msg["content"].get<std::string>());
    EXPECT_EQ(r.stream.reasoning, msg.value("reasoning_content", std::string()));
    EXPECT_EQ(r.stream.finish_reason, r.body["choices"][0]["finish_reason"].get<std::string>());
    const size_t n_calls = msg.contains("tool_calls") ? msg["tool_calls"].size() : 0;
    EXPECT_EQ(r.stream.tool_calls.size(), n_calls);
    for (size_t i = 0; i < std::min(n_calls, r.stream.tool_calls.size()); ++i) {
        EXPECT_EQ(r.stream.tool_calls[i]["function"]["name"], msg["tool_calls"][i]["function"]["name"]);
        EXPECT_EQ(r.stream.tool_calls[i]["function"]["arguments"], msg["tool_calls"][i]["function"]["arguments"]);
    }
    return r;
}

const char* kHarmonyReasoned =
    "<|channel|>analysis<|message|>The user wants a number. 6 times 7.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>The answer is 42.<|return|>";

TEST(ServerChatResponse, HarmonyReasoningAndContent) {
    const Tokenizer& tok = tokenizer_for("gptoss");
    RunResult r = run_chat(ChatFormat::HARMONY, ids_of(tok, kHarmonyReasoned), true);
    EXPECT_EQ(r.stream.reasoning, "The user wants a number. 6 times 7.");
    EXPECT_EQ(r.stream.content, "The answer is 42.");
    EXPECT_EQ(r.stream.finish_reason, "stop");
    EXPECT_EQ(r.stream.usage["completion_tokens"], r.body["usage"]["completion_tokens"]);
    EXPECT_EQ(r.body["object"], "chat.completion");
    EXPECT_FALSE(r.body["choices"][0]["message"].contains("tool_calls"));
}

TEST(ServerChatResponse, HarmonyToolCallStreamsIdAndNameFirstThenArgumentPieces) {
    const Tokenizer& tok = tokenizer_for("gptoss");
    const std::string args = R"({"path": "notes/a.txt", "content": "line one\nline two\n\tindented", "options": {"mode": {"append": true, "lines": [1, 2]}}})";
    const std::string text = "<|channel|>analysis<|message|>Write the file.<|end|><|start|>assistant<|channel|>commentary to=functions.write_file "
                             "<|constrain|>json<|message|>" + args + "<|call|>";
    RunResult r = run_chat(ChatFormat::HARMONY, ids_of(tok, text), true);
    ASSERT_EQ(r.stream.tool_calls.size(), 1u);
    EXPECT_EQ(r.stream.finish_reason, "tool_calls");
    EXPECT_EQ(r.stream.reasoning, "Write the file.");
    EXPECT_EQ(r.stream.content, "");
    // First tool delta: index, id, type, name; later ones: arguments only, in several pieces.
    ASSERT_GE(r.stream.tool_chunks.size(), 3u);
    const json& first = r.stream.tool_chunks[0];
    EXPECT_EQ(first["function"]["name"], "write_file");
    EXPECT_EQ(first["type"], "function");
    EXPECT_EQ(first["id"].get<std::string>().rfind("call_", 0), 0u);
    for (size_t i = 1; i < r.stream.tool_chunks.size(); ++i) {
        EXPECT_FALSE(r.stream.tool_chunks[i].contains("id"));
        EXPECT_FALSE(r.stream.tool_chunks[i]["function"].contains("name"));
    }
    EXPECT_EQ(json::parse(r.stream.tool_calls[0]["function"]["arguments"].get<std::string>()), json::parse(args));
    const json& msg = r.body["choices"][0]["message"];
    EXPECT_TRUE(msg["content"].is_null());
    EXPECT_EQ(msg["tool_calls"][0]["type"], "function");
    EXPECT_EQ(r.body["choices"][0]["finish_reason"], "tool_calls");
}

TEST(ServerChatResponse, ChatmlThinkContentAndToolCalls) {
    const Tokenizer& tok = tokenizer_for("qwen3");
    RunResult a = run_chat(ChatFormat::CHATML, ids_of(tok, "<think>\nLet me see.\n</think>\n\nHello there!<|im_end|>"), true);
    EXPECT_EQ(a.stream.reasoning, "Let me see.");
    EXPECT_EQ(a.stream.content, "Hello there!");
    EXPECT_EQ(a.stream.finish_reason, "stop");

    const std::string text = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": {\"city\": \"Paris\", \"country\": \"FR\"}}}\n</tool_call>\n"
                             "<tool_call>\n{\"name\": \"write\", \"arguments\": {\"body\": \"a\\nb\"}}\n</tool_call><|im_end|>";
    RunResult b = run_chat(ChatFormat::CHATML, ids_of(tok, text), true);
    ASSERT_EQ(b.stream.tool_calls.size(), 2u);
    EXPECT_EQ(b.stream.tool_calls[0]["function"]["name"], "get_weather");
    EXPECT_EQ(json::parse(b.stream.tool_calls[0]["function"]["arguments"].get<std::string>())["location"]["city"], "Paris");
    EXPECT_EQ(json::parse(b.stream.tool_calls[1]["function"]["arguments"].get<std::string>())["body"], "a\nb");
    EXPECT_EQ(b.stream.finish_reason, "tool_calls");
    EXPECT_NE(b.stream.tool_calls[0]["id"], b.stream.tool_calls[1]["id"]);

    // parallel_tool_calls: false keeps the first call and stops generating at the second.
    ChatResponseConfig one;
    one.parallel_tool_calls = false;
    RunResult c = run_chat(ChatFormat::CHATML, ids_of(tok, text), true, one);
    ASSERT_EQ(c.stream.tool_calls.size(), 1u);
    EXPECT_EQ(c.stream.tool_calls[0]["function"]["name"], "get_weather");
    EXPECT_EQ(c.stream.finish_reason, "tool_calls");
    EXPECT_GE(c.stopped_at, 0);
}

TEST(ServerChatResponse, StopSequenceIsNeverEmittedAndStopsGeneration) {
    const Tokenizer& tok = tokenizer_for("gptoss");
    const std::string text = "<|channel|>final<|message|>Count: one, two, three, four.<|return|>";
    ChatResponseConfig cfg;
    cfg.stop = {"three", "zzz"};
    const auto ids = ids_of(tok, text);
    RunResult r = run_chat(ChatFormat::HARMONY, ids, true, cfg);
    EXPECT_EQ(r.stream.content, "Count: one, two, ");
    EXPECT_EQ(r.stream.finish_reason, "stop");
    ASSERT_GE(r.stopped_at, 0);
    EXPECT_LT(r.stopped_at, static_cast<int>(ids.size()) - 2) << "generation must stop when the stop sequence completes";
    // A stop sequence split across many tokens (one character per piece).
    StopMatcher m({"END"});
    std::string out;
    for (char c : std::string("abcENxENDyz")) out += m.push(std::string(1, c));
    out += m.flush();
    EXPECT_EQ(out, "abcENx");
    EXPECT_TRUE(m.matched());
}

TEST(ServerChatResponse, MaxTokensMidHarmonyHeaderIsLengthWithValidChunks) {
    const Tokenizer& tok = tokenizer_for("gptoss");
    const auto ids = ids_of(tok, kHarmonyReasoned);
    for (size_t n = 1; n <= 8; ++n) {
        std::vector<int32_t> cut(ids.begin(), ids.begin() + static_cast<long>(n));
        RunResult r = run_chat(ChatFormat::HARMONY, cut, false);
        EXPECT_EQ(r.stream.finish_reason, "length") << n;
        EXPECT_EQ(r.body["choices"][0]["finish_reason"], "length") << n;
        // Cut inside "<|channel|>analysis<|message|>...": nothing of the header leaks as content.
        EXPECT_EQ(r.stream.content.find("<|"), std::string::npos) << n;
        EXPECT_EQ(r.stream.content.find("analysis"), std::string::npos) << n;
    }
}

TEST(ServerChatResponse, Utf8SplitAcrossByteTokensNeverBreaksAChunk) {
    const Tokenizer& tok = tokenizer_for("qwen3");
    const std::string text = "h\xC3\xA9llo \xF0\x9F\x99\x82!";  // "héllo 🙂!"
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(tok.vocab().byte_token(c));
    ids.push_back(tok.vocab().find_text("<|im_end|>"));
    ChatResponseConfig cfg;
    cfg.logprobs = true;
    RunResult r = run_chat(ChatFormat::CHATML, ids, true, cfg);
    EXPECT_EQ(r.stream.content, text);
    EXPECT_GT(r.stream.n_chunks, 5);
    // Logprob entries of the partial bytes are valid UTF-8 too (U+FFFD) and carry the raw bytes.
    const json& lp = r.body["choices"][0]["logprobs"]["content"];
    ASSERT_EQ(lp.size(), ids.size() - 1);
    EXPECT_EQ(lp[1]["bytes"], json::array({0xC3}));
    EXPECT_NO_THROW((void)r.body.dump());
}

TEST(ServerChatResponse, ForcedToolCallPrefixIsPartOfTheReply) {
    const Tokenizer& tok = tokenizer_for("gptoss");
    ChatRequest req = parse_chat_request(R"({"model":"m","messages":[{"role":"user","content":"weather?"}],
        "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],
        "tool_choice":{"type":"function","function":{"name":"get_weather"}}})");
    PreparedChat p = prepare_chat(req, tok, ChatFormat::HARMONY, "2025-01-01");
    ASSERT_FALSE(p.forced_ids.empty());
    EXPECT_TRUE(std::equal(p.forced_ids.rbegin(), p.forced_ids.rend(), p.prompt_ids.rbegin()));
    EXPECT_NE(p.prompt_text.find("get_weather"), std::string::npos) << "tools are rendered into the prompt";
    ChatResponseConfig cfg;
    cfg.forced_ids = p.forced_ids;
    RunResult r = run_chat(ChatFormat::HARMONY, ids_of(tok, R"({"city": "Oslo"}<|call|>)"), true, cfg);
    ASSERT_EQ(r.stream.tool_calls.size(), 1u);
    EXPECT_EQ(r.stream.tool_calls[0]["function"]["name"], "get_weather");
    EXPECT_EQ(json::parse(r.stream.tool_calls[0]["function"]["arguments"].get<std::string>()), json::parse(R"({"city":"Oslo"})"));

    // tool_choice none: the tools are left out of the prompt.
    req.tool_choice = ToolChoice::NONE;
    PreparedChat none = prepare_chat(req, tok, ChatFormat::HARMONY, "2025-01-01");
    EXPECT_EQ(none.prompt_text.find("get_weather"), std::string::npos);
    EXPECT_TRUE(none.forced_ids.empty());
}

TEST(ServerChatResponse, OwnOutputIsAcceptedAsHistory) {
    // An assistant turn as this server returns it (content null, reasoning, tool call with string
    // arguments), then the tool's answer: renders for both formats.
    const std::string body = R"({"messages":[
        {"role":"developer","content":[{"type":"text","text":"Be brief."}]},
        {"role":"user","content":"Weather in Paris?"},
        {"role":"assistant","content":null,"reasoning_content":"Call the tool.","tool_calls":[{"id":"call_x","type":"function",
          "function":{"name":"get_weather","arguments":"{\"location\": {\"city\": \"Paris\"}}"}}]},
        {"role":"tool","tool_call_id":"call_x","content":"18 C"},
        {"role":"assistant","content":"It is 18 C.","reasoning_content":"Done."},
        {"role":"user","content":"Thanks"}],
      "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"location":{"type":"object","properties":{"city":{"type":"string"}}}}}}}]})";
    const ChatRequest req = parse_chat_request(body);
    const PreparedChat h = prepare_chat(req, tokenizer_for("gptoss"), ChatFormat::HARMONY, "2025-01-01");
    EXPECT_NE(h.prompt_text.find("<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"location\": {\"city\": \"Paris\"}}<|call|>"), std::string::npos) << h.prompt_text;
    EXPECT_NE(h.prompt_text.find("<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>\"18 C\"<|end|>"), std::string::npos);
    EXPECT_NE(h.prompt_text.find("Be brief."), std::string::npos);
    const PreparedChat c = prepare_chat(req, tokenizer_for("qwen3"), ChatFormat::CHATML, "");
    EXPECT_NE(c.prompt_text.find("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": {\"city\": \"Paris\"}}}\n</tool_call>"), std::string::npos) << c.prompt_text;
    EXPECT_NE(c.prompt_text.find("<tool_response>\n18 C\n</tool_response>"), std::string::npos);
    EXPECT_NE(c.prompt_text.find("<|im_start|>system\nBe brief."), std::string::npos) << "developer maps to system for ChatML";
}

TEST(ServerCompletionResponse, TextStopAndLegacyLogprobs) {
    const Tokenizer& tok = tokenizer_for("gptoss");
    const auto ids = ids_of(tok, "alpha beta gamma delta");
    for (bool stream : {true, false}) {
        CompletionResponseConfig cfg;
        cfg.stop = {" gamma"};
        cfg.logprobs = true;
        cfg.stream = stream;
        CompletionResponseBuilder b(tok, cfg);
        std::vector<json> chunks;
        b.begin(chunks);
        FinishCause cause = FinishCause::LENGTH;
        for (int32_t id : ids) {
            TokenStep s;
            s.id = id;
            s.logprob = -0.5f;
            s.top = {{id, -0.5f}};
            if (!b.on_token(s, chunks)) {
                cause = FinishCause::SINK_STOP;
                break;
            }
        }
        b.finish(cause, Usage{}, chunks);
        EXPECT_EQ(b.text(), "alpha beta");
        EXPECT_EQ(b.finish_reason(), "stop");
        if (stream) {
            std::string cat;
            for (const auto& c : chunks) cat += c["choices"][0]["text"].get<std::string>();
            EXPECT_EQ(cat, "alpha beta");
        } else {
            const json r = b.response();
            EXPECT_EQ(r["object"], "text_completion");
            EXPECT_EQ(r["choices"][0]["logprobs"]["tokens"].size(), r["choices"][0]["logprobs"]["token_logprobs"].size());
            EXPECT_GE(r["choices"][0]["logprobs"]["tokens"].size(), 3u);
        }
    }
}

ApiError error_of(const std::string& body, bool chat = true) {
    try {
        if (chat) (void)parse_chat_request(body);
        else (void)parse_completion_request(body);
    } catch (const ApiException& e) {
        return e.error;
    }
    ADD_FAILURE() << "no error for " << body;
    return {};
}

TEST(ServerSchema, IgnoreEosOnCompletionsOnly) {
    EXPECT_FALSE(parse_completion_request(R"({"prompt":"x"})").gen.ignore_eos);
    EXPECT_TRUE(parse_completion_request(R"({"prompt":"x","ignore_eos":true})").gen.ignore_eos);
    EXPECT_EQ(error_of(R"({"prompt":"x","ignore_eos":1})", false).param, "ignore_eos");
    const ApiError e = error_of(R"({"messages":[{"role":"user","content":"x"}],"ignore_eos":true})");
    EXPECT_EQ(e.param, "ignore_eos");
    EXPECT_EQ(e.code, "unsupported_parameter");
    EXPECT_FALSE(parse_chat_request(R"({"messages":[{"role":"user","content":"x"}],"ignore_eos":false})").gen.ignore_eos);
}

TEST(ServerSchema, ErrorsNameTheFieldInOpenAIShape) {
    ApiError e = error_of("{not json");
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.code, "invalid_json");
    const json j = e.to_json();
    EXPECT_TRUE(j["error"].contains("message") && j["error"].contains("type") && j["error"].contains("param") && j["error"].contains("code"));
    EXPECT_EQ(error_of(R"({"model":"m"})").param, "messages");
    EXPECT_EQ(error_of(R"({"messages":[{"role":"user","content":"x"}],"temperature":"hot"})").param, "temperature");
    EXPECT_EQ(error_of(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":-1})").param, "max_tokens");
    EXPECT_EQ(error_of(R"({"messages":[{"role":"wizard","content":"x"}]})").param, "messages[0].role");
    EXPECT_EQ(error_of(R"({"messages":[{"role":"user","content":5}]})").param, "messages[0].content");
    EXPECT_EQ(error_of(R"({"messages":[{"role":"user","content":"x"}],"stop":[1]})").param, "stop[0]");
    EXPECT_EQ(error_of(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"function","function":{"name":"f"}}})").param, "tool_choice");
    EXPECT_EQ(error_of(R"({"messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}})").param, "stream_options");
    EXPECT_EQ(error_of(R"({"prompt":{"a":1}})", false).param, "prompt");
    // Accepted: content parts, stop string, both token limits (max_completion_tokens wins), text format.
    const ChatRequest r = parse_chat_request(R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
        "stop":"x","max_tokens":5,"max_completion_tokens":7,"response_format":{"type":"text"},"seed":3,"top_k":5,"min_p":0.1,
        "chat_template_kwargs":{"enable_thinking":false},"reasoning_effort":"low","user":"ignored"})");
    EXPECT_EQ(r.messages[0]["content"], "ab");
    EXPECT_EQ(r.gen.stop, std::vector<std::string>{"x"});
    EXPECT_EQ(r.gen.max_tokens, 7);
    EXPECT_EQ(r.gen.sampling.top_k, 5);
    EXPECT_EQ(r.reasoning_effort, "low");
}

TEST(ServerScheduler, PrefixReuseGivesTheSameTokensAsAFreshSession) {
    Model model(test::fixture_for("qwen3"));
    const Tokenizer& tok = tokenizer_for("qwen3");
    SchedulerOptions so;
    so.session.n_ctx = 256;
    so.session.n_threads = 2;
    so.end_of_generation = end_of_generation_tokens(model, tok);

    struct Collect : TokenSink {
        std::vector<int32_t> ids;
        int64_t reused = -1;
        FinishCause cause{};
        std::promise<void> done;
        void on_start(int64_t n) override { reused = n; }
        bool on_token(const TokenStep& s) override {
            ids.push_back(s.id);
            return true;
        }
        void on_finish(FinishCause c, const JobStats& st, const std::string&) override {
            cause = c;
            EXPECT_EQ(st.n_reused, reused);
            done.set_value();
        }
    };
    auto run = [&](Scheduler& s, const std::vector<int32_t>& prompt) {
        auto sink = std::make_shared<Collect>();
        auto job = std::make_shared<Job>();
        job->prompt = prompt;
        job->max_tokens = 6;
        job->ignore_eos = true;
        job->sink = sink;
        auto f = sink->done.get_future();
        s.submit(job);
        f.wait();
        return sink;
    };
    const auto a = ids_of(tok, "The quick brown fox jumps over the lazy dog.");
    auto b = a;
    for (int32_t t : ids_of(tok, " And then it ran away into the woods.")) b.push_back(t);

    Metrics m1, m2;
    Scheduler warm(model, so, m1), fresh(model, so, m2);
    auto first = run(warm, a);
    EXPECT_EQ(first->reused, 0);
    auto second = run(warm, b);
    EXPECT_EQ(second->reused, static_cast<int64_t>(a.size())) << "the shared prefix is reused";
    EXPECT_EQ(m1.prompt_tokens_reused.load(), a.size());
    auto ref = run(fresh, b);
    EXPECT_EQ(ref->reused, 0);
    EXPECT_EQ(second->ids, ref->ids) << "reusing the prefix must not change the output";
    EXPECT_EQ(second->cause, FinishCause::LENGTH);
    // The same prompt again: everything but the last token is reused.
    auto third = run(warm, b);
    EXPECT_EQ(third->reused, static_cast<int64_t>(b.size()) - 1);
    EXPECT_EQ(third->ids, ref->ids);
}

TEST(ServerScheduler, AGrammarFaultIsLoggedWithTheRequestIdAndEndsTheJobWithAnError) {
    // Issue 50: a grammar failure mid-generation was a 500 with nothing logged. A constraint that
    // allows nothing after two tokens stands in for a fault the schema checks did not foresee.
    struct DeadEnd : TokenConstraint {
        int n = 0;
        void allowed_tokens(std::vector<uint64_t>& allowed) override {
            allowed.assign(200, n < 2 ? ~uint64_t{0} : 0);
        }
        void accept(int32_t) override { ++n; }
    };
    struct Finish : TokenSink {
        FinishCause cause{};
        std::string error;
        int64_t tokens = 0;
        std::promise<void> done;
        bool on_token(const TokenStep&) override { return ++tokens, true; }
        void on_finish(FinishCause c, const JobStats&, const std::string& e) override {
            cause = c;
            error = e;
            done.set_value();
        }
    };
    Model model(test::fixture_for("qwen3"));
    const Tokenizer& tok = tokenizer_for("qwen3");
    SchedulerOptions so;
    so.session.n_ctx = 128;
    so.session.n_threads = 2;
    so.end_of_generation = end_of_generation_tokens(model, tok);
    Metrics m;
    Scheduler sched(model, so, m);
    auto sink = std::make_shared<Finish>();
    auto job = std::make_shared<Job>();
    job->prompt = ids_of(tok, "Hello there");
    job->max_tokens = 10;
    job->constraint = std::make_unique<DeadEnd>();
    job->request_id = "chatcmpl-test123";
    job->sink = sink;
    testing::internal::CaptureStderr();
    sched.submit(job);
    sink->done.get_future().wait();
    const std::string log = testing::internal::GetCapturedStderr();
    EXPECT_EQ(sink->cause, FinishCause::ERROR);
    EXPECT_EQ(sink->tokens, 2);
    EXPECT_NE(sink->error.find("allows no token"), std::string::npos) << sink->error;
    EXPECT_NE(log.find("request chatcmpl-test123"), std::string::npos) << log;
    EXPECT_NE(log.find("failed after 2 tokens"), std::string::npos) << log;
}

}  // namespace
}  // namespace nitro::server
