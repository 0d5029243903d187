// /v1/chat/completions: from a validated request to the prompt tokens, and from generated tokens
// to OpenAI's response (one body, or chat.completion.chunk objects for SSE).
//
// Prompt: messages are normalised for the model's chat format (harmony takes reasoning as
// `thinking`, ChatML has no developer role, OpenAI's null content becomes "") and rendered with
// render_chat. tool_choice "none" leaves the tools out of the prompt; "required" and a named
// function append the opening of a tool call to the prompt ("forced prefix"), which the output
// parser also reads, so the response carries the call as if the model had written all of it.
//
// Output: ChatTokenParser turns tokens into deltas (reasoning_content, content, tool_calls).
// Content passes through a StopMatcher (stop sequences apply to the answer text and are never
// emitted). The non-streaming message is built from the same deltas the stream sends, so the
// concatenation of streamed deltas equals the non-streamed message.
#pragma once

#include "server/openai_schema.h"
#include "server/response_common.h"
#include "tokenizer/chat.h"
#include "tokenizer/chat_parse.h"

#include <memory>
#include <string>
#include <vector>

namespace nitro::server {

/// A chat request turned into tokens.
struct PreparedChat {
    std::string prompt_text;
    std::vector<int32_t> prompt_ids;       ///< includes forced_ids at the end
    std::vector<int32_t> forced_ids;       ///< the forced opening of the reply (tool_choice)
    ChatParseOptions parse;
};

/// Renders and tokenizes. Throws ApiException (400) where the conversation cannot be rendered.
/// `date` is the gpt-oss template date ("" = today).
PreparedChat prepare_chat(const ChatRequest& req, const Tokenizer& tok, ChatFormat format, const std::string& date);

struct ChatResponseConfig {
    ChatFormat format = ChatFormat::HARMONY;
    ChatParseOptions parse;
    std::vector<int32_t> forced_ids;
    std::vector<std::string> stop;
    bool parallel_tool_calls = true;
    bool logprobs = false;
    bool stream = false;
    bool include_usage = false;
    std::string id;     ///< chatcmpl-...
    std::string model;
    int64_t created = 0;
};

class ChatResponseBuilder : public ResponseBuilder {
public:
    ChatResponseBuilder(const Tokenizer& tok, ChatResponseConfig cfg);
    void begin(std::vector<nlohmann::json>& chunks) override;
    bool on_token(const TokenStep& step, std::vector<nlohmann::json>& chunks) override;
    void finish(FinishCause cause, const Usage& usage, std::vector<nlohmann::json>& chunks) override;
    nlohmann::json response() const override;
    const std::string& finish_reason() const override { return finish_reason_; }
    /// The message as emitted so far (what a client has after applying every delta).
    const ParsedMessage& message() const { return emitted_; }

private:
    /// Emits parser deltas (stop matching, tool-call limits, ids); false when generation should stop.
    bool emit(std::vector<ChatDelta> deltas, std::vector<nlohmann::json>& chunks);
    void push_chunk(nlohmann::json delta, std::vector<nlohmann::json>& chunks);
    /// Streaming: puts the logprobs entries not yet sent into `choice` ("logprobs": {"content": [...]}).
    void attach_new_logprobs(nlohmann::json& choice);
    nlohmann::json chunk_base() const;

    const Tokenizer& tok_;
    ChatResponseConfig cfg_;
    ChatTokenParser parser_;
    StopMatcher stop_;
    ParsedMessage emitted_;
    std::vector<std::string> call_ids_;
    nlohmann::json logprobs_ = nlohmann::json::array();  ///< all entries
    size_t logprobs_sent_ = 0;                           ///< entries already attached to a chunk
    bool stopped_ = false;        ///< a stop sequence matched or the tool-call limit was hit
    bool tool_limit_ = false;
    std::string finish_reason_;
    Usage usage_;
};

}  // namespace nitro::server
