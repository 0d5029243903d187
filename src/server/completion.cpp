#include "server/completion.h"

#include "tokenizer/bpe.h"

#include <fmt/format.h>

namespace nitro::server {

using json = nlohmann::json;

std::vector<int32_t> completion_prompt_ids(const CompletionRequest& req, const Tokenizer& tok) {
    if (!req.prompt_ids.empty()) {
        for (size_t i = 0; i < req.prompt_ids.size(); ++i)
            if (req.prompt_ids[i] >= tok.vocab().size())
                bad_request(fmt::format("prompt[{}]", i),
                            fmt::format("token id {} is out of range (the vocabulary has {} tokens)", req.prompt_ids[i], tok.vocab().size()),
                            "invalid_value");
        return req.prompt_ids;
    }
    EncodeOptions enc;
    enc.parse_special = true;
    enc.add_special = true;
    std::vector<int32_t> ids = tok.encode(req.prompt, enc);
    if (ids.empty()) bad_request("prompt", "'prompt' must not be empty", "invalid_value");
    return ids;
}

CompletionResponseBuilder::CompletionResponseBuilder(const Tokenizer& tok, CompletionResponseConfig cfg)
    : tok_(tok), cfg_(std::move(cfg)), detok_(tok), stop_(cfg_.stop) {}

json CompletionResponseBuilder::chunk(std::string text, json finish_reason, json logprobs) const {
    json c = {{"id", cfg_.id},
              {"object", "text_completion"},
              {"created", cfg_.created},
              {"model", cfg_.model},
              {"system_fingerprint", "nitro"},
              {"choices", json::array({{{"index", 0}, {"text", std::move(text)}, {"logprobs", std::move(logprobs)},
                                        {"finish_reason", std::move(finish_reason)}}})}};
    if (cfg_.include_usage) c["usage"] = nullptr;
    return c;
}

json CompletionResponseBuilder::logprobs_json(size_t from) const {
    if (!cfg_.logprobs) return nullptr;
    json lp = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}, {"text_offset", json::array()}};
    for (size_t i = from; i < lp_tokens_.size(); ++i) {
        lp["tokens"].push_back(lp_tokens_[i]);
        lp["token_logprobs"].push_back(lp_values_[i]);
        lp["top_logprobs"].push_back(lp_top_[i]);
        lp["text_offset"].push_back(lp_offset_[i]);
    }
    return lp;
}

json CompletionResponseBuilder::take_logprobs() {
    json lp = logprobs_json(lp_sent_);
    lp_sent_ = lp_tokens_.size();
    return lp;
}

void CompletionResponseBuilder::send(std::string text, std::vector<json>& chunks) {
    if (text.empty()) return;
    text_ += text;
    if (cfg_.stream) {
        json lp = take_logprobs();
        chunks.push_back(chunk(std::move(text), nullptr, std::move(lp)));
    }
}

void CompletionResponseBuilder::begin(std::vector<json>& chunks) {
    if (!cfg_.echo_text.empty()) send(cfg_.echo_text, chunks);
}

bool CompletionResponseBuilder::on_token(const TokenStep& step, std::vector<json>& chunks) {
    if (step.end_of_generation) return false;  // its text is not part of the output
    if (cfg_.logprobs) {
        json top = json::object();
        for (const auto& [id, lp] : step.top) top[token_text(tok_, id)] = lp;
        lp_tokens_.push_back(token_text(tok_, step.id));
        lp_values_.push_back(step.logprob);
        lp_top_.push_back(std::move(top));
        lp_offset_.push_back(static_cast<int64_t>(cfg_.echo_text.size()) + raw_offset_);
    }
    std::string piece = detok_.push(step.id);
    raw_offset_ += static_cast<int64_t>(piece.size());
    send(stop_.push(piece), chunks);
    return !stop_.matched();
}

void CompletionResponseBuilder::finish(FinishCause cause, const Usage& usage, std::vector<json>& chunks) {
    usage_ = usage;
    if (!stop_.matched()) {
        send(stop_.push(detok_.flush()), chunks);
        send(stop_.flush(), chunks);
    }
    finish_reason_ = cause == FinishCause::LENGTH && !stop_.matched() ? "length" : "stop";
    if (!cfg_.stream) return;
    chunks.push_back(chunk("", finish_reason_, take_logprobs()));
    if (cfg_.include_usage) {
        json u = chunk("", nullptr, nullptr);
        u["choices"] = json::array();
        u["usage"] = usage_.to_json();
        chunks.push_back(std::move(u));
    }
}

json CompletionResponseBuilder::response() const {
    json r = chunk(text_, finish_reason_, logprobs_json(0));
    r["usage"] = usage_.to_json();
    return r;
}

}  // namespace nitro::server
