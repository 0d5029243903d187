// The constrained-decoding automaton (src/grammar) against hand-written JSON: for many schemas,
// texts that must be accepted whole (then end of generation), and texts that must be refused at
// a known byte (the index written next to each, counted by hand). Also the schema keywords that
// must be refused with a SchemaError naming them.
#include "grammar/automaton.h"
#include "grammar/json_schema.h"
#include "grammar/lexers.h"
#include "grammar/response_constraint.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace nitro::grammar {
namespace {

using json = nlohmann::ordered_json;
constexpr int32_t kEog = 1000;  // a stand-in end-of-generation control token

/// A RAW grammar (value, then kEog) for a schema given as JSON text; "json_object" = any object.
std::shared_ptr<Grammar> raw_grammar(const std::string& schema) {
    auto g = std::make_shared<Grammar>();
    const uint32_t root = schema == "json_object" ? kAnyObject : compile_json_schema(json::parse(schema), *g);
    GateStep v;
    v.op = GateOp::JSON;
    v.node = root;
    v.next = 1;
    g->add_step(v);
    GateStep e;
    e.op = GateOp::END_OF_GEN;
    e.tokens = {kEog};
    e.next = 2;
    g->add_step(e);
    GateStep d;
    d.op = GateOp::DONE;
    g->add_step(d);
    return g;
}

/// Index of the first byte of `text` the grammar refuses (fed one byte at a time), -1 if none.
int first_refused(const std::shared_ptr<Grammar>& g, const std::string& text) {
    Automaton a(g);
    for (size_t i = 0; i < text.size(); ++i)
        if (!a.accept_bytes(text.substr(i, 1))) return static_cast<int>(i);
    return -1;
}

/// True if the whole text is accepted and the generation may end after it.
bool complete(const std::shared_ptr<Grammar>& g, const std::string& text) {
    Automaton a(g);
    if (!a.accept_bytes(text)) return false;
    return a.accept_special(kEog) && a.done();
}

void expect_valid(const std::string& schema, const std::vector<std::string>& texts) {
    auto g = raw_grammar(schema);
    for (const auto& t : texts) {
        EXPECT_EQ(first_refused(g, t), -1) << schema << "\n  text: " << t;
        EXPECT_TRUE(complete(g, t)) << schema << "\n  text (end): " << t;
    }
}

/// {text, index of the first refused byte}.
void expect_refused(const std::string& schema, const std::vector<std::pair<std::string, int>>& cases) {
    auto g = raw_grammar(schema);
    for (const auto& [t, at] : cases) EXPECT_EQ(first_refused(g, t), at) << schema << "\n  text: " << t;
}

/// Accepted as a prefix, but the value is not complete: end of generation refused.
void expect_incomplete(const std::string& schema, const std::vector<std::string>& texts) {
    auto g = raw_grammar(schema);
    for (const auto& t : texts) {
        Automaton a(g);
        EXPECT_TRUE(a.accept_bytes(t)) << t;
        EXPECT_FALSE(a.accept_special(kEog)) << schema << "\n  ended early after: " << t;
    }
}

TEST(GrammarAutomaton, JsonObjectAcceptsJson) {
    expect_valid("json_object",
                 {"{}", "{\"a\":1}", "{ \"a\" : 1 }", "{\"a\": [1, 2.5, -3e+2, 0, -0, 1E5, 1.0e-10, true, false, null, \"x\"], \"b\": {\"c\": {}}}",
                  "{\n  \"a\": 1,\n  \"b\": [\n    {}\n  ]\n}", "{\n\t\"a\": []\n}", "{\"s\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\uD7FF\\u0000\"}",
                  "{\"s\":\"h\xC3\xA9llo \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80\"}", "{} ", "{}\n", "\n{}",
                  "{\"\":\"\"}", "{\"a\":{\"a\":{\"a\":[[[]]]}}}"});
}

TEST(GrammarAutomaton, JsonObjectRefusesWhatIsNotJson) {
    expect_refused("json_object", {
                                      {"[]", 0},                     // the root must be an object
                                      {"{\"a\":01}", 6},             // leading zero
                                      {"{\"a\":1,}", 7},             // trailing comma
                                      {"{\"a\" 1}", 5},              // missing colon
                                      {"{a:1}", 1},                  // unquoted key
                                      {"{\"s\":\"\x01\"}", 6},       // raw control character
                                      {"{\"s\":\"\\x\"}", 7},        // unknown escape
                                      {"{\"s\":\"\\uD800\"}", 9},   // surrogate escape (\uD8: 8 is not 0-7)
                                      {"{\"s\":\"\\u12G4\"}", 10},   // not hex
                                      {"{\"s\":\"\xC0\x80\"}", 6},   // overlong lead byte
                                      {"{\"s\":\"\xED\xA0\x80\"}", 7},  // UTF-8 surrogate
                                      {"{\"s\":\"\xF4\x90\x80\x80\"}", 7},  // above U+10FFFF
                                      {"{\"s\":\"\xE2\x82\"}", 8},   // cut character, then the quote
                                      {"{\"s\":\"\x80\"}", 6},       // lone continuation byte
                                      {"{\"a\":1.}", 7},             // fraction without digits
                                      {"{\"a\":.5}", 5},
                                      {"{\"a\":+1}", 5},
                                      {"{\"a\":1e}", 7},
                                      {"{\"a\":tru}", 8},
                                      {"{\"a\":nulll}", 9},
                                      {"{\"a\":1}}", 7},             // nothing after the value but whitespace
                                      {"{}x", 2},
                                      {"{\"a\":\"b\" \"c\"}", 9},    // missing comma
                                      {"{\"a\":[1 2]}", 8},
                                      {"{\"a\":[,]}", 6},
                                  });
}

TEST(GrammarAutomaton, WhitespaceIsBounded) {
    expect_refused("json_object", {
                                      {"{  \"a\":1}", 2},      // one space, not two
                                      {"{\t\"a\":1}", 1},      // a tab only after a newline
                                      {"{\n\n\n\"a\":1}", 3},  // at most two newlines
                                      {"{\r\n\"a\":1}", 1},
                                      {"{} \n", 3},
                                      {"  {}", 1},
                                  });
    const std::string indent(kMaxIndent, ' ');  // 20, llama.cpp's bound
    expect_valid("json_object", {"{\n" + indent + "\"a\":1}", "{\n\n" + indent + "}"});
    expect_refused("json_object", {{"{\n" + indent + " ", 2 + kMaxIndent}});
    // Numbers too: 16 integer digits, 16 fraction digits, 3 exponent digits.
    expect_valid("json_object", {"{\"a\":1234567890123456}", "{\"a\":0.1234567890123456}", "{\"a\":1e123}"});
    expect_refused("json_object", {{"{\"a\":12345678901234567}", 21}, {"{\"a\":0.12345678901234567}", 23}, {"{\"a\":1e1234}", 10}});
}

TEST(GrammarAutomaton, EndOfGenerationOnlyWhenComplete) {
    expect_incomplete("json_object", {"", "{", "{\"a\"", "{\"a\":", "{\"a\":1", "{\"a\":\"x", "{\"a\":[1]", "{\"a\":tr"});
    auto g = raw_grammar("{\"type\":\"integer\"}");
    EXPECT_TRUE(complete(g, "12"));   // a number at the root ends at end of generation
    EXPECT_TRUE(complete(g, "-0"));
    EXPECT_FALSE(complete(g, "-"));
    EXPECT_FALSE(complete(g, "1.5"));  // integers have no fraction
}

const char* kPerson = R"({"type":"object","properties":{
    "name":{"type":"string"},"age":{"type":"integer"},
    "tags":{"type":"array","items":{"type":"string"},"maxItems":2}},
    "required":["name","tags"],"additionalProperties":false})";

