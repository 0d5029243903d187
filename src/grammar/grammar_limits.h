// What a compiled schema needs of the automaton's two limits, computed once at request time so a
// generation can never walk into a state it cannot finish (issue 50):
//
//  - Nesting (kMaxNesting open objects/arrays). Node::min_depth is how many containers the
//    shallowest value of a node opens (its own included); the automaton offers a container, an
//    object key or a map key only when the value behind it still fits under the limit, and a
//    schema whose shallowest value is deeper than the limit is refused before anything runs.
//  - Ambiguity (kMaxConfigs parses alive at once). ambiguity_bound() is an upper bound of the
//    parses the automaton can keep alive for a value: anyOf alternatives that share a first byte
//    are alive together, each with what is alive inside it (the sum), alternatives that differ
//    in their first byte never are; object alternatives whose first property is required and
//    either named differently or a const/enum with disjoint values are told apart once that
//    property's value is read. A schema over the limit is refused naming the anyOf.
#pragma once

#include "grammar/grammar.h"

#include <cstdint>

namespace nitro::grammar {

/// Fills Node::min_depth (kUnbounded: no finite value satisfies the node) and
/// Node::deepest_value (objects: the largest min_depth among the values it may take).
void compute_min_depth(Grammar& g);

/// The most parses alive at once for a value of `root` (an upper bound, capped at cap + 1) and
/// the ANY_OF node that makes it exceed `cap` (kNoNode when it does not). Expects alternatives
/// flattened (no ANY_OF among ANY_OF alternatives).
struct Ambiguity {
    uint32_t parses = 1;
    uint32_t node = kNoNode;
};
Ambiguity ambiguity_bound(const Grammar& g, uint32_t root, uint32_t cap);

}  // namespace nitro::grammar
