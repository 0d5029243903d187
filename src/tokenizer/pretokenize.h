// Pre-tokenizers: split text into pieces that BPE encodes independently, with the regexes of
// Hugging Face `tokenizers` (the `Split` pre-tokenizer of each model's tokenizer.json, behavior
// "Isolated"), run by PCRE2 (UTF + Unicode properties, JIT-compiled).
//
// One table maps GGUF `tokenizer.ggml.pre` names to a spec: the regexes (applied in sequence,
// each one to the pieces of the previous), whether the model normalizes to NFC first, and whether
// BPE takes a piece that is itself a token whole (`ignore_merges`). Adding a model family means
// adding one row.
//
// `\s` in these regexes means Unicode White_Space, as in the Rust regex/Oniguruma engines that
// tokenizers and tiktoken use: U+0085 is whitespace, U+FEFF and U+180E are not. PCRE2 10.42's
// UCP `\s` also matches U+180E, so `\s`/`\S` are rewritten to an explicit White_Space class
// before compiling.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace nitro {

/// What a model family's pre-tokenizer does.
struct PreTokenizerSpec {
    std::string name;                  ///< tokenizer.ggml.pre value
    std::vector<std::string> regexes;  ///< HF syntax; applied in order
    bool nfc = false;                  ///< normalize text to NFC before splitting (Qwen2/3)
    bool ignore_merges = false;        ///< BPE emits a piece that is a token as that token
    std::string source;                ///< where the regexes come from (for docs and messages)
};

/// The spec for a tokenizer.ggml.pre name, or nullptr if this engine does not know it.
const PreTokenizerSpec* find_pretokenizer_spec(std::string_view name);

/// Names of all known pre-tokenizers, for messages.
std::vector<std::string> known_pretokenizers();

/// Translates a regex from HF/Oniguruma syntax to PCRE2: `\s` and `\S` become explicit Unicode
/// White_Space classes. Throws nitro::Error for a construct it cannot translate (`\S` inside a
/// character class).
std::string translate_regex_to_pcre2(std::string_view hf_regex);

/// A compiled pre-tokenizer. Thread-safe: split() may run concurrently.
class PreTokenizer {
public:
    explicit PreTokenizer(const PreTokenizerSpec& spec);
    ~PreTokenizer();
    PreTokenizer(PreTokenizer&&) noexcept;
    PreTokenizer& operator=(PreTokenizer&&) noexcept;

    /// Appends the pieces of well-formed UTF-8 `text` to `out`, in order; together they cover
    /// `text` exactly. The views point into `text`.
    void split(std::string_view text, std::vector<std::string_view>& out) const;

    const PreTokenizerSpec& spec() const { return spec_; }

private:
    struct Regex;
    PreTokenizerSpec spec_;
    std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace nitro
