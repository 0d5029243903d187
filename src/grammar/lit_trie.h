// A byte trie over a small set of literal strings (enum values, property keys, fixed markup such
// as "analysis"/"final"), each string carrying a payload (its index). The constrained-decoding
// automaton walks it one byte at a time; a node also knows which payloads lie in its subtree, so
// a walk restricted to a range of payloads (the properties an object may still take) can stop as
// soon as none is reachable.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nitro::grammar {

class LitTrie {
public:
    /// Builds the trie of `strings`; string i gets payload i. Duplicates keep the first index.
    explicit LitTrie(const std::vector<std::string>& strings = {});

    static constexpr uint32_t kRoot = 0;
    /// The child of `node` by byte `b`, or -1.
    int32_t child(uint32_t node, uint8_t b) const;
    /// The payload of the string ending at `node`, or -1.
    int32_t payload(uint32_t node) const { return nodes_[node].payload; }
    bool has_children(uint32_t node) const { return nodes_[node].child_begin != nodes_[node].child_end; }
    /// True if some string in the subtree of `node` (the node itself included) has a payload in [lo, hi].
    bool reaches(uint32_t node, uint32_t lo, uint32_t hi) const;
    /// Number of strings.
    size_t size() const { return n_strings_; }

private:
    struct Node {
        int32_t payload = -1;
        uint32_t child_begin = 0, child_end = 0;  ///< edges_[child_begin, child_end), sorted by byte
        uint32_t sub_begin = 0, sub_end = 0;      ///< sub_payloads_[sub_begin, sub_end), sorted
    };
    struct Edge {
        uint8_t byte;
        uint32_t node;
    };
    std::vector<Node> nodes_;
    std::vector<Edge> edges_;
    std::vector<uint32_t> sub_payloads_;
    size_t n_strings_ = 0;
};

}  // namespace nitro::grammar
