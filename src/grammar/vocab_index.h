// What constrained decoding needs to know about a vocabulary, built once per model and shared by
// every request (read-only after construction, except the loop tables, which are built on first
// use under a lock):
//
//  - the byte trie of the non-control tokens, in preorder: a walk visits a node right after its
//    parent and can skip a whole subtree when the automaton rejects its first byte;
//  - loop tables: for a "free" lexical loop (the body of a JSON string in a given lexer state, or
//    free text until a terminator such as "</think>" with k bytes of it matched), which tokens
//    stay inside the loop (a bitset, with the characters each begins) and which leave it (a list;
//    these are walked byte by byte). Inside a string nearly every token stays, so the mask there
//    costs a bitset copy plus the few hundred tokens that contain a quote, instead of a walk of
//    the whole trie. This is the idea behind xgrammar's split into context-independent tokens
//    (precomputed) and context-dependent ones (checked at run time), applied to the two loops
//    that dominate JSON output.
#pragma once

#include "tokenizer/vocab.h"

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace nitro::grammar {

/// A bitset over token ids: bit i of word i/64.
using TokenBits = std::vector<uint64_t>;

inline bool test_bit(const TokenBits& m, int32_t id) { return (m[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1; }
inline void set_bit(TokenBits& m, int32_t id) { m[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63); }

class VocabIndex {
public:
    /// Indexes `vocab` (copies what it needs; `vocab` may go away afterwards).
    explicit VocabIndex(const Vocab& vocab);

    struct TrieNode {
        uint8_t byte;
        uint16_t depth;        ///< 1 for a first byte
        uint32_t end;          ///< index just past this node's subtree
        uint32_t tok_begin, tok_end;  ///< tokens_[tok_begin, tok_end) end at this node
    };

    int32_t n_vocab() const { return n_vocab_; }
    size_t n_words() const { return (static_cast<size_t>(n_vocab_) + 63) / 64; }
    const std::vector<TrieNode>& trie() const { return trie_; }
    const std::vector<int32_t>& trie_tokens() const { return tokens_; }
    uint16_t max_depth() const { return max_depth_; }
    /// The tokens in the trie (every token that is not CONTROL, UNUSED or UNKNOWN and has bytes).
    const TokenBits& text_tokens() const { return text_mask_; }
    bool is_text_token(int32_t id) const { return test_bit(text_mask_, id); }
    std::string_view bytes(int32_t id) const;

    /// Staying tokens are bucketed by how many characters they begin, for strings with maxLength.
    static constexpr size_t kCharBuckets = 16;
    struct LoopTable {
        TokenBits stay;                ///< tokens all of whose bytes stay inside the loop
        std::vector<uint8_t> chars;    ///< [n_vocab] characters each staying token begins (255 = 255 or more)
        std::vector<int32_t> leave;    ///< tokens whose bytes end the loop (then something else must follow)
        // String loops only:
        std::vector<TokenBits> within;  ///< [kCharBuckets] staying tokens that begin at most k characters
        std::vector<int32_t> long_stay; ///< staying tokens that begin kCharBuckets or more characters
        uint32_t max_chars = 0;         ///< the most characters a staying token begins (255: 255 or more)
    };
    /// The loop of a JSON string body in string-lexer state `state` (lexers.h StrState).
    const LoopTable& string_loop(uint8_t state) const;
    /// The loop of free text until `terminator`, with `matched` bytes of it matched.
    const LoopTable& text_loop(const std::string& terminator, uint8_t matched) const;

private:
    int32_t n_vocab_ = 0;
    std::string bytes_arena_;
    std::vector<uint32_t> bytes_off_;  // [n_vocab + 1]
    std::vector<TrieNode> trie_;
    std::vector<int32_t> tokens_;
    uint16_t max_depth_ = 0;
    TokenBits text_mask_;

    mutable std::mutex mu_;
    mutable std::array<std::unique_ptr<LoopTable>, 16> string_loops_;
    mutable std::map<std::pair<std::string, uint8_t>, std::unique_ptr<LoopTable>> text_loops_;
};

}  // namespace nitro::grammar
