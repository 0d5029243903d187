#include "grammar/grammar_limits.h"

#include <algorithm>
#include <bitset>
#include <queue>

namespace nitro::grammar {

namespace {

/// The nodes a node's value is made of (alternatives, property values, items, map values).
template <typename F>
void for_each_part(const Node& n, F f) {
    switch (n.kind) {
        case NodeKind::ANY_OF:
            for (uint32_t a : n.alts) f(a);
            break;
        case NodeKind::OBJECT:
            for (const Property& p : n.props) f(p.node);
            if (n.additional >= 0) f(static_cast<uint32_t>(n.additional));
            break;
        case NodeKind::ARRAY: f(n.items); break;
        default: break;
    }
}

/// Reverse edges: users[i] = the nodes with i as a part (once per use).
std::vector<std::vector<uint32_t>> users_of(const Grammar& g) {
    std::vector<std::vector<uint32_t>> users(g.nodes.size());
    for (uint32_t i = 0; i < g.nodes.size(); ++i) for_each_part(g.nodes[i], [&](uint32_t c) { users[c].push_back(i); });
    return users;
}

}  // namespace

void compute_min_depth(Grammar& g) {
    // Knuth's generalisation of Dijkstra to and/or graphs: a node's depth is final once the parts
    // it needs are (any alternative for ANY_OF; every required property for OBJECT; the items
    // of an ARRAY with minItems > 0), taken in increasing depth, so the last part to become final
    // is the deepest. O(E log N), also for recursive schemas.
    const size_t N = g.nodes.size();
    std::vector<std::vector<uint32_t>> needed_by(N);  // only the edges that count
    std::vector<uint32_t> waiting(N, 0);
    using Item = std::pair<uint32_t, uint32_t>;  // (depth, node)
    std::priority_queue<Item, std::vector<Item>, std::greater<>> ready;
    for (uint32_t i = 0; i < N; ++i) {
        Node& n = g.nodes[i];
        n.min_depth = kUnbounded;
        switch (n.kind) {
            case NodeKind::NOTHING: break;
            case NodeKind::STRING:
            case NodeKind::NUMBER:
            case NodeKind::INTEGER: ready.emplace(0, i); break;
            case NodeKind::LITERAL:
                if (g.tries[n.trie].size() > 0) ready.emplace(0, i);
                break;
            case NodeKind::ANY_OF:
                for (uint32_t a : n.alts) needed_by[a].push_back(i);
                break;
            case NodeKind::ARRAY:
                if (n.min_items == 0) ready.emplace(1, i);
                else waiting[i] = 1, needed_by[n.items].push_back(i);
                break;
            case NodeKind::OBJECT:
                for (const Property& p : n.props)
                    if (p.required) ++waiting[i], needed_by[p.node].push_back(i);
                if (waiting[i] == 0) ready.emplace(1, i);
                break;
        }
    }
    std::vector<bool> final(N, false);
    while (!ready.empty()) {
        const auto [d, i] = ready.top();
        ready.pop();
        if (final[i]) continue;
        final[i] = true;
        g.nodes[i].min_depth = d;
        for (uint32_t u : needed_by[i]) {
            if (final[u]) continue;
            if (g.nodes[u].kind == NodeKind::ANY_OF) ready.emplace(d, u);
            else if (--waiting[u] == 0) ready.emplace(d + 1, u);  // (d is the deepest part: taken last)
        }
    }
    for (Node& n : g.nodes) {
        n.deepest_value = 0;
        if (n.kind != NodeKind::OBJECT) continue;
        for (const Property& p : n.props) n.deepest_value = std::max(n.deepest_value, g.nodes[p.node].min_depth);
        if (n.additional >= 0) n.deepest_value = std::max(n.deepest_value, g.nodes[static_cast<size_t>(n.additional)].min_depth);
    }
}

namespace {

class AmbiguityBound {
public:
    AmbiguityBound(const Grammar& g, uint32_t cap) : g_(g), cap_(cap), val_(g.nodes.size(), 1), groups_(g.nodes.size()) {
        // An ANY_OF's groups: for each first byte, the alternatives that can take it (distinct
        // groups once; they are alive together).
        for (uint32_t i = 0; i < g.nodes.size(); ++i) {
            const Node& n = g.nodes[i];
            if (n.kind != NodeKind::ANY_OF) continue;
            std::vector<Bytes> first;
            for (uint32_t a : n.alts) first.push_back(first_bytes(g.nodes[a]));
            for (size_t b = 0; b < 256; ++b) {
                std::vector<uint32_t> group;
                for (size_t k = 0; k < n.alts.size(); ++k)
                    if (first[k][b]) group.push_back(n.alts[k]);
                if (!group.empty() && std::find(groups_[i].begin(), groups_[i].end(), group) == groups_[i].end())
                    groups_[i].push_back(std::move(group));
            }
        }
    }

    /// Raises every node's bound until none changes (each can rise at most cap + 1 times).
    void run() {
        const auto users = users_of(g_);
        std::vector<uint32_t> work;
        std::vector<bool> queued(g_.nodes.size(), true);
        for (uint32_t i = 0; i < g_.nodes.size(); ++i) work.push_back(i);
        while (!work.empty()) {
            const uint32_t i = work.back();
            work.pop_back();
            queued[i] = false;
            const uint32_t v = std::min(cap_ + 1, eval(i));
            if (v <= val_[i]) continue;
            val_[i] = v;
            for (uint32_t u : users[i])
                if (!queued[u]) queued[u] = true, work.push_back(u);
        }
    }

