// Byte-level BPE tokenizer (GPT-2 style) over a GGUF vocabulary, equal to Hugging Face
// `tokenizers` for the model families in pretokenize.cpp.
//
// encode(text):
//   1. added tokens: leftmost-longest match of the added-token strings in the raw text. CONTROL
//      tokens (<|start|>, <|im_end|>) only when the caller parses specials; USER_DEFINED tokens
//      (<think>, <tool_call>) always, as Hugging Face does for added tokens not flagged special,
//      except that with special_ranges (a chat's markup) both kinds match only inside them.
//   2. each stretch between them: NFC if the family normalizes, then the pre-tokenizer regex.
//   3. each piece: if ignore_merges and the piece is a token, that token; else BPE merges by
//      rank, lowest first, leftmost first among equal ranks (the order HF's heap produces).
// decode(ids): the bytes of each token, concatenated, made valid UTF-8 (U+FFFD per maximal
// ill-formed subpart), which is what HF's decode with skip_special_tokens=false returns.
#pragma once

#include "tokenizer/pretokenize.h"
#include "tokenizer/vocab.h"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nitro {

class GgufMetadata;

/// Options of one encode call.
struct EncodeOptions {
    bool parse_special = false;  ///< match CONTROL token text (<|start|>) as those tokens
    bool add_special = false;    ///< prepend BOS / append EOS where the vocabulary asks for it
    /// With parse_special: added tokens, CONTROL and USER_DEFINED alike (<|im_end|>, and Qwen3's
    /// <think>, <tool_call>, <tool_response>), only where their whole text lies inside one of
    /// these [first, second) byte ranges of the input (sorted, disjoint), e.g. a chat template's
    /// own markup (RenderedChat); elsewhere their text is plain text. nullptr: CONTROL tokens
    /// anywhere, USER_DEFINED ones always (as Hugging Face matches them).
    const std::vector<std::pair<size_t, size_t>>* special_ranges = nullptr;
};

class Tokenizer {
public:
    /// Builds the tokenizer from GGUF metadata. Throws nitro::Error if the vocabulary is invalid
    /// or tokenizer.ggml.pre names a pre-tokenizer this engine does not implement.
    static Tokenizer from_gguf(const GgufMetadata& meta);

    /// Builds a tokenizer from a vocabulary and a pre-tokenizer spec.
    Tokenizer(Vocab vocab, const PreTokenizerSpec& spec);

    /// Token ids of `text`. Ill-formed UTF-8 in `text` is first replaced by U+FFFD.
    std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opt = {}) const;

    /// Appends the ids of plain text (no added-token matching, no BOS/EOS) to `out`.
    void encode_plain(std::string_view text, std::vector<int32_t>& out) const;

    /// Text of `ids`: token bytes concatenated, ill-formed UTF-8 replaced by U+FFFD.
    /// Throws nitro::Error for an id outside the vocabulary.
    std::string decode(std::span<const int32_t> ids) const;

    /// Appends the raw bytes of `ids` to `out` (may be ill-formed UTF-8).
    /// Throws nitro::Error for an id outside the vocabulary.
    void decode_bytes(std::span<const int32_t> ids, std::string& out) const;

    const Vocab& vocab() const { return vocab_; }
    const PreTokenizer& pretokenizer() const { return pre_; }

private:
    void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
    void merge_small(std::string_view piece, std::vector<int32_t>& out) const;
    void merge_large(std::string_view piece, std::vector<int32_t>& out) const;
    /// Leftmost-longest added token at or after `from`: its position and id (id -1: none).
    /// With `ranges`, control tokens only inside them (EncodeOptions::special_ranges).
    std::pair<size_t, int32_t> find_added(std::string_view text, size_t from, bool parse_special,
                                          const std::vector<std::pair<size_t, size_t>>* ranges) const;

    Vocab vocab_;
    PreTokenizer pre_;
    bool ignore_merges_ = false;
    bool nfc_ = false;
    std::array<bool, 256> added_first_byte_{};  // first bytes of added tokens
    std::vector<int32_t> added_by_length_;      // added token ids, longest first
};

}  // namespace nitro
