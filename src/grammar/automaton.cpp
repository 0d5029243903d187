#include "grammar/automaton.h"

#include "core/error.h"
#include "grammar/lexers.h"

#include <algorithm>

namespace nitro::grammar {

namespace {

enum RootPhase : uint8_t { ROOT_BEFORE, ROOT_AFTER };
enum ObjPhase : uint8_t { OBJ_OPEN, OBJ_KEY_NEXT, OBJ_KEY, OBJ_AFTER_KEY, OBJ_BEFORE_VALUE, OBJ_AFTER_VALUE };
enum ArrPhase : uint8_t { ARR_OPEN, ARR_NEXT, ARR_AFTER_VALUE };
enum GatePhase : uint8_t { GATE_START, GATE_IN_LIT };

bool is_container(uint8_t kind) { return kind == F_OBJ || kind == F_ARR; }

void emit(std::vector<Config>& out, const Config& c) {
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
}

/// Makes the frame below the top the top.
void pop(Config& c, const Arena& ar) {
    if (is_container(c.top.kind)) --c.depth;
    const ArenaNode& n = ar[static_cast<size_t>(c.parent)];
    c.top = n.frame;
    c.parent = n.parent;
}

/// Puts `f` on top of `c` (whose current top goes to the arena as it is).
void push(Config& c, Arena& ar, const Frame& f) {
    ar.push_back({c.top, c.parent});
    c.parent = static_cast<int32_t>(ar.size() - 1);
    c.top = f;
    if (is_container(f.kind)) ++c.depth;
}

Frame frame(uint32_t node, uint8_t kind, uint8_t phase = 0) {
    Frame f;
    f.node = node;
    f.kind = kind;
    f.phase = phase;
    return f;
}

bool is_digit(uint8_t b) { return b >= '0' && b <= '9'; }

/// Number lexer: true if `b` continues the number in `f` (updated), false if it does not.
bool num_step(Frame& f, uint8_t b, bool integer) {
    switch (f.lex) {
        case NUM_SIGN:
            if (b == '0') return f.lex = NUM_ZERO, true;
            if (is_digit(b)) return f.lex = NUM_INT, f.a = 1, true;
            return false;
        case NUM_ZERO:
        case NUM_INT:
            if (is_digit(b) && f.lex == NUM_INT && f.a < kMaxIntDigits) return ++f.a, true;
            if (integer) return false;
            if (b == '.') return f.lex = NUM_DOT, true;
            if (b == 'e' || b == 'E') return f.lex = NUM_E, true;
            return false;
        case NUM_DOT:
            if (is_digit(b)) return f.lex = NUM_FRAC, f.a = 1, true;
            return false;
        case NUM_FRAC:
            if (is_digit(b) && f.a < kMaxFracDigits) return ++f.a, true;
            if (b == 'e' || b == 'E') return f.lex = NUM_E, true;
            return false;
        case NUM_E:
            if (b == '+' || b == '-') return f.lex = NUM_ESIGN, true;
            if (is_digit(b)) return f.lex = NUM_EXP, f.a = 1, true;
            return false;
        case NUM_ESIGN:
            if (is_digit(b)) return f.lex = NUM_EXP, f.a = 1, true;
            return false;
        case NUM_EXP:
            if (is_digit(b) && f.a < kMaxExpDigits) return ++f.a, true;
            return false;
        default: return false;
    }
}

/// The key-trie payload range an object at property position `p` may take next: [p, last].
uint32_t last_candidate(const Node& n, uint32_t p) {
    const uint32_t np = static_cast<uint32_t>(n.props.size());
    const uint32_t r = n.next_required[p];
    return r == np ? np - 1 : r;
}

bool can_close(const Node& n, uint32_t p) { return n.props.empty() || n.next_required[p] == n.props.size(); }

/// True if a value of `node` fits under the nesting limit when placed in a frame `depth`
/// containers deep (a value that would pass it is never offered).
bool fits(const Grammar& g, uint16_t depth, uint32_t node) {
    const uint32_t d = g.nodes[node].min_depth;
    return d != kUnbounded && depth + d <= kMaxNesting;
}

/// True if the object `n` at position `p`, `depth` containers deep (itself included), may take
/// a key under key-trie node `t` (the root: any key): one whose value fits.
bool key_reachable(const Grammar& g, const Node& n, uint32_t p, uint32_t t, uint16_t depth) {
    if (n.props.empty()) return n.additional >= 0 && fits(g, depth, static_cast<uint32_t>(n.additional));
    if (p >= n.props.size()) return false;
    const LitTrie& trie = g.tries[n.trie];
    if (depth + n.deepest_value <= kMaxNesting) return trie.reaches(t, p, last_candidate(n, p));  // every value fits
    return trie.reaches_if(t, p, last_candidate(n, p), [&](uint32_t k) { return fits(g, depth, n.props[k].node); });
}

}  // namespace

Automaton::Automaton(std::shared_ptr<const Grammar> g, bool budget_spent) : g_(std::move(g)) {
    NITRO_CHECK(!g_->program.empty());
    Config c;
    c.top = frame(0, F_GATE);
    c.top.lex = budget_spent ? kGateSpent : 0;
    enter(c, 0, arena_);
    configs_.push_back(c);
}

void Automaton::enter(Config& c, uint32_t pc, Arena& ar) const {
    Frame& f = c.top;
    f.a = pc;
    f.b = 0;
    f.node = 0;
    f.phase = GATE_START;
    f.lex &= static_cast<uint8_t>(~kGateForced);
    const GateStep& s = g_->program[pc];
    if (s.op == GateOp::JSON) {
        f.a = s.next;  // where the gate resumes once the value is complete
        push(c, ar, frame(s.node, F_ROOT, ROOT_BEFORE));
    }
}

void Automaton::push_value(Config c, uint32_t node, uint8_t b, Arena& ar, std::vector<Config>& out) const {
    const Node& n = g_->nodes[node];
    switch (n.kind) {
        case NodeKind::NOTHING: return;
        case NodeKind::ANY_OF:  // alternatives are flattened at compile time: none is an ANY_OF
            for (uint32_t alt : n.alts) push_value(c, alt, b, ar, out);
            return;
        case NodeKind::OBJECT:
        case NodeKind::ARRAY:
            if (b != (n.kind == NodeKind::OBJECT ? '{' : '[') || !fits(*g_, c.depth, node) || c.depth >= kMaxNesting) return;
            push(c, ar, frame(node, n.kind == NodeKind::OBJECT ? F_OBJ : F_ARR, 0));
            return emit(out, c);
        case NodeKind::STRING:
            if (b != '"') return;
            push(c, ar, frame(node, F_STR));
            return emit(out, c);
        case NodeKind::NUMBER:
        case NodeKind::INTEGER: {
            Frame f = frame(node, F_NUM);
            if (b == '-') f.lex = NUM_SIGN;
            else if (b == '0') f.lex = NUM_ZERO;
            else if (is_digit(b)) f.lex = NUM_INT, f.a = 1;
            else return;
            push(c, ar, f);
            return emit(out, c);
        }
        case NodeKind::LITERAL: {
            const LitTrie& t = g_->tries[n.trie];
            const int32_t ch = t.child(LitTrie::kRoot, b);
            if (ch < 0) return;
            if (t.payload(static_cast<uint32_t>(ch)) >= 0 && !t.has_children(static_cast<uint32_t>(ch))) return emit(out, c);
            Frame f = frame(node, F_LIT);
            f.a = static_cast<uint32_t>(ch);
            push(c, ar, f);
            return emit(out, c);
        }
    }
}

void Automaton::step_object(Config& c, uint8_t b, Arena& ar, std::vector<Config>& out) const {
    Frame& f = c.top;
    const Node& n = g_->nodes[f.node];
    if (f.phase != OBJ_KEY) {
        if (const int w = gap_step(f.ws, b); w >= 0) {
            f.ws = static_cast<uint8_t>(w);
            return emit(out, c);
        }
    }
    switch (f.phase) {
        case OBJ_OPEN:
        case OBJ_KEY_NEXT:
            if (b == '}' && f.phase == OBJ_OPEN && can_close(n, f.a)) {
                pop(c, ar);
                return emit(out, c);
            }
            if (b != '"' || !key_reachable(*g_, n, f.a, LitTrie::kRoot, c.depth)) return;
            f.ws = 0;
            if (n.props.empty()) {  // a map: the key is a free string
                f.phase = OBJ_AFTER_KEY;
                push(c, ar, frame(kAnyString, F_STR));
                return emit(out, c);
            }
            {
                const LitTrie& t = g_->tries[n.trie];
                const int32_t ch = t.child(LitTrie::kRoot, b);
                if (ch < 0 || !key_reachable(*g_, n, f.a, static_cast<uint32_t>(ch), c.depth)) return;
                f.phase = OBJ_KEY;
                f.b = static_cast<uint32_t>(ch);
            }
            return emit(out, c);
        case OBJ_KEY: {
            const LitTrie& t = g_->tries[n.trie];
            const int32_t ch = t.child(f.b, b);
            if (ch < 0 || !key_reachable(*g_, n, f.a, static_cast<uint32_t>(ch), c.depth)) return;
            const int32_t key = t.payload(static_cast<uint32_t>(ch));
            if (key >= 0) {  // the closing quote: keys are JSON strings, so nothing extends them
                f.phase = OBJ_AFTER_KEY;
                f.a = static_cast<uint32_t>(key) + 1;
                f.b = 0;
                f.ws = 0;
            } else {
                f.b = static_cast<uint32_t>(ch);
            }
            return emit(out, c);
        }
        case OBJ_AFTER_KEY:
            if (b != ':') return;
            f.phase = OBJ_BEFORE_VALUE;
            f.ws = 0;
            return emit(out, c);
        case OBJ_BEFORE_VALUE: {
            const uint32_t value = n.props.empty() ? static_cast<uint32_t>(n.additional) : n.props[f.a - 1].node;
            f.phase = OBJ_AFTER_VALUE;
            f.ws = 0;
            return push_value(c, value, b, ar, out);
        }
        case OBJ_AFTER_VALUE:
            if (b == ',' && key_reachable(*g_, n, f.a, LitTrie::kRoot, c.depth)) {
                f.phase = OBJ_KEY_NEXT;
                f.ws = 0;
                return emit(out, c);
            }
            if (b == '}' && can_close(n, f.a)) {
                pop(c, ar);
                return emit(out, c);
            }
            return;
    }
}

void Automaton::step_array(Config& c, uint8_t b, Arena& ar, std::vector<Config>& out) const {
    Frame& f = c.top;
    const Node& n = g_->nodes[f.node];
    if (const int w = gap_step(f.ws, b); w >= 0) {
        f.ws = static_cast<uint8_t>(w);
        return emit(out, c);
    }
    switch (f.phase) {
        case ARR_OPEN:
            if (b == ']') {
                if (n.min_items > 0) return;
                pop(c, ar);
                return emit(out, c);
            }
            if (n.max_items == 0) return;
            f.a = 1;
            f.phase = ARR_AFTER_VALUE;
            f.ws = 0;
            return push_value(c, n.items, b, ar, out);
        case ARR_NEXT:
            ++f.a;
            f.phase = ARR_AFTER_VALUE;
            f.ws = 0;
            return push_value(c, n.items, b, ar, out);
        case ARR_AFTER_VALUE:
            if (b == ',' && f.a < n.max_items) {
                f.phase = ARR_NEXT;
                f.ws = 0;
                return emit(out, c);
            }
            if (b == ']' && f.a >= n.min_items) {
                pop(c, ar);
                return emit(out, c);
            }
            return;
    }
}

bool Automaton::step_gate(Config& c, uint8_t b, Arena& ar, std::vector<Config>& out) const {
    Frame& f = c.top;
    const GateStep& s = g_->program[f.a];
    auto literal = [&](uint32_t trie_id) {
        const LitTrie& t = g_->tries[trie_id];
        const int32_t ch = t.child(f.phase == GATE_START ? LitTrie::kRoot : f.b, b);
        if (ch < 0) return;
        const int32_t pl = t.payload(static_cast<uint32_t>(ch));
        if (pl >= 0 && !t.has_children(static_cast<uint32_t>(ch))) {
            enter(c, s.targets[static_cast<size_t>(pl)], ar);
        } else {
            f.phase = GATE_IN_LIT;
            f.node = trie_id;
            f.b = static_cast<uint32_t>(ch);
        }
        emit(out, c);
    };
    switch (s.op) {
        case GateOp::LIT:
            literal(f.phase == GATE_IN_LIT ? f.node : (f.lex & kGateSpent) ? s.trie_spent : s.trie);
            return true;
        case GateOp::LIT_OR_NEXT:
            if (f.phase == GATE_START &&
                ((f.lex & kGateSpent) || g_->tries[s.trie].child(LitTrie::kRoot, b) < 0)) {
                enter(c, s.next, ar);
                return false;  // the byte belongs to what follows
            }
            literal(s.trie);
            return true;
        case GateOp::FREE_UNTIL_SPECIAL:
            if (!(f.lex & kGateForced)) emit(out, c);
            return true;
        case GateOp::FREE_UNTIL_TEXT: {
            const size_t len = s.terminator.size();
            if (f.lex & kGateForced) {
                if (b != static_cast<uint8_t>(s.terminator[f.b])) return true;
                ++f.b;
            } else {
                f.b = s.kmp[f.b][b];
            }
            if (f.b == len) enter(c, s.next, ar);
            emit(out, c);
            return true;
        }
        case GateOp::SPECIAL:
        case GateOp::JSON:
        case GateOp::END_OF_GEN:
        case GateOp::DONE: return true;
    }
    return true;
}

void Automaton::step(const Config& c0, uint8_t b, Arena& ar, std::vector<Config>& out) const {
    Config c = c0;
    for (;;) {
        Frame& f = c.top;
        switch (f.kind) {
            case F_STR: {
                const StrStep s = str_step(f.lex, b);
                const Node& n = g_->nodes[f.node];
                if (s.event == STR_DEAD) return;
                if (s.event == STR_EXIT) {
                    if (f.a < n.min_length) return;
                    pop(c, ar);
                    return emit(out, c);
                }
                if (str_begins_char(s.event)) {
                    if (f.a >= n.max_length) return;
                    ++f.a;
                }
                f.lex = s.state;
                return emit(out, c);
            }
            case F_NUM:
                if (num_step(f, b, g_->nodes[f.node].kind == NodeKind::INTEGER)) return emit(out, c);
                if (!num_complete(f.lex)) return;
                pop(c, ar);
                continue;  // the byte goes to the frame below
            case F_LIT: {
                const LitTrie& t = g_->tries[g_->nodes[f.node].trie];
                const int32_t ch = t.child(f.a, b);
                if (ch >= 0) {
                    if (t.payload(static_cast<uint32_t>(ch)) >= 0 && !t.has_children(static_cast<uint32_t>(ch))) pop(c, ar);
                    else f.a = static_cast<uint32_t>(ch);
                    return emit(out, c);
                }
                if (t.payload(f.a) < 0) return;
                pop(c, ar);
                continue;
            }
            case F_ROOT: {
                if (const int w = gap_step(f.ws, b); w >= 0) {
                    f.ws = static_cast<uint8_t>(w);
                    return emit(out, c);
                }
                if (f.phase == ROOT_AFTER) return;
                f.phase = ROOT_AFTER;
                f.ws = 0;
                return push_value(c, f.node, b, ar, out);
            }
            case F_OBJ: return step_object(c, b, ar, out);
            case F_ARR: return step_array(c, b, ar, out);
            case F_GATE:
                if (step_gate(c, b, ar, out)) return;
                continue;
            default: return;
        }
    }
}

void Automaton::step_special(const Config& c0, int32_t token, Arena& ar, std::vector<Config>& out) const {
    Config c = c0;
    for (;;) {
        Frame& f = c.top;
        switch (f.kind) {
            case F_NUM:
                if (!num_complete(f.lex)) return;
                pop(c, ar);
                continue;
            case F_LIT:
                if (g_->tries[g_->nodes[f.node].trie].payload(f.a) < 0) return;
                pop(c, ar);
                continue;
            case F_ROOT:
                if (f.phase != ROOT_AFTER) return;
                pop(c, ar);
                continue;
            case F_GATE: {
                const GateStep& s = g_->program[f.a];
                switch (s.op) {
                    case GateOp::SPECIAL:
                    case GateOp::FREE_UNTIL_SPECIAL:
                    case GateOp::END_OF_GEN:
                        if (std::find(s.tokens.begin(), s.tokens.end(), token) == s.tokens.end()) return;
                        enter(c, s.next, ar);
                        return emit(out, c);
                    case GateOp::LIT_OR_NEXT:
                        if (f.phase != GATE_START) return;
                        enter(c, s.next, ar);
                        continue;
                    default: return;
                }
            }
            default: return;
        }
    }
}

bool Automaton::accept_bytes(std::string_view bytes) {
    const size_t mark = arena_.size();
    std::vector<Config> cur = configs_, next;
    for (unsigned char b : bytes) {
        next.clear();
        for (const Config& c : cur) step(c, b, arena_, next);
        if (next.empty()) {
            arena_.resize(mark);
            return false;
        }
        if (next.size() > kMaxConfigs)  // the schema's ambiguity bound (grammar_limits.h) says this cannot happen
            fail("internal error in the grammar engine: more than {} parses alive at once, above the bound the schema was "
                 "accepted with",
                 kMaxConfigs);
        cur.swap(next);
    }
    configs_ = std::move(cur);
    compact();
    return true;
}

bool Automaton::accept_special(int32_t token) {
    const size_t mark = arena_.size();
    std::vector<Config> next;
    for (const Config& c : configs_) step_special(c, token, arena_, next);
    if (next.empty()) {
        arena_.resize(mark);
        return false;
    }
    configs_ = std::move(next);
    compact();
    return true;
}

bool Automaton::allows_bytes(std::string_view bytes) const {
    const size_t mark = arena_.size();
    std::vector<Config> cur = configs_, next;
    bool ok = true;
    for (unsigned char b : bytes) {
        next.clear();
        for (const Config& c : cur) step(c, b, arena_, next);
        if (next.empty()) {
            ok = false;
            break;
        }
        cur.swap(next);
    }
    arena_.resize(mark);
    return ok;
}

bool Automaton::allows_special(int32_t token) const {
    const size_t mark = arena_.size();
    std::vector<Config> next;
    for (const Config& c : configs_) step_special(c, token, arena_, next);
    arena_.resize(mark);
    return !next.empty();
}

bool Automaton::done() const {
    return std::any_of(configs_.begin(), configs_.end(), [&](const Config& c) {
        return c.top.kind == F_GATE && g_->program[c.top.a].op == GateOp::DONE;
    });
}

bool Automaton::in_reasoning() const {
    return std::all_of(configs_.begin(), configs_.end(), [&](const Config& c) {
        if (c.top.kind != F_GATE) return false;
        const GateStep& s = g_->program[c.top.a];
        return s.reasoning && (s.op == GateOp::FREE_UNTIL_SPECIAL || s.op == GateOp::FREE_UNTIL_TEXT);
    });
}

void Automaton::set_gate_flags(uint8_t flags) {
    for (Config& c : configs_)
        if (c.top.kind == F_GATE) c.top.lex |= flags;
}

void Automaton::compact() {
    // Garbage (frames of parses that died, scratch of earlier steps) is dropped now and then by
    // copying the live stacks into a fresh arena.
    if (arena_.size() < 4096) return;
    Arena fresh;
    std::vector<int32_t> moved(arena_.size(), -1);
    for (Config& c : configs_) {
        std::vector<int32_t> chain;
        for (int32_t i = c.parent; i >= 0 && moved[static_cast<size_t>(i)] < 0; i = arena_[static_cast<size_t>(i)].parent) chain.push_back(i);
        for (size_t k = chain.size(); k-- > 0;) {
            const ArenaNode& n = arena_[static_cast<size_t>(chain[k])];
            fresh.push_back({n.frame, n.parent < 0 ? -1 : moved[static_cast<size_t>(n.parent)]});
            moved[static_cast<size_t>(chain[k])] = static_cast<int32_t>(fresh.size() - 1);
        }
        c.parent = c.parent < 0 ? -1 : moved[static_cast<size_t>(c.parent)];
    }
    arena_.swap(fresh);
}

}  // namespace nitro::grammar
