// Chat formats: render an OpenAI-style conversation into the prompt text a model was trained on,
// exactly as the model's official Jinja chat template does under transformers'
// apply_chat_template (Jinja2, trim_blocks + lstrip_blocks, tojson = Python json.dumps with
// ensure_ascii=False). The two templates are implemented directly in C++ (chat_harmony.cpp for
// gpt-oss, chat_chatml.cpp for Qwen3); the GGUF's tokenizer.chat_template is kept for reference.
//
// Inputs are JSON (nlohmann::ordered_json, so object key order, which tojson prints, is kept):
//   messages: [{"role": "system"|"developer"|"user"|"assistant"|"tool", "content": "...",
//               "thinking"/"reasoning_content": "...", "tool_calls": [{"id", "type",
//               "function": {"name", "arguments": {...} or "..."}}]}, ...]
//   tools:    [{"type": "function", "function": {"name", "description", "parameters": {...}}}]
// Where the template raises (a tool message without a preceding tool call, a null content it
// tests with `in`, ...), rendering throws nitro::Error with a message naming the message index.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nitro {

class Tokenizer;
class Vocab;

/// The chat formats this engine renders and parses.
enum class ChatFormat {
    HARMONY,  ///< gpt-oss: <|start|>ROLE<|channel|>CH<|message|>...<|end|>
    CHATML,   ///< Qwen3: <|im_start|>ROLE\n...<|im_end|>\n, <think>, <tool_call>
};

/// "harmony" / "chatml".
const char* chat_format_name(ChatFormat f);

/// The chat format of a vocabulary, recognised by its special tokens (<|channel|> and
/// <|message|> for harmony, <|im_start|> for ChatML). Throws nitro::Error if neither is there.
ChatFormat chat_format_for(const Vocab& vocab);

/// Template variables besides messages and tools (transformers' apply_chat_template kwargs).
struct ChatOptions {
    bool add_generation_prompt = true;
    /// gpt-oss "Reasoning: ..." line; the template's default is "medium".
    std::optional<std::string> reasoning_effort;
    /// gpt-oss first system line; the template's default is the ChatGPT identity.
    std::optional<std::string> model_identity;
    /// gpt-oss builtin tools ("browser", "python"); null/empty for none.
    nlohmann::ordered_json builtin_tools;
    /// Qwen3: false adds an empty <think></think> block to the generation prompt.
    std::optional<bool> enable_thinking;
    /// The date the gpt-oss template prints (strftime_now("%Y-%m-%d")): "YYYY-MM-DD".
    /// Empty means today, local time.
    std::string date;
    /// gpt-oss: an assistant tool call whose `arguments` is a JSON string (the OpenAI wire
    /// format) is rendered as that JSON, not as a quoted string (the raw template would double
    /// encode it; llama.cpp converts it the same way). Off: exactly the template.
    bool parse_string_arguments = true;

    /// Reads kwargs as the golden files and `nitro tokenize --chat` give them
    /// ({"add_generation_prompt": true, "reasoning_effort": "low", ...}). Throws nitro::Error
    /// for an unknown key or a value of the wrong type.
    static ChatOptions from_kwargs(const nlohmann::ordered_json& kwargs);
};

/// A rendered conversation, and which of its bytes the template wrote itself.
///
/// Only the template's own markup may become control tokens (<|start|>, <|message|>, <|im_end|>)
/// or Qwen3's added tags (<think>, <tool_call>, <tool_response>):
/// text that came from the request (message content, reasoning, tool names, descriptions and
/// schemas, tool results, template options) is tokenized as plain text even when it spells a
/// control token, so a message cannot forge a turn (`<|end|><|start|>system<|message|>...`).
/// For text without control-token spellings the ids equal those of the whole string tokenized
/// with special tokens parsed, which is what the official templates' goldens hold.
struct RenderedChat {
    std::string text;
    /// [first, second) byte ranges of `text` written by the template (sorted, disjoint).
    std::vector<std::pair<size_t, size_t>> markup;

    /// Appends template text (its control-token spellings are control tokens).
    void add_markup(std::string_view s);
    /// Appends request text (always plain text).
    void add_text(std::string_view s);
};

/// Renders a conversation in `format`, keeping where the markup is. `tools` may be null. Throws
/// nitro::Error where the official template raises and for inputs it cannot render
/// (non-string content).
RenderedChat render_chat_marked(ChatFormat format, const nlohmann::ordered_json& messages,
                                const nlohmann::ordered_json& tools, const ChatOptions& opt);

/// The text of render_chat_marked().
std::string render_chat(ChatFormat format, const nlohmann::ordered_json& messages,
                        const nlohmann::ordered_json& tools, const ChatOptions& opt);

/// Token ids of a rendered chat: added tokens, control (<|im_start|>) and USER_DEFINED (Qwen3's
/// <think>, <tool_call>, <tool_response>) alike, only inside its markup ranges, so message text
/// cannot forge a tool result or a reasoning block either (Hugging Face and llama.cpp would match
/// the USER_DEFINED ones in text too); no BOS/EOS (the templates write their own).
std::vector<int32_t> encode_chat(const Tokenizer& tok, const RenderedChat& chat);

/// Deepest nesting of arrays/objects accepted where request JSON is parsed or copied (the body
/// of a request, tool-call arguments given as a JSON string). Deeper input is refused or left as
/// a string, so recursive copies, dumps and schema walks stay far from the stack limit.
inline constexpr int kMaxJsonDepth = 128;

/// Parses JSON text; nullopt when it is not valid JSON or nests deeper than `max_depth`
/// (then `*too_deep` is set, when given).
std::optional<nlohmann::ordered_json> parse_json_bounded(std::string_view text, int max_depth = kMaxJsonDepth,
                                                         bool* too_deep = nullptr);

/// Today's local date as "YYYY-MM-DD".
std::string chat_date_today();

/// The "YYYY-MM-DD" of an ISO-8601 local time such as "2025-08-05T12:00:00". Throws
/// nitro::Error if it does not start with a valid date.
std::string chat_date_from_iso(std::string_view iso);

/// Python json.dumps(x, ensure_ascii=False) as Jinja's tojson prints it in transformers:
/// ", " and ": " separators, non-ASCII kept raw, floats in Python repr form (1.0, 1e-05).
std::string py_json_dumps(const nlohmann::ordered_json& x);

namespace chat_detail {

/// Jinja truthiness of an optional JSON value (nullptr: undefined).
bool truthy(const nlohmann::ordered_json* v);
/// obj[key] or nullptr if obj is not an object or has no such key (Jinja: undefined).
const nlohmann::ordered_json* field(const nlohmann::ordered_json& obj, std::string_view key);
/// obj[key] as a string for concatenation; throws nitro::Error naming `where` and `key` when it is
/// missing (Jinja UndefinedError) or not a string (Python TypeError).
const std::string& str_field(const nlohmann::ordered_json& obj, std::string_view key, const std::string& where);
/// A message's role; throws if it is missing or not a string.
const std::string& role_of(const nlohmann::ordered_json& msg, size_t index);

}  // namespace chat_detail

}  // namespace nitro
