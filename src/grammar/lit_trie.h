// A byte trie over a small set of literal strings (enum values, property keys, fixed markup such
// as "analysis"/"final"), each string carrying a payload (its index). The constrained-decoding
// automaton walks it one byte at a time; a key trie also knows which payloads lie in each
// subtree, so a walk restricted to a range of payloads (the properties an object may still take)
// can stop as soon as none is reachable.
//
// Built breadth-first from the sorted strings straight into flat arrays (a node's children are
// consecutive nodes), so building a trie of a large enum takes little more memory than the trie
// itself (issue 50: per-node vectors made a 478 KB enum cost tens of MB per request).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nitro::grammar {

class LitTrie {
public:
    /// Builds the trie of `strings`; string i gets payload i. Duplicates keep the first index.
    /// `key_ranges`: also keep each subtree's payloads, for reaches() / reaches_if().
    explicit LitTrie(const std::vector<std::string>& strings = {}, bool key_ranges = false);

    static constexpr uint32_t kRoot = 0;
    /// The child of `node` by byte `b`, or -1.
    int32_t child(uint32_t node, uint8_t b) const;
    /// The payload of the string ending at `node`, or -1.
    int32_t payload(uint32_t node) const { return nodes_[node].payload; }
    bool has_children(uint32_t node) const { return nodes_[node].child_begin != nodes_[node].child_end; }
    /// True if some string in the subtree of `node` (the node itself included) has a payload in
    /// [lo, hi]. Needs key_ranges.
    bool reaches(uint32_t node, uint32_t lo, uint32_t hi) const;
    /// As reaches(), counting only payloads for which `pred(payload)` holds.
    template <typename Pred>
    bool reaches_if(uint32_t node, uint32_t lo, uint32_t hi, Pred pred) const {
        for (uint32_t i = first_at_least(node, lo); i < sub_end_[node] && sub_payloads_[i] <= hi; ++i)
            if (pred(sub_payloads_[i])) return true;
        return false;
    }
    /// Number of strings.
    size_t size() const { return n_strings_; }
    /// The bytes its strings start with.
    std::vector<uint8_t> first_bytes() const;
    /// True if some string is in both tries.
    bool intersects(const LitTrie& other) const;
    /// Bytes the trie holds.
    size_t bytes() const;
    /// An upper bound of the bytes building a trie of `strings` takes at its peak.
    static size_t build_bytes(const std::vector<std::string>& strings, bool key_ranges);

private:
    uint32_t first_at_least(uint32_t node, uint32_t lo) const;

    struct Node {
        int32_t payload = -1;
        uint32_t child_begin = 0, child_end = 0;  ///< children: nodes [child_begin, child_end), by byte
    };
    std::vector<Node> nodes_;
    std::vector<uint8_t> label_;  ///< [node] the byte that leads to it
    // key_ranges: node n's payloads are sub_payloads_[sub_begin_[n], sub_end_[n]), ascending.
    std::vector<uint32_t> sub_begin_, sub_end_, sub_payloads_;
    size_t n_strings_ = 0;
};

}  // namespace nitro::grammar
