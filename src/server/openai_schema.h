// OpenAI request parsing and validation for `nitro serve`.
//
// The body is parsed with its nesting bounded (kMaxJsonDepth, a 400 `json_too_deep` beyond), so
// nothing downstream (copies, schema walks, template rendering) can recurse deeper than that.
// Every request body is checked field by field before anything reaches the engine: a field of
// the wrong type, an out-of-range value or a missing required field gives an ApiError with the
// HTTP status and OpenAI's error object {"error": {"message", "type", "param", "code"}}, naming
// the field. Fields this server does not know are ignored (clients send `user`, `store`,
// `metadata`, ...), as OpenAI-compatible servers commonly do.
#pragma once

#include "grammar/grammar.h"
#include "grammar/grammar_budget.h"
#include "runtime/sampler.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace nitro::server {

/// An error answered to the client: HTTP status and OpenAI's error object.
struct ApiError {
    int status = 400;
    std::string message;
    std::string type = "invalid_request_error";
    std::string param;  ///< the offending field ("" = none, sent as null)
    std::string code;   ///< machine-readable code ("" = none, sent as null)

    /// {"error": {"message", "type", "param", "code"}}.
    nlohmann::json to_json() const;
};

/// Thrown by the parsers below (and by handlers) to answer with an ApiError.
class ApiException : public std::runtime_error {
public:
    explicit ApiException(ApiError e) : std::runtime_error(e.message), error(std::move(e)) {}
    ApiError error;
};

/// 400 invalid_request_error naming `param`.
[[noreturn]] void bad_request(const std::string& param, const std::string& message, const std::string& code = "");

/// A response_format grammar past its memory budget: 400 `schema_too_large` for a schema too
/// large for one request, 429 `grammar_memory_busy` while other requests hold the total.
[[noreturn]] void grammar_memory_error(const grammar::GrammarMemoryError& e);

/// response_format: {"type": "text"}, {"type": "json_object"} or {"type": "json_schema",
/// "json_schema": {"name", "schema", "strict", "description"}}. JSON formats are enforced by
/// grammar-constrained sampling (src/grammar): the schema is compiled while the request is parsed,
/// so an unsupported keyword is a 400 before anything is queued.
struct ResponseFormat {
    enum class Type { TEXT, JSON_OBJECT, JSON_SCHEMA } type = Type::TEXT;
    std::string name;                                ///< json_schema.name
    std::shared_ptr<grammar::Grammar> grammar;       ///< the value's nodes (no program yet); null for TEXT
    uint32_t root = 0;                               ///< the value's node in `grammar`
    bool json() const { return type != Type::TEXT; }
};

/// Generation parameters shared by /v1/chat/completions and /v1/completions.
struct GenerationRequest {
    std::string model;              ///< "" when the client did not name one
    SamplerParams sampling;         ///< temperature/top_p/top_k/min_p/seed
    int64_t max_tokens = -1;        ///< -1: until end of generation or the context is full
    std::vector<std::string> stop;  ///< stop sequences (never emitted)
    bool stream = false;
    bool include_usage = false;     ///< stream_options.include_usage
    bool logprobs = false;
    int top_logprobs = 0;           ///< alternatives per position (0..20)
    /// Extension "ignore_eos" (as llama.cpp's server; /v1/completions only): keep generating
    /// after end-of-generation tokens, up to max_tokens (benchmarks with a fixed output length).
    bool ignore_eos = false;
    ResponseFormat response_format;
    /// Extension "reasoning_budget_tokens" (alias "thinking_budget_tokens", as llama.cpp's server):
    /// tokens of reasoning allowed before the answer (-1 unlimited, 0 none); unset: the server's
    /// --reasoning-budget. Enforced with response_format only.
    std::optional<int64_t> reasoning_budget;
    /// Test-only extension "debug_scripted_output": model output text (special tokens parsed) the
    /// server emits instead of sampling; refused unless the server runs with --debug-scripted-output.
    std::optional<std::string> scripted_output;
};

enum class ToolChoice { AUTO, NONE, REQUIRED, NAMED };

struct ChatRequest {
    GenerationRequest gen;
    /// Messages normalised for the chat renderer: content-part arrays joined to strings, null
    /// content made "" (see normalize_messages in chat_completion.cpp for per-format rules).
    nlohmann::ordered_json messages;
    nlohmann::ordered_json tools;   ///< null when none
    ToolChoice tool_choice = ToolChoice::AUTO;
    std::string tool_choice_name;   ///< NAMED only
    bool parallel_tool_calls = true;
    std::optional<std::string> reasoning_effort;    ///< gpt-oss: low/medium/high
    nlohmann::ordered_json chat_template_kwargs;    ///< object or null
};

struct CompletionRequest {
    GenerationRequest gen;
    std::string prompt;              ///< text prompt (when prompt_ids is empty)
    std::vector<int32_t> prompt_ids; ///< token-id prompt
    bool echo = false;               ///< prepend the prompt text to the output
};

/// What the parsers may take from the server.
struct ParseLimits {
    /// response_format grammars are charged to it (a 400 past its per-request limit, a 429 past
    /// its total); null: not limited.
    grammar::MemoryBudget* grammar_budget = nullptr;
    /// Tokens of the vocabulary (logit_bias keys must be below); 0: not checked.
    int64_t n_vocab = 0;
};

/// Parses and validates a /v1/chat/completions body. Throws ApiException.
ChatRequest parse_chat_request(const std::string& body, const ParseLimits& limits = {});
/// Parses and validates a /v1/completions body. Throws ApiException.
CompletionRequest parse_completion_request(const std::string& body, const ParseLimits& limits = {});

/// The text of a message `content`: a string, or an array of {"type":"text","text":...} parts
/// (joined), or null (""). Throws ApiException naming `param` for anything else.
std::string content_text(const nlohmann::ordered_json& content, const std::string& param);

}  // namespace nitro::server
