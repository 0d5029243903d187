#include "tokenizer/chat.h"

#include "core/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/chat_chatml.h"
#include "tokenizer/chat_harmony.h"
#include "tokenizer/vocab.h"

#include <charconv>
#include <cmath>
#include <ctime>

namespace nitro {

using json = nlohmann::ordered_json;

const char* chat_format_name(ChatFormat f) {
    return f == ChatFormat::HARMONY ? "harmony" : "chatml";
}

ChatFormat chat_format_for(const Vocab& vocab) {
    if (vocab.find_text("<|channel|>") >= 0 && vocab.find_text("<|message|>") >= 0) return ChatFormat::HARMONY;
    if (vocab.find_text("<|im_start|>") >= 0 && vocab.find_text("<|im_end|>") >= 0) return ChatFormat::CHATML;
    fail("the vocabulary has neither harmony (<|channel|>, <|message|>) nor ChatML (<|im_start|>) tokens; "
         "no chat format is known for this model");
}

ChatOptions ChatOptions::from_kwargs(const json& kwargs) {
    ChatOptions o;
    if (kwargs.is_null()) return o;
    if (!kwargs.is_object()) fail("chat kwargs must be a JSON object, got {}", kwargs.type_name());
    for (const auto& item : kwargs.items()) {
        // Named copies rather than a structured binding: clang 14 (the fuzz build) cannot
        // capture bindings in lambdas.
        const std::string& k = item.key();
        const json& v = item.value();
        auto want = [&](bool ok, const char* type) {
            if (!ok) fail("chat kwargs: '{}' must be {}, got {}", k, type, v.type_name());
        };
        if (k == "add_generation_prompt") { want(v.is_boolean(), "a boolean"); o.add_generation_prompt = v.get<bool>(); }
        else if (k == "reasoning_effort") { want(v.is_string(), "a string"); o.reasoning_effort = v.get<std::string>(); }
        else if (k == "model_identity") { want(v.is_string(), "a string"); o.model_identity = v.get<std::string>(); }
        else if (k == "builtin_tools") { want(v.is_array() || v.is_null(), "an array"); o.builtin_tools = v; }
        else if (k == "enable_thinking") { want(v.is_boolean(), "a boolean"); o.enable_thinking = v.get<bool>(); }
        else if (k == "date") { want(v.is_string(), "a string"); o.date = chat_date_from_iso(v.get<std::string>()); }
        else fail("chat kwargs: unknown key '{}' (known: add_generation_prompt, reasoning_effort, model_identity, "
                  "builtin_tools, enable_thinking, date)", k);
    }
    return o;
}

void RenderedChat::add_markup(std::string_view s) {
    if (s.empty()) return;
    if (!markup.empty() && markup.back().second == text.size()) markup.back().second += s.size();
    else markup.emplace_back(text.size(), text.size() + s.size());
    text += s;
}

void RenderedChat::add_text(std::string_view s) { text += s; }

std::vector<int32_t> encode_chat(const Tokenizer& tok, const RenderedChat& chat) {
    EncodeOptions enc;
    enc.parse_special = true;
    enc.special_ranges = &chat.markup;
    return tok.encode(chat.text, enc);
}

std::optional<json> parse_json_bounded(std::string_view text, int max_depth, bool* too_deep) {
    bool deep = false;
    // The callback sees the depth of the enclosing container (0 for the top-level value); a
    // container opened at depth >= max_depth would be nesting level max_depth + 1. Discarding it
    // keeps nothing of the deep part in memory; the parser itself is iterative.
    json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json&) {
        if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) && depth >= max_depth)
            deep = true;
        return !deep;
    };
    json j = json::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/false);
    if (too_deep) *too_deep = deep;
    if (deep || j.is_discarded()) return std::nullopt;
    return j;
}

std::string render_chat(ChatFormat format, const json& messages, const json& tools, const ChatOptions& opt) {
    return render_chat_marked(format, messages, tools, opt).text;
}

RenderedChat render_chat_marked(ChatFormat format, const json& messages, const json& tools, const ChatOptions& opt) {
    if (!messages.is_array()) fail("chat: 'messages' must be an array, got {}", messages.type_name());
    if (messages.empty()) fail("chat: 'messages' is empty; the template reads messages[0]");
    if (!tools.is_null() && !tools.is_array()) fail("chat: 'tools' must be an array or null, got {}", tools.type_name());
    for (size_t i = 0; i < messages.size(); ++i) {
        if (!messages[i].is_object()) fail("chat: messages[{}] must be an object, got {}", i, messages[i].type_name());
        chat_detail::role_of(messages[i], i);
    }
    return format == ChatFormat::HARMONY ? render_harmony(messages, tools, opt) : render_chatml(messages, tools, opt);
}

std::string chat_date_today() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    char buf[16];
    std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
    return buf;
}

