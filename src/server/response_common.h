// Pieces shared by the chat and text completion responses: stop-sequence matching over streamed
// text, token text for logprobs, usage objects, ids, and the interface the HTTP layer drives.
#pragma once

#include "server/scheduler.h"

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace nitro {
class Tokenizer;
}

namespace nitro::server {

/// Finds stop sequences in text that arrives in pieces, so that no part of a stop sequence is
/// ever emitted: text that could still be the start of a stop sequence is held back until it
/// either completes one (then it and everything after it are dropped) or cannot.
class StopMatcher {
public:
    explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
    /// Adds text; returns the text that is now safe to emit (never a stop sequence or part of one).
    std::string push(std::string_view text);
    /// Ends the stream: returns what was held back (unless a stop sequence matched).
    std::string flush();
    bool matched() const { return matched_; }

private:
    std::vector<std::string> stops_;
    std::string held_;
    bool matched_ = false;
};

/// Token counts of a response.
struct Usage {
    int64_t prompt_tokens = 0;
    int64_t completion_tokens = 0;
    int64_t cached_tokens = 0;  ///< prompt tokens reused from the cached prefix
    /// {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details": {"cached_tokens"}}.
    nlohmann::json to_json() const;
};

/// A token's text for logprobs: its bytes as UTF-8 with ill-formed parts replaced by U+FFFD.
std::string token_text(const Tokenizer& tok, int32_t id);
/// A token's raw bytes as a JSON array of integers (OpenAI's "bytes").
nlohmann::json token_bytes(const Tokenizer& tok, int32_t id);

/// "PREFIX" + 24 random alphanumerics (chatcmpl-..., cmpl-..., call_...).
std::string random_id(const std::string& prefix);

/// What the HTTP layer drives: tokens in, OpenAI JSON out. Implemented by the chat and the text
/// completion builders; both are plain objects (no threads), so tests can feed them token ids.
class ResponseBuilder {
public:
    virtual ~ResponseBuilder() = default;
    /// Stream chunks to send before any token (the chat role chunk).
    virtual void begin(std::vector<nlohmann::json>& chunks) {}
    /// One generated token; appends stream chunks. Returns false to stop generating.
    virtual bool on_token(const TokenStep& step, std::vector<nlohmann::json>& chunks) = 0;
    /// The job ended (END_OF_GENERATION, LENGTH or SINK_STOP); appends the last stream chunks
    /// (finish_reason, then usage when asked).
    virtual void finish(FinishCause cause, const Usage& usage, std::vector<nlohmann::json>& chunks) = 0;
    /// The non-streaming response body (after finish).
    virtual nlohmann::json response() const = 0;
    /// "stop", "length" or "tool_calls" (after finish).
    virtual const std::string& finish_reason() const = 0;
};

}  // namespace nitro::server