TEST(GrammarAutomaton, ObjectPropertiesInOrderOptionalOnesSkippable) {
    expect_valid(kPerson, {R"({"name":"x","tags":[]})", R"({"name":"x","age":3,"tags":["a","b"]})",
                           "{\n  \"name\": \"Ann\",\n  \"age\": 41,\n  \"tags\": [\"a\"]\n}"});
    expect_refused(kPerson, {
                                {R"({"age":3})", 2},                           // name comes first (required)
                                {R"({"name":"x"})", 11},                       // tags is required
                                {R"({"name":"x","age":3.5})", 19},             // an integer
                                {R"({"name":"x","tags":["a","b","c"]})", 27},  // at most 2 items
                                {R"({"name":"x","tags":[],"extra":1})", 21},   // no other keys
                                {R"({"name":1})", 8},
                                {R"({"name":"x","name":"y"})", 13},            // no key twice
                                {R"({"name":"x","tags":[1]})", 20},
                                {R"({"nam":"x"})", 5},
                            });
    expect_incomplete(kPerson, {R"({"name":"x","age":3)"});
}

TEST(GrammarAutomaton, EnumAndConstMatchTheirJsonTexts) {
    const char* e = R"({"enum":["red","green",1,null,{"a":[1]},2.5]})";
    expect_valid(e, {"\"red\"", "\"green\"", "1", "null", "{\"a\":[1]}", "2.5"});
    expect_refused(e, {{"\"blue\"", 1}, {"12", 1}, {"{\"a\": [1]}", 5}, {"nul ", 3}, {"2.50", 3}});
    expect_incomplete(e, {"\"re", "{\"a\":[1]"});
    expect_valid(R"({"const":"x"})", {"\"x\""});
    expect_refused(R"({"const":"x"})", {{"\"y\"", 1}});
    // An enum with a type keeps the values of that type only.
    expect_refused(R"({"type":"string","enum":["a",1]})", {{"1", 0}});
    // Escapes in enum strings are matched as nlohmann writes them.
    expect_valid(R"({"enum":["a\"b","\u00e9\n"]})", {"\"a\\\"b\"", "\"\xC3\xA9\\n\""});
}

