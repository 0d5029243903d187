#include "tokenizer/chat_harmony.h"

#include "core/error.h"
#include "tokenizer/unicode.h"

#include <algorithm>

namespace nitro {

using json = nlohmann::ordered_json;
using chat_detail::field;
using chat_detail::str_field;
using chat_detail::truthy;

namespace {

bool is(const json* v, const char* s) { return v && v->is_string() && v->get_ref<const std::string&>() == s; }

bool contains_string(const json* list, const std::string& s) {
    if (!list || !list->is_array()) return false;
    return std::any_of(list->begin(), list->end(), [&](const json& e) { return e.is_string() && e == s; });
}

/// Python str() of a scalar, as Jinja prints it.
std::string py_str(const json& e) {
    if (e.is_string()) return e.get<std::string>();
    if (e.is_boolean()) return e.get<bool>() ? "True" : "False";
    if (e.is_null()) return "None";
    if (e.is_number()) return py_json_dumps(e);
    fail("chat template (gpt-oss): cannot print a {} where the template expects a type name or enum value",
         e.type_name());
}

/// Jinja `x|join(sep)`.
std::string join(const json& list, const std::string& sep) {
    std::string out;
    bool first = true;
    for (const auto& e : list) {
        if (!first) out += sep;
        first = false;
        out += py_str(e);
    }
    return out;
}

/// `"..." + x` where x must be a string (Python raises TypeError otherwise).
const std::string& as_str(const json* v, const char* what) {
    if (!v) fail("chat template (gpt-oss): {} is missing (the template needs a string)", what);
    if (!v->is_string()) fail("chat template (gpt-oss): {} is {}, the template needs a string", what, v->type_name());
    return v->get_ref<const std::string&>();
}

std::string ts_type(const json& spec);

std::string ts_array(const json& spec) {
    std::string out;
    const json* items = field(spec, "items");
    if (truthy(items)) {
        const json* it = field(*items, "type");
        if (is(it, "string")) out = "string[]";
        else if (is(it, "number") || is(it, "integer")) out = "number[]";
        else if (is(it, "boolean")) out = "boolean[]";
        else {
            const std::string inner = ts_type(*items);
            out = inner == "object | object" || utf8_length(inner) > 50 ? "any[]" : inner + "[]";
        }
    } else {
        out = "any[]";
    }
    if (truthy(field(spec, "nullable"))) out += " | null";
    return out;
}

// The macro's oneOf branch. Its `set has_object_variants = true` sits inside a for loop, and
// Jinja scopes loop bodies, so the flag never leaves the loop: the "any" fallback is dead and
// every variant is printed.
std::string ts_one_of(const json& variants) {
    std::string out;
    if (!variants.is_array()) fail("chat template (gpt-oss): 'oneOf' must be a list, got {}", variants.type_name());
    for (size_t i = 0; i < variants.size(); ++i) {
        const json& v = variants[i];
        out += ts_type(v);
        if (truthy(field(v, "description"))) out += "// " + as_str(field(v, "description"), "oneOf description");
        if (const json* d = field(v, "default")) out += std::string(20, ' ') + "// default: " + py_json_dumps(*d);
        if (i + 1 < variants.size()) out += " | \n";
    }
    return out;
}

std::string ts_object(const json& spec) {
    const json* props = field(spec, "properties");
    if (!truthy(props)) return "object";
    if (!props->is_object()) fail("chat template (gpt-oss): 'properties' must be an object, got {}", props->type_name());
    const json* required = field(spec, "required");
    std::string out = "{\n";
    size_t i = 0;
    for (const auto& [name, prop] : props->items()) {
        out += name;
        if (!contains_string(truthy(required) ? required : nullptr, name)) out += "?";
        // `{{- ": " }}` then a newline and 16 spaces of template indentation before
        // `{{ render_typescript_type(...) }}`, which has no `-`: they are printed.
        out += ": \n                ";
        out += ts_type(prop);
        if (++i < props->size()) out += ", ";
    }
    out += "}";
    return out;
}

std::string ts_type(const json& spec) {
    const json* type = field(spec, "type");
    if (is(type, "array")) return ts_array(spec);
    if (type && type->is_array() && !type->empty()) {
        // A list of types (Union[...]): "a | b", or the single entry.
        if (type->size() > 1) return join(*type, " | ");
        return py_str((*type)[0]);
    }
    if (truthy(field(spec, "oneOf"))) return ts_one_of(*field(spec, "oneOf"));
    if (is(type, "string")) {
        const json* en = field(spec, "enum");
        if (truthy(en)) {
            if (!en->is_array()) fail("chat template (gpt-oss): 'enum' must be a list, got {}", en->type_name());
            return "\"" + join(*en, "\" | \"") + "\"";
        }
        return truthy(field(spec, "nullable")) ? "string | null" : "string";
    }
    if (is(type, "number") || is(type, "integer")) return "number";
    if (is(type, "boolean")) return "boolean";
    if (is(type, "object")) return ts_object(spec);
    return "any";
}

std::string render_tool_namespace(const json& tools) {
    std::string out = "## functions\n\nnamespace functions {\n\n";
    for (size_t t = 0; t < tools.size(); ++t) {
        const std::string where = fmt::format("tools[{}].function", t);
        const json* fn = field(tools[t], "function");
        if (!fn || !fn->is_object()) fail("chat template (gpt-oss): tools[{}] has no 'function' object", t);
        out += "// " + str_field(*fn, "description", where) + "\n";
        out += "type " + str_field(*fn, "name", where) + " = ";
        const json* params = field(*fn, "parameters");
        const json* props = params ? field(*params, "properties") : nullptr;
        if (truthy(params) && truthy(props)) {
            if (!props->is_object())
                fail("chat template (gpt-oss): {}.parameters.properties must be an object", where);
            const json* required = field(*params, "required");
            out += "(_: {\n";
            for (const auto& [name, spec] : props->items()) {
                if (truthy(field(spec, "description")))
                    out += "// " + as_str(field(spec, "description"), "a parameter description") + "\n";
                out += name;
                if (!contains_string(truthy(required) ? required : nullptr, name)) out += "?";
                out += ": " + ts_type(spec);
                if (const json* d = field(spec, "default")) {
                    if (truthy(field(spec, "enum")))
                        out += ", // default: " + as_str(d, "the default of an enum parameter");
                    else if (truthy(field(spec, "oneOf")))
                        out += "// default: " + as_str(d, "the default of a oneOf parameter");
                    else
                        out += ", // default: " + py_json_dumps(*d);
                }
                out += ",\n";
            }
            out += "}) => any;\n\n";
        } else {
            out += "() => any;\n\n";
        }
    }
    out += "} // namespace functions";
    return out;
}

std::string render_builtin_tools(bool browser, bool python) {
    std::string out;
    if (browser) {
        out += "## browser\n\n"
               "// Tool for browsing.\n"
               "// The `cursor` appears in brackets before each browsing display: `[{cursor}]`.\n"
               "// Cite information from the tool using the following format:\n"
               "// `\u3010{cursor}\u2020L{line_start}(-L{line_end})?\u3011`, for example: `\u30106\u2020L9-L11\u3011` or `\u30108\u2020L3\u3011`.\n"
               "// Do not quote more than 10 words directly from the tool output.\n"
               "// sources=web (default: web)\n"
               "namespace browser {\n\n"
               "// Searches for information related to `query` and displays `topn` results.\n"
               "type search = (_: {\n"
               "query: string,\n"
               "topn?: number, // default: 10\n"
               "source?: string,\n"
               "}) => any;\n\n"
               "// Opens the link `id` from the page indicated by `cursor` starting at line number `loc`, showing `num_lines` lines.\n"
               "// Valid link ids are displayed with the formatting: `\u3010{id}\u2020.*\u3011`.\n"
               "// If `cursor` is not provided, the most recent page is implied.\n"
               "// If `id` is a string, it is treated as a fully qualified URL associated with `source`.\n"
               "// If `loc` is not provided, the viewport will be positioned at the beginning of the document or centered on the most relevant passage, if available.\n"
               "// Use this function without `id` to scroll to a new location of an opened page.\n"
               "type open = (_: {\n"
               "id?: number | string, // default: -1\n"
               "cursor?: number, // default: -1\n"
               "loc?: number, // default: -1\n"
               "num_lines?: number, // default: -1\n"
               "view_source?: boolean, // default: false\n"
               "source?: string,\n"
               "}) => any;\n\n"
               "// Finds exact matches of `pattern` in the current page, or the page given by `cursor`.\n"
               "type find = (_: {\n"
               "pattern: string,\n"
               "cursor?: number, // default: -1\n"
               "}) => any;\n\n"
               "} // namespace browser\n\n";
    }
    if (python) {
        out += "## python\n\n"
               "Use this tool to execute Python code in your chain of thought. The code will not be shown to the user. This tool should be used for internal reasoning, but not for code that is intended to be visible to the user (e.g. when creating plots, tables, or files).\n\n"
               "When you send a message containing Python code to python, it will be executed in a stateful Jupyter notebook environment. python will respond with the output of the execution or time out after 120.0 seconds. The drive at '/mnt/data' can be used to save and persist user files. Internet access for this session is UNKNOWN. Depends on the cluster.\n\n";
    }
    return out;
}

std::string build_system_message(const json& tools, const ChatOptions& opt) {
    std::string out = opt.model_identity.value_or("You are ChatGPT, a large language model trained by OpenAI.");
    out += "\nKnowledge cutoff: 2024-06\n";
    out += "Current date: " + (opt.date.empty() ? chat_date_today() : opt.date) + "\n\n";
    out += "Reasoning: " + opt.reasoning_effort.value_or("medium") + "\n\n";
    if (truthy(&opt.builtin_tools)) {
        out += "# Tools\n\n";
        bool browser = false, python = false;
        for (const auto& t : opt.builtin_tools) {
            if (t == "browser") browser = true;
            else if (t == "python") python = true;
        }
        out += render_builtin_tools(browser, python);
    }
    out += "# Valid channels: analysis, commentary, final. Channel must be included for every message.";
    if (truthy(&tools)) out += "\nCalls to these tools must go to the commentary channel: 'functions'.";
    return out;
}

bool has_channel_tags(const std::string& s) {
    return s.find("<|channel|>analysis<|message|>") != std::string::npos ||
           s.find("<|channel|>final<|message|>") != std::string::npos;
}

/// `"<|channel|>..." in message.X`: a string is searched; null or a number raises TypeError.
void check_no_channel_tags(const json& msg, const char* key, size_t index) {
    const json* v = field(msg, key);
    if (!v) return;
    if (v->is_string()) {
        if (has_channel_tags(v->get_ref<const std::string&>()))
            fail("chat template (gpt-oss): messages[{}].{} contains <|channel|> tags; pass analysis text in "
                 "'thinking' and the final answer in 'content'", index, key);
        return;
    }
    if (v->is_array() || v->is_object()) return;  // `in` tests membership: no raise
    fail("chat template (gpt-oss): messages[{}].{} is {}: the template tests it with `in` and raises "
         "(TypeError: argument of type '{}' is not iterable)", index, key, v->type_name(),
         v->is_null() ? "NoneType" : v->type_name());
}

}  // namespace

std::string harmony_typescript_type(const json& spec) { return ts_type(spec); }

RenderedChat render_harmony(const json& messages, const json& tools, const ChatOptions& opt) {
    // Markup: the template's literal control-token text. Everything from the request (content,
    // thinking, names, the tool namespace built from the schemas, the system text built from the
    // options) goes in as text; those builders write no control tokens of their own.
    RenderedChat out;
    out.add_markup("<|start|>system<|message|>");
    out.add_text(build_system_message(tools, opt));
    out.add_markup("<|end|>");

    const std::string& role0 = chat_detail::role_of(messages[0], 0);
    size_t first = 0;
    const json* developer_message = nullptr;
    if (role0 == "developer" || role0 == "system") {
        developer_message = field(messages[0], "content");  // missing: undefined, i.e. none
        first = 1;
    }
    if (truthy(developer_message) || truthy(&tools)) {
        out.add_markup("<|start|>developer<|message|>");
        if (truthy(developer_message))
            out.add_text("# Instructions\n\n" + as_str(developer_message, "messages[0].content") + "\n\n");
        if (truthy(&tools)) out.add_text("# Tools\n\n" + render_tool_namespace(tools));
        out.add_markup("<|end|>");
    }

    std::optional<std::string> last_tool_call;
    for (size_t i = first; i < messages.size(); ++i) {
        const json& m = messages[i];
        const std::string& role = chat_detail::role_of(m, i);
        const std::string where = fmt::format("messages[{}] ({})", i, role);
        const bool is_last = i + 1 == messages.size();
        if (role == "assistant") {
            check_no_channel_tags(m, "content", i);
            check_no_channel_tags(m, "thinking", i);
            const json* content = field(m, "content");
            const json* thinking = field(m, "thinking");
            if (const json* calls = field(m, "tool_calls")) {
                bool future_final = false;
                for (size_t j = i + 1; j < messages.size(); ++j)
                    if (chat_detail::role_of(messages[j], j) == "assistant" && !field(messages[j], "tool_calls"))
                        future_final = true;
                // The template renders only the first tool call of a message.
                if (!calls->is_array() || calls->empty())
                    fail("chat template (gpt-oss): {}: 'tool_calls' must be a non-empty list", where);
                const json* call = &(*calls)[0];
                if (truthy(field(*call, "function"))) call = field(*call, "function");
                if (truthy(content) && truthy(thinking))
                    fail("chat template (gpt-oss): {}: cannot pass both content and thinking in an assistant "
                         "message with tool calls", where);
                if ((truthy(content) || truthy(thinking)) && !future_final) {
                    out.add_markup("<|start|>assistant<|channel|>analysis<|message|>");
                    out.add_text(truthy(content) ? as_str(content, "content") : as_str(thinking, "thinking"));
                    out.add_markup("<|end|>");
                }
                const std::string& name = str_field(*call, "name", where + ".tool_calls[0]");
                out.add_markup("<|start|>assistant to=functions.");
                out.add_text(name);
                out.add_markup("<|channel|>commentary ");
                const json* ctype = field(*call, "content_type");
                out.add_text(ctype ? as_str(ctype, "content_type") : std::string("json"));
                out.add_markup("<|message|>");
                const json* args = field(*call, "arguments");
                if (!args) fail("chat template (gpt-oss): {}.tool_calls[0] has no 'arguments'", where);
                if (args->is_string() && opt.parse_string_arguments) {
                    // Bounded: a string of deeply nested JSON stays a string (printed quoted).
                    const auto parsed = parse_json_bounded(args->get_ref<const std::string&>());
                    out.add_text(parsed ? py_json_dumps(*parsed) : py_json_dumps(*args));
                } else {
                    out.add_text(py_json_dumps(*args));
                }
                out.add_markup("<|call|>");
                last_tool_call = name;
            } else if (is_last && !opt.add_generation_prompt) {
                if (thinking) {
                    out.add_markup("<|start|>assistant<|channel|>analysis<|message|>");
                    out.add_text(as_str(thinking, "thinking"));
                    out.add_markup("<|end|>");
                }
                out.add_markup("<|start|>assistant<|channel|>final<|message|>");
                out.add_text(as_str(content, "content"));
                out.add_markup("<|return|>");
            } else {
                out.add_markup("<|start|>assistant<|channel|>final<|message|>");
                out.add_text(as_str(content, "content"));
                out.add_markup("<|end|>");
                last_tool_call.reset();
            }
        } else if (role == "tool") {
            if (!last_tool_call)
                fail("chat template (gpt-oss): {}: message has tool role, but there was no previous assistant "
                     "message with a tool call", where);
            const json* content = field(m, "content");
            if (!content) fail("chat template (gpt-oss): {} has no 'content'", where);
            out.add_markup("<|start|>functions.");
            out.add_text(*last_tool_call);
            out.add_markup(" to=assistant<|channel|>commentary<|message|>");
            out.add_text(py_json_dumps(*content));
            out.add_markup("<|end|>");
        } else if (role == "user") {
            out.add_markup("<|start|>user<|message|>");
            out.add_text(str_field(m, "content", where));
            out.add_markup("<|end|>");
        }
        // Later system/developer messages are not rendered by the template.
    }
    if (opt.add_generation_prompt) out.add_markup("<|start|>assistant");
    return out;
}

}  // namespace nitro
