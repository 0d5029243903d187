#include "tokenizer/unicode.h"

#include <algorithm>
#include <vector>

namespace nitro {

Utf8Step utf8_step(std::string_view s) {
    const auto b0 = static_cast<uint8_t>(s[0]);
    if (b0 < 0x80) return {Utf8Step::Kind::OK, b0, 1};
    size_t need = 0;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    uint32_t cp = 0;
    if (b0 >= 0xC2 && b0 <= 0xDF) { need = 2; cp = b0 & 0x1F; }
    else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 3; cp = b0 & 0x0F;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;  // no surrogates
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 4; cp = b0 & 0x07;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;  // <= U+10FFFF
    } else {
        return {Utf8Step::Kind::INVALID, 0, 1};
    }
    for (size_t i = 1; i < need; ++i) {
        if (i >= s.size()) return {Utf8Step::Kind::INCOMPLETE, 0, i};
        const auto b = static_cast<uint8_t>(s[i]);
        const uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (b < l || b > h) return {Utf8Step::Kind::INVALID, 0, i};
        cp = (cp << 6) | (b & 0x3F);
    }
    return {Utf8Step::Kind::OK, cp, need};
}

bool utf8_is_valid(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        if (static_cast<uint8_t>(s[i]) < 0x80) { ++i; continue; }
        Utf8Step st = utf8_step(s.substr(i));
        if (st.kind != Utf8Step::Kind::OK) return false;
        i += st.len;
    }
    return true;
}

std::string utf8_sanitize(std::string_view s) {
    if (utf8_is_valid(s)) return std::string(s);
    std::string out;
    out.reserve(s.size() + 8);
    size_t i = 0;
    while (i < s.size()) {
        Utf8Step st = utf8_step(s.substr(i));
        if (st.kind == Utf8Step::Kind::OK) out.append(s.substr(i, st.len));
        else out.append("\xEF\xBF\xBD");
        i += st.len;
    }
    return out;
}

size_t utf8_length(std::string_view s) {
    size_t n = 0;
    for (char c : s) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
    return n;
}

void utf8_append(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

namespace {

using namespace unicode_data;

// Hangul syllable arithmetic (Unicode section 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

const Decomposition* find_decomposition(uint32_t cp) {
    const Decomposition* end = kDecompositions + kDecompositions_size;
    const Decomposition* it = std::lower_bound(
        kDecompositions, end, cp, [](const Decomposition& d, uint32_t c) { return d.cp < c; });
    return it != end && it->cp == cp ? it : nullptr;
}

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
    if (cp >= kSBase && cp < kSBase + kSCount) {
        const uint32_t s = cp - kSBase;
        out.push_back(kLBase + s / kNCount);
        out.push_back(kVBase + (s % kNCount) / kTCount);
        if (s % kTCount) out.push_back(kTBase + s % kTCount);
        return;
    }
    const Decomposition* d = find_decomposition(cp);
    if (!d) { out.push_back(cp); return; }
    decompose(d->first, out);
    if (d->second) decompose(d->second, out);
}

uint32_t compose_pair(uint32_t a, uint32_t b) {
    if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
        return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
    if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
        b < kTBase + kTCount)
        return a + (b - kTBase);
    const Composition* end = kCompositions + kCompositions_size;
    const Composition* it = std::lower_bound(
        kCompositions, end, std::pair{a, b}, [](const Composition& c, std::pair<uint32_t, uint32_t> k) {
            return c.first < k.first || (c.first == k.first && c.second < k.second);
        });
    return it != end && it->first == a && it->second == b ? it->composite : 0;
}

}  // namespace

uint8_t unicode_ccc(uint32_t cp) {
    if (cp < 0x300) return 0;
    const CccRange* end = kCccRanges + kCccRanges_size;
    const CccRange* it = std::upper_bound(kCccRanges, end, cp,
                                          [](uint32_t c, const CccRange& r) { return c < r.first; });
    if (it == kCccRanges) return 0;
    --it;
    return cp <= it->last ? static_cast<uint8_t>(it->ccc) : 0;
}

namespace {

std::string nfc_segment(std::string_view s);

}  // namespace

std::string nfc_normalize(std::string_view s) {
    // Code points below U+0300 are starters that never decompose into anything that does not
    // compose back, and are never the second half of a composition: text made only of them is
    // in NFC, and they cut text into pieces that normalize independently, except that the
    // starter just before a higher code point may compose with it. So only the stretches from
    // that starter to the next code point below U+0300 go through the full algorithm.
    size_t i = 0;
    while (i < s.size() && static_cast<uint8_t>(s[i]) < 0xCC) ++i;
    if (i == s.size()) return std::string(s);
    std::string out;
    out.reserve(s.size() + 16);
    size_t done = 0;
    while (i < s.size()) {
        // s[i] starts a code point >= U+0300 (lead byte >= 0xCC); back up to the starter before.
        size_t seg = i;
        if (seg > done) {
            --seg;
            while (seg > done && (static_cast<uint8_t>(s[seg]) & 0xC0) == 0x80) --seg;
        }
        size_t end = i;
        while (end < s.size()) {
            const auto b = static_cast<uint8_t>(s[end]);
            if (b < 0xCC && (b & 0xC0) != 0x80) break;  // a code point below U+0300 begins here
            ++end;
        }
        out.append(s.substr(done, seg - done));
        out += nfc_segment(s.substr(seg, end - seg));
        done = end;
        i = end;
        while (i < s.size() && static_cast<uint8_t>(s[i]) < 0xCC) ++i;
    }
    out.append(s.substr(done));
    return out;
}

namespace {

std::string nfc_segment(std::string_view s) {
    std::vector<uint32_t> cps;
    cps.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        Utf8Step st = utf8_step(s.substr(i));
        decompose(st.kind == Utf8Step::Kind::OK ? st.cp : 0xFFFD, cps);
        i += st.len;
    }
    // Canonical ordering: stable sort of each run of non-starters by combining class.
    for (size_t i = 0; i < cps.size();) {
        if (unicode_ccc(cps[i]) == 0) { ++i; continue; }
        size_t j = i;
        while (j < cps.size() && unicode_ccc(cps[j]) != 0) ++j;
        std::stable_sort(cps.begin() + i, cps.begin() + j,
                         [](uint32_t a, uint32_t b) { return unicode_ccc(a) < unicode_ccc(b); });
        i = j;
    }
    // Canonical composition.
    std::vector<uint32_t> out;
    out.reserve(cps.size());
    size_t starter = SIZE_MAX;  // index in `out` of the last starter
    int last_ccc = 256;         // class of the last code point kept; 0: it is the starter
    for (uint32_t cp : cps) {
        const int ccc = unicode_ccc(cp);
        if (starter != SIZE_MAX && (last_ccc < ccc || last_ccc == 0)) {
            if (uint32_t c = compose_pair(out[starter], cp)) {
                out[starter] = c;
                continue;
            }
        }
        if (ccc == 0) starter = out.size();
        last_ccc = ccc;
        out.push_back(cp);
    }
    std::string r;
    r.reserve(s.size());
    for (uint32_t cp : out) utf8_append(r, cp);
    return r;
}

}  // namespace

}  // namespace nitro
