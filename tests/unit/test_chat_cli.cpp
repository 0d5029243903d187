// `nitro tokenize` end to end: ids and chat renderings from the binary equal the goldens.
#include "gguf_bytes.h"
#include "tokenizer_fixtures.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace nitro {
namespace {

using json = nlohmann::ordered_json;

std::string run(const std::string& cmd) { return test::run_command(cmd); }

TEST(ChatCli, TokenizeJsonAndChatEqualGoldens) {
    const std::string nitro = NITRO_BINARY;
    for (const std::string family : {"gptoss", "qwen3"}) {
        const std::string model = test::fixture_for(family);
        // Plain text from stdin (a golden record with a code snippet), and --special.
        const auto tok_records = test::read_jsonl("golden/tokenizer/" + family + ".jsonl");
        const json& plain = tok_records[5];
        const std::string in = test::temp_dir("chat-cli-in") + "/nitro_tok_in.txt";
        std::ofstream(in, std::ios::binary) << plain.at("text").get<std::string>();
        EXPECT_EQ(json::parse(run(nitro + " tokenize -m " + model + " --json < " + in))["ids"], plain.at("ids"));
        const json& special = tok_records.back();
        ASSERT_TRUE(special.at("special").get<bool>());
        std::ofstream(in, std::ios::binary) << special.at("text").get<std::string>();
        EXPECT_EQ(json::parse(run(nitro + " tokenize --special -m " + model + " --json < " + in))["ids"], special.at("ids"));
        // --chat on the golden conversations that use tools or template options (each run loads
        // the model, so not all 17; the renderer itself is tested on all of them).
        int n = 0;
        for (const auto& r : test::read_jsonl("golden/chat/" + family + ".jsonl")) {
            if (r.contains("error") || (r["tools"].is_null() && r["kwargs"].size() < 2)) continue;
            const std::string file = test::temp_dir("chat-cli") + "/nitro_chat.json";
            std::ofstream(file) << json{{"messages", r["messages"]}, {"tools", r["tools"]}, {"kwargs", r["kwargs"]}}.dump();
            const json got = json::parse(run(nitro + " tokenize -m " + model + " --json --date 2025-08-05 --chat " + file));
            EXPECT_EQ(got["rendered"], r["rendered"]) << family << "/" << r["name"];
            EXPECT_EQ(got["ids"], r["ids"]) << family << "/" << r["name"];
            ++n;
        }
        EXPECT_GE(n, 4);
    }
}

}  // namespace
}  // namespace nitro
