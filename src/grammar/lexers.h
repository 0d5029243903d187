// Byte-level lexers of the constrained-decoding automaton: the body of a JSON string (RFC 8259
// section 7, with UTF-8 checked as RFC 3629 section 4 gives it, so every output is valid UTF-8),
// the whitespace allowed between JSON tokens, and JSON numbers.
//
// Whitespace is bounded so that a model cannot fill its budget with it: a gap is empty, one
// space, or one or two newlines followed by at most kMaxIndent spaces/tabs (the shape of
// pretty-printed JSON; llama.cpp's json-schema-to-grammar bounds its `space` rule the same way).
// Numbers are bounded too: at most 16 integer digits, 16 fraction digits and 3 exponent digits.
#pragma once

#include <array>
#include <cstdint>

namespace nitro::grammar {

// ---- JSON string body --------------------------------------------------------------------------

/// String lexer states (after the opening quote).
enum StrState : uint8_t {
    STR_NORMAL,   ///< between characters
    STR_ESC,      ///< after '\'
    STR_U4,       ///< after "\u": 4 hex digits to go
    STR_U3,       ///< 3 hex digits to go
    STR_U3D,      ///< after "\uD": [0-7] (no surrogate escapes), then 2 more
    STR_U2,
    STR_U1,
    STR_C1,       ///< one UTF-8 continuation byte to go (80-BF)
    STR_C2,       ///< two to go
    STR_C2_E0,    ///< after E0: A0-BF, then one
    STR_C2_ED,    ///< after ED: 80-9F (no surrogates), then one
    STR_C3,       ///< three to go
    STR_C3_F0,    ///< after F0: 90-BF, then two
    STR_C3_F4,    ///< after F4: 80-8F (at most U+10FFFF), then two
    STR_N_STATES
};

/// What a byte did in the string body.
enum StrEvent : uint8_t {
    STR_DEAD,   ///< not allowed here
    STR_CONT,   ///< continues a character begun earlier
    STR_START,  ///< begins a character (escape or multi-byte) that later bytes complete
    STR_CHAR,   ///< a whole one-byte character
    STR_EXIT,   ///< the closing quote
};

struct StrStep {
    uint8_t state;
    uint8_t event;
};

/// The transition of the string lexer in `s` on byte `b`.
StrStep str_step(uint8_t s, uint8_t b);

/// True if the event begins a character (a string's length counts characters as they begin).
inline bool str_begins_char(uint8_t ev) { return ev == STR_START || ev == STR_CHAR; }

// ---- Whitespace between tokens -----------------------------------------------------------------

inline constexpr int kMaxIndent = 20;

/// The gap state after byte `b` in gap state `ws` (0 = nothing yet), or -1 if `b` is not allowed
/// whitespace there (or not whitespace).
inline int gap_step(uint8_t ws, uint8_t b) {
    // 0: empty; 1: one space (final); 2..2+kMaxIndent: one newline + indent; then two newlines + indent.
    constexpr int kNl1 = 2, kNl2 = kNl1 + kMaxIndent + 1;
    if (ws == 0) return b == ' ' ? 1 : b == '\n' ? kNl1 : -1;
    if (ws == 1) return -1;
    if (ws == kNl1 && b == '\n') return kNl2;
    if (b == ' ' || b == '\t') {
        const int base = ws >= kNl2 ? kNl2 : kNl1;
        return ws - base < kMaxIndent ? ws + 1 : -1;
    }
    return -1;
}

inline bool is_json_space(uint8_t b) { return b == ' ' || b == '\n' || b == '\t' || b == '\r'; }

// ---- Numbers ----------------------------------------------------------------------------------

enum NumState : uint8_t { NUM_SIGN, NUM_ZERO, NUM_INT, NUM_DOT, NUM_FRAC, NUM_E, NUM_ESIGN, NUM_EXP };

inline constexpr uint32_t kMaxIntDigits = 16, kMaxFracDigits = 16, kMaxExpDigits = 3;

/// True where the number read so far is complete (it may still continue).
inline bool num_complete(uint8_t s) { return s == NUM_ZERO || s == NUM_INT || s == NUM_FRAC || s == NUM_EXP; }

}  // namespace nitro::grammar
