// ChatML (Qwen3) output parser. See chat_parse.h for what maps to what.
//
// Text is kept in a buffer until it is decided: a suffix that may be the start of a tag
// (<think>, </think>, <tool_call>, </tool_call>) and trailing newlines (which the template strips
// around reasoning and uses as the separator before a tool call) wait for the next text. The
// newline rules are the template's own: reasoning is strip('\n')-ed, content after </think> is
// lstrip('\n')-ed, and one '\n' separates content from a following <tool_call>. So parsing a
// rendered assistant turn and rendering the result again gives the same text.
#include "tokenizer/chat_parse.h"

#include "core/error.h"

namespace nitro {

namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view kThinkOpen = "<think>", kThinkClose = "</think>";
constexpr std::string_view kToolOpen = "<tool_call>", kToolClose = "</tool_call>";

/// Length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t partial_tag(std::string_view s, std::string_view tag) {
    for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
        if (tag.starts_with(s.substr(s.size() - n))) return n;
    return 0;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/// Skips one JSON value of already-validated JSON text starting at `i`; returns the end.
size_t skip_value(std::string_view s, size_t i) {
    if (s[i] == '"') {
        for (++i; i < s.size() && s[i] != '"'; ++i)
            if (s[i] == '\\') ++i;
        return i + 1;
    }
    if (s[i] == '{' || s[i] == '[') {
        int depth = 0;
        for (; i < s.size(); ++i) {
            if (s[i] == '"') { i = skip_value(s, i) - 1; continue; }
            if (s[i] == '{' || s[i] == '[') ++depth;
            if (s[i] == '}' || s[i] == ']') if (--depth == 0) return i + 1;
        }
        return i;
    }
    while (i < s.size() && s[i] != ',' && s[i] != '}' && s[i] != ']' && !is_space(s[i])) ++i;
    return i;
}

/// The exact text of the top-level member `key` of a JSON object (validated), or "".
std::string_view member_text(std::string_view s, std::string_view key) {
    size_t i = s.find('{');
    if (i == std::string_view::npos) return {};
    ++i;
    while (i < s.size()) {
        while (i < s.size() && (is_space(s[i]) || s[i] == ',')) ++i;
        if (i >= s.size() || s[i] != '"') return {};
        const size_t k_end = skip_value(s, i);
        const std::string_view k = s.substr(i + 1, k_end - i - 2);
        i = k_end;
        while (i < s.size() && (is_space(s[i]) || s[i] == ':')) ++i;
        const size_t v_end = skip_value(s, i);
        if (k == key) return s.substr(i, v_end - i);
        i = v_end;
    }
    return {};
}

class ChatmlParser final : public ChatOutputParser {
public:
    explicit ChatmlParser(const ChatParseOptions& opt) {
        if (opt.reasoning_open) state_ = State::THINK;
    }

    void push_text(std::string_view text) override {
        if (state_ == State::END) return;
        buf_ += text;
        process(false);
    }

    void push_special(std::string_view t) override {
        if (t == "<|im_end|>" || t == "<|endoftext|>" || t == "<|im_start|>") finish();
    }

    void finish() override {
        if (state_ == State::END) return;
        process(true);
        state_ = State::END;
    }

private:
    enum class State { START, THINK, CONTENT, TOOL, END };

    void reasoning(std::string_view s) { emit(make_delta(ChatDelta::Kind::REASONING, std::string(s))); }
    void content(std::string_view s) { emit(make_delta(ChatDelta::Kind::CONTENT, std::string(s))); }

    /// Drops leading characters of buf_ matched by `pred`; true if anything else is left.
    template <typename Pred>
    bool drop_leading(Pred pred) {
        size_t i = 0;
        while (i < buf_.size() && pred(buf_[i])) ++i;
        buf_.erase(0, i);
        return !buf_.empty();
    }

