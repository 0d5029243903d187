#include "grammar/vocab_index.h"

#include "grammar/grammar.h"
#include "grammar/lexers.h"

#include <algorithm>
#include <numeric>

namespace nitro::grammar {

VocabIndex::VocabIndex(const Vocab& vocab) : n_vocab_(vocab.size()) {
    bytes_off_.reserve(static_cast<size_t>(n_vocab_) + 1);
    bytes_off_.push_back(0);
    std::vector<int32_t> ids;
    text_mask_.assign(n_words(), 0);
    for (int32_t id = 0; id < n_vocab_; ++id) {
        const std::string_view b = vocab.bytes(id);
        bytes_arena_ += b;
        bytes_off_.push_back(static_cast<uint32_t>(bytes_arena_.size()));
        const TokenType t = vocab.type(id);
        if (b.empty() || t == TokenType::CONTROL || t == TokenType::UNUSED || t == TokenType::UNKNOWN) continue;
        ids.push_back(id);
        set_bit(text_mask_, id);
    }
    std::sort(ids.begin(), ids.end(), [&](int32_t x, int32_t y) { return bytes(x) < bytes(y) || (bytes(x) == bytes(y) && x < y); });
    // Preorder trie from the sorted strings: keep the path of open nodes; a string shares its
    // longest common prefix with the previous one, closes the nodes below it and opens the rest.
    std::vector<uint32_t> path;  // node index per depth - 1
    std::string_view prev;
    auto close_to = [&](size_t depth) {
        while (path.size() > depth) {
            trie_[path.back()].end = static_cast<uint32_t>(trie_.size());
            path.pop_back();
        }
    };
    for (int32_t id : ids) {
        const std::string_view s = bytes(id);
        size_t lcp = 0;
        while (lcp < s.size() && lcp < prev.size() && lcp < path.size() && s[lcp] == prev[lcp]) ++lcp;
        close_to(lcp);
        for (size_t d = lcp; d < s.size(); ++d) {
            TrieNode n{};
            n.byte = static_cast<uint8_t>(s[d]);
            n.depth = static_cast<uint16_t>(std::min<size_t>(d + 1, 65535));
            n.tok_begin = n.tok_end = 0;
            path.push_back(static_cast<uint32_t>(trie_.size()));
            trie_.push_back(n);
        }
        max_depth_ = std::max<uint16_t>(max_depth_, static_cast<uint16_t>(std::min<size_t>(s.size(), 65535)));
        TrieNode& last = trie_[path.back()];
        if (last.tok_begin == last.tok_end) last.tok_begin = last.tok_end = static_cast<uint32_t>(tokens_.size());
        tokens_.push_back(id);
        last.tok_end = static_cast<uint32_t>(tokens_.size());
        prev = s;
    }
    close_to(0);
}

std::string_view VocabIndex::bytes(int32_t id) const {
    const size_t i = static_cast<size_t>(id);
    return std::string_view(bytes_arena_).substr(bytes_off_[i], bytes_off_[i + 1] - bytes_off_[i]);
}

const VocabIndex::LoopTable& VocabIndex::string_loop(uint8_t state) const {
    std::lock_guard<std::mutex> lk(mu_);
    auto& slot = string_loops_[state];
    if (slot) return *slot;
    auto t = std::make_unique<LoopTable>();
    t->stay.assign(n_words(), 0);
    t->chars.assign(static_cast<size_t>(n_vocab_), 0);
    for (int32_t id : tokens_) {
        uint8_t s = state;
        unsigned chars = 0;
        bool dead = false, left = false;
        for (unsigned char b : bytes(id)) {
            const StrStep st = str_step(s, b);
            if (st.event == STR_DEAD) {
                dead = true;
                break;
            }
            if (st.event == STR_EXIT) {
                left = true;
                break;
            }
            chars += str_begins_char(st.event);
            s = st.state;
        }
        if (left) t->leave.push_back(id);
        else if (!dead) {
            set_bit(t->stay, id);
            t->chars[static_cast<size_t>(id)] = static_cast<uint8_t>(std::min(chars, 255u));
        }
    }
    t->within.assign(kCharBuckets, TokenBits(n_words(), 0));
    for (int32_t id : tokens_) {
        if (!test_bit(t->stay, id)) continue;
        const uint32_t c = t->chars[static_cast<size_t>(id)];
        t->max_chars = std::max(t->max_chars, c);
        if (c >= kCharBuckets) t->long_stay.push_back(id);
        else
            for (size_t k = c; k < kCharBuckets; ++k) set_bit(t->within[k], id);
    }
    slot = std::move(t);
    return *slot;
}

const VocabIndex::LoopTable& VocabIndex::text_loop(const std::string& terminator, uint8_t matched) const {
    std::lock_guard<std::mutex> lk(mu_);
    auto& slot = text_loops_[{terminator, matched}];
    if (slot) return *slot;
    const auto kmp = kmp_table(terminator);
    auto t = std::make_unique<LoopTable>();
    t->stay.assign(n_words(), 0);
    for (int32_t id : tokens_) {
        size_t k = matched;
        bool left = false;
        for (unsigned char b : bytes(id)) {
            k = kmp[k][b];
            if (k == terminator.size()) {
                left = true;
                break;
            }
        }
        if (left) t->leave.push_back(id);
        else set_bit(t->stay, id);
    }
    slot = std::move(t);
    return *slot;
}

}  // namespace nitro::grammar
