// GGUF tokenizer metadata from a Hugging Face tokenizer folder, written the way llama.cpp's
// convert_hf_to_gguf.py writes it for byte-level BPE models (Model._set_vocab_gpt2 with
// get_vocab_base, then gguf-py's SpecialVocab): used by `nitro synth --tokenizer DIR` so that a
// synthetic model carries a real tokenizer exactly as a converted model would.
#pragma once

#include "gguf/gguf.h"

#include <cstdint>
#include <string>

namespace nitro {

/// Reads DIR/tokenizer.json (required; model type BPE), DIR/tokenizer_config.json, DIR/config.json
/// and DIR/chat_template.jinja (each optional) and sets in `m`:
///  - tokenizer.ggml.model "gpt2" and tokenizer.ggml.pre (recognised from the pre-tokenizer's split
///    regex: "gpt-4o" for o200k / gpt-oss, "qwen2" for Qwen2/Qwen3; anything else is an error);
///  - tokenizer.ggml.tokens: the vocabulary (model vocab and added tokens) ordered by id, ids without
///    a token filled with "[PAD{id}]", up to config.json's vocab_size, else `n_vocab_default`
///    (or the tokenizer's own size when that is larger and no config.json says otherwise);
///  - tokenizer.ggml.token_type: NORMAL (1); added tokens CONTROL (3) when special or shaped like a
///    special token ("<|...|>" and the others of does_token_look_special), else USER_DEFINED (4);
///    pads UNUSED (5);
///  - tokenizer.ggml.merges as "a b" strings (pair-form merges joined; a space inside a part is
///    written as U+0120, as gguf-py does);
///  - special token ids (bos, eos, unk, sep, pad, cls, mask) from tokenizer_config.json's
///    `<type>_token` (looked up among the added tokens), then from config.json's `<type>_token_id`
///    for types still unset; `add_<type>_token` flags from tokenizer_config.json;
///  - tokenizer.chat_template from tokenizer_config.json, else from chat_template.jinja.
/// Not handled (not needed for gpt-oss and Qwen3; an error or documented omission): WordPiece /
/// Unigram / SentencePiece models (error), add_*_token inferred from a TemplateProcessing post-
/// processor (not derived), lists of named chat templates (error).
/// Returns the number of tokens written. Throws nitro::Error naming the file and field on bad input.
int64_t write_hf_tokenizer(GgufMetadata& m, const std::string& dir, int64_t n_vocab_default);

}  // namespace nitro