    void process(bool final) {
        for (;;) {
            switch (state_) {
                case State::START: {
                    size_t i = 0;
                    while (i < buf_.size() && is_space(buf_[i])) ++i;
                    const std::string_view s = std::string_view(buf_).substr(i);
                    if (s.starts_with(kThinkOpen)) {
                        buf_.erase(0, i + kThinkOpen.size());
                        state_ = State::THINK;
                        continue;
                    }
                    if (kThinkOpen.starts_with(s) && !final) return;
                    state_ = State::CONTENT;
                    continue;
                }
                case State::THINK: {
                    if (!reasoning_started_ && !drop_leading([](char c) { return c == '\n'; }) && !final) return;
                    const size_t close = buf_.find(kThinkClose);
                    if (close != std::string::npos) {
                        std::string_view r = std::string_view(buf_).substr(0, close);
                        while (!r.empty() && r.back() == '\n') r.remove_suffix(1);
                        reasoning(r);
                        buf_.erase(0, close + kThinkClose.size());
                        state_ = State::CONTENT;
                        content_begin_ = true;
                        continue;
                    }
                    size_t end = final ? buf_.size() : buf_.size() - partial_tag(buf_, kThinkClose);
                    while (end > 0 && buf_[end - 1] == '\n') --end;  // strip('\n') at the end
                    if (end > 0) reasoning_started_ = true;
                    reasoning(std::string_view(buf_).substr(0, end));
                    buf_.erase(0, final ? buf_.size() : end);
                    return;
                }
                case State::CONTENT: {
                    if (content_begin_) {
                        if (!drop_leading([](char c) { return c == '\n'; })) return;
                        content_begin_ = false;
                    }
                    if (after_tool_) {
                        if (!drop_leading(is_space)) return;
                        after_tool_ = false;
                    }
                    const size_t open = buf_.find(kToolOpen);
                    if (open != std::string::npos) {
                        std::string_view pre = std::string_view(buf_).substr(0, open);
                        tool_sep_ = pre.ends_with('\n') ? "\n" : "";
                        pre.remove_suffix(tool_sep_.size());
                        content(pre);
                        buf_.erase(0, open + kToolOpen.size());
                        state_ = State::TOOL;
                        continue;
                    }
                    size_t end = buf_.size();
                    if (!final) {
                        end -= partial_tag(buf_, kToolOpen);
                        while (end > 0 && buf_[end - 1] == '\n') --end;  // may separate a tool call
                    }
                    content(std::string_view(buf_).substr(0, end));
                    buf_.erase(0, end);
                    return;
                }
                case State::TOOL: {
                    const size_t close = buf_.find(kToolClose);
                    if (close == std::string::npos) {
                        if (!final) return;
                        warn("tool call " + std::to_string(n_calls_seen_) +
                             ": output ended before </tool_call>; kept as content");
                        content(tool_sep_ + std::string(kToolOpen) + buf_);
                        buf_.clear();
                        return;
                    }
                    const std::string body = buf_.substr(0, close);
                    buf_.erase(0, close + kToolClose.size());
                    tool_call(body);
                    state_ = State::CONTENT;
                    continue;
                }
                case State::END: return;
            }
        }
    }

    void tool_call(const std::string& body) {
        const int seen = n_calls_seen_++;
        json j = json::parse(body, nullptr, false);
        std::string problem;
        if (j.is_discarded()) problem = "its JSON does not parse";
        else if (!j.is_object()) problem = "its JSON is not an object";
        else if (!j.contains("name") || !j["name"].is_string()) problem = "it has no string \"name\"";
        else if (!j.contains("arguments")) problem = "it has no \"arguments\"";
        if (!problem.empty()) {
            warn("tool call " + std::to_string(seen) + ": " + problem + "; kept as content");
            content(tool_sep_ + std::string(kToolOpen) + body + std::string(kToolClose));
            return;
        }
        const json& args = j["arguments"];
        ChatDelta d = make_delta(ChatDelta::Kind::TOOL_CALL_BEGIN, "");
        d.tool_index = static_cast<int>(msg_.tool_calls.size());
        d.id = "call_" + std::to_string(d.tool_index);
        d.name = j["name"].get<std::string>();
        d.text = args.is_string() ? args.get<std::string>() : std::string(member_text(body, "arguments"));
        emit(std::move(d));
        after_tool_ = true;
    }

    State state_ = State::START;
    std::string buf_;
    bool reasoning_started_ = false;
    bool content_begin_ = false;
    bool after_tool_ = false;
    std::string tool_sep_;
    int n_calls_seen_ = 0;
};

}  // namespace

std::unique_ptr<ChatOutputParser> make_chatml_parser(const ChatParseOptions& opt) {
    return std::make_unique<ChatmlParser>(opt);
}

}  // namespace nitro
