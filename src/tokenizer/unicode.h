// UTF-8 helpers and Unicode NFC normalization for the tokenizer.
//
// UTF-8 decoding follows the Unicode Standard's well-formed byte sequences (Table 3-7). An
// ill-formed sequence is replaced by U+FFFD per *maximal subpart* (Unicode 15, section 3.9,
// "U+FFFD Substitution of Maximal Subparts"), which is what Rust's String::from_utf8_lossy and
// therefore Hugging Face `tokenizers` decode do.
// NFC follows UAX #15 (canonical decomposition, canonical ordering, canonical composition) with
// tables generated from Python's unicodedata by tools/gen_nfc_tables.py.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace nitro {

/// Result of decoding one UTF-8 sequence at the start of a byte range.
struct Utf8Step {
    enum class Kind { OK, INVALID, INCOMPLETE } kind = Kind::OK;
    uint32_t cp = 0;   ///< the code point when kind == OK
    size_t len = 0;    ///< bytes consumed: the sequence (OK), the maximal ill-formed subpart
                       ///< (INVALID, >= 1), or the valid-so-far prefix cut by the end (INCOMPLETE)
};

/// Decodes the sequence that starts at s[0] (s must not be empty).
Utf8Step utf8_step(std::string_view s);

/// True if `s` is well-formed UTF-8.
bool utf8_is_valid(std::string_view s);

/// `s` with every maximal ill-formed subpart (and a sequence cut off by the end) replaced by
/// U+FFFD; well-formed input is returned unchanged.
std::string utf8_sanitize(std::string_view s);

/// Number of code points in well-formed UTF-8 `s` (what Python's len() gives).
size_t utf8_length(std::string_view s);

/// Appends the UTF-8 encoding of `cp` to `out`.
void utf8_append(std::string& out, uint32_t cp);

/// Unicode Normalization Form C of well-formed UTF-8 `s`. Text made only of code points below
/// U+0300 is always in NFC and is returned without work.
std::string nfc_normalize(std::string_view s);

/// Canonical combining class of `cp` (0 for starters).
uint8_t unicode_ccc(uint32_t cp);

namespace unicode_data {
struct CccRange { uint32_t first, last, ccc; };
struct Decomposition { uint32_t cp, first, second; };  ///< second == 0: singleton mapping
struct Composition { uint32_t first, second, composite; };
extern const char* const kUnicodeVersion;
extern const CccRange kCccRanges[];
extern const size_t kCccRanges_size;
extern const Decomposition kDecompositions[];
extern const size_t kDecompositions_size;
extern const Composition kCompositions[];
extern const size_t kCompositions_size;
}  // namespace unicode_data

}  // namespace nitro
