#include "tokenizer/bpe.h"

#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/unicode.h"

#include <algorithm>
#include <queue>

namespace nitro {

Tokenizer Tokenizer::from_gguf(const GgufMetadata& meta) {
    Vocab v = Vocab::from_gguf(meta);
    const PreTokenizerSpec* spec = find_pretokenizer_spec(v.pre());
    if (!spec) {
        std::string known;
        for (const auto& n : known_pretokenizers()) known += (known.empty() ? "" : ", ") + n;
        fail("{}: tokenizer.ggml.pre is '{}'; this engine implements the pre-tokenizers {}",
             meta.source, v.pre(), known);
    }
    return Tokenizer(std::move(v), *spec);
}

Tokenizer::Tokenizer(Vocab vocab, const PreTokenizerSpec& spec)
    : vocab_(std::move(vocab)), pre_(spec), ignore_merges_(spec.ignore_merges), nfc_(spec.nfc) {
    added_by_length_ = vocab_.added_tokens();
    std::stable_sort(added_by_length_.begin(), added_by_length_.end(), [&](int32_t a, int32_t b) {
        return vocab_.text(a).size() > vocab_.text(b).size();
    });
    for (int32_t id : added_by_length_) added_first_byte_[static_cast<uint8_t>(vocab_.text(id)[0])] = true;
}

namespace {

using Ranges = std::vector<std::pair<size_t, size_t>>;

/// True if [at, at + len) lies inside one range of the sorted, disjoint `ranges`.
bool inside(const Ranges& ranges, size_t at, size_t len) {
    auto it = std::upper_bound(ranges.begin(), ranges.end(), at, [](size_t v, const auto& r) { return v < r.first; });
    if (it == ranges.begin()) return false;
    --it;
    return at >= it->first && at + len <= it->second;
}

/// Replaces ill-formed UTF-8 range by range, so `ranges` can be moved to the sanitized text.
std::string sanitize_keeping_ranges(std::string_view text, const Ranges& ranges, Ranges& moved) {
    std::string out;
    size_t pos = 0;
    auto copy = [&](size_t end) {
        out += utf8_sanitize(text.substr(pos, end - pos));
        pos = end;
    };
    for (const auto& [b, e] : ranges) {
        copy(std::min(b, text.size()));
        const size_t start = out.size();
        copy(std::min(e, text.size()));
        moved.emplace_back(start, out.size());
    }
    copy(text.size());
    return out;
}

}  // namespace

std::pair<size_t, int32_t> Tokenizer::find_added(std::string_view text, size_t from, bool parse_special,
                                                 const Ranges* ranges) const {
    for (size_t i = from; i < text.size(); ++i) {
        if (!added_first_byte_[static_cast<uint8_t>(text[i])]) continue;
        const std::string_view rest = text.substr(i);
        for (int32_t id : added_by_length_) {  // longest first: the first hit is the longest
            const bool control = vocab_.is_control(id);
            if (!parse_special && control) continue;
            const std::string_view t = vocab_.text(id);
            if (rest.size() >= t.size() && rest.compare(0, t.size(), t) == 0) {
                if (ranges && !inside(*ranges, i, t.size())) continue;  // request text: plain, whatever it spells
                return {i, id};
            }
        }
    }
    return {text.size(), -1};
}

std::vector<int32_t> Tokenizer::encode(std::string_view input, const EncodeOptions& opt) const {
    std::string sanitized;
    std::string_view text = input;
    const Ranges* ranges = opt.parse_special ? opt.special_ranges : nullptr;
    Ranges moved;
    if (!utf8_is_valid(input)) {
        if (ranges) {
            sanitized = sanitize_keeping_ranges(input, *ranges, moved);
            ranges = &moved;
        } else {
            sanitized = utf8_sanitize(input);
        }
        text = sanitized;
    }
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 4);
    if (opt.add_special && vocab_.add_bos) out.push_back(*vocab_.bos_id);
    size_t pos = 0;
    while (pos < text.size()) {
        auto [at, id] = added_by_length_.empty() ? std::pair<size_t, int32_t>{text.size(), -1}
                                                 : find_added(text, pos, opt.parse_special, ranges);
        encode_plain(text.substr(pos, at - pos), out);
        if (id < 0) break;
        out.push_back(id);
        pos = at + vocab_.text(id).size();
    }
    if (opt.add_special && vocab_.add_eos) out.push_back(*vocab_.eos_id);
    return out;
}

