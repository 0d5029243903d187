// Harmony (gpt-oss) output parser. See chat_parse.h for what maps to what.
//
// States: HEADER collects the text and control tokens between <|start|> (or the start of the
// output, which follows the prompt's "<|start|>assistant") and <|message|>; BODY routes message
// text by channel and recipient; BARE is output without channel markup, all content. Header text
// is held back while it can still be a header (role word, "to=RECIPIENT", in at most two words);
// as soon as it cannot, it is content. That test only grows stricter as text is added, so the
// result does not depend on how the text was chunked.
//
// A header that never reaches <|message|> (the output is cut, or <|start|>, <|end|>, <|return|>
// or <|call|> comes first) yields nothing, with a warning, when it is markup: after an explicit
// <|start|>, or with a <|channel|>/<|constrain|> tag, a whole "assistant" word or a "to=" word.
// Otherwise it was plain words that only looked like the start of a header ("as", "to") and it
// is content. So control-token text never reaches content, and neither does a role or recipient.
#include "tokenizer/chat_parse.h"

#include <sstream>

namespace nitro {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/// True if `h` (header text without control tokens) can still grow into a header:
/// at most two words, each a prefix of "assistant" or of "to=", or a "to=..." word.
bool could_be_header_text(std::string_view h) {
    int words = 0;
    size_t i = 0;
    while (i < h.size()) {
        while (i < h.size() && is_space(h[i])) ++i;
        if (i >= h.size()) break;
        size_t j = i;
        while (j < h.size() && !is_space(h[j])) ++j;
        const std::string_view w = h.substr(i, j - i);
        if (++words > 2) return false;
        const bool ok = std::string_view("assistant").starts_with(w) || std::string_view("to=").starts_with(w) ||
                        w.starts_with("to=");
        if (!ok) return false;
        i = j;
    }
    return true;
}

/// True if header text (without control tokens) has a whole header word: "assistant" or "to=...".
bool has_header_word(std::string_view h) {
    size_t i = 0;
    while (i < h.size()) {
        while (i < h.size() && is_space(h[i])) ++i;
        size_t j = i;
        while (j < h.size() && !is_space(h[j])) ++j;
        const std::string_view w = h.substr(i, j - i);
        if (w == "assistant" || w.starts_with("to=")) return true;
        i = j;
    }
    return false;
}

struct Header {
    std::string role, channel, recipient, content_type;
};

/// Parses "assistant to=functions.f<|channel|>commentary json" and the other orders.
Header parse_header(const std::string& h, const std::string& default_role) {
    std::string spaced;
    for (size_t i = 0; i < h.size();) {
        bool tag = false;
        for (std::string_view t : {std::string_view("<|channel|>"), std::string_view("<|constrain|>")}) {
            if (h.compare(i, t.size(), t) == 0) {
                spaced += ' ';
                spaced += t;
                spaced += ' ';
                i += t.size();
                tag = true;
                break;
            }
        }
        if (!tag) spaced += h[i++];
    }
    Header r;
    r.role = default_role;
    std::istringstream in(spaced);
    std::string w;
    bool seen_channel = false, first = true;
    while (in >> w) {
        if (w.starts_with("to=")) r.recipient = w.substr(3);
        else if (w == "<|channel|>") { if (in >> w) r.channel = w; seen_channel = true; }
        else if (w == "<|constrain|>") { if (in >> w) r.content_type = w; }
        else if (first && !seen_channel) r.role = w;
        else if (seen_channel) r.content_type = w;
        first = false;
    }
    return r;
}

class HarmonyParser final : public ChatOutputParser {
public:
    void push_text(std::string_view text) override {
        switch (state_) {
            case State::HEADER:
                header_ += text;
                // After an explicit <|start|> everything up to <|message|> is a header (the
                // role comes first); after the prompt's "<|start|>assistant" it must look like one.
                if (!header_has_tag_ && !default_role_.empty() && !could_be_header_text(header_)) to_bare();
                break;
            case State::BODY: body(text); break;
            case State::BARE: emit(make_delta(ChatDelta::Kind::CONTENT, std::string(text))); break;
        }
    }

