#include "tokenizer/vocab.h"

#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/unicode.h"

#include <algorithm>

namespace nitro {

namespace {

/// GPT-2 bytes_to_unicode: printable bytes stand for themselves, the other 68 bytes (controls,
/// space, DEL, NBSP, soft hyphen, ...) are shifted to U+0100.. in byte order.
struct ByteTable {
    std::array<uint32_t, 256> to_cp{};
    std::array<int16_t, 512> from_cp{};  // code point (< 512) -> byte, -1 if none
    ByteTable() {
        from_cp.fill(-1);
        uint32_t next = 256;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
            to_cp[b] = printable ? static_cast<uint32_t>(b) : next++;
            from_cp[to_cp[b]] = static_cast<int16_t>(b);
        }
    }
};
const ByteTable& byte_table() {
    static const ByteTable t;
    return t;
}

/// Decodes byte-level token text to bytes. As Hugging Face's ByteLevel decoder does, a token
/// with any character outside the byte alphabet is taken as its raw UTF-8 bytes.
void decode_token_text(std::string_view text, std::string& out) {
    const ByteTable& bt = byte_table();
    const size_t start = out.size();
    for (size_t i = 0; i < text.size();) {
        Utf8Step st = utf8_step(text.substr(i));
        if (st.kind != Utf8Step::Kind::OK || st.cp >= 512 || bt.from_cp[st.cp] < 0) {
            out.resize(start);
            out.append(text);
            return;
        }
        out.push_back(static_cast<char>(bt.from_cp[st.cp]));
        i += st.len;
    }
}

template <typename T>
const std::vector<T>& array_of(const GgufMetadata& meta, const char* key, const char* what) {
    const GgufArray* a = meta.get_array(key);
    if (!a) fail("{}: metadata key '{}' is missing; a byte-level BPE tokenizer needs it", meta.source, key);
    const auto* v = std::get_if<std::vector<T>>(&a->data);
    if (!v) fail("{}: metadata key '{}' is an array of {}, expected {}", meta.source, key, gguf_type_name(a->type), what);
    return *v;
}

}  // namespace

uint32_t byte_to_codepoint(uint8_t b) { return byte_table().to_cp[b]; }

std::string_view Vocab::text(int32_t id) const {
    const auto i = static_cast<size_t>(id);
    return std::string_view(text_arena_).substr(text_off_.at(i), text_off_.at(i + 1) - text_off_[i]);
}

std::string_view Vocab::bytes(int32_t id) const {
    const auto i = static_cast<size_t>(id);
    return std::string_view(bytes_arena_).substr(bytes_off_.at(i), bytes_off_.at(i + 1) - bytes_off_[i]);
}

int32_t Vocab::find_text(std::string_view t) const {
    for (int32_t id : added_)
        if (text(id) == t) return id;
    // Normal tokens: their text is the byte-level encoding of their bytes.
    std::string b;
    decode_token_text(t, b);
    const int32_t id = find_bytes(b);
    return id >= 0 && text(id) == t ? id : -1;
}

Vocab Vocab::from_lists(const std::vector<std::string>& tokens, const std::vector<int32_t>& types,
                        const std::vector<std::string>& merges, const std::string& source) {
    Vocab v;
    v.build(tokens, types, merges, source);
    return v;
}

Vocab Vocab::from_gguf(const GgufMetadata& meta) {
    const std::optional<std::string> model = meta.get_string("tokenizer.ggml.model");
    if (!model) fail("{}: metadata key 'tokenizer.ggml.model' is missing; the file has no tokenizer", meta.source);
    if (*model != "gpt2")
        fail("{}: tokenizer.ggml.model is '{}'; only byte-level BPE ('gpt2') is supported", meta.source, *model);
    const auto& tokens = array_of<std::string>(meta, "tokenizer.ggml.tokens", "strings");
    const auto& merges = array_of<std::string>(meta, "tokenizer.ggml.merges", "strings");
    std::vector<int32_t> types;
    if (meta.get_array("tokenizer.ggml.token_type"))
        types = array_of<int32_t>(meta, "tokenizer.ggml.token_type", "int32 values");
    else
        types.assign(tokens.size(), static_cast<int32_t>(TokenType::NORMAL));

    Vocab v;
    v.build(tokens, types, merges, meta.source);
    v.pre_ = meta.get_string("tokenizer.ggml.pre").value_or("");
    v.chat_template_ = meta.get_string("tokenizer.chat_template").value_or("");
    auto id_key = [&](const char* key) -> std::optional<int32_t> {
        std::optional<int64_t> x = meta.get_int(key);
        if (!x) return std::nullopt;
        if (*x < 0 || *x >= v.size())
            fail("{}: metadata key '{}' = {} is not a token id (vocabulary has {} tokens)", meta.source, key, *x, v.size());
        return static_cast<int32_t>(*x);
    };
    v.bos_id = id_key("tokenizer.ggml.bos_token_id");
    v.eos_id = id_key("tokenizer.ggml.eos_token_id");
    v.pad_id = id_key("tokenizer.ggml.padding_token_id");
    v.eot_id = id_key("tokenizer.ggml.eot_token_id");
    v.add_bos = meta.get_bool("tokenizer.ggml.add_bos_token").value_or(false);
    v.add_eos = meta.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
    if (v.add_bos && !v.bos_id)
        fail("{}: tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id is missing", meta.source);
    if (v.add_eos && !v.eos_id)
        fail("{}: tokenizer.ggml.add_eos_token is true but tokenizer.ggml.eos_token_id is missing", meta.source);
    return v;
}

