// /v1/completions (the legacy text completion API): the prompt is text (tokenized with special
// tokens parsed, as llama.cpp's server does) or token ids; the output is the detokenized text
// (always valid UTF-8), cut at the first stop sequence, with legacy logprobs when asked.
#pragma once

#include "server/openai_schema.h"
#include "server/response_common.h"
#include "tokenizer/detokenize.h"

#include <string>
#include <vector>

namespace nitro::server {

struct CompletionResponseConfig {
    std::vector<std::string> stop;
    bool logprobs = false;
    int top_logprobs = 0;
    bool stream = false;
    bool include_usage = false;
    std::string echo_text;  ///< the prompt text when `echo` was asked, else ""
    std::string id;         ///< cmpl-...
    std::string model;
    int64_t created = 0;
};

/// Prompt ids of a completion request. Throws ApiException (400) for an empty prompt or an id
/// outside the vocabulary.
std::vector<int32_t> completion_prompt_ids(const CompletionRequest& req, const Tokenizer& tok);

class CompletionResponseBuilder : public ResponseBuilder {
public:
    CompletionResponseBuilder(const Tokenizer& tok, CompletionResponseConfig cfg);
    void begin(std::vector<nlohmann::json>& chunks) override;
    bool on_token(const TokenStep& step, std::vector<nlohmann::json>& chunks) override;
    void finish(FinishCause cause, const Usage& usage, std::vector<nlohmann::json>& chunks) override;
    nlohmann::json response() const override;
    const std::string& finish_reason() const override { return finish_reason_; }
    const std::string& text() const { return text_; }

private:
    void send(std::string text, std::vector<nlohmann::json>& chunks);
    nlohmann::json chunk(std::string text, nlohmann::json finish_reason, nlohmann::json logprobs) const;
    nlohmann::json logprobs_json(size_t from) const;  ///< entries from `from` on (null when not asked)
    nlohmann::json take_logprobs();                   ///< entries not yet sent

    const Tokenizer& tok_;
    CompletionResponseConfig cfg_;
    StreamingDetokenizer detok_;
    StopMatcher stop_;
    std::string text_;
    // Legacy logprobs, parallel arrays.
    nlohmann::json lp_tokens_ = nlohmann::json::array(), lp_values_ = nlohmann::json::array(),
                   lp_top_ = nlohmann::json::array(), lp_offset_ = nlohmann::json::array();
    size_t lp_sent_ = 0;
    int64_t raw_offset_ = 0;  ///< bytes of text produced (before stop cutting), for text_offset
    std::string finish_reason_;
    Usage usage_;
};

}  // namespace nitro::server