std::string chat_date_from_iso(std::string_view iso) {
    auto digits = [&](size_t from, size_t n) {
        for (size_t i = from; i < from + n; ++i)
            if (i >= iso.size() || iso[i] < '0' || iso[i] > '9') return false;
        return true;
    };
    if (!(digits(0, 4) && iso.size() >= 10 && iso[4] == '-' && digits(5, 2) && iso[7] == '-' && digits(8, 2)))
        fail("chat date '{}' is not an ISO-8601 date (YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS)", iso);
    const int month = (iso[5] - '0') * 10 + (iso[6] - '0'), day = (iso[8] - '0') * 10 + (iso[9] - '0');
    if (month < 1 || month > 12 || day < 1 || day > 31) fail("chat date '{}' has no such month or day", iso);
    return std::string(iso.substr(0, 10));
}

namespace {

void dump_string(const std::string& s, std::string& out) {
    static const char* hex = "0123456789abcdef";
    out.push_back('"');
    for (char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (c < 0x20) {
                    out += "\\u00";
                    out.push_back(hex[c >> 4]);
                    out.push_back(hex[c & 15]);
                } else {
                    out.push_back(ch);
                }
        }
    }
    out.push_back('"');
}

/// Python float repr: shortest round-trip digits; fixed notation for exponents -4..15 (with
/// ".0" when integral), else d.ddde+XX.
void dump_float(double v, std::string& out) {
    if (std::isnan(v)) { out += "NaN"; return; }
    if (std::isinf(v)) { out += v < 0 ? "-Infinity" : "Infinity"; return; }
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
    std::string_view sci(buf, static_cast<size_t>(r.ptr - buf));
    const size_t e_pos = sci.find('e');
    std::string_view mant = sci.substr(0, e_pos);
    int exp = std::stoi(std::string(sci.substr(e_pos + 1)));
    std::string sign;
    if (!mant.empty() && mant[0] == '-') { sign = "-"; mant.remove_prefix(1); }
    std::string digits;
    for (char c : mant) if (c != '.') digits.push_back(c);
    out += sign;
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            out += "0.";
            out.append(static_cast<size_t>(-exp - 1), '0');
            out += digits;
        } else {
            const size_t int_len = static_cast<size_t>(exp) + 1;
            if (digits.size() <= int_len) {
                out += digits;
                out.append(int_len - digits.size(), '0');
                out += ".0";
            } else {
                out += digits.substr(0, int_len);
                out += '.';
                out += digits.substr(int_len);
            }
        }
    } else {
        out += digits.substr(0, 1);
        if (digits.size() > 1) { out += '.'; out += digits.substr(1); }
        out += exp < 0 ? "e-" : "e+";
        const int a = exp < 0 ? -exp : exp;
        if (a < 10) out += '0';
        out += std::to_string(a);
    }
}

void dump(const json& x, std::string& out) {
    switch (x.type()) {
        case json::value_t::null: out += "null"; break;
        case json::value_t::boolean: out += x.get<bool>() ? "true" : "false"; break;
        case json::value_t::number_integer: out += std::to_string(x.get<int64_t>()); break;
        case json::value_t::number_unsigned: out += std::to_string(x.get<uint64_t>()); break;
        case json::value_t::number_float: dump_float(x.get<double>(), out); break;
        case json::value_t::string: dump_string(x.get_ref<const std::string&>(), out); break;
        case json::value_t::array: {
            out.push_back('[');
            bool first = true;
            for (const auto& e : x) {
                if (!first) out += ", ";
                first = false;
                dump(e, out);
            }
            out.push_back(']');
            break;
        }
        case json::value_t::object: {
            out.push_back('{');
            bool first = true;
            for (const auto& [k, v] : x.items()) {
                if (!first) out += ", ";
                first = false;
                dump_string(k, out);
                out += ": ";
                dump(v, out);
            }
            out.push_back('}');
            break;
        }
        default: fail("tojson: cannot print a JSON value of type {}", x.type_name());
    }
}

}  // namespace

std::string py_json_dumps(const json& x) {
    std::string out;
    dump(x, out);
    return out;
}

namespace chat_detail {

bool truthy(const json* v) {
    if (!v) return false;
    switch (v->type()) {
        case json::value_t::null: return false;
        case json::value_t::boolean: return v->get<bool>();
        case json::value_t::number_integer: return v->get<int64_t>() != 0;
        case json::value_t::number_unsigned: return v->get<uint64_t>() != 0;
        case json::value_t::number_float: return v->get<double>() != 0.0;
        case json::value_t::string: return !v->get_ref<const std::string&>().empty();
        case json::value_t::array:
        case json::value_t::object: return !v->empty();
        default: return true;
    }
}

const json* field(const json& obj, std::string_view key) {
    if (!obj.is_object()) return nullptr;
    auto it = obj.find(std::string(key));
    return it == obj.end() ? nullptr : &*it;
}

const std::string& str_field(const json& obj, std::string_view key, const std::string& where) {
    const json* v = field(obj, key);
    if (!v) fail("chat template: {}: '{}' is missing (the template needs a string)", where, key);
    if (!v->is_string())
        fail("chat template: {}: '{}' is {}, the template needs a string", where, key, v->type_name());
    return v->get_ref<const std::string&>();
}

const std::string& role_of(const json& msg, size_t index) {
    return str_field(msg, "role", fmt::format("messages[{}]", index));
}

}  // namespace chat_detail

}  // namespace nitro
