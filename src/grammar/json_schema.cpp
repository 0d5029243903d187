#include "grammar/json_schema.h"

#include "grammar/grammar_limits.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

namespace nitro::grammar {

using json = nlohmann::ordered_json;

std::string literal_text(const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::strict); }

namespace {

const std::set<std::string, std::less<>>& annotations() {
    static const std::set<std::string, std::less<>> s = {"$schema", "$id", "$comment", "title", "description", "examples",
                                                         "default", "deprecated", "readOnly", "writeOnly", "$defs", "definitions"};
    return s;
}

const std::set<std::string, std::less<>>& supported() {
    static const std::set<std::string, std::less<>> s = {"type", "properties", "required", "additionalProperties", "items",
                                                         "minItems", "maxItems", "uniqueItems", "minLength", "maxLength",
                                                         "enum", "const", "anyOf", "allOf", "$ref"};
    return s;
}

constexpr const char* kSupportedList =
    "type, properties, required, additionalProperties, items, minItems, maxItems, minLength, maxLength, enum, const, "
    "anyOf, allOf (one schema), $ref, $defs";

[[noreturn]] void unsupported(const std::string& keyword, const std::string& path, const std::string& why = "") {
    throw SchemaError(fmt::format("'{}' (at {}) is not supported{}: this server cannot enforce it while sampling, and ignoring it "
                                  "would not guarantee output that validates. Supported: {}.",
                                  keyword, path, why.empty() ? "" : " " + why, kSupportedList),
                      keyword, path, true);
}

[[noreturn]] void invalid(const std::string& keyword, const std::string& path, const std::string& message) {
    throw SchemaError(fmt::format("invalid schema at {}: {}", path, message), keyword, path);
}

/// The JSON pointer `path` + "/" + `token` (escaped).
std::string child_path(const std::string& path, std::string_view token) {
    std::string out = path + "/";
    for (char c : token) {
        if (c == '~') out += "~0";
        else if (c == '/') out += "~1";
        else out += c;
    }
    return out;
}

bool type_matches(const json& v, std::string_view type) {
    if (type == "string") return v.is_string();
    if (type == "number") return v.is_number();
    if (type == "integer") return v.is_number_integer() || v.is_number_unsigned() || (v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>())));
    if (type == "boolean") return v.is_boolean();
    if (type == "null") return v.is_null();
    if (type == "object") return v.is_object();
    if (type == "array") return v.is_array();
    return false;
}

const char* kind_of_keyword(std::string_view k) {
    if (k == "properties" || k == "required" || k == "additionalProperties") return "object";
    if (k == "items" || k == "minItems" || k == "maxItems" || k == "uniqueItems") return "array";
    if (k == "minLength" || k == "maxLength") return "string";
    return nullptr;
}

class Compiler {
public:
    Compiler(const json& root, Grammar& g) : root_(root), g_(g) {}

    uint32_t run() {
        const uint32_t r = compile(root_, "#");
        while (!work_.empty()) {
            auto [id, ptr] = work_.back();
            work_.pop_back();
            const uint32_t n = compile(*resolve(ptr), ptr);
            g_.nodes[id].alts = {n};
        }
        check_epsilon_cycles();
        compute_min_depth(g_);
        prune_unproductive();
        flatten_alternatives();
        compute_min_depth(g_);  // (the objects' deepest values, now that dead properties are gone)
        const uint32_t depth = g_.nodes[r].min_depth;
        if (depth == kUnbounded)
            throw SchemaError("no JSON value satisfies this schema (a required part can never be completed: an empty enum, "
                              "'false', or a recursion with no way out)",
                              "", "#");
        if (depth > kMaxNesting)
            throw SchemaError(fmt::format("every value of this schema nests objects/arrays {} levels deep (its required parts "
                                          "alone), more than the {} this server produces",
                                          depth, kMaxNesting),
                              "", "#", true);
        const Ambiguity amb = ambiguity_bound(g_, r, static_cast<uint32_t>(kMaxConfigs));
        if (amb.parses > kMaxConfigs) {
            const std::string where = amb.node < paths_.size() && !paths_[amb.node].empty() ? paths_[amb.node] : "#";
            throw SchemaError(fmt::format("the schema is too ambiguous to follow: the alternatives of the anyOf at {} (with what they "
                                          "nest) can read the same output in more than {} ways at once. Make alternatives that "
                                          "start alike differ early: a first property that is required and has a distinct "
                                          "name or 'const' value in each",
                                          where, kMaxConfigs),
                              "anyOf", where, true);
        }
        return r;
    }

private:
    uint32_t add(Node n, const std::string& path) {
        if (g_.nodes.size() >= kMaxSchemaNodes)
            throw SchemaError(fmt::format("the schema is too large: more than {} parts (at {})", kMaxSchemaNodes, path), "", path, true);
        const uint32_t id = g_.add_node(std::move(n));
        paths_.resize(id + 1);
        paths_[id] = path;
        return id;
    }

