// The token mask of a constrained generation: which tokens of the vocabulary the automaton
// accepts next (a token is allowed when all of its bytes are, or, for a control token, when the
// grammar takes it there).
//
// How: per parse alive (Config), by what is on top of its stack:
//  - inside a JSON string, or in free text until a terminator: the vocabulary's loop table for
//    that lexer state (vocab_index.h) gives the tokens that stay inside at once; only the tokens
//    that leave the loop are walked byte by byte from the parse;
//  - in free text until a control token (harmony's analysis channel): every text token;
//  - anywhere else: a depth-first walk of the vocabulary's byte trie, stepping the automaton one
//    byte per trie edge and skipping a subtree as soon as no parse survives its first byte.
// Control tokens: the few the grammar mentions are tried one by one; all others are never allowed.
#pragma once

#include "grammar/automaton.h"
#include "grammar/vocab_index.h"

namespace nitro::grammar {

/// Work done for one mask (for tests and benchmarks).
struct MaskStats {
    uint64_t trie_nodes = 0;     ///< trie nodes stepped
    uint64_t walked_tokens = 0;  ///< tokens walked byte by byte (loop leavers)
    uint64_t bulk_loops = 0;     ///< parses served by a loop table or the text-token set
};

/// Sets `mask` (resized to v.n_words()) to the tokens `a` accepts next.
void compute_token_mask(const Automaton& a, const VocabIndex& v, TokenBits& mask, MaskStats* stats = nullptr);

}  // namespace nitro::grammar
