#include "tokenizer/chat_parse.h"

#include "tokenizer/bpe.h"

#include <array>

namespace nitro {

using json = nlohmann::ordered_json;

json ParsedMessage::to_openai() const {
    json m = {{"role", "assistant"}, {"content", content}};
    if (!reasoning_content.empty()) m["reasoning_content"] = reasoning_content;
    if (!tool_calls.empty()) {
        json calls = json::array();
        for (const auto& c : tool_calls)
            calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
        m["tool_calls"] = std::move(calls);
    }
    return m;
}

json ChatDelta::to_openai() const {
    switch (kind) {
        case Kind::CONTENT: return {{"content", text}};
        case Kind::REASONING: return {{"reasoning_content", text}};
        case Kind::TOOL_CALL_BEGIN:
            return {{"tool_calls", json::array({{{"index", tool_index}, {"id", id}, {"type", "function"},
                                                 {"function", {{"name", name}, {"arguments", text}}}}})}};
        case Kind::TOOL_CALL_ARGUMENTS:
            return {{"tool_calls", json::array({{{"index", tool_index}, {"function", {{"arguments", text}}}}})}};
    }
    return json::object();
}

void apply_delta(ParsedMessage& m, const ChatDelta& d) {
    switch (d.kind) {
        case ChatDelta::Kind::CONTENT: m.content += d.text; break;
        case ChatDelta::Kind::REASONING: m.reasoning_content += d.text; break;
        case ChatDelta::Kind::TOOL_CALL_BEGIN:
            if (static_cast<size_t>(d.tool_index) >= m.tool_calls.size()) m.tool_calls.resize(d.tool_index + 1);
            m.tool_calls[d.tool_index].id = d.id;
            m.tool_calls[d.tool_index].name = d.name;
            m.tool_calls[d.tool_index].arguments += d.text;
            break;
        case ChatDelta::Kind::TOOL_CALL_ARGUMENTS: m.tool_calls.at(d.tool_index).arguments += d.text; break;
    }
}

std::vector<ChatDelta> ChatOutputParser::take_deltas() {
    std::vector<ChatDelta> out;
    out.swap(pending_);
    return out;
}

void ChatOutputParser::emit(ChatDelta d) {
    if ((d.kind == ChatDelta::Kind::CONTENT || d.kind == ChatDelta::Kind::REASONING ||
         d.kind == ChatDelta::Kind::TOOL_CALL_ARGUMENTS) && d.text.empty())
        return;
    apply_delta(msg_, d);
    pending_.push_back(std::move(d));
}

std::unique_ptr<ChatOutputParser> make_chat_output_parser(ChatFormat format, const ChatParseOptions& opt) {
    return format == ChatFormat::HARMONY ? make_harmony_parser(opt) : make_chatml_parser(opt);
}

namespace {

// Control tokens of each format that the one-shot parser recognises in text.
constexpr std::array<std::string_view, 7> kHarmonySpecials = {
    "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>"};
constexpr std::array<std::string_view, 3> kChatmlSpecials = {"<|im_start|>", "<|im_end|>", "<|endoftext|>"};

}  // namespace

ParsedMessage parse_chat_output(ChatFormat format, std::string_view text, const ChatParseOptions& opt) {
    auto parser = make_chat_output_parser(format, opt);
    size_t pos = 0;
    while (pos < text.size()) {
        size_t best = std::string_view::npos;
        std::string_view tag;
        auto scan = [&](const auto& specials) {
            for (std::string_view s : specials) {
                const size_t at = text.find(s, pos);
                if (at < best) { best = at; tag = s; }
            }
        };
        if (format == ChatFormat::HARMONY) scan(kHarmonySpecials);
        else scan(kChatmlSpecials);
        if (best == std::string_view::npos) {
            parser->push_text(text.substr(pos));
            break;
        }
        if (best > pos) parser->push_text(text.substr(pos, best - pos));
        parser->push_special(tag);
        pos = best + tag.size();
    }
    parser->finish();
    return parser->message();
}

ChatTokenParser::ChatTokenParser(const Tokenizer& tok, ChatFormat format, const ChatParseOptions& opt)
    : tok_(&tok), detok_(tok), parser_(make_chat_output_parser(format, opt)) {}

std::vector<ChatDelta> ChatTokenParser::push(int32_t id) {
    if (id >= 0 && id < tok_->vocab().size() && tok_->vocab().is_control(id)) {
        const std::string rest = detok_.flush();
        if (!rest.empty()) parser_->push_text(rest);
        parser_->push_special(tok_->vocab().text(id));
    } else {
        const std::string text = detok_.push(id);
        if (!text.empty()) parser_->push_text(text);
    }
    return parser_->take_deltas();
}

std::vector<ChatDelta> ChatTokenParser::finish() {
    const std::string rest = detok_.flush();
    if (!rest.empty()) parser_->push_text(rest);
    parser_->finish();
    return parser_->take_deltas();
}

std::vector<int32_t> chat_stop_tokens(ChatFormat format, const Tokenizer& tok) {
    std::vector<int32_t> ids;
    const auto names = format == ChatFormat::HARMONY ? std::vector<std::string_view>{"<|return|>", "<|call|>"}
                                                     : std::vector<std::string_view>{"<|im_end|>", "<|endoftext|>"};
    for (std::string_view n : names)
        if (int32_t id = tok.vocab().find_text(n); id >= 0) ids.push_back(id);
    return ids;
}

}  // namespace nitro
