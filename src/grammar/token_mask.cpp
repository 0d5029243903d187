#include "grammar/token_mask.h"


namespace nitro::grammar {

namespace {

void or_bits(TokenBits& dst, const TokenBits& src) {
    for (size_t i = 0; i < dst.size(); ++i) dst[i] |= src[i];
}

/// True if the parse `c` accepts all of `bytes`.
bool walk(const Automaton& a, const Config& c, std::string_view bytes, std::vector<Config>& cur, std::vector<Config>& next) {
    Arena& ar = a.arena();
    const size_t mark = ar.size();
    cur.assign(1, c);
    for (unsigned char b : bytes) {
        next.clear();
        for (const Config& x : cur) a.step(x, b, ar, next);
        cur.swap(next);
        if (cur.empty()) break;
    }
    ar.resize(mark);
    return !cur.empty();
}

}  // namespace

void compute_token_mask(const Automaton& a, const VocabIndex& v, TokenBits& mask, MaskStats* stats) {
    MaskStats local;
    MaskStats& st = stats ? *stats : local;
    const Grammar& g = a.grammar();
    mask.assign(v.n_words(), 0);
    Arena& ar = a.arena();
    const size_t mark0 = ar.size();
    std::vector<Config> roots, cur, next;
    auto walk_leavers = [&](const Config& c, const std::vector<int32_t>& leave) {
        for (int32_t id : leave) {
            if (test_bit(mask, id)) continue;
            ++st.walked_tokens;
            if (walk(a, c, v.bytes(id), cur, next)) set_bit(mask, id);
        }
    };
    for (const Config& c : a.configs()) {
        const Frame& f = c.top;
        if (f.kind == F_STR) {
            const Node& n = g.nodes[f.node];
            const VocabIndex::LoopTable& t = v.string_loop(f.lex);
            ++st.bulk_loops;
            const uint32_t room = n.max_length - f.a;  // characters the string may still begin
            if (n.max_length == kUnbounded || (room >= t.max_chars && t.max_chars < 255)) {
                or_bits(mask, t.stay);
            } else {
                // Tokens of fewer than kCharBuckets characters by bucket; the long ones one by one
                // (a saturated count, 255 or more, is walked).
                or_bits(mask, t.within[std::min<size_t>(room, VocabIndex::kCharBuckets - 1)]);
                if (room >= VocabIndex::kCharBuckets)
                    for (int32_t id : t.long_stay) {
                        const uint8_t ch = t.chars[static_cast<size_t>(id)];
                        if (ch == 255 ? walk(a, c, v.bytes(id), cur, next) : ch <= room) set_bit(mask, id);
                    }
            }
            walk_leavers(c, t.leave);
            continue;
        }
        if (f.kind == F_GATE && !(f.lex & kGateForced)) {
            const GateStep& s = g.program[f.a];
            if (s.op == GateOp::FREE_UNTIL_SPECIAL) {
                ++st.bulk_loops;
                or_bits(mask, v.text_tokens());
                continue;
            }
            if (s.op == GateOp::FREE_UNTIL_TEXT) {
                ++st.bulk_loops;
                const VocabIndex::LoopTable& t = v.text_loop(s.terminator, static_cast<uint8_t>(f.b));
                or_bits(mask, t.stay);
                walk_leavers(c, t.leave);
                continue;
            }
        }
        roots.push_back(c);
    }
    if (!roots.empty()) {
        // Depth-first over the trie in preorder; level[d] holds the parses after d bytes, and
        // mark[d] the arena size once they were made (a new sibling at depth d drops the frames
        // its predecessors pushed).
        const auto& trie = v.trie();
        const auto& toks = v.trie_tokens();
        std::vector<std::vector<Config>> level(static_cast<size_t>(v.max_depth()) + 1);
        std::vector<size_t> mark(level.size(), mark0);
        level[0] = roots;
        size_t i = 0;
        while (i < trie.size()) {
            const VocabIndex::TrieNode& n = trie[i];
            const size_t d = n.depth;
            ar.resize(mark[d - 1]);
            std::vector<Config>& out = level[d];
            out.clear();
            for (const Config& c : level[d - 1]) a.step(c, n.byte, ar, out);
            ++st.trie_nodes;
            if (out.empty()) {
                i = n.end;
                continue;
            }
            mark[d] = ar.size();
            for (uint32_t t = n.tok_begin; t < n.tok_end; ++t) set_bit(mask, toks[t]);
            ++i;
        }
    }
    ar.resize(mark0);
    for (int32_t s : g.specials())
        if (s >= 0 && s < v.n_vocab() && a.allows_special(s)) set_bit(mask, s);
}

}  // namespace nitro::grammar