TEST(GrammarAutomaton, AnyOfKeepsBothReadingsUntilTheyDiffer) {
    const std::string s = R"({"anyOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},
                                      {"type":"object","properties":{"b":{"type":"string"}},"required":["b"]}]})";
    expect_valid(s, {R"({"a":1})", R"({"b":"s"})"});
    expect_refused(s, {{R"({"c":1})", 2}, {R"({"a":"s"})", 5}});
    auto g = raw_grammar(s);
    Automaton a(g);
    ASSERT_TRUE(a.accept_bytes("{\""));
    EXPECT_EQ(a.configs().size(), 2u);
    ASSERT_TRUE(a.accept_bytes("a"));
    EXPECT_EQ(a.configs().size(), 1u);
    expect_valid(R"({"type":["string","null"]})", {"\"x\"", "null"});
    expect_refused(R"({"type":["string","null"]})", {{"1", 0}});
    // Optional[X] as pydantic writes it: anyOf with null, annotations beside it.
    expect_valid(R"({"anyOf":[{"type":"integer"},{"type":"null"}],"default":null,"title":"N"})", {"null", "7"});
}

TEST(GrammarAutomaton, RefsAndRecursion) {
    const std::string tree = R"({"$defs":{"node":{"type":"object","properties":{
        "value":{"type":"integer"},"children":{"type":"array","items":{"$ref":"#/$defs/node"}}},
        "required":["value","children"]}},"$ref":"#/$defs/node"})";
    expect_valid(tree, {R"({"value":1,"children":[{"value":2,"children":[]},{"value":3,"children":[{"value":4,"children":[]}]}]})"});
    expect_refused(tree, {{R"({"value":1,"children":[{"value":2}]})", 33}});
    const std::string linked = R"({"type":"object","properties":{"next":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},"required":["next"]})";
    expect_valid(linked, {R"({"next":null})", R"({"next":{"next":{"next":null}}})"});
    // definitions (draft 7) and a pointer with an escaped '/'.
    expect_valid(R"({"definitions":{"a/b":{"type":"boolean"}},"type":"array","items":{"$ref":"#/definitions/a~1b"}})",
                 {"[true,false]"});
    // Deeper nesting than kMaxNesting is not produced.
    const std::string deep = std::string(kMaxNesting, '[');
    auto g = raw_grammar(R"({"$defs":{"a":{"type":"array","items":{"$ref":"#/$defs/a"}}},"$ref":"#/$defs/a"})");
    EXPECT_EQ(first_refused(g, deep + "["), static_cast<int>(kMaxNesting));
    EXPECT_TRUE(complete(g, deep + std::string(kMaxNesting, ']')));
}

TEST(GrammarAutomaton, StringLengthsCountCharacters) {
    const char* s = R"({"type":"string","minLength":2,"maxLength":3})";
    expect_valid(s, {"\"ab\"", "\"abc\"", "\"\\u00e9x\"", "\"\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\"", "\"\\n\\t\""});
    expect_refused(s, {{"\"a\"", 2}, {"\"abcd", 4}, {"\"abc\\", 4}, {"\"\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E" "x", 10}});
}

TEST(GrammarAutomaton, ArrayCounts) {
    const char* s = R"({"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":2})";
    expect_valid(s, {"[true]", "[true,false]", "[ true , false ]"});
    expect_refused(s, {{"[]", 1}, {"[true,false,true]", 11}, {"[1]", 1}});
    expect_valid(R"({"type":"array","maxItems":0})", {"[]"});
    expect_refused(R"({"type":"array","maxItems":0})", {{"[1]", 1}});
}