    uint32_t value(uint32_t i) const { return val_[i]; }

    /// The ANY_OF where the bound passes the cap, found from `root` down the parts over the cap.
    uint32_t culprit(uint32_t root) const {
        uint32_t found = kNoNode;
        std::vector<bool> seen(g_.nodes.size(), false);
        for (uint32_t i = root; i != kNoNode && !seen[i];) {
            seen[i] = true;
            if (g_.nodes[i].kind == NodeKind::ANY_OF) found = i;
            uint32_t next = kNoNode;
            for_each_part(g_.nodes[i], [&](uint32_t c) {
                if (next == kNoNode && val_[c] > cap_) next = c;
            });
            i = next;
        }
        return found;
    }

private:
    using Bytes = std::bitset<256>;

    Bytes first_bytes(const Node& n) const {
        Bytes b;
        switch (n.kind) {
            case NodeKind::OBJECT: b['{'] = true; break;
            case NodeKind::ARRAY: b['['] = true; break;
            case NodeKind::STRING: b['"'] = true; break;
            case NodeKind::NUMBER:
            case NodeKind::INTEGER:
                b['-'] = true;
                for (int c = '0'; c <= '9'; ++c) b[static_cast<size_t>(c)] = true;
                break;
            case NodeKind::LITERAL:
                for (uint8_t c : g_.tries[n.trie].first_bytes()) b[c] = true;
                break;
            default: break;
        }
        return b;
    }

    /// Parses alive inside one value of a non-ANY_OF node (an alternative's own share).
    uint32_t inner(uint32_t i) const {
        const Node& n = g_.nodes[i];
        uint32_t v = 1;
        if (n.kind == NodeKind::ARRAY && n.max_items > 0) v = std::max(v, val_[n.items]);
        if (n.kind == NodeKind::OBJECT) for_each_part(n, [&](uint32_t c) { v = std::max(v, val_[c]); });
        return v;
    }

    uint32_t eval(uint32_t i) const {
        const Node& n = g_.nodes[i];
        if (n.kind != NodeKind::ANY_OF) return inner(i);
        // Alternatives that can take the same first byte are alive together.
        uint32_t best = 1;
        for (const auto& group : groups_[i]) {
            best = std::max(best, group_bound(group));
            if (best > cap_) break;
        }
        return best;
    }

    uint32_t sum_inner(const std::vector<uint32_t>& alts) const {
        uint64_t s = 0;
        for (uint32_t a : alts) s += inner(a);
        return static_cast<uint32_t>(std::min<uint64_t>(s, cap_ + 1));
    }

    uint32_t group_bound(const std::vector<uint32_t>& group) const {
        const bool objects = std::all_of(group.begin(), group.end(), [&](uint32_t a) { return g_.nodes[a].kind == NodeKind::OBJECT; });
        if (group.size() == 1 || !objects) return sum_inner(group);
        // Objects whose first property is required: its key, then its value, tell them apart.
        const bool keyed = std::all_of(group.begin(), group.end(), [&](uint32_t a) {
            const Node& n = g_.nodes[a];
            return !n.props.empty() && n.props[0].required;
        });
        if (!keyed) return sum_inner(group);
        uint64_t bound = group.size();  // while '{' and the first key are read
        std::vector<bool> done(group.size(), false);
        for (size_t i = 0; i < group.size(); ++i) {
            if (done[i]) continue;
            std::vector<uint32_t> cls;  // the alternatives whose first key is this one
            for (size_t j = i; j < group.size(); ++j)
                if (!done[j] && g_.nodes[group[j]].props[0].name == g_.nodes[group[i]].props[0].name) cls.push_back(group[j]), done[j] = true;
            uint64_t inside = 0, after_sum = 0, after_max = 0;
            for (uint32_t a : cls) {
                const Node& n = g_.nodes[a];
                inside += val_[n.props[0].node];
                uint32_t rest = 1;
                for (size_t p = 1; p < n.props.size(); ++p) rest = std::max(rest, val_[n.props[p].node]);
                after_sum += rest;
                after_max = std::max<uint64_t>(after_max, rest);
            }
            bound = std::max({bound, inside, disjoint_literals(cls) ? after_max : after_sum});
        }
        return static_cast<uint32_t>(std::min<uint64_t>(bound, cap_ + 1));
    }

    /// True if the first property values of `cls` are literals no two of which share a text.
    bool disjoint_literals(const std::vector<uint32_t>& cls) const {
        if (cls.size() == 1) return true;
        std::vector<const LitTrie*> tries;
        for (uint32_t a : cls) {
            const Node& v = g_.nodes[g_.nodes[a].props[0].node];
            if (v.kind != NodeKind::LITERAL) return false;
            tries.push_back(&g_.tries[v.trie]);
        }
        for (size_t i = 0; i < tries.size(); ++i)
            for (size_t j = i + 1; j < tries.size(); ++j)
                if (tries[i]->intersects(*tries[j])) return false;
        return true;
    }

    const Grammar& g_;
    const uint32_t cap_;
    std::vector<uint32_t> val_;
    std::vector<std::vector<std::vector<uint32_t>>> groups_;
};

}  // namespace

Ambiguity ambiguity_bound(const Grammar& g, uint32_t root, uint32_t cap) {
    AmbiguityBound b(g, cap);
    b.run();
    Ambiguity out;
    out.parses = b.value(root);
    if (out.parses > cap) out.node = b.culprit(root);
    return out;
}

}  // namespace nitro::grammar
