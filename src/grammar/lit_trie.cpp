#include "grammar/lit_trie.h"

#include <algorithm>

namespace nitro::grammar {

LitTrie::LitTrie(const std::vector<std::string>& strings) {
    // Built iteratively (strings may be long): a node list with unsorted children, then flattened.
    struct Tmp {
        int32_t payload = -1;
        std::vector<Edge> kids;
        std::vector<uint32_t> subs;
    };
    std::vector<Tmp> tmp(1);
    auto find_kid = [&](uint32_t n, uint8_t b) -> int32_t {
        for (const Edge& e : tmp[n].kids)
            if (e.byte == b) return static_cast<int32_t>(e.node);
        return -1;
    };
    for (size_t i = 0; i < strings.size(); ++i) {
        // Skip a duplicate: it would add its index to the subtree lists without being a payload.
        uint32_t n = 0;
        bool present = true;
        for (unsigned char c : strings[i]) {
            const int32_t k = find_kid(n, c);
            if (k < 0) {
                present = false;
                break;
            }
            n = static_cast<uint32_t>(k);
        }
        if (present && tmp[n].payload >= 0) continue;
        ++n_strings_;
        n = 0;
        tmp[0].subs.push_back(static_cast<uint32_t>(i));
        for (unsigned char c : strings[i]) {
            int32_t k = find_kid(n, c);
            if (k < 0) {
                k = static_cast<int32_t>(tmp.size());
                tmp[n].kids.push_back({c, static_cast<uint32_t>(k)});
                tmp.emplace_back();
            }
            n = static_cast<uint32_t>(k);
            tmp[n].subs.push_back(static_cast<uint32_t>(i));
        }
        tmp[n].payload = static_cast<int32_t>(i);
    }
    nodes_.resize(tmp.size());
    for (size_t n = 0; n < tmp.size(); ++n) {
        Tmp& t = tmp[n];
        std::sort(t.kids.begin(), t.kids.end(), [](const Edge& a, const Edge& b) { return a.byte < b.byte; });
        Node& out = nodes_[n];
        out.payload = t.payload;
        out.child_begin = static_cast<uint32_t>(edges_.size());
        edges_.insert(edges_.end(), t.kids.begin(), t.kids.end());
        out.child_end = static_cast<uint32_t>(edges_.size());
        out.sub_begin = static_cast<uint32_t>(sub_payloads_.size());
        sub_payloads_.insert(sub_payloads_.end(), t.subs.begin(), t.subs.end());  // ascending: inserted in index order
        out.sub_end = static_cast<uint32_t>(sub_payloads_.size());
    }
}

int32_t LitTrie::child(uint32_t node, uint8_t b) const {
    const Node& n = nodes_[node];
    for (uint32_t e = n.child_begin; e < n.child_end; ++e) {
        if (edges_[e].byte == b) return static_cast<int32_t>(edges_[e].node);
        if (edges_[e].byte > b) break;
    }
    return -1;
}

bool LitTrie::reaches(uint32_t node, uint32_t lo, uint32_t hi) const {
    const Node& n = nodes_[node];
    auto first = sub_payloads_.begin() + n.sub_begin, last = sub_payloads_.begin() + n.sub_end;
    auto it = std::lower_bound(first, last, lo);
    return it != last && *it <= hi;
}

}  // namespace nitro::grammar
