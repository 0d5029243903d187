#include "grammar/grammar.h"

#include "grammar/grammar_budget.h"

#include <algorithm>

namespace nitro::grammar {

Grammar::Grammar(std::unique_ptr<MemoryLease> lease) : lease_(std::move(lease)) {
    // The any-value graph (kAnyValue .. kJsonWords), in that order.
    Node any;
    any.kind = NodeKind::ANY_OF;
    any.alts = {kAnyObject, kAnyArray, kAnyString, kAnyNumber, kJsonWords};
    add_node(std::move(any));
    Node obj;
    obj.kind = NodeKind::OBJECT;
    obj.additional = static_cast<int32_t>(kAnyValue);
    obj.next_required = {0};
    obj.min_depth = 1;
    add_node(std::move(obj));
    Node arr;
    arr.kind = NodeKind::ARRAY;
    arr.items = kAnyValue;
    arr.min_depth = 1;
    add_node(std::move(arr));
    Node str;
    str.kind = NodeKind::STRING;
    add_node(std::move(str));
    Node num;
    num.kind = NodeKind::NUMBER;
    add_node(std::move(num));
    Node words;
    words.kind = NodeKind::LITERAL;
    words.trie = add_trie({"true", "false", "null"});
    add_node(std::move(words));
}

Grammar::~Grammar() {
    // Free everything before the lease goes, so its trim finds the memory free.
    nodes = {};
    tries = {};
    program = {};
    lease_.reset();
}

void Grammar::charge(size_t bytes) {
    if (lease_) lease_->charge(bytes);
}

size_t Grammar::charged_bytes() const { return lease_ ? lease_->bytes() : 0; }

uint32_t Grammar::add_node(Node n) {
    // The node, its lists and names (the node array grows by doubling: counted twice).
    size_t bytes = 2 * sizeof(Node) + (n.alts.capacity() + n.next_required.capacity()) * sizeof(uint32_t) +
                   n.props.capacity() * sizeof(Property);
    for (const Property& p : n.props) bytes += p.name.capacity() > 15 ? p.name.capacity() + 1 : 0;
    charge(bytes);
    nodes.push_back(std::move(n));
    return static_cast<uint32_t>(nodes.size() - 1);
}

uint32_t Grammar::add_trie(const std::vector<std::string>& strings, bool key_ranges) {
    // The peak of the build first, then what the trie keeps.
    const size_t peak = LitTrie::build_bytes(strings, key_ranges) + 2 * sizeof(LitTrie);
    charge(peak);
    tries.emplace_back(strings, key_ranges);
    if (lease_) lease_->release(peak - std::min(peak, tries.back().bytes() + 2 * sizeof(LitTrie)));
    return static_cast<uint32_t>(tries.size() - 1);
}

uint32_t Grammar::add_step(GateStep s) {
    program.push_back(std::move(s));
    return static_cast<uint32_t>(program.size() - 1);
}

std::vector<int32_t> Grammar::specials() const {
    std::vector<int32_t> out;
    for (const GateStep& s : program)
        if (s.op == GateOp::SPECIAL || s.op == GateOp::FREE_UNTIL_SPECIAL || s.op == GateOp::END_OF_GEN)
            out.insert(out.end(), s.tokens.begin(), s.tokens.end());
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

std::vector<std::array<uint8_t, 256>> kmp_table(const std::string& t) {
    const size_t n = t.size();
    std::vector<std::array<uint8_t, 256>> d(n);
    // Failure function, then the DFA: d[k][b] = matched length after reading b with k matched.
    std::vector<size_t> fail(n + 1, 0);
    for (size_t i = 1, k = 0; i < n; ++i) {
        while (k > 0 && t[i] != t[k]) k = fail[k];
        if (t[i] == t[k]) ++k;
        fail[i + 1] = k;
    }
    for (size_t k = 0; k < n; ++k)
        for (int b = 0; b < 256; ++b) {
            size_t j = k;
            while (j > 0 && static_cast<uint8_t>(t[j]) != b) j = fail[j];
            if (static_cast<uint8_t>(t[j]) == b) ++j;
            d[k][static_cast<size_t>(b)] = static_cast<uint8_t>(j);
        }
    return d;
}

}  // namespace nitro::grammar
