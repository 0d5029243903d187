// An indexed binary min-heap of experts ordered by (key, tick): the cached experts of one layer,
// so that a policy finds its victim in O(log C) instead of scanning every slot. Sized once for
// n_expert entries; no allocation after construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace nitro {

/// Same alias as in expert_cache_policy.h.
using ExpertId = uint16_t;

class ExpertHeap {
public:
    explicit ExpertHeap(int n_expert) : pos_(n_expert, -1) { nodes_.reserve(n_expert); }

    bool contains(ExpertId e) const { return pos_[e] >= 0; }
    bool empty() const { return nodes_.empty(); }
    size_t size() const { return nodes_.size(); }
    /// Expert with the smallest (key, tick); the heap must not be empty.
    ExpertId top() const { return nodes_[0].e; }
    double top_key() const { return nodes_[0].key; }
    uint64_t top_tick() const { return nodes_[0].tick; }

    /// Inserts `e` or changes its key.
    void set(ExpertId e, double key, uint64_t tick) {
        int i = pos_[e];
        if (i < 0) {
            i = static_cast<int>(nodes_.size());
            nodes_.push_back({key, tick, e});
            pos_[e] = i;
            up(i);
            return;
        }
        const Node old = nodes_[i];
        nodes_[i].key = key;
        nodes_[i].tick = tick;
        if (less(nodes_[i], old)) up(i);
        else down(i);
    }
    /// Removes `e` if present.
    void erase(ExpertId e) {
        const int i = pos_[e];
        if (i < 0) return;
        pos_[e] = -1;
        const Node last = nodes_.back();
        nodes_.pop_back();
        if (i == static_cast<int>(nodes_.size())) return;
        nodes_[i] = last;
        pos_[last.e] = i;
        up(i);
        down(pos_[last.e]);
    }
    /// Removes and returns the top.
    ExpertId pop() {
        const ExpertId e = nodes_[0].e;
        erase(e);
        return e;
    }
    /// Re-keys every entry with `key_of(e)` and restores the heap order in O(n).
    template <typename F>
    void rekey_all(F key_of) {
        for (Node& n : nodes_) n.key = key_of(n.e);
        for (int i = static_cast<int>(nodes_.size()) / 2; i-- > 0;) down(i);
    }

private:
    struct Node {
        double key;
        uint64_t tick;
        ExpertId e;
    };
    static bool less(const Node& a, const Node& b) { return a.key < b.key || (a.key == b.key && a.tick < b.tick); }
    void place(int i, const Node& n) {
        nodes_[i] = n;
        pos_[n.e] = i;
    }
    void up(int i) {
        const Node n = nodes_[i];
        while (i > 0) {
            const int p = (i - 1) / 2;
            if (!less(n, nodes_[p])) break;
            place(i, nodes_[p]);
            i = p;
        }
        place(i, n);
    }
    void down(int i) {
        const int sz = static_cast<int>(nodes_.size());
        const Node n = nodes_[i];
        for (;;) {
            int c = 2 * i + 1;
            if (c >= sz) break;
            if (c + 1 < sz && less(nodes_[c + 1], nodes_[c])) ++c;
            if (!less(nodes_[c], n)) break;
            place(i, nodes_[c]);
            i = c;
        }
        place(i, n);
    }
    std::vector<Node> nodes_;
    std::vector<int32_t> pos_;  // [n_expert] index in nodes_ or -1
};

}  // namespace nitro
