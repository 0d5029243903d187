#include "hub/model_pick.h"

#include "core/error.h"

#include <algorithm>
#include <cctype>

namespace nitro::hub {

namespace {

std::string upper(std::string s) {
    for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return s;
}

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/// Hugging Face repository ids as llama.cpp accepts them: [A-Za-z0-9_] with single '/', '.' or '-'
/// between them, exactly one '/'.
bool valid_repo_id(const std::string& id) {
    if (id.empty() || id.size() > 256) return false;
    int slashes = 0;
    bool after_special = true;  // the id may not start with a special character
    for (char c : id) {
        if (is_word_char(c)) {
            after_special = false;
        } else if (c == '/' || c == '.' || c == '-') {
            if (after_special) return false;
            slashes += c == '/';
            after_special = true;
        } else {
            return false;
        }
    }
    return !after_special && slashes == 1;
}

std::string base_name(const std::string& path) {
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool is_model_gguf(const std::string& path) {
    if (!ends_with(path, ".gguf")) return false;
    const std::string name = base_name(path);
    for (const char* other : {"mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-"})
        if (name.find(other) != std::string::npos) return false;
    return true;
}

/// True if `path` holds `tag` (any case) followed by '.' or '-' (llama.cpp: regex "TAG[.-]", icase).
bool has_tag(const std::string& path, const std::string& tag) {
    const std::string p = upper(path), t = upper(tag);
    for (size_t at = p.find(t); at != std::string::npos; at = p.find(t, at + 1)) {
        const size_t next = at + t.size();
        if (next < p.size() && (p[next] == '.' || p[next] == '-')) return true;
    }
    return false;
}

bool first_or_single(const std::string& path) {
    const GgufName n = parse_gguf_name(path);
    return n.count <= 1 || n.index == 1;
}

const RepoFile* find_by_quant(const std::vector<RepoFile>& files, const std::string& quant) {
    for (const RepoFile& f : files)
        if (is_model_gguf(f.path) && has_tag(f.path, quant) && first_or_single(f.path)) return &f;
    return nullptr;
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
    return s;
}

/// "Its GGUF files: a, b, ... (and N more)" or a note that there is none.
std::string gguf_listing(const std::vector<RepoFile>& files) {
    std::vector<std::string> names;
    for (const RepoFile& f : files)
        if (ends_with(f.path, ".gguf")) names.push_back(f.path);
    if (names.empty()) return "it has no .gguf file";
    constexpr size_t kShown = 24;
    std::string s = "its GGUF files: " + join(std::vector<std::string>(names.begin(), names.begin() + std::min(kShown, names.size())), ", ");
    if (names.size() > kShown) s += fmt::format(" (and {} more)", names.size() - kShown);
    return s;
}

[[noreturn]] void fail_no_match(const std::vector<RepoFile>& files, const ModelRef& ref, const std::string& label) {
    const std::vector<std::string> tags = quant_tags(files);
    if (tags.empty()) {
        std::vector<std::string> some;
        for (size_t i = 0; i < files.size() && i < 8; ++i) some.push_back(files[i].path);
        fail("{} has no GGUF model file (nitro runs GGUF; look for a GGUF conversion, often a repository "
             "named ...-GGUF){}",
             label, some.empty() ? std::string() : "; its files: " + join(some, ", ") + (files.size() > 8 ? ", ..." : ""));
    }
    const std::string hint = fmt::format("e.g. {}:{}", ref.repo, tags.front());
    if (!ref.file.empty())
        fail("{} has no file '{}'; {} (or name a quant: {})", label, ref.file, gguf_listing(files), hint);
    fail("{} has no GGUF file for quant '{}'; its quants: {} ({}); {}", label, ref.quant, join(tags, ", "), hint,
         gguf_listing(files));
}

}  // namespace

std::string ModelRef::text() const {
    if (!file.empty()) return repo + ":" + file;
    if (!quant.empty()) return repo + ":" + quant;
    return repo;
}

ModelRef parse_model_ref(const std::string& spec) {
    const std::string form =
        "expected OWNER/NAME[:QUANT] or OWNER/NAME:FILE.gguf, e.g. ggml-org/gpt-oss-20b-GGUF or "
        "unsloth/Qwen3-30B-A3B-GGUF:Q4_K_M";
    ModelRef r;
    const size_t colon = spec.find(':');
    r.repo = spec.substr(0, colon);
    if (!valid_repo_id(r.repo)) fail("'{}' is not a Hugging Face repository: {}", spec, form);
    if (colon == std::string::npos) return r;
    const std::string rest = spec.substr(colon + 1);
    if (rest.empty()) fail("'{}': nothing after ':'; {}", spec, form);
    if (ends_with(upper(rest), ".GGUF")) {
        if (rest.find("..") != std::string::npos || rest.front() == '/' || rest.find('\\') != std::string::npos)
            fail("'{}': '{}' is not a file path inside a repository", spec, rest);
        r.file = rest;
        return r;
    }
    for (char c : rest)
        if (!is_word_char(c) && c != '-' && c != '.')
            fail("'{}': '{}' is not a quant name (letters, digits, '_', '-', '.'); {}", spec, rest, form);
    r.quant = rest;
    return r;
}

GgufName parse_gguf_name(const std::string& path) {
    GgufName n;
    if (!ends_with(path, ".gguf")) return n;
    n.gguf = true;
    n.prefix = path.substr(0, path.size() - 5);
    // PREFIX-NNNNN-of-NNNNN (llama.cpp's regex "^(.+)-([0-9]{5})-of-([0-9]{5})$", icase)
    const std::string& p = n.prefix;
    if (p.size() > 15) {
        const std::string tail = p.substr(p.size() - 15);  // -NNNNN-of-NNNNN
        auto digits = [&](size_t at) {
            return std::all_of(tail.begin() + at, tail.begin() + at + 5, [](char c) { return c >= '0' && c <= '9'; });
        };
        if (tail[0] == '-' && digits(1) && upper(tail.substr(6, 4)) == "-OF-" && digits(10)) {
            n.index = std::stoi(tail.substr(1, 5));
            n.count = std::stoi(tail.substr(10, 5));
            n.prefix = p.substr(0, p.size() - 15);
        }
    }
    // the tag: "[-.]([A-Z0-9_]+)$", icase
    size_t start = n.prefix.size();
    while (start > 0 && is_word_char(n.prefix[start - 1])) --start;
    if (start > 0 && start < n.prefix.size() && (n.prefix[start - 1] == '-' || n.prefix[start - 1] == '.'))
        n.tag = upper(n.prefix.substr(start));
    return n;
}

std::vector<std::string> quant_tags(const std::vector<RepoFile>& files) {
    std::vector<std::string> tags;
    for (const RepoFile& f : files) {
        if (!is_model_gguf(f.path) || !first_or_single(f.path)) continue;
        const std::string t = parse_gguf_name(f.path).tag;
        if (!t.empty() && std::find(tags.begin(), tags.end(), t) == tags.end()) tags.push_back(t);
    }
    return tags;
}

std::vector<RepoFile> pick_model_files(const std::vector<RepoFile>& files, const ModelRef& ref,
                                       const std::string& repo_label) {
    const RepoFile* primary = nullptr;
    if (!ref.file.empty()) {
        for (const RepoFile& f : files)
            if (upper(f.path) == upper(ref.file)) {
                primary = &f;
                break;
            }
    } else if (!ref.quant.empty()) {
        primary = find_by_quant(files, ref.quant);
    } else {
        for (const char* q : {"Q4_K_M", "Q8_0"})
            if (!primary) primary = find_by_quant(files, q);
        for (const RepoFile& f : files)
            if (!primary && is_model_gguf(f.path) && first_or_single(f.path)) primary = &f;
    }
    if (!primary) fail_no_match(files, ref, repo_label);

    const GgufName pn = parse_gguf_name(primary->path);
    if (pn.count <= 1) return {*primary};
    std::vector<const RepoFile*> shards(static_cast<size_t>(pn.count), nullptr);
    for (const RepoFile& f : files) {
        const GgufName n = parse_gguf_name(f.path);
        if (n.count == pn.count && n.prefix == pn.prefix && n.index >= 1 && n.index <= n.count) shards[n.index - 1] = &f;
    }
    std::vector<RepoFile> out;
    std::vector<std::string> missing;
    for (int i = 0; i < pn.count; ++i) {
        if (shards[i]) out.push_back(*shards[i]);
        else missing.push_back(fmt::format("{}-{:05d}-of-{:05d}.gguf", pn.prefix, i + 1, pn.count));
    }
    if (!missing.empty())
        fail("{}: the split model {}-*-of-{:05d}.gguf is missing {} of its {} shards: {}", repo_label, pn.prefix,
             pn.count, missing.size(), pn.count, join(missing, ", "));
    return out;
}

}  // namespace nitro::hub
