// The constrained-decoding automaton: a pushdown automaton over symbols (the bytes of normal
// tokens, and whole control tokens) that accepts exactly the outputs a Grammar (grammar.h)
// describes, one symbol at a time.
//
// A parse is a stack of frames (Config): the gate program at the bottom, then a ROOT frame for
// the JSON value, then one frame per open object / array / string / number / literal. Each frame
// is a small value (16 bytes: node, kind, phase, whitespace gap, lexer state, two counters); the
// frames below the top live in an Arena as an immutable linked list, so a step copies 24 bytes
// and a push appends one node, and many parses share their common bottom. Ambiguity (anyOf
// branches that start alike) keeps several configurations alive until the input tells them
// apart; identical ones are merged. The state of a generation is its set of configurations.
//
// The same step functions serve accept() (the chosen token) and the token masks (token_mask.h),
// which walk the vocabulary's byte trie with them, so what the mask allows is by construction what
// accept() takes.
#pragma once

#include "grammar/grammar.h"

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace nitro::grammar {

enum FrameKind : uint8_t { F_GATE, F_ROOT, F_OBJ, F_ARR, F_STR, F_NUM, F_LIT };

/// One stack frame. `node`: schema node (gate: the literal trie in use); `phase`: where in the
/// frame's syntax; `ws`: whitespace gap state (lexers.h); `lex`: string/number lexer state (gate:
/// flags kGateSpent/kGateForced); `a`, `b`: counters (object: property position and key-trie node;
/// array: items; string: characters; number: digits; literal: trie node; gate: step and aux).
struct Frame {
    uint32_t node = 0;
    uint8_t kind = F_GATE, phase = 0, ws = 0, lex = 0;
    uint32_t a = 0, b = 0;
    bool operator==(const Frame&) const = default;
};

/// Gate flags (Frame::lex of the gate frame).
inline constexpr uint8_t kGateSpent = 1;   ///< the reasoning budget is spent: no new reasoning
inline constexpr uint8_t kGateForced = 2;  ///< end the current reasoning now (only its end is allowed)

struct ArenaNode {
    Frame frame;
    int32_t parent;
};
using Arena = std::vector<ArenaNode>;

/// One parse: the top frame and the rest of the stack (an arena index, -1 = none).
struct Config {
    Frame top;
    int32_t parent = -1;
    uint16_t depth = 0;  ///< open objects and arrays
    bool operator==(const Config&) const = default;
};


class Automaton {
public:
    /// Starts at step 0 of `g`'s program. `budget_spent`: start with the reasoning budget spent
    /// (a budget of 0 tokens).
    explicit Automaton(std::shared_ptr<const Grammar> g, bool budget_spent = false);

    /// Advances by the bytes of one normal token. Returns false, and changes nothing, if the
    /// grammar does not allow them. Throws nitro::Error when the parses alive exceed kMaxConfigs.
    bool accept_bytes(std::string_view bytes);
    /// Advances by one control token; false (nothing changed) if not allowed here.
    bool accept_special(int32_t token);
    /// True if `bytes` / `token` would be accepted (nothing changes).
    bool allows_bytes(std::string_view bytes) const;
    bool allows_special(int32_t token) const;

    /// True when the program has reached DONE (after an end-of-generation token).
    bool done() const;
    /// True when every parse is inside a reasoning step (FREE_* with reasoning set).
    bool in_reasoning() const;
    /// Sets gate flags on every parse whose top is the gate (reasoning budget).
    void set_gate_flags(uint8_t flags);

    const Grammar& grammar() const { return *g_; }
    const std::vector<Config>& configs() const { return configs_; }

    // The step functions, for the mask. Successors of `c` are appended to `out` (merged with what
    // is there); frames they push go to `arena` (which must hold c's stack).
    void step(const Config& c, uint8_t byte, Arena& arena, std::vector<Config>& out) const;
    void step_special(const Config& c, int32_t token, Arena& arena, std::vector<Config>& out) const;
    /// The arena holding the configurations' stacks; the mask appends scratch frames past its
    /// end and truncates them again.
    Arena& arena() const { return arena_; }

private:
    void push_value(Config c, uint32_t node, uint8_t b, Arena& ar, std::vector<Config>& out) const;
    void step_object(Config& c, uint8_t b, Arena& ar, std::vector<Config>& out) const;
    void step_array(Config& c, uint8_t b, Arena& ar, std::vector<Config>& out) const;
    /// Gate on a byte: false when the byte must be fed again to the new top (after an epsilon move).
    bool step_gate(Config& c, uint8_t b, Arena& ar, std::vector<Config>& out) const;
    void enter(Config& c, uint32_t pc, Arena& ar) const;
    void compact();

    std::shared_ptr<const Grammar> g_;
    std::vector<Config> configs_;
    mutable Arena arena_;
};

}  // namespace nitro::grammar
