// The vocabulary of a byte-level BPE tokenizer, read from GGUF metadata as llama.cpp's
// convert_hf_to_gguf.py writes it:
//   tokenizer.ggml.model         "gpt2" (byte-level BPE; the only model supported here)
//   tokenizer.ggml.pre           pre-tokenizer name ("gpt-4o", "qwen2", "llama-bpe", ...)
//   tokenizer.ggml.tokens        [n_vocab] token text, byte-level encoded (GPT-2 bytes_to_unicode)
//   tokenizer.ggml.token_type    [n_vocab] llama_token_type: 1 normal, 3 control, 4 user-defined,
//                                5 unused, ...
//   tokenizer.ggml.merges        [n_merges] "LEFT RIGHT", in rank order
//   tokenizer.ggml.{bos,eos,padding,eot}_token_id, add_bos_token, add_eos_token
//   tokenizer.chat_template      the Jinja chat template (kept for reference)
// Token text is decoded to raw bytes once at load, so encoding and decoding work on bytes.
#pragma once

#include "tokenizer/flat_map.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nitro {

class GgufMetadata;

/// llama.cpp's llama_token_type values, as stored in tokenizer.ggml.token_type.
enum class TokenType : int32_t {
    UNDEFINED = 0, NORMAL = 1, UNKNOWN = 2, CONTROL = 3, USER_DEFINED = 4, UNUSED = 5, BYTE = 6,
};

class Vocab {
public:
    /// Reads and validates the vocabulary from GGUF metadata. Throws nitro::Error naming the key
    /// (and the token or merge index) when something is missing or inconsistent.
    static Vocab from_gguf(const GgufMetadata& meta);

    /// Builds a vocabulary from in-memory lists (the same content as the GGUF keys).
    /// `source` names the origin in error messages.
    static Vocab from_lists(const std::vector<std::string>& tokens, const std::vector<int32_t>& types,
                            const std::vector<std::string>& merges, const std::string& source);

    /// Number of tokens (ids are 0 .. size()-1).
    int32_t size() const { return static_cast<int32_t>(types_.size()); }
    /// Token text as stored in the GGUF (byte-level encoded for normal tokens).
    std::string_view text(int32_t id) const;
    /// The bytes a token stands for (what decoding emits for it).
    std::string_view bytes(int32_t id) const;
    TokenType type(int32_t id) const { return types_.at(static_cast<size_t>(id)); }
    /// True for CONTROL tokens (<|start|>, <|im_end|>, ...): matched in text only when the caller
    /// asks to parse special tokens.
    bool is_control(int32_t id) const { return type(id) == TokenType::CONTROL; }

    /// Id of the normal token whose bytes are `bytes`, or -1.
    int32_t find_bytes(std::string_view bytes) const { return by_bytes_.find(bytes); }
    /// Id of the token whose GGUF text is exactly `text` (any type), or -1. Linear for non-normal
    /// tokens; meant for setup code, not for hot loops.
    int32_t find_text(std::string_view text) const;
    /// Id of the token for one byte.
    int32_t byte_token(uint8_t b) const { return byte_token_[b]; }
    /// The merge joining (left, right), rank -1 if there is none.
    BpeMerge merge(int32_t left, int32_t right) const { return merges_.find(left, right); }
    size_t n_merges() const { return n_merges_; }
    /// Ids of the added tokens (CONTROL, USER_DEFINED, UNKNOWN), which are matched as whole
    /// strings before pre-tokenization.
    const std::vector<int32_t>& added_tokens() const { return added_; }

    /// tokenizer.ggml.pre ("" if absent).
    const std::string& pre() const { return pre_; }
    /// tokenizer.chat_template ("" if absent).
    const std::string& chat_template() const { return chat_template_; }
    std::optional<int32_t> bos_id, eos_id, pad_id, eot_id;
    bool add_bos = false;
    bool add_eos = false;

private:
    void build(const std::vector<std::string>& tokens, const std::vector<int32_t>& types,
               const std::vector<std::string>& merges, const std::string& source);

    std::vector<TokenType> types_;
    std::string text_arena_;                  // GGUF token texts, concatenated
    std::vector<uint32_t> text_off_;          // [n_vocab + 1]
    std::string bytes_arena_;                 // decoded token bytes, concatenated
    std::vector<uint32_t> bytes_off_;         // [n_vocab + 1]
    StringIdMap by_bytes_;                    // normal tokens: bytes -> id
    MergeMap merges_;
    size_t n_merges_ = 0;
    std::array<int32_t, 256> byte_token_{};
    std::vector<int32_t> added_;
    std::string pre_;
    std::string chat_template_;
};

/// GPT-2's bytes_to_unicode: the code point that stands for byte `b` in byte-level token text.
uint32_t byte_to_codepoint(uint8_t b);

}  // namespace nitro
