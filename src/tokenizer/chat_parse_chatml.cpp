// ChatML (Qwen3) output parser. See chat_parse.h for what maps to what.
//
// Text is kept in a buffer until it is decided: a suffix that may be the start of a tag
// (<think>, </think>, <tool_call>, </tool_call>) and trailing newlines (which the template strips
// around reasoning and uses as the separator before a tool call) wait for the next text. The
// newline rules are the template's own: reasoning is strip('\n')-ed, content after </think> is
// lstrip('\n')-ed, and one '\n' separates content from a following <tool_call>. So parsing a
// rendered assistant turn and rendering the result again gives the same text.
//
// No tag text reaches content or reasoning. A tag where it has no meaning (</think> or <think>
// in the answer, </tool_call> outside a call, any but </think> inside reasoning) is dropped, the
// text around it kept. A call whose JSON is malformed gives its text, without the tags, as
// content. A call cut by the end of the output gives the call when its name and its arguments'
// JSON value are whole (only `}` or `</tool_call>` is missing; the arguments are that value), else
// nothing; both with a warning.
#include "tokenizer/chat_parse.h"

#include "core/error.h"

namespace nitro {

namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view kThinkOpen = "<think>", kThinkClose = "</think>";
constexpr std::string_view kToolOpen = "<tool_call>", kToolClose = "</tool_call>";

constexpr std::string_view kTags[] = {kThinkOpen, kThinkClose, kToolOpen, kToolClose};

/// Length of the longest suffix of `s` that is a proper prefix of one of the tags.
size_t partial_tag(std::string_view s) {
    size_t best = 0;
    for (std::string_view tag : kTags)
        for (size_t n = std::min(s.size(), tag.size() - 1); n > best; --n)
            if (tag.starts_with(s.substr(s.size() - n))) {
                best = n;
                break;
            }
    return best;
}

/// The leftmost tag in `s` (no tag is a prefix of another, so at most one starts at a place).
struct TagHit {
    size_t at = std::string_view::npos;
    std::string_view tag;
};
TagHit first_tag(std::string_view s) {
    TagHit hit;
    for (std::string_view tag : kTags)
        if (const size_t at = s.find(tag); at < hit.at) hit = {at, tag};
    return hit;
}

/// `s` without the tags in it (one left-to-right pass, as the parser reads them).
std::string without_tags(std::string_view s) {
    std::string out;
    for (TagHit h = first_tag(s); h.at != std::string_view::npos; h = first_tag(s)) {
        out += s.substr(0, h.at);
        s.remove_prefix(h.at + h.tag.size());
    }
    out += s;
    return out;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/// The end of a complete JSON string starting at s[i] == '"', or npos.
size_t string_end(std::string_view s, size_t i) {
    for (++i; i < s.size(); ++i) {
        if (s[i] == '\\') ++i;
        else if (s[i] == '"') return i + 1;
    }
    return std::string_view::npos;
}

size_t skip_value(std::string_view s, size_t i);

/// The JSON value at the start of `s` when it is whole and valid, else "": `{"city": "Paris"}}`
/// (the value and the call's own closing brace) gives `{"city": "Paris"}`. A number or word is
/// whole only when something follows it (the output may have ended inside it).
std::string whole_json_value(std::string_view s) {
    if (s.empty()) return "";
    const size_t end = skip_value(s, 0);
    if (end > s.size()) return "";
    const std::string_view v = s.substr(0, end);
    if (!parse_json_bounded(v)) return "";
    const bool delimited = v.back() == '}' || v.back() == ']' || v.back() == '"';
    if (!delimited && end == s.size()) return "";
    return std::string(v);
}

/// A cut tool call: `{"name": "NAME", "arguments": REST` (any whitespace) gives NAME and the
/// arguments' JSON when REST starts with a whole value (else ""); anything else false.
bool cut_call_parts(std::string_view b, std::string& name, std::string& args) {
    size_t i = 0;
    auto ws = [&] { while (i < b.size() && is_space(b[i])) ++i; };
    auto lit = [&](std::string_view t) {
        ws();
        if (b.substr(i, t.size()) != t) return false;
        i += t.size();
        return true;
    };
    if (!lit("{") || !lit("\"name\"") || !lit(":")) return false;
    ws();
    if (i >= b.size() || b[i] != '"') return false;
    const size_t end = string_end(b, i);
    if (end == std::string_view::npos) return false;
    json n = json::parse(b.substr(i, end - i), nullptr, false);
    if (!n.is_string()) return false;
    i = end;
    if (!lit(",") || !lit("\"arguments\"") || !lit(":")) return false;
    ws();
    name = n.get<std::string>();
    args = whole_json_value(without_tags(b.substr(i)));
    return true;
}

/// Skips one JSON value starting at `i`; returns its end (past s.size() when a string or a
/// container is not closed). The text must be valid JSON for the end to be the value's end.
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
        return s.size() + 1;  // not closed
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
    explicit ChatmlParser(const ChatParseOptions& opt) : plain_content_(opt.plain_content) {
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
                    const TagHit hit = first_tag(buf_);
                    if (hit.at != std::string::npos) {
                        std::string_view r = std::string_view(buf_).substr(0, hit.at);
                        if (hit.tag == kThinkClose) {
                            while (!r.empty() && r.back() == '\n') r.remove_suffix(1);
                            reasoning(r);
                            buf_.erase(0, hit.at + hit.tag.size());
                            state_ = State::CONTENT;
                            content_begin_ = true;
                            continue;
                        }
                        if (!r.empty()) reasoning_started_ = true;
                        reasoning(r);
                        stray_tag(hit.tag, "reasoning");
                        buf_.erase(0, hit.at + hit.tag.size());
                        continue;
                    }
                    size_t end = final ? buf_.size() : buf_.size() - partial_tag(buf_);
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
                    if (plain_content_) {
                        content(buf_);
                        buf_.clear();
                        return;
                    }
                    const TagHit hit = first_tag(buf_);
                    if (hit.at != std::string::npos) {
                        std::string_view pre = std::string_view(buf_).substr(0, hit.at);
                        if (hit.tag == kToolOpen) {
                            tool_sep_ = pre.ends_with('\n') ? "\n" : "";
                            pre.remove_suffix(tool_sep_.size());
                            content(pre);
                            buf_.erase(0, hit.at + kToolOpen.size());
                            state_ = State::TOOL;
                            continue;
                        }
                        content(pre);
                        stray_tag(hit.tag, "content");
                        buf_.erase(0, hit.at + hit.tag.size());
                        continue;
                    }
                    size_t end = buf_.size();
                    if (!final) {
                        end -= partial_tag(buf_);
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
                        cut_tool_call(buf_);
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
            warn("tool call " + std::to_string(seen) + ": " + problem + "; its text is kept as content, without the tags");
            // The template's framing newlines ("<tool_call>\n...\n</tool_call>") are markup too.
            std::string_view text = body;
            if (text.starts_with('\n')) text.remove_prefix(1);
            if (text.ends_with('\n')) text.remove_suffix(1);
            content(tool_sep_ + without_tags(text));
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

    /// The output ended inside <tool_call>: the call when its name and arguments are whole (only
    /// the closing brace or tag is missing), else nothing: a call's arguments are valid JSON or
    /// there is no call.
    void cut_tool_call(const std::string& body) {
        const int seen = n_calls_seen_++;
        std::string name, args;
        if (!cut_call_parts(body, name, args)) {
            warn("tool call " + std::to_string(seen) + ": output ended before its name was complete; dropped");
            return;
        }
        if (args.empty()) {
            warn("tool call " + std::to_string(seen) + " (" + name + "): output ended inside its arguments; dropped");
            return;
        }
        warn("tool call " + std::to_string(seen) + ": output ended before </tool_call>; its arguments are whole");
        ChatDelta d = make_delta(ChatDelta::Kind::TOOL_CALL_BEGIN, std::move(args));
        d.tool_index = static_cast<int>(msg_.tool_calls.size());
        d.id = "call_" + std::to_string(d.tool_index);
        d.name = std::move(name);
        emit(std::move(d));
    }

    void stray_tag(std::string_view tag, const char* where) {
        warn("a stray " + std::string(tag) + " in the " + where + " was dropped");
    }

    State state_ = State::START;
    bool plain_content_ = false;
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
