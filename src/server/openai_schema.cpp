#include "server/openai_schema.h"

#include "grammar/json_schema.h"
#include "tokenizer/chat.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

namespace nitro::server {

using json = nlohmann::ordered_json;

nlohmann::json ApiError::to_json() const {
    nlohmann::json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
    if (!param.empty()) e["param"] = param;
    if (!code.empty()) e["code"] = code;
    return {{"error", e}};
}

void bad_request(const std::string& param, const std::string& message, const std::string& code) {
    ApiError e;
    e.status = 400;
    e.message = message;
    e.param = param;
    e.code = code;
    throw ApiException(std::move(e));
}

namespace {

const char* type_name(const json& v) {
    if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
    if (v.is_number_float()) return "number";
    return v.type_name();
}

[[noreturn]] void wrong_type(const std::string& param, const json& v, const char* expected) {
    bad_request(param, fmt::format("'{}' must be {}, got {}", param, expected, type_name(v)), "invalid_type");
}

/// obj[key] when present and not null, else nullptr.
const json* opt_field(const json& obj, const char* key) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return nullptr;
    return &*it;
}

std::optional<double> get_number(const json& obj, const char* key, double lo, double hi) {
    const json* v = opt_field(obj, key);
    if (!v) return std::nullopt;
    if (!v->is_number()) wrong_type(key, *v, "a number");
    const double d = v->get<double>();
    if (!std::isfinite(d) || d < lo || d > hi) bad_request(key, fmt::format("'{}' must be between {} and {}, got {}", key, lo, hi, d), "invalid_value");
    return d;
}

std::optional<int64_t> get_int(const json& obj, const char* key, int64_t lo, int64_t hi) {
    const json* v = opt_field(obj, key);
    if (!v) return std::nullopt;
    // An integer beyond 64 bits parses as a float: too large, not of the wrong type.
    if (v->is_number_float() && std::isfinite(v->get<double>()) && std::abs(v->get<double>()) >= 0x1p63 &&
        std::floor(v->get<double>()) == v->get<double>())
        bad_request(key, fmt::format("'{}' must be between {} and {}, got {}", key, lo, hi, v->dump()), "invalid_value");
    if (!v->is_number_integer() && !v->is_number_unsigned()) wrong_type(key, *v, "an integer");
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        bad_request(key, fmt::format("'{}' is too large", key), "invalid_value");
    const int64_t i = v->get<int64_t>();
    if (i < lo || i > hi) bad_request(key, fmt::format("'{}' must be between {} and {}, got {}", key, lo, hi, i), "invalid_value");
    return i;
}

std::optional<bool> get_bool(const json& obj, const char* key) {
    const json* v = opt_field(obj, key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) wrong_type(key, *v, "a boolean");
    return v->get<bool>();
}

std::optional<std::string> get_string(const json& obj, const char* key) {
    const json* v = opt_field(obj, key);
    if (!v) return std::nullopt;
    if (!v->is_string()) wrong_type(key, *v, "a string");
    return v->get<std::string>();
}

json parse_body(const std::string& body) {
    bool too_deep = false;
    std::optional<json> parsed = parse_json_bounded(body, kMaxJsonDepth, &too_deep);
    if (too_deep)
        bad_request("", fmt::format("The JSON body of your request nests arrays/objects deeper than {} levels, "
                                    "the most this server accepts.", kMaxJsonDepth),
                    "json_too_deep");
    if (!parsed) {
        // Find where it broke for the message.
        try {
            const json again = json::parse(body);
            (void)again;
        } catch (const json::parse_error& e) {
            bad_request("", fmt::format("We could not parse the JSON body of your request: {}", e.what()), "invalid_json");
        }
        bad_request("", "We could not parse the JSON body of your request.", "invalid_json");
    }
    json j = std::move(*parsed);
    if (!j.is_object()) bad_request("", fmt::format("the request body must be a JSON object, got {}", type_name(j)), "invalid_json");
    return j;
}

/// OpenAI's rule for function names: ^[a-zA-Z0-9_-]{1,64}$. Names are printed into the prompt
/// (`to=functions.NAME`, `{"name": "NAME"`), so nothing else may pass.
void check_tool_name(const std::string& name, const std::string& param) {
    const bool ok = !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    });
    if (!ok)
        bad_request(param, fmt::format("'{}' must match ^[a-zA-Z0-9_-]{{1,64}}$ (letters, digits, '_' and '-', at most 64), got '{}'",
                                       param, name.size() > 80 ? name.substr(0, 80) + "..." : name),
                    "invalid_value");
}

