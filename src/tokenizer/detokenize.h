// Streaming detokenizer: turns tokens given one at a time into text that is always valid UTF-8.
//
// Bytes of a multi-byte character split across tokens are held back until the character
// completes; a byte sequence that can never become valid is replaced by U+FFFD (one per maximal
// ill-formed subpart), so the concatenation of everything emitted, plus flush(), equals
// Tokenizer::decode() of all the tokens at once.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace nitro {

class Tokenizer;

/// Incremental UTF-8 assembly from raw bytes (used by StreamingDetokenizer; usable on its own).
class Utf8Stream {
public:
    /// Adds bytes; returns the text that is now complete (valid UTF-8, possibly empty).
    std::string push(std::string_view bytes);
    /// Ends the stream: an incomplete sequence left over becomes U+FFFD.
    std::string flush();
    /// Bytes held back waiting for the rest of a character (0..3).
    size_t pending() const { return pending_.size(); }

private:
    std::string pending_;
};

class StreamingDetokenizer {
public:
    explicit StreamingDetokenizer(const Tokenizer& tok) : tok_(&tok) {}

    /// Adds one token; returns the text it completes (valid UTF-8, possibly empty).
    /// Throws nitro::Error for an id outside the vocabulary.
    std::string push(int32_t id);
    /// Ends the stream; returns U+FFFD if an incomplete character was pending, else "".
    std::string flush() { return utf8_.flush(); }
    /// Bytes held back waiting for the rest of a character.
    size_t pending() const { return utf8_.pending(); }

private:
    const Tokenizer* tok_;
    Utf8Stream utf8_;
};

}  // namespace nitro