TEST(GrammarAutomaton, MapsAndInferredTypes) {
    expect_valid(R"({"type":"object","additionalProperties":{"type":"integer"}})", {"{}", R"({"x":1,"y":2})"});
    expect_refused(R"({"type":"object","additionalProperties":{"type":"integer"}})", {{R"({"x":"1"})", 5}});
    expect_valid(R"({"type":"object","additionalProperties":false})", {"{}"});
    expect_refused(R"({"type":"object","additionalProperties":false})", {{"{\"", 1}});
    expect_valid(R"({"properties":{"a":{"type":"null"}}})", {"{}", R"({"a":null})"});  // type inferred: object
    expect_refused(R"({"properties":{"a":{"type":"null"}}})", {{"[", 0}});
    expect_valid("{}", {"1", "\"s\"", "[{}]", "null"});  // no keywords: any value
    expect_valid("true", {"[1,{\"a\":false}]"});
}

std::string schema_error(const std::string& schema) {
    Grammar g;
    try {
        compile_json_schema(json::parse(schema), g);
    } catch (const SchemaError& e) {
        return e.keyword + " | " + e.path + " | " + e.what();
    }
    return "no error";
}

TEST(GrammarSchema, UnsupportedKeywordsAreNamedNeverIgnored) {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {R"({"type":"string","pattern":"^a"})", "pattern | #"},
        {R"({"type":"object","properties":{"d":{"type":"string","format":"date-time"}}})", "format | #/properties/d"},
        {R"({"type":"integer","minimum":0})", "minimum | #"},
        {R"({"type":"number","multipleOf":2})", "multipleOf | #"},
        {R"({"oneOf":[{"type":"string"}]})", "oneOf | #"},
        {R"({"not":{"type":"string"}})", "not | #"},
        {R"({"type":"array","uniqueItems":true})", "uniqueItems | #"},
        {R"({"type":"array","prefixItems":[{"type":"string"}]})", "prefixItems | #"},
        {R"({"type":"object","properties":{"a":{}},"additionalProperties":{"type":"string"}})", "additionalProperties | #"},
        {R"({"$ref":"https://example.com/s.json"})", "$ref | #"},
        {R"({"allOf":[{"type":"string"},{"maxLength":3}]})", "allOf | #"},
        {R"({"type":"object","properties":{"a":{}},"required":["b"]})", "required | #"},
        {R"({"type":"string","foo":1})", "foo | #"},
        {R"({"$ref":"#/$defs/a","maxLength":2,"$defs":{"a":{"type":"string"}}})", "$ref | #"},
        {R"({"anyOf":[{"type":"string"}],"type":"string"})", "anyOf | #"},
        {R"({"enum":["a"],"maxLength":2})", "enum | #"},
        {R"({"type":"array","items":{"type":"object","propertyNames":{"maxLength":2}}})", "propertyNames | #/items"},
    };
    for (const auto& [schema, want] : cases) {
        const std::string got = schema_error(schema);
        EXPECT_TRUE(got.starts_with(want)) << schema << "\n  got: " << got;
        EXPECT_NE(got.find("not supported"), std::string::npos) << got;
    }
}

TEST(GrammarSchema, InvalidAndUnsatisfiableSchemas) {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {R"({"type":"array","minItems":-1})", "minItems | #"},
        {R"({"type":"strin"})", "type | #"},
        {R"({"enum":[]})", "enum | #"},
        {R"({"type":"string","minLength":3,"maxLength":2})", "minLength | #"},
        {R"({"$ref":"#/$defs/missing"})", "$ref | #"},
        {R"(5)", " | #"},
        {R"({"type":"object","properties":{"a":false},"required":["a"]})", " | # | no JSON value"},
        {R"({"type":"object","properties":{"next":{"$ref":"#"}},"required":["next"]})", " | # | no JSON value"},
        {R"({"$ref":"#"})", "$ref | # | the schema has a $ref/anyOf cycle"},
        {R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"anyOf":[{"$ref":"#/$defs/a"}]}},"$ref":"#/$defs/a"})", "$ref | # | the schema has a $ref/anyOf cycle"},
        {R"({"type":"string","enum":[1]})", " | # | no JSON value"},
    };
    for (const auto& [schema, want] : cases) {
        const std::string got = schema_error(schema);
        EXPECT_TRUE(got.starts_with(want)) << schema << "\n  got: " << got;
    }
    // Parts that cannot complete are dropped, not offered: the optional 'b' (false) never starts.
    expect_valid(R"({"type":"object","properties":{"a":{"type":"integer"},"b":false}})", {"{}", R"({"a":1})"});
    expect_refused(R"({"type":"object","properties":{"a":{"type":"integer"},"b":false}})", {{R"({"b")", 2}});
}

}  // namespace
}  // namespace nitro::grammar