    uint32_t nothing(const std::string& path) {
        Node n;
        n.kind = NodeKind::NOTHING;
        return add(std::move(n), path);
    }

    uint32_t trie(const std::vector<std::string>& strings, const std::string& path, bool key_ranges = false) {
        for (const auto& s : strings) literal_bytes_ += s.size();
        if (literal_bytes_ > kMaxLiteralBytes)
            throw SchemaError(fmt::format("the schema's enum values and property names are too large: more than {} bytes (at {})",
                                          kMaxLiteralBytes, path),
                              "", path, true);
        return g_.add_trie(strings, key_ranges);
    }

    const json* resolve(const std::string& ref) const {
        if (ref == "#") return &root_;
        const json* cur = &root_;
        size_t i = 2;  // after "#/"
        while (i <= ref.size()) {
            size_t j = ref.find('/', i);
            if (j == std::string::npos) j = ref.size();
            std::string tok;
            for (size_t k = i; k < j; ++k) {
                if (ref[k] == '~' && k + 1 < j && (ref[k + 1] == '0' || ref[k + 1] == '1')) {
                    tok += ref[k + 1] == '0' ? '~' : '/';
                    ++k;
                } else {
                    tok += ref[k];
                }
            }
            if (cur->is_object() && cur->contains(tok)) cur = &(*cur)[tok];
            else if (cur->is_array() && !tok.empty() && std::all_of(tok.begin(), tok.end(), [](char ch) { return ch >= '0' && ch <= '9'; }) && std::stoull(tok) < cur->size())
                cur = &(*cur)[std::stoull(tok)];
            else return nullptr;
            i = j + 1;
        }
        return cur;
    }

    uint32_t ref(const json& r, const std::string& path) {
        if (!r.is_string()) invalid("$ref", path, "'$ref' must be a string");
        const std::string s = r.get<std::string>();
        if (s != "#" && !s.starts_with("#/"))
            unsupported("$ref", path, fmt::format("for '{}' (only references inside this schema, \"#\" or \"#/...\")", s));
        if (auto it = refs_.find(s); it != refs_.end()) return it->second;
        if (!resolve(s)) invalid("$ref", path, fmt::format("'$ref' \"{}\" does not point at anything in this schema", s));
        Node alias;
        alias.kind = NodeKind::ANY_OF;  // filled with the target's node once it is compiled
        const uint32_t id = add(std::move(alias), path);
        refs_[s] = id;
        work_.emplace_back(id, s);
        return id;
    }

    static bool constraining(std::string_view k) { return !annotations().count(k); }

