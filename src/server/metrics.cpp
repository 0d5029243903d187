#include "server/metrics.h"

#include <fmt/format.h>

namespace nitro::server {

void Metrics::add_collector(Collector c) {
    std::lock_guard<std::mutex> lk(mu_);
    collectors_.push_back(std::move(c));
}

namespace {

template <typename T>
void family(std::string& out, const char* name, const char* type, const char* help, T value) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
}

}  // namespace

std::string Metrics::render() const {
    std::string out;
    out += "# HELP nitro_requests_total HTTP requests received, by endpoint.\n# TYPE nitro_requests_total counter\n";
    out += fmt::format("nitro_requests_total{{endpoint=\"chat_completions\"}} {}\n", requests_chat.load());
    out += fmt::format("nitro_requests_total{{endpoint=\"completions\"}} {}\n", requests_completion.load());
    out += fmt::format("nitro_requests_total{{endpoint=\"other\"}} {}\n", requests_other.load());
    out += "# HELP nitro_requests_finished_total Generation requests by outcome.\n# TYPE nitro_requests_finished_total counter\n";
    out += fmt::format("nitro_requests_finished_total{{outcome=\"ok\"}} {}\n", requests_ok.load());
    out += fmt::format("nitro_requests_finished_total{{outcome=\"client_error\"}} {}\n", requests_client_error.load());
    out += fmt::format("nitro_requests_finished_total{{outcome=\"server_error\"}} {}\n", requests_server_error.load());
    out += fmt::format("nitro_requests_finished_total{{outcome=\"cancelled\"}} {}\n", requests_cancelled.load());
    family(out, "nitro_prompt_tokens_total", "counter", "Prompt tokens of requests (reused + evaluated).", prompt_tokens.load());
    family(out, "nitro_prompt_tokens_evaluated_total", "counter", "Prompt tokens run through the model.", prompt_tokens_evaluated.load());
    family(out, "nitro_prompt_tokens_reused_total", "counter", "Prompt tokens served from the cached K/V of a shared prefix.", prompt_tokens_reused.load());
    family(out, "nitro_generated_tokens_total", "counter", "Tokens generated.", generated_tokens.load());
    family(out, "nitro_prompt_seconds_total", "counter", "Time spent evaluating prompts, seconds.", prompt_us.load() / 1e6);
    family(out, "nitro_decode_seconds_total", "counter", "Time spent decoding, seconds.", decode_us.load() / 1e6);
    const double pus = static_cast<double>(prompt_us.load()), dus = static_cast<double>(decode_us.load());
    family(out, "nitro_prompt_tokens_per_second", "gauge", "Prompt throughput over all requests, tokens/s.",
           pus > 0 ? static_cast<double>(prompt_tokens_evaluated.load()) * 1e6 / pus : 0.0);
    family(out, "nitro_decode_tokens_per_second", "gauge", "Decode throughput over all requests, tokens/s.",
           dus > 0 ? static_cast<double>(decode_steps.load()) * 1e6 / dus : 0.0);
    family(out, "nitro_last_prompt_tokens_per_second", "gauge", "Prompt throughput of the last finished request, tokens/s.", last_prompt_tok_s.load());
    family(out, "nitro_last_decode_tokens_per_second", "gauge", "Decode throughput of the last finished request, tokens/s.", last_decode_tok_s.load());
    family(out, "nitro_grammar_masks_total", "counter", "Tokens sampled under a response_format grammar.", grammar_masks.load());
    family(out, "nitro_grammar_mask_seconds_total", "counter",
           "Time computing response_format token masks and advancing the grammar (sampling not included), seconds.",
           grammar_mask_us.load() / 1e6);
    family(out, "nitro_http_connections", "gauge", "HTTP connections open.", http_connections_open.load());
    family(out, "nitro_http_connections_waiting", "gauge",
           "HTTP connections waiting for a request head (new or kept alive; they hold no thread).", http_connections_waiting.load());
    family(out, "nitro_http_connections_accepted_total", "counter", "HTTP connections accepted.", http_connections_accepted.load());
    out += "# HELP nitro_http_connections_refused_total HTTP connections answered 503 at a cap (--max-connections, "
           "--max-connections-per-client).\n# TYPE nitro_http_connections_refused_total counter\n";
    out += fmt::format("nitro_http_connections_refused_total{{cap=\"total\"}} {}\n", http_refused_total_cap.load());
    out += fmt::format("nitro_http_connections_refused_total{{cap=\"per_client\"}} {}\n", http_refused_client_cap.load());
    out += "# HELP nitro_http_timeouts_total HTTP connections closed for a request head not whole by --header-timeout, or a "
           "body under --body-min-rate.\n# TYPE nitro_http_timeouts_total counter\n";
    out += fmt::format("nitro_http_timeouts_total{{phase=\"head\"}} {}\n", http_head_timeouts.load());
    out += fmt::format("nitro_http_timeouts_total{{phase=\"body\"}} {}\n", http_body_too_slow.load());
    family(out, "nitro_queue_length", "gauge", "Requests waiting for the model.", queue_length.load());
    family(out, "nitro_requests_active", "gauge", "Requests being processed by the model.", active.load());
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& c : collectors_) c(out);
    return out;
}

}  // namespace nitro::server