/// OpenAI's logit_bias: {"TOKEN_ID": BIAS, ...}, biases in [-100, 100] added to the logits.
void parse_logit_bias(const json& lb, int64_t n_vocab, SamplerParams& sp) {
    if (!lb.is_object()) wrong_type("logit_bias", lb, "an object mapping token ids to biases");
    constexpr size_t kMaxEntries = 1024;
    if (lb.size() > kMaxEntries)
        bad_request("logit_bias", fmt::format("'logit_bias' may hold at most {} tokens, got {}", kMaxEntries, lb.size()), "invalid_value");
    for (const auto& [key, v] : lb.items()) {
        const std::string param = "logit_bias." + key.substr(0, 40);
        const bool digits = !key.empty() && key.size() <= 10 && std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
        const int64_t id = digits ? std::stoll(key) : -1;
        if (id < 0 || id > std::numeric_limits<int32_t>::max() || (n_vocab > 0 && id >= n_vocab))
            bad_request(param,
                        n_vocab > 0 ? fmt::format("'logit_bias' key '{}' is not a token id of this model (0..{})", key.substr(0, 40), n_vocab - 1)
                                    : fmt::format("'logit_bias' key '{}' is not a token id", key.substr(0, 40)),
                        "invalid_value");
        if (!v.is_number()) wrong_type(param, v, "a number");
        const double b = v.get<double>();
        if (!std::isfinite(b) || b < -100.0 || b > 100.0)
            bad_request(param, fmt::format("'logit_bias' values must be between -100 and 100, got {} for token {}", v.dump(), id), "invalid_value");
        sp.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(b));
    }
}

}  // namespace

void grammar_memory_error(const grammar::GrammarMemoryError& e) {
    ApiError a;
    a.status = e.busy ? 429 : 400;
    a.type = e.busy ? "server_error" : "invalid_request_error";
    a.message = std::string("response_format: ") + e.what();
    a.param = e.busy ? "" : "response_format";
    a.code = e.busy ? "grammar_memory_busy" : "schema_too_large";
    throw ApiException(std::move(a));
}