    uint32_t compile(const json& s, const std::string& path) {
        if (s.is_boolean()) return s.get<bool>() ? kAnyValue : nothing(path);
        if (!s.is_object()) invalid("", path, fmt::format("a schema must be an object or a boolean, got {}", s.type_name()));
        for (const auto& [k, v] : s.items())
            if (!annotations().count(k) && !supported().count(k)) unsupported(k, path);
        auto others = [&](std::string_view self, std::initializer_list<std::string_view> allowed) {
            for (const auto& [k, v] : s.items())
                if (k != self && constraining(k) && std::find(allowed.begin(), allowed.end(), k) == allowed.end())
                    unsupported(std::string(self), path, fmt::format("together with '{}'", k));
        };
        if (s.contains("$ref")) {
            others("$ref", {});
            return ref(s["$ref"], path);
        }
        if (s.contains("allOf")) {
            const json& a = s["allOf"];
            if (!a.is_array() || a.empty()) invalid("allOf", path, "'allOf' must be a non-empty array of schemas");
            if (a.size() != 1) unsupported("allOf", path, "with more than one schema");
            others("allOf", {});
            return compile(a[0], child_path(child_path(path, "allOf"), "0"));
        }
        if (s.contains("anyOf")) {
            const json& a = s["anyOf"];
            if (!a.is_array() || a.empty()) invalid("anyOf", path, "'anyOf' must be a non-empty array of schemas");
            others("anyOf", {});
            Node n;
            n.kind = NodeKind::ANY_OF;
            for (size_t i = 0; i < a.size(); ++i) n.alts.push_back(compile(a[i], child_path(child_path(path, "anyOf"), std::to_string(i))));
            return add(std::move(n), path);
        }
        std::vector<std::string> types;
        if (s.contains("type")) {
            const json& t = s["type"];
            if (t.is_string()) types.push_back(t.get<std::string>());
            else if (t.is_array() && !t.empty() && std::all_of(t.begin(), t.end(), [](const json& x) { return x.is_string(); }))
                for (const auto& x : t) types.push_back(x.get<std::string>());
            else invalid("type", path, "'type' must be a type name or a non-empty array of them");
            for (const auto& ty : types)
                if (ty != "object" && ty != "array" && ty != "string" && ty != "number" && ty != "integer" && ty != "boolean" && ty != "null")
                    invalid("type", path, fmt::format("unknown type '{}' (object, array, string, number, integer, boolean, null)", ty));
        }
        if (s.contains("enum") || s.contains("const")) {
            others(s.contains("enum") ? "enum" : "const", {"type", "enum", "const"});
            return literal(s, types, path);
        }
        if (types.empty()) {
            const char* inferred = nullptr;
            for (const auto& [k, v] : s.items()) {
                const char* kind = kind_of_keyword(k);
                if (!kind) continue;
                if (inferred && std::string_view(inferred) != kind)
                    invalid(k, path, fmt::format("keywords of an {} and of a {} without 'type': give 'type'", inferred, kind));
                inferred = kind;
            }
            if (!inferred) return kAnyValue;
            types.push_back(inferred);
        }
        if (types.size() == 1) return typed(s, types[0], path);
        Node n;
        n.kind = NodeKind::ANY_OF;
        for (const auto& ty : types) n.alts.push_back(typed(s, ty, path));
        return add(std::move(n), path);
    }

    uint32_t literal(const json& s, const std::vector<std::string>& types, const std::string& path) {
        std::vector<json> values;
        if (s.contains("enum")) {
            const json& e = s["enum"];
            if (!e.is_array() || e.empty()) invalid("enum", path, "'enum' must be a non-empty array");
            for (const auto& v : e) values.push_back(v);
        }
        if (s.contains("const")) {
            if (values.empty()) values.push_back(s["const"]);
            else std::erase_if(values, [&](const json& v) { return v != s["const"]; });
        }
        std::vector<std::string> texts;
        for (const auto& v : values) {
            const bool ok = types.empty() || std::any_of(types.begin(), types.end(), [&](const std::string& t) { return type_matches(v, t); });
            if (ok) texts.push_back(literal_text(v));
        }
        if (texts.empty()) return nothing(path);
        Node n;
        n.kind = NodeKind::LITERAL;
        n.trie = trie(texts, path);
        return add(std::move(n), path);
    }

