#include "grammar/lexers.h"

#include <cstddef>

namespace nitro::grammar {

namespace {

StrStep compute(uint8_t s, uint8_t b) {
    auto hex = [](uint8_t c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); };
    auto in = [](uint8_t c, uint8_t lo, uint8_t hi) { return c >= lo && c <= hi; };
    const StrStep dead{s, STR_DEAD};
    switch (s) {
        case STR_NORMAL:
            if (b == '"') return {STR_NORMAL, STR_EXIT};
            if (b == '\\') return {STR_ESC, STR_START};
            if (b < 0x20) return dead;  // control characters must be escaped
            if (b < 0x80) return {STR_NORMAL, STR_CHAR};
            if (in(b, 0xC2, 0xDF)) return {STR_C1, STR_START};
            if (b == 0xE0) return {STR_C2_E0, STR_START};
            if (b == 0xED) return {STR_C2_ED, STR_START};
            if (in(b, 0xE1, 0xEF)) return {STR_C2, STR_START};
            if (b == 0xF0) return {STR_C3_F0, STR_START};
            if (in(b, 0xF1, 0xF3)) return {STR_C3, STR_START};
            if (b == 0xF4) return {STR_C3_F4, STR_START};
            return dead;  // 80-C1 (continuation or overlong lead), F5-FF
        case STR_ESC:
            if (b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' || b == 'r' || b == 't') return {STR_NORMAL, STR_CONT};
            if (b == 'u') return {STR_U4, STR_CONT};
            return dead;
        case STR_U4:
            if (b == 'd' || b == 'D') return {STR_U3D, STR_CONT};
            return hex(b) ? StrStep{STR_U3, STR_CONT} : dead;
        case STR_U3D: return in(b, '0', '7') ? StrStep{STR_U2, STR_CONT} : dead;
        case STR_U3: return hex(b) ? StrStep{STR_U2, STR_CONT} : dead;
        case STR_U2: return hex(b) ? StrStep{STR_U1, STR_CONT} : dead;
        case STR_U1: return hex(b) ? StrStep{STR_NORMAL, STR_CONT} : dead;
        case STR_C1: return in(b, 0x80, 0xBF) ? StrStep{STR_NORMAL, STR_CONT} : dead;
        case STR_C2: return in(b, 0x80, 0xBF) ? StrStep{STR_C1, STR_CONT} : dead;
        case STR_C2_E0: return in(b, 0xA0, 0xBF) ? StrStep{STR_C1, STR_CONT} : dead;
        case STR_C2_ED: return in(b, 0x80, 0x9F) ? StrStep{STR_C1, STR_CONT} : dead;
        case STR_C3: return in(b, 0x80, 0xBF) ? StrStep{STR_C2, STR_CONT} : dead;
        case STR_C3_F0: return in(b, 0x90, 0xBF) ? StrStep{STR_C2, STR_CONT} : dead;
        case STR_C3_F4: return in(b, 0x80, 0x8F) ? StrStep{STR_C2, STR_CONT} : dead;
        default: return dead;
    }
}

struct Table {
    std::array<std::array<StrStep, 256>, STR_N_STATES> t;
    Table() {
        for (int s = 0; s < STR_N_STATES; ++s)
            for (int b = 0; b < 256; ++b) t[static_cast<size_t>(s)][static_cast<size_t>(b)] = compute(static_cast<uint8_t>(s), static_cast<uint8_t>(b));
    }
};

const Table& table() {
    static const Table t;
    return t;
}

}  // namespace

StrStep str_step(uint8_t s, uint8_t b) { return table().t[s][b]; }

}  // namespace nitro::grammar
