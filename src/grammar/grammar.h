// What a constrained generation must produce, compiled for the automaton (automaton.h): a JSON
// value grammar (a graph of schema nodes, from json_schema.h) inside a "gate" program, the chat
// format's own markup around the value (harmony's channel headers, Qwen3's <think> block), which
// response_constraint.cpp writes.
//
// Schema nodes: ANY_OF (alternatives; also $ref aliases), OBJECT (declared properties in order,
// optional ones may be skipped; or a map whose keys are free strings), ARRAY (items, min/max
// count), STRING (free text, min/max length in characters), NUMBER / INTEGER, LITERAL (a set of
// fixed JSON texts: enum, const, true/false/null) and NOTHING (no value). Nodes 0..5 are the
// well-known "any JSON value" graph (kAnyValue and its parts), which every grammar has.
//
// The gate program is a list of steps over symbols, where a symbol is a byte of a normal token
// or a whole control token (a "special"): SPECIAL (exactly that control token), LIT (one of a
// literal set of byte strings, then jump to that string's target), FREE_UNTIL_SPECIAL (any
// bytes until a control token: harmony's analysis text up to <|end|>), FREE_UNTIL_TEXT (any bytes
// until a terminator string: Qwen3's reasoning up to "</think>"), LIT_OR_NEXT (an optional
// literal: "<think>" or straight on), JSON (one value of a node, with bounded whitespace around
// it), END_OF_GEN (one of the end-of-generation tokens) and DONE.
#pragma once

#include "grammar/grammar_budget.h"
#include "grammar/lit_trie.h"

#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace nitro::grammar {

enum class NodeKind : uint8_t { NOTHING, ANY_OF, OBJECT, ARRAY, STRING, NUMBER, INTEGER, LITERAL };

inline constexpr uint32_t kUnbounded = std::numeric_limits<uint32_t>::max();
inline constexpr uint32_t kNoNode = std::numeric_limits<uint32_t>::max();

/// Most objects/arrays open at once (deeper nesting is not produced; the request body's limit).
/// Schemas whose shallowest value nests deeper are refused (grammar_limits.h).
inline constexpr uint16_t kMaxNesting = 128;
/// Most parses the automaton keeps alive at once; schemas that could need more are refused
/// (grammar_limits.h).
inline constexpr size_t kMaxConfigs = 256;

struct Property {
    std::string name;
    uint32_t node = 0;
    bool required = false;
};

struct Node {
    NodeKind kind = NodeKind::NOTHING;
    std::vector<uint32_t> alts;              ///< ANY_OF: alternatives
    std::vector<Property> props;             ///< OBJECT: declared properties, in the order they are written
    int32_t additional = -1;                 ///< OBJECT without props: value node of its (free) keys; -1: no keys
    uint32_t trie = 0;                       ///< OBJECT: quoted keys (payload = property index); LITERAL: the JSON texts
    std::vector<uint32_t> next_required;     ///< OBJECT: [props + 1] first required index >= p (props.size(): none)
    uint32_t items = 0;                      ///< ARRAY: item node
    uint32_t min_items = 0, max_items = kUnbounded;    ///< ARRAY
    uint32_t min_length = 0, max_length = kUnbounded;  ///< STRING, in characters (code points; an escape is one)
    uint32_t min_depth = 0;      ///< objects/arrays its shallowest value opens, its own included (kUnbounded: none)
    uint32_t deepest_value = 0;  ///< OBJECT: the largest min_depth among its property (or map) values
};

/// The well-known nodes: any JSON value = anyOf(any object, any array, any string, any number,
/// true/false/null); an any-object maps free keys to any value.
inline constexpr uint32_t kAnyValue = 0, kAnyObject = 1, kAnyArray = 2, kAnyString = 3, kAnyNumber = 4, kJsonWords = 5;

enum class GateOp : uint8_t { SPECIAL, LIT, FREE_UNTIL_SPECIAL, FREE_UNTIL_TEXT, LIT_OR_NEXT, JSON, END_OF_GEN, DONE };

struct GateStep {
    GateOp op = GateOp::DONE;
    std::vector<int32_t> tokens;    ///< SPECIAL: the token; FREE_UNTIL_SPECIAL: the one that ends it; END_OF_GEN: any of these
    uint32_t trie = 0;              ///< LIT, LIT_OR_NEXT: the literal set
    uint32_t trie_spent = 0;        ///< LIT: the set once the reasoning budget is spent (== trie when the same)
    std::vector<uint32_t> targets;  ///< LIT, LIT_OR_NEXT: the step after literal i
    uint32_t next = 0;              ///< LIT_OR_NEXT: the step when the literal does not start; others: the next step
    std::string terminator;         ///< FREE_UNTIL_TEXT
    std::vector<std::array<uint8_t, 256>> kmp;  ///< FREE_UNTIL_TEXT: matched length after a byte (KMP automaton)
    uint32_t node = 0;              ///< JSON: the value's node
    bool reasoning = false;         ///< FREE_*: its tokens count against the reasoning budget
};

/// A compiled constraint: schema nodes, literal tries and the gate program (step 0 first).
struct Grammar {
    /// A grammar holding the well-known any-value nodes (and no program yet). With `lease`, every
    /// node and trie added is charged to it (grammar_budget.h), which may throw.
    explicit Grammar(std::unique_ptr<MemoryLease> lease = nullptr);
    ~Grammar();
    Grammar(const Grammar&) = delete;
    Grammar& operator=(const Grammar&) = delete;

    std::vector<Node> nodes;
    std::vector<LitTrie> tries;
    std::vector<GateStep> program;

    uint32_t add_node(Node n);
    /// `key_ranges`: the trie answers LitTrie::reaches (object keys); literals do not need it.
    uint32_t add_trie(const std::vector<std::string>& strings, bool key_ranges = false);
    /// Appends a step and returns its index.
    uint32_t add_step(GateStep s);
    /// Every control token the program accepts anywhere (the mask tries each of these).
    std::vector<int32_t> specials() const;
    /// Bytes charged so far (0 without a lease).
    size_t charged_bytes() const;

private:
    void charge(size_t bytes);
    std::unique_ptr<MemoryLease> lease_;
};

/// The KMP transition table of `terminator`: [len][256] matched length after a byte.
std::vector<std::array<uint8_t, 256>> kmp_table(const std::string& terminator);

}  // namespace nitro::grammar
