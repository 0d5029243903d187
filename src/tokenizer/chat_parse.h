// Parsing model output back into an OpenAI assistant message, incrementally (token by token,
// emitting OpenAI-style deltas) or in one go, with the same result: the one-shot parse is the
// incremental parser fed the whole text, and every decision the parser takes depends only on
// text it has already seen in full (partial tags are held back), so chunking cannot change it.
//
// harmony (gpt-oss), after the generation prompt "<|start|>assistant":
//   <|channel|>analysis<|message|>...<|end|>            -> reasoning_content
//   <|channel|>final<|message|>...<|return|>             -> content
//   <|channel|>commentary<|message|>...<|end|>          -> content (preamble)
//   [ to=functions.NAME]<|channel|>commentary[ to=functions.NAME] [<|constrain|>]json
//     <|message|>{args}<|call|>                          -> tool call NAME with arguments {args}
//   text with no channel markup                          -> content
//   output cut off anywhere                              -> what was produced so far
// ChatML (Qwen3), after "<|im_start|>assistant\n":
//   <think>\n...\n</think>\n\n                           -> reasoning_content
//   <tool_call>\n{"name": N, "arguments": A}\n</tool_call> -> tool call (several allowed)
//   a tool call whose JSON does not parse                -> kept in content, with a warning
// Stop tokens: <|return|> and <|call|> end a harmony generation, <|end|> does not;
// <|im_end|> and <|endoftext|> end a ChatML one (see chat_stop_tokens()).
#pragma once

#include "tokenizer/chat.h"
#include "tokenizer/detokenize.h"

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace nitro {

class Tokenizer;

/// One tool call of a parsed message. `arguments` is the JSON text the model wrote.
struct ParsedToolCall {
    std::string id;         ///< "call_0", "call_1", ... in order of appearance
    std::string name;
    std::string arguments;
    bool operator==(const ParsedToolCall&) const = default;
};

/// An assistant message parsed from model output.
struct ParsedMessage {
    std::string content;
    std::string reasoning_content;
    std::vector<ParsedToolCall> tool_calls;
    std::vector<std::string> warnings;  ///< malformed tool calls kept as content, and the like
    bool operator==(const ParsedMessage&) const = default;

    /// {"role": "assistant", "content": "...", "reasoning_content": "..." (if any),
    ///  "tool_calls": [{"id", "type": "function", "function": {"name", "arguments"}}] (if any)}.
    nlohmann::ordered_json to_openai() const;
};

/// An OpenAI-style streaming delta.
struct ChatDelta {
    enum class Kind { CONTENT, REASONING, TOOL_CALL_BEGIN, TOOL_CALL_ARGUMENTS } kind = Kind::CONTENT;
    std::string text;     ///< content / reasoning / arguments text
    int tool_index = -1;  ///< for tool call deltas
    std::string id, name; ///< TOOL_CALL_BEGIN only

    /// {"content": ...} / {"reasoning_content": ...} / {"tool_calls": [{"index", ...}]}.
    nlohmann::ordered_json to_openai() const;
};

/// A delta of `kind` carrying `text` (and, for tool call deltas, the tool index).
inline ChatDelta make_delta(ChatDelta::Kind kind, std::string text, int tool_index = -1) {
    ChatDelta d;
    d.kind = kind;
    d.text = std::move(text);
    d.tool_index = tool_index;
    return d;
}

/// Applies a delta to a message (what a streaming client does).
void apply_delta(ParsedMessage& m, const ChatDelta& d);

/// Parser options.
struct ChatParseOptions {
    /// ChatML: the prompt already opened a <think> block, so output starts inside reasoning.
    bool reasoning_open = false;
    /// ChatML: after the reasoning block everything is content, tags included (a response_format
    /// answer: its JSON strings may hold "<tool_call>" or "</think>" text, and no tool call can
    /// follow). Harmony needs no such option: its answer is a message body.
    bool plain_content = false;
};

/// The incremental parser of one format. Feed text (valid UTF-8, from normal tokens) and
/// control tokens (by their text, e.g. "<|channel|>") in order, then finish().
class ChatOutputParser {
public:
    virtual ~ChatOutputParser() = default;
    /// Adds text produced by normal tokens.
    virtual void push_text(std::string_view text) = 0;
    /// Adds one control token, by its text.
    virtual void push_special(std::string_view token_text) = 0;
    /// Ends the output (EOS or max_tokens): held-back text is resolved, nothing is an error.
    virtual void finish() = 0;
    /// The deltas produced since the last call.
    std::vector<ChatDelta> take_deltas();
    /// The message so far (equal to applying every delta produced so far).
    const ParsedMessage& message() const { return msg_; }

protected:
    void emit(ChatDelta d);
    void warn(std::string w) { msg_.warnings.push_back(std::move(w)); }
    ParsedMessage msg_;

private:
    std::vector<ChatDelta> pending_;
};

/// The harmony parser (chat_parse_harmony.cpp); prefer make_chat_output_parser().
std::unique_ptr<ChatOutputParser> make_harmony_parser(const ChatParseOptions& opt);
/// The ChatML parser (chat_parse_chatml.cpp); prefer make_chat_output_parser().
std::unique_ptr<ChatOutputParser> make_chatml_parser(const ChatParseOptions& opt);

/// A new parser for `format`.
std::unique_ptr<ChatOutputParser> make_chat_output_parser(ChatFormat format, const ChatParseOptions& opt = {});

/// Parses a whole output text in one go. Control-token text in `text` (<|channel|>, <|im_end|>)
/// is taken as those tokens.
ParsedMessage parse_chat_output(ChatFormat format, std::string_view text, const ChatParseOptions& opt = {});

/// Token-level driver: detokenizes with StreamingDetokenizer (so text is always valid UTF-8)
/// and routes control tokens to the parser as specials.
class ChatTokenParser {
public:
    ChatTokenParser(const Tokenizer& tok, ChatFormat format, const ChatParseOptions& opt = {});
    /// Adds one generated token; returns the deltas it completes.
    std::vector<ChatDelta> push(int32_t id);
    /// Ends the output; returns the last deltas.
    std::vector<ChatDelta> finish();
    const ParsedMessage& message() const { return parser_->message(); }

private:
    const Tokenizer* tok_;
    StreamingDetokenizer detok_;
    std::unique_ptr<ChatOutputParser> parser_;
};

/// Token ids that end generation in `format` (<|return|>, <|call|>; <|im_end|>, <|endoftext|>),
/// those present in the vocabulary.
std::vector<int32_t> chat_stop_tokens(ChatFormat format, const Tokenizer& tok);

}  // namespace nitro
