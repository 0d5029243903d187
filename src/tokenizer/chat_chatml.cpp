#include "tokenizer/chat_chatml.h"

#include "core/error.h"

namespace nitro {

using json = nlohmann::ordered_json;
using chat_detail::field;
using chat_detail::str_field;
using chat_detail::truthy;

namespace {

// Python str methods used by the template.
std::string lstrip_nl(std::string s) {
    s.erase(0, s.find_first_not_of('\n') == std::string::npos ? s.size() : s.find_first_not_of('\n'));
    return s;
}
std::string rstrip_nl(std::string s) {
    const size_t e = s.find_last_not_of('\n');
    s.erase(e == std::string::npos ? 0 : e + 1);
    return s;
}
std::string strip_nl(std::string s) { return lstrip_nl(rstrip_nl(std::move(s))); }
bool starts_with(const std::string& s, std::string_view p) { return s.compare(0, p.size(), p) == 0; }
bool ends_with(const std::string& s, std::string_view p) {
    return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}
/// s.split(sep)[0] and s.split(sep)[-1].
std::string split_first(const std::string& s, const std::string& sep) {
    const size_t p = s.find(sep);
    return p == std::string::npos ? s : s.substr(0, p);
}
std::string split_last(const std::string& s, const std::string& sep) {
    const size_t p = s.rfind(sep);
    return p == std::string::npos ? s : s.substr(p + sep.size());
}

/// `x in message.content` / `message.content + ...`: content must be a string. A null content
/// makes the template raise TypeError ("argument of type 'NoneType' is not iterable").
const std::string& content_of(const json& m, const std::string& where) {
    const json* c = field(m, "content");
    if (c && c->is_null())
        fail("chat template (Qwen3): {}: 'content' is null; the template raises (TypeError: argument of type "
             "'NoneType' is not iterable); use \"\" for an assistant message that only calls tools", where);
    return str_field(m, "content", where);
}

}  // namespace

RenderedChat render_chatml(const json& messages, const json& tools, const ChatOptions& opt) {
    // Markup: the template's literal text around the request's text (see chat_harmony.cpp).
    RenderedChat out;
    const std::string& role0 = chat_detail::role_of(messages[0], 0);
    if (truthy(&tools)) {
        out.add_markup("<|im_start|>system\n");
        if (role0 == "system") out.add_text(content_of(messages[0], "messages[0] (system)") + "\n\n");
        out.add_markup("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                       "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
        for (const auto& t : tools) {  // (appends: GCC 12 warns falsely of "\n" + std::string&&)
            std::string line = "\n";
            line += py_json_dumps(t);
            out.add_text(line);
        }
        out.add_markup("\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
                       "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
                       "<args-json-object>}\n</tool_call><|im_end|>\n");
    } else if (role0 == "system") {
        out.add_markup("<|im_start|>system\n");
        out.add_text(content_of(messages[0], "messages[0] (system)"));
        out.add_markup("<|im_end|>\n");
    }

    // The last user message that is a real query (not a wrapped tool response).
    const size_t n = messages.size();
    size_t last_query = n - 1;
    for (size_t k = n; k-- > 0;) {
        const json& m = messages[k];
        if (chat_detail::role_of(m, k) != "user") continue;
        const std::string& c = content_of(m, fmt::format("messages[{}] (user)", k));
        if (!(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>"))) {
            last_query = k;
            break;
        }
    }

    for (size_t i = 0; i < n; ++i) {
        const json& m = messages[i];
        const std::string& role = chat_detail::role_of(m, i);
        const std::string where = fmt::format("messages[{}] ({})", i, role);
        if (role == "user" || (role == "system" && i != 0)) {
            out.add_markup("<|im_start|>" + role + "\n");
            out.add_text(content_of(m, where));
            out.add_markup("<|im_end|>\n");
        } else if (role == "assistant") {
            std::string content;
            std::string reasoning;
            const json* rc = field(m, "reasoning_content");
            if (rc && !rc->is_null()) {
                if (!rc->is_string()) fail("chat template (Qwen3): {}: 'reasoning_content' must be a string", where);
                reasoning = rc->get<std::string>();
                content = content_of(m, where);
            } else {
                content = content_of(m, where);
                if (content.find("</think>") != std::string::npos) {
                    const std::string whole = content;
                    content = lstrip_nl(split_last(whole, "</think>"));
                    reasoning = lstrip_nl(split_last(rstrip_nl(split_first(whole, "</think>")), "<think>"));
                }
            }
            if (i > last_query && (i + 1 == n || !reasoning.empty())) {
                out.add_markup("<|im_start|>assistant\n<think>\n");
                out.add_text(strip_nl(reasoning));
                out.add_markup("\n</think>\n\n");
                out.add_text(lstrip_nl(content));
            } else {
                out.add_markup("<|im_start|>assistant\n");
                out.add_text(content);
            }
            const json* calls = field(m, "tool_calls");
            if (truthy(calls)) {
                if (!calls->is_array()) fail("chat template (Qwen3): {}: 'tool_calls' must be a list", where);
                for (size_t k = 0; k < calls->size(); ++k) {
                    if ((k == 0 && !content.empty()) || k > 0) out.add_markup("\n");
                    const json* call = &(*calls)[k];
                    if (truthy(field(*call, "function"))) call = field(*call, "function");
                    const std::string cw = fmt::format("{}.tool_calls[{}]", where, k);
                    out.add_markup("<tool_call>\n{\"name\": \"");
                    out.add_text(str_field(*call, "name", cw));
                    out.add_markup("\", \"arguments\": ");
                    const json* args = field(*call, "arguments");
                    if (!args) fail("chat template (Qwen3): {} has no 'arguments'", cw);
                    out.add_text(args->is_string() ? args->get<std::string>() : py_json_dumps(*args));
                    out.add_markup("}\n</tool_call>");
                }
            }
            out.add_markup("<|im_end|>\n");
        } else if (role == "tool") {
            if (i == 0 || chat_detail::role_of(messages[i - 1], i - 1) != "tool") out.add_markup("<|im_start|>user");
            out.add_markup("\n<tool_response>\n");
            out.add_text(content_of(m, where));
            out.add_markup("\n</tool_response>");
            if (i + 1 == n || chat_detail::role_of(messages[i + 1], i + 1) != "tool") out.add_markup("<|im_end|>\n");
        }
    }
    if (opt.add_generation_prompt) {
        out.add_markup("<|im_start|>assistant\n");
        if (opt.enable_thinking == false) out.add_markup("<think>\n\n</think>\n\n");
    }
    return out;
}

}  // namespace nitro
