#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenize.h"

#include "core/error.h"

#include <pcre2.h>

namespace nitro {

namespace {

// The regexes, from each model's tokenizer.json `pre_tokenizer` (Split, Isolated).
const std::vector<PreTokenizerSpec>& spec_table() {
    static const std::vector<PreTokenizerSpec> table = {
        {"gpt-4o",
         {R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
          R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
          R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
         false, true, "openai/gpt-oss-20b tokenizer.json (o200k_harmony); ignore_merges: true"},
        {"qwen2",
         {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
         true, false, "Qwen/Qwen3 tokenizer.json; normalizer NFC"},
        {"llama-bpe",
         {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
         false, true, "meta-llama/Meta-Llama-3 tokenizer.json; ignore_merges: true (no goldens here)"},
    };
    return table;
}

// Unicode White_Space (PropList.txt), the meaning of `\s` in Rust regex and Oniguruma.
constexpr std::string_view kWhiteSpace =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

}  // namespace

const PreTokenizerSpec* find_pretokenizer_spec(std::string_view name) {
    for (const auto& s : spec_table())
        if (s.name == name) return &s;
    return nullptr;
}

std::vector<std::string> known_pretokenizers() {
    std::vector<std::string> r;
    for (const auto& s : spec_table()) r.push_back(s.name);
    return r;
}

std::string translate_regex_to_pcre2(std::string_view re) {
    std::string out;
    bool in_class = false;
    for (size_t i = 0; i < re.size(); ++i) {
        const char c = re[i];
        if (c == '\\' && i + 1 < re.size()) {
            const char n = re[++i];
            if (n == 's') {
                if (in_class) out.append(kWhiteSpace);
                else out.append("[").append(kWhiteSpace).append("]");
            } else if (n == 'S') {
                if (in_class) fail("pre-tokenizer regex '{}': \\S inside a character class is not supported", re);
                out.append("[^").append(kWhiteSpace).append("]");
            } else {
                out.push_back('\\');
                out.push_back(n);
            }
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = true;
            out.push_back(c);
            if (i + 1 < re.size() && re[i + 1] == '^') out.push_back(re[++i]);
            if (i + 1 < re.size() && re[i + 1] == ']') out.push_back(re[++i]);  // literal ]
            continue;
        }
        if (c == ']' && in_class) in_class = false;
        out.push_back(c);
    }
    return out;
}

struct PreTokenizer::Regex {
    pcre2_code* code = nullptr;
    bool jit = false;
    ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(const PreTokenizerSpec& spec) : spec_(spec) {
    for (const std::string& hf : spec.regexes) {
        const std::string pattern = translate_regex_to_pcre2(hf);
        int err = 0;
        PCRE2_SIZE off = 0;
        auto r = std::make_unique<Regex>();
        r->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
        if (!r->code) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            fail("pre-tokenizer '{}': PCRE2 cannot compile its regex at offset {}: {}", spec.name, off,
                 reinterpret_cast<const char*>(msg));
        }
        r->jit = pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE) == 0;
        regexes_.push_back(std::move(r));
    }
}

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

namespace {

/// Per-thread PCRE2 state: match data and a JIT stack larger than the 32 KiB default, so long
/// runs of letters or spaces cannot exhaust it.
struct MatchScratch {
    pcre2_match_data* md = nullptr;
    pcre2_jit_stack* stack = nullptr;
    pcre2_match_context* ctx = nullptr;
    MatchScratch() {
        md = pcre2_match_data_create(4, nullptr);
        stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
        ctx = pcre2_match_context_create(nullptr);
        pcre2_jit_stack_assign(ctx, nullptr, stack);
    }
    ~MatchScratch() {
        pcre2_match_context_free(ctx);
        pcre2_jit_stack_free(stack);
        pcre2_match_data_free(md);
    }
};

MatchScratch& scratch() {
    thread_local MatchScratch s;
    return s;
}

/// Appends the pieces of `text` under one regex: each match, and each gap between matches.
void split_one(const pcre2_code* code, bool jit, std::string_view text, std::vector<std::string_view>& out,
               const std::string& name) {
    MatchScratch& s = scratch();
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0;     // next offset to search from
    size_t emitted = 0; // text before this offset is already in `out`
    while (pos < text.size()) {
        const int rc = jit ? pcre2_jit_match(code, subject, text.size(), pos, 0, s.md, s.ctx)
                           : pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, s.md, s.ctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            fail("pre-tokenizer '{}': PCRE2 match failed at byte {}: {}", name, pos,
                 reinterpret_cast<const char*>(msg));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.md);
        const size_t b = ov[0], e = ov[1];
        if (b > emitted) out.push_back(text.substr(emitted, b - emitted));
        if (e > b) {
            out.push_back(text.substr(b, e - b));
            emitted = e;
            pos = e;
        } else {
            // Empty match: step over one code point (none of the shipped regexes matches empty).
            pos = b + 1;
            while (pos < text.size() && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80) ++pos;
        }
    }
    if (emitted < text.size()) out.push_back(text.substr(emitted));
}

}  // namespace

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
    if (text.empty()) return;
    if (regexes_.empty()) {
        out.push_back(text);
        return;
    }
    const size_t first = out.size();
    split_one(regexes_[0]->code, regexes_[0]->jit, text, out, spec_.name);
    for (size_t r = 1; r < regexes_.size(); ++r) {
        std::vector<std::string_view> pieces(out.begin() + static_cast<ptrdiff_t>(first), out.end());
        out.resize(first);
        for (std::string_view p : pieces) split_one(regexes_[r]->code, regexes_[r]->jit, p, out, spec_.name);
    }
}

}  // namespace nitro
