#include "grammar/lit_trie.h"

#include <algorithm>
#include <numeric>

namespace nitro::grammar {

LitTrie::LitTrie(const std::vector<std::string>& strings, bool key_ranges) {
    // The strings in order (equal ones by index, so the first index is kept), duplicates dropped.
    std::vector<uint32_t> order(strings.size());
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return strings[a] < strings[b]; });
    order.erase(std::unique(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return strings[a] == strings[b]; }), order.end());
    n_strings_ = order.size();
    // Node k covers the sorted strings [lo[k], hi[k]) that share its first depth[k] bytes. Nodes
    // are made in breadth-first order, so processing them by index is the breadth-first walk and
    // each node's children come out consecutive.
    std::vector<uint32_t> lo{0}, hi{static_cast<uint32_t>(order.size())}, depth{0};
    nodes_.emplace_back();
    label_.push_back(0);
    for (size_t k = 0; k < nodes_.size(); ++k) {
        uint32_t i = lo[k];
        const uint32_t end = hi[k], d = depth[k];
        if (i < end && strings[order[i]].size() == d) nodes_[k].payload = static_cast<int32_t>(order[i++]);  // (sorts first)
        nodes_[k].child_begin = static_cast<uint32_t>(nodes_.size());
        while (i < end) {
            const char b = strings[order[i]][d];
            uint32_t j = i + 1;
            while (j < end && strings[order[j]][d] == b) ++j;
            nodes_.emplace_back();
            label_.push_back(static_cast<uint8_t>(b));
            lo.push_back(i);
            hi.push_back(j);
            depth.push_back(d + 1);
            i = j;
        }
        nodes_[k].child_end = static_cast<uint32_t>(nodes_.size());
    }
    if (key_ranges) {
        sub_begin_.resize(nodes_.size());
        sub_end_.resize(nodes_.size());
        for (size_t k = 0; k < nodes_.size(); ++k) {
            sub_begin_[k] = static_cast<uint32_t>(sub_payloads_.size());
            sub_payloads_.insert(sub_payloads_.end(), order.begin() + lo[k], order.begin() + hi[k]);
            std::sort(sub_payloads_.begin() + sub_begin_[k], sub_payloads_.end());
            sub_end_[k] = static_cast<uint32_t>(sub_payloads_.size());
        }
    }
    nodes_.shrink_to_fit();
    label_.shrink_to_fit();
}

int32_t LitTrie::child(uint32_t node, uint8_t b) const {
    const Node& n = nodes_[node];
    const auto first = label_.begin() + n.child_begin, last = label_.begin() + n.child_end;
    const auto it = std::lower_bound(first, last, b);
    return it != last && *it == b ? static_cast<int32_t>(it - label_.begin()) : -1;
}

uint32_t LitTrie::first_at_least(uint32_t node, uint32_t lo) const {
    const auto first = sub_payloads_.begin() + sub_begin_[node], last = sub_payloads_.begin() + sub_end_[node];
    return static_cast<uint32_t>(std::lower_bound(first, last, lo) - sub_payloads_.begin());
}

bool LitTrie::reaches(uint32_t node, uint32_t lo, uint32_t hi) const {
    const uint32_t i = first_at_least(node, lo);
    return i < sub_end_[node] && sub_payloads_[i] <= hi;
}

std::vector<uint8_t> LitTrie::first_bytes() const {
    std::vector<uint8_t> out;
    if (nodes_.empty()) return out;
    for (uint32_t c = nodes_[kRoot].child_begin; c < nodes_[kRoot].child_end; ++c) out.push_back(label_[c]);
    return out;
}

bool LitTrie::intersects(const LitTrie& other) const {
    // Both tries walked together along the bytes they share.
    std::vector<std::pair<uint32_t, uint32_t>> stack{{kRoot, kRoot}};
    while (!stack.empty()) {
        const auto [a, b] = stack.back();
        stack.pop_back();
        if (payload(a) >= 0 && other.payload(b) >= 0) return true;
        for (uint32_t c = nodes_[a].child_begin; c < nodes_[a].child_end; ++c)
            if (const int32_t d = other.child(b, label_[c]); d >= 0) stack.emplace_back(c, static_cast<uint32_t>(d));
    }
    return false;
}

size_t LitTrie::bytes() const {
    return nodes_.capacity() * sizeof(Node) + label_.capacity() + (sub_begin_.capacity() + sub_end_.capacity() + sub_payloads_.capacity()) * 4;
}

size_t LitTrie::build_bytes(const std::vector<std::string>& strings, bool key_ranges) {
    size_t chars = 0;
    for (const auto& s : strings) chars += s.size();
    const size_t nodes = chars + 1;  // at most one node per byte, and the root
    // Per node: the node and its label, the three build arrays, and (key tries) two range ends;
    // vectors grow by doubling, so up to twice that; the sort order; the subtree payloads.
    const size_t per_node = sizeof(Node) + 1 + 12 + (key_ranges ? 8 : 0);
    return 2 * nodes * per_node + 4 * strings.size() + (key_ranges ? 4 * (chars + strings.size()) : 0);
}

}  // namespace nitro::grammar