void Vocab::build(const std::vector<std::string>& tokens, const std::vector<int32_t>& types,
                  const std::vector<std::string>& merges, const std::string& source) {
    if (tokens.empty()) fail("{}: tokenizer.ggml.tokens is empty", source);
    if (types.size() != tokens.size())
        fail("{}: tokenizer.ggml.token_type has {} entries, tokenizer.ggml.tokens has {}; they must match",
             source, types.size(), tokens.size());
    const size_t n = tokens.size();
    size_t total = 0;
    for (const auto& t : tokens) total += t.size();
    if (total >= UINT32_MAX) fail("{}: tokenizer.ggml.tokens holds {} bytes, too many", source, total);

    types_.resize(n);
    text_arena_.reserve(total);
    bytes_arena_.reserve(total);
    text_off_.resize(n + 1);
    bytes_off_.resize(n + 1);
    for (size_t i = 0; i < n; ++i) {
        const int32_t t = types[i];
        if (t < 0 || t > static_cast<int32_t>(TokenType::BYTE))
            fail("{}: tokenizer.ggml.token_type[{}] = {} is not a llama_token_type (0..6)", source, i, t);
        types_[i] = static_cast<TokenType>(t);
        text_off_[i] = static_cast<uint32_t>(text_arena_.size());
        text_arena_.append(tokens[i]);
        bytes_off_[i] = static_cast<uint32_t>(bytes_arena_.size());
        decode_token_text(tokens[i], bytes_arena_);
    }
    text_off_[n] = static_cast<uint32_t>(text_arena_.size());
    bytes_off_[n] = static_cast<uint32_t>(bytes_arena_.size());

    byte_token_.fill(-1);
    by_bytes_.reserve(n);
    for (size_t i = 0; i < n; ++i) {
        const auto id = static_cast<int32_t>(i);
        switch (types_[i]) {
            case TokenType::UNDEFINED:
            case TokenType::NORMAL:
            case TokenType::BYTE:
                if (by_bytes_.insert(bytes(id), id) && bytes(id).size() == 1)
                    byte_token_[static_cast<uint8_t>(bytes(id)[0])] = id;
                break;
            case TokenType::CONTROL:
            case TokenType::USER_DEFINED:
            case TokenType::UNKNOWN:
                if (!text(id).empty()) added_.push_back(id);
                break;
            case TokenType::UNUSED: break;
        }
    }
    for (int b = 0; b < 256; ++b)
        if (byte_token_[b] < 0)
            fail("{}: the vocabulary has no token for byte 0x{:02X}; a byte-level BPE vocabulary needs all 256",
                 source, b);

    // Merges: each needs three lookups (left, right, joined) that miss the cache, so they are
    // done in batches: decode and hash a batch, prefetch its slots, then look up and insert.
    merges_.reserve(merges.size());
    n_merges_ = merges.size();
    constexpr size_t kBatch = 32;
    struct Pending {
        std::string left, right, joined;
        uint64_t hl = 0, hr = 0, hj = 0;
        int32_t a = -1, b = -1, c = -1;
    };
    std::vector<Pending> batch(kBatch);
    for (size_t base = 0; base < merges.size(); base += kBatch) {
        const size_t count = std::min(kBatch, merges.size() - base);
        for (size_t k = 0; k < count; ++k) {
            const std::string& m = merges[base + k];
            Pending& p = batch[k];
            const size_t sp = m.find(' ', 1);
            if (sp == std::string::npos || sp + 1 >= m.size())
                fail("{}: tokenizer.ggml.merges[{}] = '{}' is not two tokens separated by a space", source,
                     base + k, m);
            p.left.clear();
            p.right.clear();
            decode_token_text(std::string_view(m).substr(0, sp), p.left);
            decode_token_text(std::string_view(m).substr(sp + 1), p.right);
            p.joined.assign(p.left).append(p.right);
            p.hl = hash_bytes(p.left);
            p.hr = hash_bytes(p.right);
            p.hj = hash_bytes(p.joined);
            by_bytes_.prefetch(p.hl);
            by_bytes_.prefetch(p.hr);
            by_bytes_.prefetch(p.hj);
        }
        for (size_t k = 0; k < count; ++k) {
            Pending& p = batch[k];
            p.a = by_bytes_.find_hashed(p.left, p.hl);
            p.b = by_bytes_.find_hashed(p.right, p.hr);
            p.c = by_bytes_.find_hashed(p.joined, p.hj);
            if (p.a < 0 || p.b < 0 || p.c < 0)
                fail("{}: tokenizer.ggml.merges[{}] = '{}' refers to a token that is not in the vocabulary",
                     source, base + k, merges[base + k]);
            merges_.prefetch(p.a, p.b);
        }
        for (size_t k = 0; k < count; ++k)
            merges_.insert(batch[k].a, batch[k].b, BpeMerge{static_cast<int32_t>(base + k), batch[k].c});
    }
}

}  // namespace nitro