    static uint32_t count(const json& s, const char* key, const std::string& path) {
        const json& v = s[key];
        if (!(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0)))
            invalid(key, path, fmt::format("'{}' must be a non-negative integer", key));
        return static_cast<uint32_t>(std::min<uint64_t>(v.get<uint64_t>(), kUnbounded - 1));
    }

    uint32_t typed(const json& s, const std::string& type, const std::string& path) {
        Node n;
        if (type == "boolean" || type == "null") {
            n.kind = NodeKind::LITERAL;
            n.trie = type == "null" ? trie({"null"}, path) : trie({"true", "false"}, path);
            return add(std::move(n), path);
        }
        if (type == "number" || type == "integer") {
            n.kind = type == "number" ? NodeKind::NUMBER : NodeKind::INTEGER;
            return add(std::move(n), path);
        }
        if (type == "string") {
            n.kind = NodeKind::STRING;
            if (s.contains("minLength")) n.min_length = count(s, "minLength", path);
            if (s.contains("maxLength")) n.max_length = count(s, "maxLength", path);
            if (n.min_length > n.max_length) invalid("minLength", path, "'minLength' is above 'maxLength'");
            return add(std::move(n), path);
        }
        if (type == "array") {
            n.kind = NodeKind::ARRAY;
            n.items = kAnyValue;
            if (s.contains("items")) n.items = compile(s["items"], child_path(path, "items"));
            if (s.contains("minItems")) n.min_items = count(s, "minItems", path);
            if (s.contains("maxItems")) n.max_items = count(s, "maxItems", path);
            if (n.min_items > n.max_items) invalid("minItems", path, "'minItems' is above 'maxItems'");
            if (s.contains("uniqueItems")) {
                if (!s["uniqueItems"].is_boolean()) invalid("uniqueItems", path, "'uniqueItems' must be a boolean");
                if (s["uniqueItems"].get<bool>()) unsupported("uniqueItems", path, "when true");
            }
            return add(std::move(n), path);
        }
        // object
        n.kind = NodeKind::OBJECT;
        std::set<std::string> required;
        if (s.contains("required")) {
            const json& r = s["required"];
            if (!r.is_array()) invalid("required", path, "'required' must be an array of property names");
            for (const auto& x : r) {
                if (!x.is_string()) invalid("required", path, "'required' must be an array of property names");
                if (!required.insert(x.get<std::string>()).second)
                    invalid("required", path, fmt::format("'required' names '{}' twice", x.get<std::string>()));
            }
        }
        if (s.contains("properties")) {
            const json& p = s["properties"];
            if (!p.is_object()) invalid("properties", path, "'properties' must be an object of schemas");
            const std::string ppath = child_path(path, "properties");
            for (const auto& [name, sub] : p.items()) {
                Property prop;
                prop.name = name;
                prop.required = required.count(name) > 0;
                prop.node = compile(sub, child_path(ppath, name));
                n.props.push_back(std::move(prop));
            }
        }
        for (const auto& r : required)
            if (std::none_of(n.props.begin(), n.props.end(), [&](const Property& p) { return p.name == r; }))
                unsupported("required", path,
                            fmt::format("for '{}', which is not in 'properties' (this server produces declared properties only)", r));
        int32_t additional = static_cast<int32_t>(kAnyValue);
        if (s.contains("additionalProperties")) {
            const json& ap = s["additionalProperties"];
            if (ap.is_boolean()) additional = ap.get<bool>() ? static_cast<int32_t>(kAnyValue) : -1;
            else if (ap.is_object() && n.props.empty()) additional = static_cast<int32_t>(compile(ap, child_path(path, "additionalProperties")));
            else if (ap.is_object() && std::all_of(ap.items().begin(), ap.items().end(), [](const auto& kv) { return !constraining(kv.key()); }))
                additional = static_cast<int32_t>(kAnyValue);  // {} (any value): as true
            else if (ap.is_object()) unsupported("additionalProperties", path, "as a schema together with 'properties'");
            else invalid("additionalProperties", path, "'additionalProperties' must be a boolean or a schema");
        }
        // With declared properties only they are produced; without, `additional` makes it a map.
        n.additional = n.props.empty() ? additional : -1;
        finish_object(n, path);
        return add(std::move(n), path);
    }

    void finish_object(Node& n, const std::string& path) {
        std::vector<std::string> keys;
        for (const auto& p : n.props) keys.push_back(literal_text(json(p.name)));
        n.trie = trie(keys, path, true);
        n.next_required.assign(n.props.size() + 1, static_cast<uint32_t>(n.props.size()));
        for (size_t i = n.props.size(); i-- > 0;) n.next_required[i] = n.props[i].required ? static_cast<uint32_t>(i) : n.next_required[i + 1];
    }

    /// anyOf / $ref chains that lead back to themselves without a byte in between would make the
    /// automaton expand forever: refused.
    void check_epsilon_cycles() const {
        const size_t N = g_.nodes.size();
        std::vector<uint8_t> color(N, 0);  // 0 new, 1 on stack, 2 done
        for (size_t start = 0; start < N; ++start) {
            if (color[start] || g_.nodes[start].kind != NodeKind::ANY_OF) continue;
            std::vector<std::pair<uint32_t, size_t>> stack{{static_cast<uint32_t>(start), 0}};
            color[start] = 1;
            while (!stack.empty()) {
                auto& [n, i] = stack.back();
                const Node& node = g_.nodes[n];
                if (i == node.alts.size()) {
                    color[n] = 2;
                    stack.pop_back();
                    continue;
                }
                const uint32_t a = node.alts[i++];
                if (g_.nodes[a].kind != NodeKind::ANY_OF) continue;
                if (color[a] == 1)
                    throw SchemaError("the schema has a $ref/anyOf cycle that never reaches a value (a schema that refers to "
                                      "itself with nothing in between)",
                                      "$ref", "#");
                if (color[a] == 0) {
                    color[a] = 1;
                    stack.emplace_back(a, 0);
                }
            }
        }
    }

    /// Drops the branches no finite JSON value completes (min_depth unbounded), so a constrained
    /// generation never walks into a dead end.
    void prune_unproductive() {
        const size_t N = g_.nodes.size();
        productive_.assign(N, false);
        for (size_t i = 0; i < N; ++i) productive_[i] = g_.nodes[i].min_depth != kUnbounded;
        for (size_t i = 0; i < N; ++i) {
            Node& n = g_.nodes[i];
            if (n.kind == NodeKind::ANY_OF) {
                std::erase_if(n.alts, [&](uint32_t a) { return !productive_[a]; });
                std::sort(n.alts.begin(), n.alts.end());
                n.alts.erase(std::unique(n.alts.begin(), n.alts.end()), n.alts.end());
            } else if (n.kind == NodeKind::ARRAY && !productive_[n.items]) {
                n.max_items = 0;
            } else if (n.kind == NodeKind::OBJECT) {
                if (n.additional >= 0 && !productive_[static_cast<size_t>(n.additional)]) n.additional = -1;
                const size_t before = n.props.size();
                std::erase_if(n.props, [&](const Property& q) { return !q.required && !productive_[q.node]; });
                if (n.props.size() != before) finish_object(n, "#");
            }
        }
    }

    /// Replaces every ANY_OF's alternatives by the non-ANY_OF nodes they lead to, so the automaton
    /// forks once per value and never recurses through aliases.
    void flatten_alternatives() {
        const size_t N = g_.nodes.size();
        std::vector<uint8_t> done(N, 0);
        for (size_t i = 0; i < N; ++i) {
            if (g_.nodes[i].kind != NodeKind::ANY_OF || done[i]) continue;
            std::vector<uint32_t> stack{static_cast<uint32_t>(i)};
            while (!stack.empty()) {
                const uint32_t n = stack.back();
                bool ready = true;
                for (uint32_t a : g_.nodes[n].alts)
                    if (g_.nodes[a].kind == NodeKind::ANY_OF && !done[a]) stack.push_back(a), ready = false;
                if (!ready) continue;
                stack.pop_back();
                if (done[n]) continue;
                std::vector<uint32_t> flat;
                for (uint32_t a : g_.nodes[n].alts) {
                    if (g_.nodes[a].kind == NodeKind::ANY_OF) flat.insert(flat.end(), g_.nodes[a].alts.begin(), g_.nodes[a].alts.end());
                    else flat.push_back(a);
                }
                std::sort(flat.begin(), flat.end());
                flat.erase(std::unique(flat.begin(), flat.end()), flat.end());
                if (flat.size() > 4096)
                    throw SchemaError("the schema is too large: an anyOf with more than 4096 alternatives once $refs are followed", "anyOf", "#", true);
                g_.nodes[n].alts = std::move(flat);
                done[n] = 1;
            }
        }
    }

    const json& root_;
    Grammar& g_;
    std::map<std::string, uint32_t> refs_;
    std::vector<std::pair<uint32_t, std::string>> work_;
    std::vector<bool> productive_;
    std::vector<std::string> paths_;  ///< [node] the JSON pointer of the schema it came from
    size_t literal_bytes_ = 0;
};

}  // namespace

uint32_t compile_json_schema(const json& schema, Grammar& g) { return Compiler(schema, g).run(); }

}  // namespace nitro::grammar
