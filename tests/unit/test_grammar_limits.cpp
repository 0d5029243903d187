// The grammar engine's nesting and ambiguity limits (issue 50): a schema the automaton cannot
// honour within them is refused when it is compiled (naming the part), and one it accepts never
// leads a generation into a state it cannot finish. The red-team's schemas, then a fuzz of the
// schema compiler with generated schemas (recursion, depth, enums, anyOf): every schema either
// compiles or is a SchemaError, and on random walks through each compiled one some byte or the
// end is always allowed, the nesting stays under kMaxNesting and the parses alive stay under the
// bound the schema was accepted with.
#include "grammar/automaton.h"
#include "grammar/grammar_limits.h"
#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>

namespace nitro::grammar {
namespace {

using json = nlohmann::ordered_json;
constexpr int32_t kEog = 1000;

struct Compiled {
    std::shared_ptr<Grammar> g;
    uint32_t root = 0;
};

Compiled compile(const json& schema) {
    Compiled c;
    c.g = std::make_shared<Grammar>();
    c.root = compile_json_schema(schema, *c.g);
    GateStep v;
    v.op = GateOp::JSON;
    v.node = c.root;
    v.next = 1;
    c.g->add_step(v);
    GateStep e;
    e.op = GateOp::END_OF_GEN;
    e.tokens = {kEog};
    e.next = 2;
    c.g->add_step(e);
    GateStep d;
    d.op = GateOp::DONE;
    c.g->add_step(d);
    return c;
}

SchemaError compile_error(const json& schema) {
    Grammar g;
    try {
        compile_json_schema(schema, g);
    } catch (const SchemaError& e) {
        return e;
    }
    ADD_FAILURE() << "no SchemaError for " << schema.dump().substr(0, 300);
    return SchemaError("", "", "");
}

/// prefix + the number (appended: GCC 12 warns falsely of "literal" + std::string&&).
std::string numbered(std::string prefix, uint64_t i) {
    prefix += std::to_string(i);
    return prefix;
}

/// Deepest nesting among the automaton's parses.
int depth_of(const Automaton& a) {
    int d = 0;
    for (const Config& c : a.configs()) d = std::max<int>(d, c.depth);
    return d;
}

// ---- the red-team's schemas ----

TEST(GrammarLimits, RecursiveOptionalPropertyStopsOfferingDepthAtTheLimit) {
    // {"$defs":{"N":{"type":"object","properties":{"c":{"$ref":"#/$defs/N"}}}},"$ref":"#/$defs/N"}:
    // the output reached 128 levels and then nothing was allowed (a 500). Now at 128 levels the
    // key "c" (whose value opens one more) is not offered: only '}' is.
    const Compiled c = compile(json::parse(R"({"$defs":{"N":{"type":"object","properties":{"c":{"$ref":"#/$defs/N"}}}},"$ref":"#/$defs/N"})"));
    Automaton a(c.g);
    for (int level = 1; level < kMaxNesting; ++level) ASSERT_TRUE(a.accept_bytes("{\"c\":")) << level;
    ASSERT_TRUE(a.accept_bytes("{"));
    EXPECT_EQ(depth_of(a), kMaxNesting);
    EXPECT_FALSE(a.allows_bytes("\"")) << "the key would need a 129th level";
    EXPECT_FALSE(a.allows_bytes(" \""));
    EXPECT_TRUE(a.allows_bytes("}"));
    ASSERT_TRUE(a.accept_bytes(std::string(kMaxNesting, '}')));
    EXPECT_TRUE(a.accept_special(kEog));
    EXPECT_TRUE(a.done());
}

TEST(GrammarLimits, MapsAndArraysAtTheLimitOfferOnlyWhatFits) {
    // A map of maps: at the limit no key (its value is another map); an array of arrays: only ']'.
    const Compiled m = compile(json::parse(R"({"$defs":{"M":{"type":"object","additionalProperties":{"$ref":"#/$defs/M"}}},"$ref":"#/$defs/M"})"));
    Automaton a(m.g);
    for (int level = 1; level < kMaxNesting; ++level) ASSERT_TRUE(a.accept_bytes("{\"k\":"));
    ASSERT_TRUE(a.accept_bytes("{"));
    EXPECT_FALSE(a.allows_bytes("\""));
    EXPECT_TRUE(a.accept_bytes(std::string(kMaxNesting, '}')));
    // An optional key whose value fits stays offered next to one that does not.
    const Compiled two = compile(json::parse(
        R"({"$defs":{"N":{"type":"object","properties":{"deep":{"$ref":"#/$defs/N"},"leaf":{"type":"integer"}}}},"$ref":"#/$defs/N"})"));
    Automaton b(two.g);
    for (int level = 1; level < kMaxNesting; ++level) ASSERT_TRUE(b.accept_bytes("{\"deep\":"));
    ASSERT_TRUE(b.accept_bytes("{"));
    EXPECT_TRUE(b.allows_bytes("\"leaf\":1}"));
    EXPECT_FALSE(b.allows_bytes("\"d"));
    ASSERT_TRUE(b.accept_bytes("\"leaf\":1"));
    EXPECT_FALSE(b.allows_bytes(",")) << "no key left that fits";
}

json required_chain(int n) {
    // D0 requires D1 ... D(n-1), an empty object: every value nests n objects.
    json defs = json::object();
    for (int i = 0; i < n; ++i) {
        json d = {{"type", "object"}};
        if (i + 1 < n) {
            d["properties"] = {{"x", {{"$ref", numbered("#/$defs/D", i + 1)}}}};
            d["required"] = {"x"};
        }
        defs[numbered("D", i)] = d;
    }
    return {{"$defs", defs}, {"$ref", "#/$defs/D0"}};
}

TEST(GrammarLimits, SchemasDeeperThanTheLimitAreRefusedAtCompileTime) {
    // A required $defs chain 200 deep was accepted and failed mid-generation.
    const SchemaError e = compile_error(required_chain(200));
    EXPECT_TRUE(e.unsupported);
    EXPECT_NE(std::string(e.what()).find("200 levels"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("128"), std::string::npos) << e.what();
    EXPECT_EQ(compile_error(required_chain(kMaxNesting + 1)).path, "#");
    // Exactly at the limit: accepted, and its (only) shape completes.
    const Compiled c = compile(required_chain(kMaxNesting));
    EXPECT_EQ(c.g->nodes[c.root].min_depth, static_cast<uint32_t>(kMaxNesting));
    Automaton a(c.g);
    for (int i = 1; i < kMaxNesting; ++i) ASSERT_TRUE(a.accept_bytes("{\"x\":"));
    ASSERT_TRUE(a.accept_bytes("{" + std::string(kMaxNesting, '}')));
    EXPECT_TRUE(a.accept_special(kEog));
    // Arrays count too: minItems 1 of arrays of arrays.
    json arr = {{"type", "integer"}};
    for (int i = 0; i < 130; ++i) arr = {{"type", "array"}, {"items", arr}, {"minItems", 1}};
    EXPECT_NE(std::string(compile_error(arr).what()).find("130 levels"), std::string::npos);
}

json any_of_objects(int n, bool discriminated) {
    json alts = json::array();
    for (int i = 0; i < n; ++i) {
        json o = {{"type", "object"}, {"properties", {{"kind", {{"const", numbered("k", i)}}}, {"v", {{"type", "integer"}}}}}};
        if (discriminated) o["required"] = {"kind"};
        alts.push_back(o);
    }
    return {{"anyOf", alts}};
}

TEST(GrammarLimits, AmbiguityPastTheLimitIsRefusedNamingTheAnyOf) {
    // 300 object alternatives all alive after '{' (no required first property): more than 256 parses.
    const SchemaError e = compile_error({{"type", "object"}, {"properties", {{"item", any_of_objects(300, false)}}}});
    EXPECT_TRUE(e.unsupported);
    EXPECT_EQ(e.keyword, "anyOf");
    EXPECT_EQ(e.path, "#/properties/item");
    EXPECT_NE(std::string(e.what()).find("#/properties/item"), std::string::npos) << e.what();
    // 257 strings that differ only in their length limits: all alive for the whole string.
    json strs = json::array();
    for (int i = 0; i < 257; ++i) strs.push_back({{"type", "string"}, {"maxLength", i + 1}});
    EXPECT_EQ(compile_error({{"anyOf", strs}}).path, "#");
    strs.erase(strs.size() - 1);
    EXPECT_NO_THROW(compile({{"anyOf", strs}}));
    // With a required first "kind" const they are told apart by its value, but 300 are still all
    // alive after '{' (refused); 200 are accepted, and the parses alive while one is read stay
    // within the bound.
    EXPECT_EQ(compile_error(any_of_objects(300, true)).keyword, "anyOf");
    const Compiled c = compile(any_of_objects(200, true));
    const Ambiguity amb = ambiguity_bound(*c.g, c.root, kMaxConfigs);
    EXPECT_EQ(amb.parses, 200u);
    Automaton a(c.g);
    size_t most = 0;
    for (char ch : std::string(R"({"kind":"k17","v":5})")) {
        ASSERT_TRUE(a.accept_bytes(std::string(1, ch)));
        most = std::max(most, a.configs().size());
    }
    EXPECT_TRUE(a.accept_special(kEog));
    EXPECT_EQ(most, 200u) << "every alternative is alive after '{'";
}

TEST(GrammarLimits, TaggedRecursiveUnionsAreNotAmbiguous) {
    // A UI tree whose node kinds are told apart by a required first "type": the bound stays at the
    // number of kinds however deep the tree goes.
    const json ui = json::parse(R"({"$defs":{"node":{"anyOf":[
        {"type":"object","properties":{"type":{"const":"div"},"children":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["type","children"]},
        {"type":"object","properties":{"type":{"const":"text"},"value":{"type":"string"}},"required":["type","value"]},
        {"type":"object","properties":{"type":{"enum":["button","link"]},"label":{"type":"string"}},"required":["type"]}]}},
        "$ref":"#/$defs/node"})");
    const Compiled c = compile(ui);
    EXPECT_EQ(ambiguity_bound(*c.g, c.root, kMaxConfigs).parses, 3u);
    // Without the tag first, the bound multiplies with depth, and it is refused.
    json untagged = ui;
    for (auto& alt : untagged["$defs"]["node"]["anyOf"]) alt.erase("required");
    EXPECT_EQ(compile_error(untagged).keyword, "anyOf");
}

TEST(GrammarLimits, NestedAmbiguityBoundIsTheProductAndHolds) {
    // Two object alternatives, each holding an anyOf of two objects: 2 x 2 parses inside.
    const json s = json::parse(R"({"anyOf":[
        {"type":"object","properties":{"a":{"anyOf":[{"type":"object","properties":{"x":{"type":"integer"}}},{"type":"object","properties":{"y":{"type":"integer"}}}]}}},
        {"type":"object","properties":{"a":{"anyOf":[{"type":"object","properties":{"x":{"type":"string"}}},{"type":"object","properties":{"z":{"type":"integer"}}}]}}}]})");
    const Compiled c = compile(s);
    const uint32_t bound = ambiguity_bound(*c.g, c.root, kMaxConfigs).parses;
    EXPECT_EQ(bound, 4u);
    Automaton a(c.g);
    size_t most = 0;
    for (char ch : std::string(R"({"a":{)")) {
        ASSERT_TRUE(a.accept_bytes(std::string(1, ch)));
        most = std::max(most, a.configs().size());
    }
    EXPECT_EQ(most, 4u) << "the bound is reached here";
}

// ---- fuzz ----

/// Random schemas: objects (shared property names, some required), arrays (min/max items),
/// strings (lengths), numbers, enums and consts of nested values, anyOf, $refs to up to three
/// definitions that may refer to each other and to themselves.
class SchemaGen {
public:
    explicit SchemaGen(uint64_t seed) : rng_(seed) {}

    json schema() {
        json defs = json::object();
        n_defs_ = pick(0, 3);
        for (int i = 0; i < n_defs_; ++i) defs[numbered("D", i)] = value(3);
        json root = value(3);
        if (n_defs_ > 0) root["$defs"] = defs;
        return root;
    }

private:
    int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

    json literal(int depth) {
        switch (pick(0, depth > 0 ? 5 : 3)) {
            case 0: return pick(-20, 20);
            case 1: return numbered(std::string(1, static_cast<char>('a' + pick(0, 4))), static_cast<uint64_t>(pick(0, 9)));
            case 2: return pick(0, 1) == 1;
            case 3: return nullptr;
            case 4: return json::array({literal(depth - 1), literal(depth - 1)});
            default: return {{"k", literal(depth - 1)}};
        }
    }

    json value(int depth) {
        const int kind = pick(0, depth > 0 ? 10 : 6);
        switch (kind) {
            case 0: return {{"type", "string"}, {"minLength", pick(0, 2)}, {"maxLength", pick(2, 6)}};
            case 1: return {{"type", pick(0, 1) ? "integer" : "number"}};
            case 2: return {{"type", "boolean"}};
            case 3: {
                json e = json::array();
                for (int i = pick(1, 5); i > 0; --i) e.push_back(literal(2));
                return {{"enum", e}};
            }
            case 4: return {{"const", literal(2)}};
            case 5:
            case 6:
                if (n_defs_ > 0) return {{"$ref", numbered("#/$defs/D", pick(0, n_defs_ - 1))}};
                return {{"type", "null"}};
            case 7:
            case 8: {
                json o = {{"type", "object"}, {"properties", json::object()}};
                json req = json::array();
                for (int i = pick(0, 3); i > 0; --i) {
                    const std::string name = std::string(1, static_cast<char>('a' + pick(0, 5)));
                    o["properties"][name] = value(depth - 1);
                    if (pick(0, 2) == 0) req.push_back(name);
                }
                if (!req.empty()) {
                    std::sort(req.begin(), req.end());
                    req.erase(std::unique(req.begin(), req.end()), req.end());
                    o["required"] = req;
                }
                if (o["properties"].empty() && pick(0, 1)) o["additionalProperties"] = value(depth - 1);
                return o;
            }
            case 9: {
                json a = {{"type", "array"}, {"items", value(depth - 1)}};
                if (pick(0, 1)) a["minItems"] = pick(0, 2);
                if (pick(0, 1)) a["maxItems"] = pick(2, 4);
                return a;
            }
            default: {
                // Mostly narrow; one in six wide (nested wide ones pass the ambiguity limit).
                json alts = json::array();
                for (int i = pick(0, 5) == 0 ? pick(8, 24) : pick(2, 4); i > 0; --i) alts.push_back(value(depth - 1));
                return {{"anyOf", alts}};
            }
        }
    }

    std::mt19937_64 rng_;
    int n_defs_ = 0;
};

struct WalkStats {
    int bytes = 0, max_depth = 0;
    size_t max_parses = 0;
};

/// Walks the automaton byte by byte, choosing among the allowed bytes (opening brackets and
/// quotes favoured; the end taken one time in ten when allowed), for at most `steps` bytes. Fails at the first state that allows neither a
/// byte nor the end, past kMaxNesting, or with more parses alive than `bound`.
/// `open_first`: take '{', '[' or '"' whenever allowed, and end strings at once (a walk straight
/// down to the limit).
WalkStats random_walk(const Compiled& c, uint32_t bound, std::mt19937_64& rng, int steps, const std::string& what, bool open_first) {
    static const std::string alphabet = "{}[]\",:0123456789-.eEtrufalsn abcdek\\";
    WalkStats st;
    Automaton a(c.g);
    for (int step = 0; step < steps; ++step) {
        std::vector<std::pair<char, int>> choices;  // (byte, weight)
        for (char ch : alphabet) {
            if (!a.allows_bytes(std::string(1, ch))) continue;
            const int w = ch == '{' || ch == '[' || ch == '"' ? 12 : ch == ' ' ? 0 : ch == '}' || ch == ']' ? 2 : 3;
            if (w > 0) choices.emplace_back(ch, w);
        }
        const bool can_end = a.allows_special(kEog);
        if (choices.empty()) {
            EXPECT_TRUE(can_end) << "dead end after " << step << " bytes: " << what;
            break;
        }
        if (can_end && std::uniform_int_distribution<int>(0, 9)(rng) == 0) break;
        // (Inside a string the quote that ends it comes first.)
        const bool in_string = a.configs().front().top.kind == F_STR;
        if (open_first)
            for (char want : std::string_view(in_string ? "\"" : "{[\""))
                if (std::any_of(choices.begin(), choices.end(), [&](const auto& ch) { return ch.first == want; })) {
                    choices = {{want, 1}};
                    break;
                }
        int total = 0;
        for (const auto& [ch, w] : choices) total += w;
        int r = std::uniform_int_distribution<int>(0, total - 1)(rng);
        char pick = choices.back().first;
        for (const auto& [ch, w] : choices)
            if ((r -= w) < 0) {
                pick = ch;
                break;
            }
        if (!a.accept_bytes(std::string(1, pick))) {
            ADD_FAILURE() << "an allowed byte was refused: " << what;
            break;
        }
        ++st.bytes;
        st.max_depth = std::max(st.max_depth, depth_of(a));
        st.max_parses = std::max(st.max_parses, a.configs().size());
        if (st.max_depth > kMaxNesting || a.configs().size() > bound) {
            ADD_FAILURE() << "depth " << st.max_depth << ", " << a.configs().size() << " parses (bound " << bound << ") after " << step
                          << " bytes: " << what;
            break;
        }
    }
    return st;
}

TEST(GrammarLimitsFuzz, GeneratedSchemasCompileOrAreRefusedAndNeverDeadEnd) {
    std::mt19937_64 rng(20261208);
    int compiled = 0, refused = 0, ambiguous = 0, walked = 0, deepest = 0;
    size_t most_parses = 0;
    for (uint64_t seed = 1; seed <= 2000; ++seed) {
        const json schema = SchemaGen(seed).schema();
        const std::string what = numbered("seed ", seed) + ": " + schema.dump().substr(0, 400);
        Compiled c;
        try {
            c = compile(schema);
        } catch (const SchemaError& e) {
            ++refused;
            ambiguous += e.keyword == "anyOf" && std::string(e.what()).find("ambiguous") != std::string::npos;
            continue;
        }  // any other exception fails the test
        ++compiled;
        const uint32_t bound = ambiguity_bound(*c.g, c.root, kMaxConfigs).parses;
        ASSERT_LE(bound, kMaxConfigs) << what;
        for (int walk = 0; walk < 3; ++walk) {
            const WalkStats st = random_walk(c, bound, rng, 400, what, walk == 1);
            walked += st.bytes;
            deepest = std::max(deepest, st.max_depth);
            most_parses = std::max(most_parses, st.max_parses);
        }
    }
    // The red-team shapes once more, walked long enough to hit the nesting limit.
    int at_limit = 0;
    for (const char* s : {R"({"$defs":{"N":{"type":"object","properties":{"c":{"$ref":"#/$defs/N"}}}},"$ref":"#/$defs/N"})",
                          R"({"$defs":{"A":{"type":"array","items":{"anyOf":[{"$ref":"#/$defs/A"},{"type":"integer"}]}}},"$ref":"#/$defs/A"})",
                          R"({"$defs":{"M":{"type":"object","additionalProperties":{"anyOf":[{"$ref":"#/$defs/M"},{"type":"null"}]}}},"$ref":"#/$defs/M"})"}) {
        const Compiled c = compile(json::parse(s));
        const uint32_t bound = ambiguity_bound(*c.g, c.root, kMaxConfigs).parses;
        for (int walk = 0; walk < 3; ++walk) at_limit += random_walk(c, bound, rng, 3000, s, true).max_depth == kMaxNesting;
    }
    // The generator makes every outcome (MEASURED: 1,875 compiled, 125 refused, 17 of them as too
    // ambiguous; 160,000 bytes walked, depth 128 reached, 14 parses at once), and runs in ~1.5 s.
    EXPECT_GT(compiled, 1500);
    EXPECT_GT(refused, 50);
    EXPECT_GT(ambiguous, 5);
    EXPECT_GT(walked, 100000);
    EXPECT_EQ(deepest, kMaxNesting);
    EXPECT_GE(most_parses, 8u);
    EXPECT_EQ(at_limit, 9) << "every walk straight down a recursive shape reaches the limit";
    RecordProperty("compiled", compiled);
    RecordProperty("refused_ambiguous", ambiguous);
    RecordProperty("bytes_walked", walked);
}

}  // namespace
}  // namespace nitro::grammar
