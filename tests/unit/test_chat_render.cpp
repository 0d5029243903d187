// Chat rendering parity with the official Jinja templates (Python Jinja2 3.1.6 under
// transformers' apply_chat_template) on shared/golden/chat/*.jsonl: byte-equal text, equal ids.
#include "core/error.h"
#include "tokenizer/chat.h"
#include "tokenizer/chat_harmony.h"
#include "tokenizer_fixtures.h"

#include <gtest/gtest.h>

namespace nitro {
namespace {

using json = nlohmann::ordered_json;
using test::read_jsonl;
using test::tokenizer_for;

ChatFormat format_of(const std::string& family) {
    return family == "gptoss" ? ChatFormat::HARMONY : ChatFormat::CHATML;
}

class ChatGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatGolden, RenderedTextAndIdsEqualOfficialTemplate) {
    const std::string family = GetParam();
    const Tokenizer& tok = tokenizer_for(family);
    EXPECT_EQ(chat_format_for(tok.vocab()), format_of(family));
    const auto records = read_jsonl("golden/chat/" + family + ".jsonl");
    ASSERT_EQ(records.size(), 18u);
    int rendered_ok = 0, errors_ok = 0, n_errors = 0;
    for (const auto& r : records) {
        const std::string name = r.at("name");
        ChatOptions opt = ChatOptions::from_kwargs(r.at("kwargs"));
        opt.date = chat_date_from_iso(r.at("now").get<std::string>());
        if (r.contains("error")) {
            ++n_errors;
            try {
                render_chat(format_of(family), r.at("messages"), r.at("tools"), opt);
                ADD_FAILURE() << family << "/" << name << ": rendered, but the template raises " << r.at("error");
            } catch (const Error& e) {
                ++errors_ok;
                std::printf("[ golden   ] %s/%s raises as the template does (%s): %s\n", family.c_str(), name.c_str(),
                            r.at("error").get<std::string>().c_str(), e.what());
            }
            continue;
        }
        std::string got;
        try {
            got = render_chat(format_of(family), r.at("messages"), r.at("tools"), opt);
        } catch (const Error& e) {
            ADD_FAILURE() << family << "/" << name << " raised: " << e.what();
            continue;
        }
        const std::string want = r.at("rendered");
        EXPECT_EQ(got, want) << family << "/" << name;
        EncodeOptions special;
        special.parse_special = true;
        const auto ids = tok.encode(got, special);
        EXPECT_EQ(ids, r.at("ids").get<std::vector<int32_t>>()) << family << "/" << name;
        rendered_ok += got == want && ids == r.at("ids").get<std::vector<int32_t>>();
    }
    EXPECT_EQ(n_errors, 1);
    std::printf("[ golden   ] %s: %d/%zu renderings byte-equal with equal ids, %d/%d template errors reproduced\n",
                family.c_str(), rendered_ok, records.size() - n_errors, errors_ok, n_errors);
}

INSTANTIATE_TEST_SUITE_P(Chat, ChatGolden, ::testing::Values("gptoss", "qwen3"));

TEST(ChatJson, TojsonIsPythonJsonDumps) {
    // json.dumps(..., ensure_ascii=False) output, written out by hand from Python's rules.
    const json x = json::parse(R"({"b": [1, 2.5, 1e-05, 1e16, 100.0, true, null], "a": "é\n\u0001\"/", "c": {}})");
    EXPECT_EQ(py_json_dumps(x), "{\"b\": [1, 2.5, 1e-05, 1e+16, 100.0, true, null], \"a\": \"é\\n\\u0001\\\"/\", \"c\": {}}");
    EXPECT_EQ(py_json_dumps(json::parse("0.0001")), "0.0001");
    EXPECT_EQ(py_json_dumps(json::parse("123456789.125")), "123456789.125");
    EXPECT_EQ(py_json_dumps(json::parse("-0.5")), "-0.5");
}

TEST(ChatHarmony, PreviousFinalAnswerEndsWithEndNotReturn) {
    // History rule: only the last assistant message of a training render ends with <|return|>;
    // every earlier final answer ends with <|end|>, and so does the last one when a generation
    // prompt follows.
    const json msgs = json::parse(R"([
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Bye"},
        {"role": "assistant", "content": "Goodbye!"}])");
    ChatOptions opt;
    opt.date = "2025-08-05";
    opt.add_generation_prompt = false;
    const std::string train = render_chat(ChatFormat::HARMONY, msgs, nullptr, opt);
    EXPECT_NE(train.find("<|channel|>final<|message|>Hello!<|end|>"), std::string::npos);
    EXPECT_TRUE(train.ends_with("<|channel|>final<|message|>Goodbye!<|return|>"));
    opt.add_generation_prompt = true;
    const std::string infer = render_chat(ChatFormat::HARMONY, msgs, nullptr, opt);
    EXPECT_NE(infer.find("Goodbye!<|end|><|start|>assistant"), std::string::npos);
    EXPECT_EQ(infer.find("<|return|>"), std::string::npos);
}

TEST(ChatHarmony, TemplateErrorsAreClearErrors) {
    ChatOptions opt;
    opt.date = "2025-08-05";
    auto render = [&](const char* msgs) { return render_chat(ChatFormat::HARMONY, json::parse(msgs), nullptr, opt); };
    EXPECT_THROW(render(R"([{"role": "user", "content": "x"}, {"role": "tool", "content": "1"}])"), Error);
    EXPECT_THROW(render(R"([{"role": "assistant", "content": "<|channel|>final<|message|>x"}])"), Error);
    EXPECT_THROW(render(R"([{"role": "user", "content": null}])"), Error);
    EXPECT_THROW(render(R"([])"), Error);
}

TEST(ChatDate, DefaultsToTodayAndValidatesIso) {
    EXPECT_EQ(chat_date_from_iso("2025-08-05T12:00:00"), "2025-08-05");
    EXPECT_THROW(chat_date_from_iso("05/08/2025"), Error);
    EXPECT_EQ(chat_date_today().size(), 10u);
}

}  // namespace
}  // namespace nitro