void Tokenizer::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
    if (text.empty()) return;
    std::string normalized;
    if (nfc_) {
        normalized = nfc_normalize(text);
        text = normalized;
    }
    std::vector<std::string_view> pieces;
    pre_.split(text, pieces);
    for (std::string_view p : pieces) encode_piece(p, out);
}

void Tokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
    if (piece.size() == 1) {
        out.push_back(vocab_.byte_token(static_cast<uint8_t>(piece[0])));
        return;
    }
    if (ignore_merges_) {
        const int32_t id = vocab_.find_bytes(piece);
        if (id >= 0) {
            out.push_back(id);
            return;
        }
    }
    if (piece.size() <= 96) merge_small(piece, out);
    else merge_large(piece, out);
}

// Short pieces (almost all): an array of symbols and the rank of each adjacent pair; each step
// merges the lowest-ranked pair, leftmost on ties, and re-ranks its two neighbours.
void Tokenizer::merge_small(std::string_view piece, std::vector<int32_t>& out) const {
    int32_t ids[96];
    BpeMerge pair[96];
    int n = static_cast<int>(piece.size());
    for (int i = 0; i < n; ++i) ids[i] = vocab_.byte_token(static_cast<uint8_t>(piece[i]));
    for (int i = 0; i + 1 < n; ++i) pair[i] = vocab_.merge(ids[i], ids[i + 1]);
    while (n > 1) {
        int best = -1;
        for (int i = 0; i + 1 < n; ++i)
            if (pair[i].rank >= 0 && (best < 0 || pair[i].rank < pair[best].rank)) best = i;
        if (best < 0) break;
        ids[best] = pair[best].id;
        for (int i = best + 1; i + 1 < n; ++i) ids[i] = ids[i + 1];
        for (int i = best + 1; i + 2 < n; ++i) pair[i] = pair[i + 1];
        --n;
        if (best > 0) pair[best - 1] = vocab_.merge(ids[best - 1], ids[best]);
        if (best + 1 < n) pair[best] = vocab_.merge(ids[best], ids[best + 1]);
    }
    out.insert(out.end(), ids, ids + n);
}

// Long pieces: a doubly linked list of symbols and a min-heap of candidate merges ordered by
// (rank, position), with stale entries skipped when popped (HF tokenizers' Word::merge_all).
void Tokenizer::merge_large(std::string_view piece, std::vector<int32_t>& out) const {
    const int n = static_cast<int>(piece.size());
    std::vector<int32_t> ids(n);
    std::vector<int> prev(n), next(n);
    for (int i = 0; i < n; ++i) {
        ids[i] = vocab_.byte_token(static_cast<uint8_t>(piece[i]));
        prev[i] = i - 1;
        next[i] = i + 1 < n ? i + 1 : -1;
    }
    struct Cand {
        int32_t rank;
        int pos;
        int32_t left, right, merged;
        bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
    auto push = [&](int i) {
        if (i < 0 || next[i] < 0) return;
        BpeMerge m = vocab_.merge(ids[i], ids[next[i]]);
        if (m.rank >= 0) heap.push({m.rank, i, ids[i], ids[next[i]], m.id});
    };
    for (int i = 0; i + 1 < n; ++i) push(i);
    while (!heap.empty()) {
        Cand c = heap.top();
        heap.pop();
        const int j = next[c.pos];
        if (ids[c.pos] != c.left || j < 0 || ids[j] != c.right) continue;  // stale
        ids[c.pos] = c.merged;
        ids[j] = -1;
        next[c.pos] = next[j];
        if (next[j] >= 0) prev[next[j]] = c.pos;
        push(prev[c.pos]);
        push(c.pos);
    }
    for (int i = 0; i >= 0; i = next[i]) out.push_back(ids[i]);
}

void Tokenizer::decode_bytes(std::span<const int32_t> ids, std::string& out) const {
    for (int32_t id : ids) {
        if (id < 0 || id >= vocab_.size())
            fail("token id {} is outside the vocabulary (0..{})", id, vocab_.size() - 1);
        out.append(vocab_.bytes(id));
    }
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
    std::string bytes;
    decode_bytes(ids, bytes);
    return utf8_sanitize(bytes);
}

}  // namespace nitro
