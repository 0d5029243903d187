#include "grammar/response_constraint.h"

#include "core/error.h"
#include "tokenizer/vocab.h"

#include <algorithm>

namespace nitro::grammar {

namespace {

int32_t control_token(const Vocab& vocab, std::string_view text) {
    const int32_t id = vocab.find_text(text);
    if (id < 0 || !vocab.is_control(id))
        fail("response_format needs the control token {} in the model's vocabulary, which has none", text);
    return id;
}

GateStep step(GateOp op) {
    GateStep s;
    s.op = op;
    return s;
}

/// Appends JSON(root), END_OF_GEN(eog), DONE; returns the JSON step's index.
uint32_t add_value_tail(Grammar& g, uint32_t root, const std::vector<int32_t>& eog) {
    const uint32_t at = static_cast<uint32_t>(g.program.size());
    GateStep json = step(GateOp::JSON);
    json.node = root;
    json.next = at + 1;
    g.add_step(std::move(json));
    GateStep end = step(GateOp::END_OF_GEN);
    end.tokens = eog;
    end.next = at + 2;
    g.add_step(std::move(end));
    g.add_step(step(GateOp::DONE));
    return at;
}

}  // namespace

void add_response_program(Grammar& g, uint32_t root, const Vocab& vocab, const ResponseGrammarOptions& opt) {
    NITRO_CHECK(g.program.empty());
    std::vector<int32_t> eog = opt.end_of_generation;
    if (opt.envelope == Envelope::HARMONY) {
        // <|call|> ends a tool call, not an answer.
        const int32_t call = vocab.find_text("<|call|>");
        std::erase(eog, call);
    }
    if (eog.empty()) fail("response_format needs an end-of-generation token, and this model has none");
    switch (opt.envelope) {
        case Envelope::RAW: add_value_tail(g, root, eog); return;
        case Envelope::HARMONY: {
            const int32_t channel = control_token(vocab, "<|channel|>"), message = control_token(vocab, "<|message|>"),
                          end = control_token(vocab, "<|end|>"), start = control_token(vocab, "<|start|>");
            // 0 <|channel|>  1 final|analysis  2 <|message|> (analysis)  3 TEXT until <|end|>
            // 4 <|start|>  5 "assistant" -> 0   6 <|message|> (final)  7 VALUE  8 end  9 DONE
            GateStep s0 = step(GateOp::SPECIAL);
            s0.tokens = {channel};
            s0.next = 1;
            g.add_step(std::move(s0));
            GateStep s1 = step(GateOp::LIT);
            s1.trie = g.add_trie({"final", "analysis"});
            s1.trie_spent = g.add_trie({"final"});
            s1.targets = {6, 2};
            g.add_step(std::move(s1));
            GateStep s2 = step(GateOp::SPECIAL);
            s2.tokens = {message};
            s2.next = 3;
            g.add_step(std::move(s2));
            GateStep s3 = step(GateOp::FREE_UNTIL_SPECIAL);
            s3.tokens = {end};
            s3.next = 4;
            s3.reasoning = true;
            g.add_step(std::move(s3));
            GateStep s4 = step(GateOp::SPECIAL);
            s4.tokens = {start};
            s4.next = 5;
            g.add_step(std::move(s4));
            GateStep s5 = step(GateOp::LIT);
            s5.trie = s5.trie_spent = g.add_trie({"assistant"});
            s5.targets = {0};
            g.add_step(std::move(s5));
            GateStep s6 = step(GateOp::SPECIAL);
            s6.tokens = {message};
            s6.next = 7;
            g.add_step(std::move(s6));
            add_value_tail(g, root, eog);
            return;
        }
        case Envelope::CHATML: {
            // [0 "<think>" or straight to the value]  1 TEXT until "</think>"  2 VALUE  3 end  4 DONE
            GateStep think = step(GateOp::FREE_UNTIL_TEXT);
            think.terminator = "</think>";
            think.kmp = kmp_table(think.terminator);
            think.reasoning = true;
            if (opt.reasoning_open) {
                think.next = 1;
                g.add_step(std::move(think));
            } else {
                GateStep open = step(GateOp::LIT_OR_NEXT);
                open.trie = open.trie_spent = g.add_trie({"<think>"});
                open.targets = {1};
                open.next = 2;
                g.add_step(std::move(open));
                think.next = 2;
                g.add_step(std::move(think));
            }
            add_value_tail(g, root, eog);
            return;
        }
    }
}

ResponseConstraint::ResponseConstraint(std::shared_ptr<const VocabIndex> vocab, std::shared_ptr<const Grammar> g, int64_t reasoning_budget)
    : vocab_(std::move(vocab)), specials_(g->specials()), a_(std::move(g), reasoning_budget == 0), budget_(reasoning_budget) {
    if (budget_ == 0 && a_.in_reasoning()) a_.set_gate_flags(kGateSpent | kGateForced);
}

void ResponseConstraint::allowed_tokens(std::vector<uint64_t>& allowed) {
    stats_ = MaskStats{};
    compute_token_mask(a_, *vocab_, allowed, &stats_);
}

void ResponseConstraint::accept(int32_t id) {
    if (id < 0 || id >= vocab_->n_vocab()) fail("token {} is outside the vocabulary", id);
    const bool was_reasoning = a_.in_reasoning();
    // A token the program names is taken whole (even if the vocabulary also gives it bytes, as an
    // end-of-generation token of type NORMAL would); any other by its bytes.
    const bool named = std::binary_search(specials_.begin(), specials_.end(), id) && a_.accept_special(id);
    const bool ok = named || (vocab_->is_text_token(id) && a_.accept_bytes(vocab_->bytes(id)));
    if (!ok) fail("token {} is not allowed by the response format at this point", id);
    if (was_reasoning && a_.in_reasoning()) {
        ++reasoning_tokens_;
        if (budget_ >= 0 && reasoning_tokens_ >= budget_) a_.set_gate_flags(kGateSpent | kGateForced);
    }
}

}  // namespace nitro::grammar