    void push_special(std::string_view t) override {
        if (t == "<|start|>") {
            if (state_ == State::HEADER) end_header_early("<|start|>");
            start_header("");
        } else if (t == "<|channel|>" || t == "<|constrain|>") {
            if (state_ == State::HEADER) {
                header_ += t;
                header_has_tag_ = true;
            } else if (state_ == State::BARE) {
                start_header("assistant");
                header_ += t;
                header_has_tag_ = true;
            } else {
                warn(std::string("harmony: ") + std::string(t) + " inside a message body was ignored");
            }
        } else if (t == "<|message|>") {
            if (state_ == State::HEADER) begin_body();
            else warn("harmony: <|message|> outside a header was ignored");
        } else if (t == "<|end|>" || t == "<|return|>" || t == "<|call|>") {
            if (state_ == State::HEADER) end_header_early(t);
            start_header("assistant");
        }
        // Other control tokens (<|endoftext|>, reserved ones) carry no structure here.
    }

    void finish() override {
        if (state_ == State::HEADER) end_header_early("the end of the output");
        if (state_ == State::BODY && route_ == Route::TOOL)
            warn("harmony: output ended inside the arguments of tool call '" + msg_.tool_calls.back().name + "'");
        start_header("assistant");
    }

private:
    enum class State { HEADER, BODY, BARE };
    enum class Route { CONTENT, REASONING, TOOL, IGNORE };

    void start_header(const std::string& role) {
        state_ = State::HEADER;
        header_.clear();
        header_has_tag_ = false;
        default_role_ = role;
    }

    /// The header ends before <|message|>: dropped when it is markup, else its words are content.
    void end_header_early(std::string_view by) {
        if (header_.empty() && !header_explicit()) return;
        if (!header_explicit() && !header_has_tag_ && !has_header_word(header_)) {
            if (!header_.empty()) to_bare();
            return;
        }
        warn("harmony: a message header ended at " + std::string(by) + " before <|message|>; dropped (" +
             (header_.empty() ? std::string("<|start|>") : header_) + ")");
        header_.clear();
        header_has_tag_ = false;
    }

    /// The header follows an explicit <|start|> (not the prompt's "<|start|>assistant").
    bool header_explicit() const { return default_role_.empty(); }

    void to_bare() {
        std::string text = std::move(header_);
        header_.clear();
        state_ = State::BARE;
        emit(make_delta(ChatDelta::Kind::CONTENT, std::move(text)));
    }

    void begin_body() {
        const Header h = parse_header(header_, default_role_.empty() ? "assistant" : default_role_);
        state_ = State::BODY;
        header_.clear();
        if (h.role != "assistant") {
            route_ = Route::IGNORE;
            warn("harmony: a message from role '" + h.role + "' in the output was ignored");
        } else if (!h.recipient.empty() && h.recipient != "assistant") {
            route_ = Route::TOOL;
            const std::string name = h.recipient.starts_with("functions.") ? h.recipient.substr(10) : h.recipient;
            const int index = static_cast<int>(msg_.tool_calls.size());
            ChatDelta d = make_delta(ChatDelta::Kind::TOOL_CALL_BEGIN, "", index);
            d.id = "call_" + std::to_string(index);
            d.name = name;
            emit(std::move(d));
        } else if (h.channel == "analysis") {
            route_ = Route::REASONING;
        } else {
            route_ = Route::CONTENT;  // final, commentary preambles, or no channel
        }
    }

    void body(std::string_view text) {
        switch (route_) {
            case Route::CONTENT: emit(make_delta(ChatDelta::Kind::CONTENT, std::string(text))); break;
            case Route::REASONING: emit(make_delta(ChatDelta::Kind::REASONING, std::string(text))); break;
            case Route::TOOL: {
                ChatDelta d = make_delta(ChatDelta::Kind::TOOL_CALL_ARGUMENTS, std::string(text));
                d.tool_index = static_cast<int>(msg_.tool_calls.size()) - 1;
                emit(std::move(d));
                break;
            }
            case Route::IGNORE: break;
        }
    }

    State state_ = State::HEADER;
    Route route_ = Route::CONTENT;
    std::string header_;
    bool header_has_tag_ = false;
    std::string default_role_ = "assistant";  // the prompt ended with "<|start|>assistant"
};

}  // namespace

std::unique_ptr<ChatOutputParser> make_harmony_parser(const ChatParseOptions&) {
    return std::make_unique<HarmonyParser>();
}

}  // namespace nitro
