#include "server/chat_completion.h"

#include "core/error.h"
#include "tokenizer/bpe.h"

#include <fmt/format.h>

namespace nitro::server {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

/// Adapts the schema's normalised messages to what each format's renderer reads.
ojson normalize_messages(const ojson& in, ChatFormat format) {
    ojson out = ojson::array();
    for (const auto& m : in) {
        ojson n = m;
        const std::string role = m["role"];
        if (format == ChatFormat::HARMONY) {
            // gpt-oss reads the analysis text as `thinking`; with a tool call, the template
            // renders one of content/thinking as the analysis message, so keep the reasoning.
            if (n.contains("reasoning_content")) {
                n["thinking"] = n["reasoning_content"];
                n.erase("reasoning_content");
            }
            if (n.contains("tool_calls")) {
                if (n.contains("thinking") || n["content"] == "") n.erase("content");
            }
        } else {
            if (role == "developer") n["role"] = "system";  // Qwen3's template knows no developer role
        }
        out.push_back(std::move(n));
    }
    return out;
}

bool ends_with(const std::string& s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

PreparedChat prepare_chat(const ChatRequest& req, const Tokenizer& tok, ChatFormat format, const std::string& date) {
    ChatOptions opt;
    if (!req.chat_template_kwargs.is_null()) {
        try {
            opt = ChatOptions::from_kwargs(req.chat_template_kwargs);
        } catch (const Error& e) {
            bad_request("chat_template_kwargs", e.what(), "invalid_value");
        }
    }
    opt.add_generation_prompt = true;
    if (req.reasoning_effort) opt.reasoning_effort = req.reasoning_effort;
    if (opt.date.empty()) opt.date = date;
    ojson tools = req.tool_choice == ToolChoice::NONE ? ojson() : req.tools;
    // OpenAI makes a tool's description optional; the gpt-oss template concatenates it (and
    // raises when it is undefined), so an absent description is rendered as empty.
    if (format == ChatFormat::HARMONY && tools.is_array())
        for (auto& t : tools)
            if (!t["function"].contains("description")) t["function"]["description"] = "";
    PreparedChat p;
    RenderedChat rendered;
    try {
        rendered = render_chat_marked(format, normalize_messages(req.messages, format), tools, opt);
    } catch (const Error& e) {
        bad_request("messages", e.what(), "invalid_messages");
    }
    p.prompt_text = rendered.text;
    // The forced opening of a tool call: markup around the (validated) tool name.
    RenderedChat forced;
    if (req.tool_choice == ToolChoice::NAMED || req.tool_choice == ToolChoice::REQUIRED) {
        const bool named = req.tool_choice == ToolChoice::NAMED;
        if (format == ChatFormat::HARMONY) {
            forced.add_markup("<|channel|>commentary to=functions.");
            if (named) {
                forced.add_text(req.tool_choice_name);
                forced.add_markup(" <|constrain|>json<|message|>");
            }
        } else {
            forced.add_markup("<tool_call>\n{\"name\": \"");
            if (named) {
                forced.add_text(req.tool_choice_name);
                forced.add_markup("\", \"arguments\": ");
            }
        }
    }
    // Message text is plain text: only the template's markup becomes control tokens.
    p.prompt_ids = encode_chat(tok, rendered);
    if (!forced.text.empty()) {
        p.forced_ids = encode_chat(tok, forced);
        p.prompt_ids.insert(p.prompt_ids.end(), p.forced_ids.begin(), p.forced_ids.end());
    }
    // A template that opens the reasoning block in the generation prompt (Qwen3 thinking
    // variants) makes the reply start inside it.
    p.parse.reasoning_open = format == ChatFormat::CHATML && forced.text.empty() &&
                             (ends_with(p.prompt_text, "<think>\n") || ends_with(p.prompt_text, "<think>"));
    return p;
}

ChatResponseBuilder::ChatResponseBuilder(const Tokenizer& tok, ChatResponseConfig cfg)
    : tok_(tok), cfg_(std::move(cfg)), parser_(tok, cfg_.format, cfg_.parse), stop_(cfg_.stop) {}

json ChatResponseBuilder::chunk_base() const {
    json c = {{"id", cfg_.id}, {"object", "chat.completion.chunk"}, {"created", cfg_.created}, {"model", cfg_.model},
              {"system_fingerprint", "nitro"}};
    if (cfg_.include_usage) c["usage"] = nullptr;
    return c;
}

void ChatResponseBuilder::attach_new_logprobs(json& choice) {
    if (cfg_.logprobs && logprobs_sent_ < logprobs_.size()) {
        json part = json::array();
        for (; logprobs_sent_ < logprobs_.size(); ++logprobs_sent_) part.push_back(logprobs_[logprobs_sent_]);
        choice["logprobs"] = {{"content", std::move(part)}};
    }
}

void ChatResponseBuilder::push_chunk(json delta, std::vector<json>& chunks) {
    if (!cfg_.stream) return;
    json c = chunk_base();
    json choice = {{"index", 0}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    attach_new_logprobs(choice);
    c["choices"] = json::array({std::move(choice)});
    chunks.push_back(std::move(c));
}

void ChatResponseBuilder::begin(std::vector<json>& chunks) {
    push_chunk({{"role", "assistant"}, {"content", ""}}, chunks);
    // The forced opening of a tool call is part of the reply: the parser reads it first.
    std::vector<ChatDelta> deltas;
    for (int32_t id : cfg_.forced_ids) {
        auto d = parser_.push(id);
        deltas.insert(deltas.end(), d.begin(), d.end());
    }
    emit(std::move(deltas), chunks);
}

bool ChatResponseBuilder::emit(std::vector<ChatDelta> deltas, std::vector<json>& chunks) {
    auto send = [&](ChatDelta d) {
        apply_delta(emitted_, d);
        push_chunk(d.to_openai(), chunks);
    };
    for (auto& d : deltas) {
        if (stopped_) break;
        if (d.kind == ChatDelta::Kind::CONTENT) {
            std::string text = stop_.push(d.text);
            if (!text.empty()) send(make_delta(ChatDelta::Kind::CONTENT, std::move(text)));
            if (stop_.matched()) stopped_ = true;
            continue;
        }
        // Any other delta ends a stretch of content: what was held back for stop matching goes first.
        if (std::string held = stop_.flush(); !held.empty()) send(make_delta(ChatDelta::Kind::CONTENT, std::move(held)));
        if (d.kind == ChatDelta::Kind::TOOL_CALL_BEGIN || d.kind == ChatDelta::Kind::TOOL_CALL_ARGUMENTS) {
            if (!cfg_.parallel_tool_calls && d.tool_index >= 1) {
                stopped_ = tool_limit_ = true;  // one call only: stop before the second
                break;
            }
            if (d.kind == ChatDelta::Kind::TOOL_CALL_BEGIN) {
                if (static_cast<size_t>(d.tool_index) >= call_ids_.size()) call_ids_.resize(static_cast<size_t>(d.tool_index) + 1);
                call_ids_[static_cast<size_t>(d.tool_index)] = random_id("call_");
                d.id = call_ids_[static_cast<size_t>(d.tool_index)];
            }
        }
        send(std::move(d));
    }
    return !stopped_;
}

bool ChatResponseBuilder::on_token(const TokenStep& step, std::vector<json>& chunks) {
    if (cfg_.logprobs && !step.end_of_generation) {
        json top = json::array();
        for (const auto& [id, lp] : step.top)
            top.push_back({{"token", token_text(tok_, id)}, {"logprob", lp}, {"bytes", token_bytes(tok_, id)}});
        logprobs_.push_back({{"token", token_text(tok_, step.id)}, {"logprob", step.logprob}, {"bytes", token_bytes(tok_, step.id)},
                             {"top_logprobs", std::move(top)}});
    }
    return emit(parser_.push(step.id), chunks);
}

void ChatResponseBuilder::finish(FinishCause cause, const Usage& usage, std::vector<json>& chunks) {
    usage_ = usage;
    if (!stopped_) {
        emit(parser_.finish(), chunks);
        if (std::string held = stop_.flush(); !held.empty()) {
            ChatDelta d = make_delta(ChatDelta::Kind::CONTENT, std::move(held));
            apply_delta(emitted_, d);
            push_chunk(d.to_openai(), chunks);
        }
    }
    if (cause == FinishCause::LENGTH && !stopped_) finish_reason_ = "length";
    else if (!emitted_.tool_calls.empty() && (tool_limit_ || !stop_.matched())) finish_reason_ = "tool_calls";
    else finish_reason_ = "stop";
    if (!cfg_.stream) return;
    json c = chunk_base();
    json choice = {{"index", 0}, {"delta", json::object()}, {"logprobs", nullptr}, {"finish_reason", finish_reason_}};
    attach_new_logprobs(choice);
    c["choices"] = json::array({std::move(choice)});
    chunks.push_back(std::move(c));
    if (cfg_.include_usage) {
        json u = chunk_base();
        u["choices"] = json::array();
        u["usage"] = usage_.to_json();
        chunks.push_back(std::move(u));
    }
}

json ChatResponseBuilder::response() const {
    json msg = {{"role", "assistant"}, {"content", emitted_.content}};
    if (!emitted_.reasoning_content.empty()) msg["reasoning_content"] = emitted_.reasoning_content;
    if (!emitted_.tool_calls.empty()) {
        json calls = json::array();
        for (const auto& c : emitted_.tool_calls)
            calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
        msg["tool_calls"] = std::move(calls);
        if (emitted_.content.empty()) msg["content"] = nullptr;  // as OpenAI sends a pure tool call
    }
    json choice = {{"index", 0}, {"message", std::move(msg)}, {"logprobs", nullptr}, {"finish_reason", finish_reason_}};
    if (cfg_.logprobs) choice["logprobs"] = {{"content", logprobs_}};
    return {{"id", cfg_.id},
            {"object", "chat.completion"},
            {"created", cfg_.created},
            {"model", cfg_.model},
            {"system_fingerprint", "nitro"},
            {"choices", json::array({std::move(choice)})},
            {"usage", usage_.to_json()}};
}

}  // namespace nitro::server