namespace {

/// OpenAI's response_format, with the schema compiled (SchemaError -> 400 naming the keyword).
ResponseFormat parse_response_format(const json& rf, const ParseLimits& limits) {
    ResponseFormat out;
    if (!rf.is_object()) wrong_type("response_format", rf, "an object");
    auto type = get_string(rf, "type");
    if (!type) bad_request("response_format.type", "'response_format.type' is required ('text', 'json_object' or 'json_schema')", "missing_required_parameter");
    if (*type == "text") return out;
    try {
        out.grammar = std::make_shared<grammar::Grammar>(std::make_unique<grammar::MemoryLease>(limits.grammar_budget));
    } catch (const grammar::GrammarMemoryError& e) {
        grammar_memory_error(e);
    }
    if (*type == "json_object") {
        out.type = ResponseFormat::Type::JSON_OBJECT;
        out.root = grammar::kAnyObject;
        return out;
    }
    if (*type != "json_schema")
        bad_request("response_format.type", fmt::format("'response_format.type' must be 'text', 'json_object' or 'json_schema', got '{}'", *type), "invalid_value");
    out.type = ResponseFormat::Type::JSON_SCHEMA;
    const json* js = opt_field(rf, "json_schema");
    if (!js) bad_request("response_format.json_schema", "Missing required parameter: 'response_format.json_schema'.", "missing_required_parameter");
    if (!js->is_object()) wrong_type("response_format.json_schema", *js, "an object");
    auto name = get_string(*js, "name");
    if (!name) bad_request("response_format.json_schema.name", "Missing required parameter: 'response_format.json_schema.name'.", "missing_required_parameter");
    check_tool_name(*name, "response_format.json_schema.name");
    out.name = *name;
    (void)get_bool(*js, "strict");  // the schema is always enforced; strict changes nothing here
    (void)get_string(*js, "description");
    const json* schema = opt_field(*js, "schema");
    if (schema && !schema->is_object() && !schema->is_boolean()) wrong_type("response_format.json_schema.schema", *schema, "an object");
    try {
        // No schema: any JSON value.
        out.root = schema ? grammar::compile_json_schema(*schema, *out.grammar) : grammar::kAnyValue;
    } catch (const grammar::SchemaError& e) {
        bad_request("response_format.json_schema.schema", std::string("response_format.json_schema.schema: ") + e.what(),
                    e.unsupported ? "unsupported_schema" : "invalid_schema");
    } catch (const grammar::GrammarMemoryError& e) {
        grammar_memory_error(e);
    }
    return out;
}

void parse_generation(const json& j, GenerationRequest& g, bool chat, const ParseLimits& limits) {
    // OpenAI's defaults: temperature 1, no top-k, a fresh seed per request unless one is given.
    g.sampling.temperature = 1.0f;
    g.sampling.top_k = 0;
    g.sampling.seed = std::random_device{}();
    if (auto m = get_string(j, "model")) g.model = *m;
    if (auto v = get_number(j, "temperature", 0.0, 2.0)) g.sampling.temperature = static_cast<float>(*v);
    if (auto v = get_number(j, "top_p", 0.0, 1.0)) g.sampling.top_p = static_cast<float>(*v);
    if (auto v = get_number(j, "min_p", 0.0, 1.0)) g.sampling.min_p = static_cast<float>(*v);
    if (auto v = get_int(j, "top_k", 0, std::numeric_limits<int32_t>::max())) g.sampling.top_k = static_cast<int>(*v);
    if (auto v = get_int(j, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()))
        g.sampling.seed = static_cast<uint64_t>(*v);
    // max_completion_tokens is the newer name; it wins when both are given.
    if (auto v = get_int(j, "max_tokens", 1, std::numeric_limits<int32_t>::max())) g.max_tokens = *v;
    if (auto v = get_int(j, "max_completion_tokens", 1, std::numeric_limits<int32_t>::max())) g.max_tokens = *v;
    (void)get_int(j, "n", 1, 1);  // one choice per request
    for (const char* pen : {"frequency_penalty", "presence_penalty"})
        if (auto v = get_number(j, pen, -2.0, 2.0); v && *v != 0.0)
            bad_request(pen, fmt::format("'{}' is not supported by this server (only 0)", pen), "unsupported_parameter");
    if (const json* lb = opt_field(j, "logit_bias")) parse_logit_bias(*lb, limits.n_vocab, g.sampling);

    if (const json* s = opt_field(j, "stop")) {
        if (s->is_string()) {
            g.stop.push_back(s->get<std::string>());
        } else if (s->is_array()) {
            if (s->size() > 4) bad_request("stop", "'stop' may hold at most 4 sequences", "invalid_value");
            for (size_t i = 0; i < s->size(); ++i) {
                if (!(*s)[i].is_string()) wrong_type(fmt::format("stop[{}]", i), (*s)[i], "a string");
                g.stop.push_back((*s)[i].get<std::string>());
            }
        } else {
            wrong_type("stop", *s, "a string or an array of strings");
        }
        for (const auto& x : g.stop)
            if (x.empty()) bad_request("stop", "stop sequences must not be empty", "invalid_value");
    }
    if (auto v = get_bool(j, "ignore_eos")) {
        if (chat && *v) bad_request("ignore_eos", "'ignore_eos' is only supported on /v1/completions", "unsupported_parameter");
        g.ignore_eos = *v;
    }
    if (auto v = get_string(j, "debug_scripted_output")) g.scripted_output = *v;
    if (const json* rf = opt_field(j, "response_format")) g.response_format = parse_response_format(*rf, limits);
    for (const char* key : {"reasoning_budget_tokens", "thinking_budget_tokens"})
        if (auto v = get_int(j, key, -1, std::numeric_limits<int32_t>::max())) {
            if (!g.response_format.json())
                bad_request(key, fmt::format("'{}' is enforced together with a JSON response_format only (json_object or json_schema)", key),
                            "unsupported_parameter");
            g.reasoning_budget = *v;
        }
    if (g.ignore_eos && g.response_format.json())
        bad_request("ignore_eos", "'ignore_eos' cannot be combined with a JSON response_format: the output ends when the value is complete",
                    "invalid_value");
    if (auto v = get_bool(j, "stream")) g.stream = *v;
    if (const json* so = opt_field(j, "stream_options")) {
        if (!so->is_object()) wrong_type("stream_options", *so, "an object");
        if (!g.stream) bad_request("stream_options", "'stream_options' is only allowed when 'stream' is true", "invalid_value");
        if (auto v = get_bool(*so, "include_usage")) g.include_usage = *v;
    }
    if (chat) {
        if (auto v = get_bool(j, "logprobs")) g.logprobs = *v;
        if (auto v = get_int(j, "top_logprobs", 0, 20)) {
            if (!g.logprobs) bad_request("top_logprobs", "'top_logprobs' needs 'logprobs' set to true", "invalid_value");
            g.top_logprobs = static_cast<int>(*v);
        }
    } else if (auto v = get_int(j, "logprobs", 0, 5)) {  // legacy completions: an integer
        g.logprobs = true;
        g.top_logprobs = static_cast<int>(*v);
    }
}

const std::vector<std::string>& known_roles() {
    static const std::vector<std::string> r = {"system", "developer", "user", "assistant", "tool"};
    return r;
}

json normalize_tool_call(const json& c, const std::string& where) {
    if (!c.is_object()) wrong_type(where, c, "an object");
    const json* fn = opt_field(c, "function");
    if (!fn || !fn->is_object()) bad_request(where + ".function", fmt::format("'{}.function' must be an object", where), "invalid_value");
    auto name = get_string(*fn, "name");
    if (!name || name->empty()) bad_request(where + ".function.name", fmt::format("'{}.function.name' is required", where), "missing_required_parameter");
    check_tool_name(*name, where + ".function.name");  // printed into the prompt like the names in 'tools'
    json out = {{"id", c.value("id", std::string())}, {"type", "function"}, {"function", {{"name", *name}}}};
    const json* args = opt_field(*fn, "arguments");
    if (!args) out["function"]["arguments"] = "{}";
    else if (args->is_string() || args->is_object()) out["function"]["arguments"] = *args;
    else wrong_type(where + ".function.arguments", *args, "a string");
    return out;
}

json parse_messages(const json& j) {
    const json* msgs = opt_field(j, "messages");
    if (!msgs) bad_request("messages", "Missing required parameter: 'messages'.", "missing_required_parameter");
    if (!msgs->is_array()) wrong_type("messages", *msgs, "an array");
    if (msgs->empty()) bad_request("messages", "'messages' must contain at least one message", "invalid_value");
    json out = json::array();
    for (size_t i = 0; i < msgs->size(); ++i) {
        const json& m = (*msgs)[i];
        const std::string where = fmt::format("messages[{}]", i);
        if (!m.is_object()) wrong_type(where, m, "an object");
        auto role = get_string(m, "role");
        if (!role) bad_request(where + ".role", fmt::format("'{}.role' is required", where), "missing_required_parameter");
        if (std::find(known_roles().begin(), known_roles().end(), *role) == known_roles().end())
            bad_request(where + ".role", fmt::format("'{}.role' must be one of system, developer, user, assistant, tool; got '{}'", where, *role), "invalid_value");
        json n = {{"role", *role}};
        const auto content_it = m.find("content");
        const bool has_calls = m.contains("tool_calls") && !m["tool_calls"].is_null();
        if (content_it == m.end() && *role != "assistant")
            bad_request(where + ".content", fmt::format("'{}.content' is required", where), "missing_required_parameter");
        n["content"] = content_text(content_it == m.end() ? json() : *content_it, where + ".content");
        for (const char* key : {"reasoning_content", "thinking"}) {
            if (auto r = get_string(m, key); r && !r->empty()) n["reasoning_content"] = *r;
        }
        if (*role == "assistant" && has_calls) {
            const json& calls = m["tool_calls"];
            if (!calls.is_array()) wrong_type(where + ".tool_calls", calls, "an array");
            json nc = json::array();
            for (size_t k = 0; k < calls.size(); ++k) nc.push_back(normalize_tool_call(calls[k], fmt::format("{}.tool_calls[{}]", where, k)));
            if (!nc.empty()) n["tool_calls"] = std::move(nc);
        }
        if (*role == "tool") {
            if (auto id = get_string(m, "tool_call_id")) n["tool_call_id"] = *id;
        }
        if (auto name = get_string(m, "name")) n["name"] = *name;
        out.push_back(std::move(n));
    }
    return out;
}

json parse_tools(const json& j) {
    const json* tools = opt_field(j, "tools");
    if (!tools) return nullptr;
    if (!tools->is_array()) wrong_type("tools", *tools, "an array");
    if (tools->empty()) return nullptr;
    json out = json::array();
    for (size_t i = 0; i < tools->size(); ++i) {
        const json& t = (*tools)[i];
        const std::string where = fmt::format("tools[{}]", i);
        if (!t.is_object()) wrong_type(where, t, "an object");
        auto type = get_string(t, "type");
        if (type && *type != "function") bad_request(where + ".type", fmt::format("'{}.type' must be 'function', got '{}'", where, *type), "invalid_value");
        const json* fn = opt_field(t, "function");
        if (!fn || !fn->is_object()) bad_request(where + ".function", fmt::format("'{}.function' must be an object", where), "missing_required_parameter");
        auto name = get_string(*fn, "name");
        if (!name || name->empty()) bad_request(where + ".function.name", fmt::format("'{}.function.name' is required", where), "missing_required_parameter");
        check_tool_name(*name, where + ".function.name");
        json f = {{"name", *name}};
        if (auto d = get_string(*fn, "description")) f["description"] = *d;
        if (const json* p = opt_field(*fn, "parameters")) {
            if (!p->is_object()) wrong_type(where + ".function.parameters", *p, "an object");
            f["parameters"] = *p;
        }
        out.push_back({{"type", "function"}, {"function", std::move(f)}});
    }
    return out;
}

}  // namespace

