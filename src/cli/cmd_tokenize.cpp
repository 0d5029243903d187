// nitro tokenize [-m MODEL] [TEXT] [--json] [--special] [--chat FILE.json] [--date YYYY-MM-DD]
//
// Prints the token ids of TEXT (stdin when absent) with the model's own tokenizer, read from its
// GGUF metadata. With --chat, renders a conversation ({"messages": [...], "tools": [...],
// "kwargs": {...}}) in the model's chat format first and tokenizes the rendering with special
// tokens parsed.
#include "cli/commands.h"
#include "core/error.h"
#include "core/user_file.h"
#include "gguf/gguf.h"
#include "runtime/default_model.h"
#include "tokenizer/bpe.h"
#include "tokenizer/chat.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>

namespace nitro::cli {

namespace {

struct TokenizeOptions {
    std::string model;
    std::string text;
    bool json = false;
    bool special = false;
    std::string chat;
    std::string date;
};

std::string read_all(std::istream& in) {
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string dump_json(const nlohmann::ordered_json& j) {
    return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

int run_tokenize(const TokenizeOptions& o, bool text_given) {
    GgufModel model(o.model.empty() ? default_model_path() : o.model);  // the embedded model, as nitro run
    const Tokenizer tok = Tokenizer::from_gguf(model.metadata());
    std::string text;
    EncodeOptions enc;
    enc.parse_special = o.special;
    nlohmann::ordered_json out;
    if (!o.chat.empty()) {
        if (text_given) fail("nitro tokenize: give either TEXT or --chat FILE, not both");
        const std::string body = read_user_file(o.chat, "--chat");
        nlohmann::ordered_json conv;
        try {
            conv = nlohmann::ordered_json::parse(body);
        } catch (const nlohmann::json::parse_error& e) {
            fail("--chat: '{}' is not valid JSON: {}", o.chat, e.what());
        }
        if (!conv.is_object())
            fail(
                "--chat: '{}' holds a JSON {}, not an object {{\"messages\": [...], \"tools\": [...], \"kwargs\": {{...}}}}",
                o.chat, conv.type_name());
        if (!conv.contains("messages")) fail("--chat: '{}' has no \"messages\"", o.chat);
        if (!conv["messages"].is_array())
            fail("--chat: '{}': \"messages\" is a JSON {}, not an array of messages", o.chat, conv["messages"].type_name());
        ChatOptions copt = ChatOptions::from_kwargs(conv.value("kwargs", nlohmann::ordered_json()));
        if (!o.date.empty()) copt.date = chat_date_from_iso(o.date);
        // Only the template's markup becomes control tokens; message text stays plain text.
        const RenderedChat rc = render_chat_marked(chat_format_for(tok.vocab()), conv["messages"],
                                                   conv.value("tools", nlohmann::ordered_json()), copt);
        out["rendered"] = rc.text;
        out["ids"] = encode_chat(tok, rc);
    } else {
        text = text_given ? o.text : read_all(std::cin);
        out["ids"] = tok.encode(text, enc);
    }
    const std::vector<int32_t> ids = out["ids"].get<std::vector<int32_t>>();
    if (o.json) {
        out["ids"] = ids;
        std::puts(dump_json(out).c_str());
    } else {
        std::string line;
        for (int32_t id : ids) line += (line.empty() ? "" : " ") + std::to_string(id);
        std::puts(line.c_str());
    }
    return 0;
}

}  // namespace

Action add_tokenize(CLI::App& app) {
    auto opt = std::make_shared<TokenizeOptions>();
    CLI::App* sub = app.add_subcommand("tokenize", "Print the token ids of a text (or of a rendered chat) with a model's tokenizer");
    sub->add_option("-m,--model", opt->model, "GGUF model whose tokenizer to use; default: the embedded models/tiny-moe-pystd.gguf")
        ->envname("NITRO_MODEL");
    CLI::Option* text = sub->add_option("text", opt->text, "Text to tokenize (default: read stdin)");
    sub->add_flag("--json", opt->json, "Print {\"ids\": [...]} (with --chat: {\"rendered\": \"...\", \"ids\": [...]})");
    sub->add_flag("--special", opt->special,
                  "Parse special-token text such as <|start|> or <|im_start|> as those tokens (default: plain text)");
    sub->add_option("--chat", opt->chat,
                    "JSON file {\"messages\": [...], \"tools\": [...], \"kwargs\": {...}}: render it in the model's chat "
                    "format, then tokenize with special tokens parsed");
    sub->add_option("--date", opt->date, "Date the gpt-oss chat template prints, YYYY-MM-DD (default: today)")
        ->envname("NITRO_CHAT_DATE");
    return [opt, text]() { return run_tokenize(*opt, text->count() > 0); };
}

}  // namespace nitro::cli
