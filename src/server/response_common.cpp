#include "server/response_common.h"

#include "tokenizer/bpe.h"
#include "tokenizer/detokenize.h"

#include <algorithm>
#include <random>

namespace nitro::server {

std::string StopMatcher::push(std::string_view text) {
    if (matched_) return "";
    held_.append(text);
    if (stops_.empty()) return std::exchange(held_, std::string());
    // The earliest complete stop sequence wins.
    size_t cut = std::string::npos;
    for (const auto& s : stops_)
        if (size_t p = held_.find(s); p != std::string::npos) cut = std::min(cut, p);
    if (cut != std::string::npos) {
        matched_ = true;
        std::string out = held_.substr(0, cut);
        held_.clear();
        return out;
    }
    // Hold back the longest suffix that is a proper prefix of a stop sequence.
    size_t keep = 0;
    for (const auto& s : stops_)
        for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k)
            if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
                keep = k;
                break;
            }
    std::string out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
}

std::string StopMatcher::flush() {
    if (matched_) return "";
    return std::exchange(held_, std::string());
}

nlohmann::json Usage::to_json() const {
    return {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

std::string token_text(const Tokenizer& tok, int32_t id) {
    std::string bytes;
    const int32_t one[1] = {id};
    tok.decode_bytes(one, bytes);
    Utf8Stream u;
    std::string out = u.push(bytes);
    return out + u.flush();
}

nlohmann::json token_bytes(const Tokenizer& tok, int32_t id) {
    std::string bytes;
    const int32_t one[1] = {id};
    tok.decode_bytes(one, bytes);
    nlohmann::json a = nlohmann::json::array();
    for (unsigned char c : bytes) a.push_back(static_cast<int>(c));
    return a;
}

std::string random_id(const std::string& prefix) {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    static const char alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    std::string id = prefix;
    for (int i = 0; i < 24; ++i) id += alnum[rng() % (sizeof(alnum) - 1)];
    return id;
}

}  // namespace nitro::server