std::string content_text(const json& content, const std::string& param) {
    if (content.is_null()) return "";
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array()) wrong_type(param, content, "a string or an array of content parts");
    std::string text;
    for (size_t i = 0; i < content.size(); ++i) {
        const json& part = content[i];
        const std::string where = fmt::format("{}[{}]", param, i);
        if (!part.is_object()) wrong_type(where, part, "an object");
        auto type = get_string(part, "type");
        if (!type || (*type != "text" && *type != "input_text"))
            bad_request(where + ".type", fmt::format("'{}.type' must be 'text' (this server reads text only), got '{}'", where, type.value_or("")),
                        "unsupported_content");
        auto t = get_string(part, "text");
        if (!t) bad_request(where + ".text", fmt::format("'{}.text' is required", where), "missing_required_parameter");
        text += *t;
    }
    return text;
}

ChatRequest parse_chat_request(const std::string& body, const ParseLimits& limits) {
    const json j = parse_body(body);
    ChatRequest r;
    parse_generation(j, r.gen, true, limits);
    r.messages = parse_messages(j);
    r.tools = parse_tools(j);
    if (const json* tc = opt_field(j, "tool_choice")) {
        if (tc->is_string()) {
            const std::string s = tc->get<std::string>();
            if (s == "auto") r.tool_choice = ToolChoice::AUTO;
            else if (s == "none") r.tool_choice = ToolChoice::NONE;
            else if (s == "required") r.tool_choice = ToolChoice::REQUIRED;
            else bad_request("tool_choice", fmt::format("'tool_choice' must be 'auto', 'none', 'required' or a function, got '{}'", s), "invalid_value");
        } else if (tc->is_object()) {
            const json* fn = opt_field(*tc, "function");
            auto name = fn && fn->is_object() ? get_string(*fn, "name") : std::nullopt;
            if (!name) bad_request("tool_choice.function.name", "'tool_choice.function.name' is required", "missing_required_parameter");
            check_tool_name(*name, "tool_choice.function.name");
            r.tool_choice = ToolChoice::NAMED;
            r.tool_choice_name = *name;
        } else {
            wrong_type("tool_choice", *tc, "a string or an object");
        }
        if (r.tool_choice == ToolChoice::REQUIRED || r.tool_choice == ToolChoice::NAMED) {
            if (r.tools.is_null()) bad_request("tool_choice", "'tool_choice' requires 'tools'", "invalid_value");
        }
        if (r.tool_choice == ToolChoice::NAMED) {
            bool found = false;
            for (const auto& t : r.tools) found |= t["function"]["name"] == r.tool_choice_name;
            if (!found) bad_request("tool_choice", fmt::format("tool_choice names '{}', which is not in 'tools'", r.tool_choice_name), "invalid_value");
        }
    }
    if (auto v = get_bool(j, "parallel_tool_calls")) r.parallel_tool_calls = *v;
    if (auto e = get_string(j, "reasoning_effort")) {
        if (*e != "low" && *e != "medium" && *e != "high")
            bad_request("reasoning_effort", fmt::format("'reasoning_effort' must be 'low', 'medium' or 'high', got '{}'", *e), "invalid_value");
        r.reasoning_effort = *e;
    }
    if (const json* k = opt_field(j, "chat_template_kwargs")) {
        if (!k->is_object()) wrong_type("chat_template_kwargs", *k, "an object");
        r.chat_template_kwargs = *k;
    }
    if (r.gen.response_format.json() && (r.tool_choice == ToolChoice::REQUIRED || r.tool_choice == ToolChoice::NAMED))
        bad_request("tool_choice", "'tool_choice' 'required' or a named function cannot be combined with a JSON response_format: the "
                                   "reply is the JSON answer, and no tool call is produced with it",
                    "invalid_value");
    return r;
}

