// response_format for `nitro serve`: the JSON value a request asks for (json_schema compiled by
// json_schema.h, or any object for json_object), placed where the chat format puts the answer,
// and enforced token by token (TokenConstraint).
//
// Where the constraint applies (what was chosen, and why):
//  - RAW (/v1/completions): the whole output is the JSON value, then an end-of-generation token.
//  - HARMONY (gpt-oss, after the prompt's "<|start|>assistant"): the reply is zero or more
//    analysis messages, free text (reasoning), then the final message whose body is the value:
//      ( <|channel|>analysis<|message|> TEXT <|end|><|start|>assistant )* <|channel|>final<|message|> VALUE <|return|>
//    The headers are forced exactly; the analysis text is free (no control token but <|end|>);
//    no commentary, tool call or preamble can be produced. This is what llama.cpp's gpt-oss
//    handler builds for a response format (common/chat.cpp: analysis messages, then the final
//    channel with the schema; tools are not offered).
//  - CHATML (Qwen3, after "<|im_start|>assistant\n"): an optional reasoning block, free text up to
//    "</think>", then the value, then <|im_end|>. When the prompt already opened "<think>" the
//    reply starts inside it; otherwise "<think>" may open one, or the value starts at once (as
//    llama.cpp's Qwen3 grammar: optional <think>...</think>, then the schema).
// Reasoning budget (llama.cpp's --reasoning-budget / reasoning_budget_tokens): at most N tokens of
// reasoning; when they are spent the reasoning is ended for the model (harmony: <|end|> is the only
// token allowed, and the next header can only be the final channel; ChatML: the rest of
// "</think>" is forced). 0 = no reasoning at all: the final channel (or the value) comes first.
// -1 = unlimited.
#pragma once

#include "grammar/automaton.h"
#include "grammar/token_mask.h"
#include "grammar/vocab_index.h"
#include "runtime/token_constraint.h"

#include <memory>
#include <vector>

namespace nitro {
class Vocab;
}

namespace nitro::grammar {

enum class Envelope { RAW, HARMONY, CHATML };

struct ResponseGrammarOptions {
    Envelope envelope = Envelope::RAW;
    bool reasoning_open = false;             ///< CHATML: the prompt ends inside "<think>"
    std::vector<int32_t> end_of_generation;  ///< tokens that may end the output once the value is complete
};

/// Writes the gate program for `opt.envelope` around the JSON node `root` (already in `g`).
/// Throws nitro::Error when the vocabulary lacks a control token the format needs or no
/// end-of-generation token is given.
void add_response_program(Grammar& g, uint32_t root, const Vocab& vocab, const ResponseGrammarOptions& opt);

class ResponseConstraint : public TokenConstraint {
public:
    /// `reasoning_budget`: tokens of reasoning allowed (-1 unlimited, 0 none).
    ResponseConstraint(std::shared_ptr<const VocabIndex> vocab, std::shared_ptr<const Grammar> g, int64_t reasoning_budget);

    void allowed_tokens(std::vector<uint64_t>& allowed) override;
    void accept(int32_t id) override;

    const Automaton& automaton() const { return a_; }
    int64_t reasoning_tokens() const { return reasoning_tokens_; }
    /// Work of the last mask.
    const MaskStats& last_stats() const { return stats_; }

private:
    std::shared_ptr<const VocabIndex> vocab_;
    std::vector<int32_t> specials_;  ///< the control tokens the program names (sorted)
    Automaton a_;
    int64_t budget_;
    int64_t reasoning_tokens_ = 0;
    MaskStats stats_;
};

}  // namespace nitro::grammar
