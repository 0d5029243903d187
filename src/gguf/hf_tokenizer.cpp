#include "gguf/hf_tokenizer.h"

#include "core/error.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <unordered_map>
#include <vector>

namespace nitro {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// gguf.TokenType
constexpr int32_t kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5;

std::string read_text(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    if (!f) fail("cannot read '{}'", p.string());
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
}

json read_json(const fs::path& p) {
    try {
        return json::parse(read_text(p));
    } catch (const json::exception& e) {
        fail("'{}' is not valid JSON: {}", p.string(), e.what());
    }
}

/// Split regexes of the byte-level BPE pre-tokenizers this build recognises, with the name
/// llama.cpp gives them (tokenizer.ggml.pre). convert_hf_to_gguf.py identifies a pre-tokenizer by
/// hashing the tokens of a probe text; the split regex identifies the same two families directly.
const std::pair<const char*, const char*> kPreTokenizers[] = {
    {"gpt-4o",
     R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"},
    {"qwen2",
     R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"},
};

std::string find_pre(const json& tok, const std::string& file) {
    const json* pre = tok.contains("pre_tokenizer") ? &tok["pre_tokenizer"] : nullptr;
    std::vector<const json*> parts;
    if (pre && pre->is_object()) {
        if (pre->value("type", "") == "Sequence" && pre->contains("pretokenizers"))
            for (const auto& p : (*pre)["pretokenizers"]) parts.push_back(&p);
        else
            parts.push_back(pre);
    }
    for (const json* p : parts) {
        if (p->value("type", "") != "Split" || !p->contains("pattern")) continue;
        const json& pat = (*p)["pattern"];
        if (!pat.is_object() || !pat.contains("Regex") || !pat["Regex"].is_string()) continue;
        const std::string re = pat["Regex"].get<std::string>();
        for (const auto& [name, known] : kPreTokenizers)
            if (re == known) return name;
        fail("'{}': pre-tokenizer split regex is not one this build knows (gpt-4o, qwen2): {}", file, re);
    }
    fail("'{}': no Split pre-tokenizer with a regex found (only byte-level BPE tokenizers of the gpt-4o and "
         "qwen2 families are supported)",
         file);
}

/// convert_hf_to_gguf.py does_token_look_special.
bool looks_special(const std::string& t) {
    auto starts = [&](const std::string& p) { return t.rfind(p, 0) == 0; };
    auto ends = [&](const std::string& s) { return t.size() >= s.size() && t.compare(t.size() - s.size(), s.size(), s) == 0; };
    if (t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]") return true;
    if (starts("<|") && ends("|>")) return true;
    if (starts("<\xef\xbd\x9c") && ends("\xef\xbd\x9c>")) return true;  // <｜ ... ｜> (deepseek-coder)
    if (starts("<unused") && ends(">")) return true;
    return false;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
    for (size_t p = 0; (p = s.find(from, p)) != std::string::npos; p += to.size()) s.replace(p, from.size(), to);
    return s;
}

std::shared_ptr<GgufArray> string_array(std::vector<std::string> v) {
    auto a = std::make_shared<GgufArray>();
    a->type = GgufType::STRING;
    a->data = std::move(v);
    return a;
}

}  // namespace

int64_t write_hf_tokenizer(GgufMetadata& m, const std::string& dir_str, int64_t n_vocab_default) {
    const fs::path dir(dir_str);
    const fs::path tok_file = dir / "tokenizer.json";
    if (!fs::is_regular_file(tok_file)) fail("--tokenizer '{}': no tokenizer.json in that folder", dir_str);
    const json tok = read_json(tok_file);
    const std::string tf = tok_file.string();
    if (!tok.contains("model") || !tok["model"].is_object()) fail("'{}': no 'model' object", tf);
    const json& model = tok["model"];
    if (model.value("type", "") != "BPE") fail("'{}': model type '{}' is not BPE (only byte-level BPE is supported)", tf, model.value("type", ""));
    if (!model.contains("vocab") || !model["vocab"].is_object()) fail("'{}': model.vocab is not an object", tf);

    json config_tok = json::object(), config = json::object();
    if (fs::is_regular_file(dir / "tokenizer_config.json")) config_tok = read_json(dir / "tokenizer_config.json");
    if (fs::is_regular_file(dir / "config.json")) config = read_json(dir / "config.json");

    // Vocabulary by id: model vocab, then added tokens (which may repeat vocab entries).
    std::unordered_map<int64_t, std::string> by_id;
    int64_t max_id = -1;
    for (const auto& [text, idv] : model["vocab"].items()) {
        if (!idv.is_number_integer() || idv.get<int64_t>() < 0) fail("'{}': token '{}' has a bad id", tf, text);
        const int64_t id = idv.get<int64_t>();
        by_id[id] = text;
        max_id = std::max(max_id, id);
    }
    struct Added {
        std::string content;
        bool special;
    };
    std::map<int64_t, Added> added;
    std::vector<std::pair<std::string, int64_t>> added_order;  // content -> id, file order (first match wins)
    if (tok.contains("added_tokens")) {
        for (const auto& a : tok["added_tokens"]) {
            if (!a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") || !a["content"].is_string())
                fail("'{}': an added_tokens entry lacks an integer 'id' or a string 'content'", tf);
            const int64_t id = a["id"].get<int64_t>();
            const std::string c = a["content"].get<std::string>();
            added[id] = {c, a.value("special", false)};
            added_order.emplace_back(c, id);
            by_id[id] = c;
            max_id = std::max(max_id, id);
        }
    }
    int64_t n_vocab = n_vocab_default;
    if (config.contains("vocab_size") && config["vocab_size"].is_number_integer()) {
        n_vocab = config["vocab_size"].get<int64_t>();
        if (max_id >= n_vocab) fail("'{}': token id {} is not below config.json vocab_size {}", tf, max_id, n_vocab);
    }
    n_vocab = std::max(n_vocab, max_id + 1);

    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    tokens.reserve(static_cast<size_t>(n_vocab));
    types.reserve(static_cast<size_t>(n_vocab));
    for (int64_t i = 0; i < n_vocab; ++i) {
        auto it = by_id.find(i);
        if (it == by_id.end()) {
            tokens.push_back("[PAD" + std::to_string(i) + "]");
            types.push_back(kUnused);
            continue;
        }
        std::string t = it->second;
        auto ad = added.find(i);
        if (ad != added.end()) {
            if (ad->second.special || looks_special(t)) {
                types.push_back(kControl);
            } else {
                t = replace_all(t, "\xe2\x96\x81", " ");  // pre-normalise user-defined spaces (U+2581)
                types.push_back(kUserDefined);
            }
        } else {
            types.push_back(kNormal);
        }
        tokens.push_back(std::move(t));
    }

    // Merges: "a b" strings, or [a, b] pairs (transformers >= 4.45) joined with a space, a space
    // inside a part written as U+0120 (gguf-py SpecialVocab).
    std::vector<std::string> merges;
    if (model.contains("merges") && model["merges"].is_array()) {
        const json& ms = model["merges"];
        merges.reserve(ms.size());
        for (const auto& e : ms) {
            if (e.is_string()) {
                merges.push_back(e.get<std::string>());
            } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
                merges.push_back(replace_all(e[0].get<std::string>(), " ", "\xc4\xa0") + " " +
                                 replace_all(e[1].get<std::string>(), " ", "\xc4\xa0"));
            } else {
                fail("'{}': unknown merges format (expected strings or pairs of strings)", tf);
            }
        }
    }

    m.set("tokenizer.ggml.model", std::string("gpt2"));
    m.set("tokenizer.ggml.pre", find_pre(tok, tf));
    const int64_t size = static_cast<int64_t>(tokens.size());
    m.set("tokenizer.ggml.tokens", string_array(std::move(tokens)));
    auto ta = std::make_shared<GgufArray>();
    ta->type = GgufType::INT32;
    ta->data = std::move(types);
    m.set("tokenizer.ggml.token_type", ta);
    m.set("tokenizer.ggml.merges", string_array(std::move(merges)));

    // Special tokens, in gguf-py's order of discovery: tokenizer_config.json, then config.json.
    static const std::pair<const char*, const char*> kTypes[] = {
        {"bos", "bos_token_id"}, {"eos", "eos_token_id"}, {"unk", "unknown_token_id"}, {"sep", "seperator_token_id"},
        {"pad", "padding_token_id"}, {"cls", "cls_token_id"}, {"mask", "mask_token_id"}};
    std::map<std::string, bool> set_types;
    auto set_special = [&](const std::string& typ, const char* key, int64_t id) {
        if (set_types.count(typ) || id < 0 || id >= size) return;
        set_types[typ] = true;
        m.set(std::string("tokenizer.ggml.") + key, static_cast<uint32_t>(id));
    };
    std::vector<std::pair<std::string, bool>> add_flags;
    for (const auto& [typ, key] : kTypes) {
        const std::string t(typ);
        if (config_tok.contains("add_" + t + "_token") && config_tok["add_" + t + "_token"].is_boolean())
            add_flags.emplace_back(t, config_tok["add_" + t + "_token"].get<bool>());
        if (!config_tok.contains(t + "_token")) continue;
        const json& e = config_tok[t + "_token"];
        std::string content;
        if (e.is_string()) content = e.get<std::string>();
        else if (e.is_object() && e.contains("content") && e["content"].is_string()) content = e["content"].get<std::string>();
        else continue;
        for (const auto& [c, id] : added_order)
            if (c == content) {
                set_special(t, key, id);
                break;
            }
    }
    for (const auto& [typ, key] : kTypes) {
        const std::string k = std::string(typ) + "_token_id";
        if (config.contains(k) && config[k].is_number_integer()) set_special(typ, key, config[k].get<int64_t>());
    }
    for (const auto& [typ, v] : add_flags)
        if (typ == "bos" || typ == "eos" || typ == "sep") m.set("tokenizer.ggml.add_" + typ + "_token", v);

    // Chat template: tokenizer_config.json's, else chat_template.jinja.
    if (config_tok.contains("chat_template")) {
        const json& ct = config_tok["chat_template"];
        if (ct.is_string()) m.set("tokenizer.chat_template", ct.get<std::string>());
        else if (!ct.is_null())
            fail("'{}': chat_template is not a string (lists of named templates are not supported)",
                 (dir / "tokenizer_config.json").string());
    } else if (fs::is_regular_file(dir / "chat_template.jinja")) {
        m.set("tokenizer.chat_template", read_text(dir / "chat_template.jinja"));
    }
    return size;
}

}  // namespace nitro