CompletionRequest parse_completion_request(const std::string& body, const ParseLimits& limits) {
    const json j = parse_body(body);
    CompletionRequest r;
    parse_generation(j, r.gen, false, limits);
    const json* p = opt_field(j, "prompt");
    if (!p) bad_request("prompt", "Missing required parameter: 'prompt'.", "missing_required_parameter");
    if (p->is_string()) {
        r.prompt = p->get<std::string>();
    } else if (p->is_array()) {
        if (p->size() == 1 && (*p)[0].is_string()) {
            r.prompt = (*p)[0].get<std::string>();
        } else {
            for (size_t i = 0; i < p->size(); ++i) {
                const json& t = (*p)[i];
                if (!t.is_number_integer() && !t.is_number_unsigned())
                    bad_request(fmt::format("prompt[{}]", i), "'prompt' must be a string or an array of token ids (one prompt per request)", "invalid_type");
                const int64_t id = t.get<int64_t>();
                if (id < 0 || id > std::numeric_limits<int32_t>::max()) bad_request(fmt::format("prompt[{}]", i), fmt::format("token id {} is out of range", id), "invalid_value");
                r.prompt_ids.push_back(static_cast<int32_t>(id));
            }
            if (r.prompt_ids.empty()) bad_request("prompt", "'prompt' must not be empty", "invalid_value");
        }
    } else {
        wrong_type("prompt", *p, "a string or an array of token ids");
    }
    if (auto v = get_bool(j, "echo")) r.echo = *v;
    return r;
}

}  // namespace nitro::server
