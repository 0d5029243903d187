// Server metrics in Prometheus text exposition format (GET /metrics).
//
// Counters are lock-free atomics updated by the HTTP threads and the scheduler's worker. Other
// parts of the engine (expert placement: slot hits/misses, uploads) register a collector that
// appends their own metric families to the same page, so /metrics stays one endpoint.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace nitro::server {

class Metrics {
public:
    // Requests, by outcome.
    std::atomic<uint64_t> requests_chat{0}, requests_completion{0}, requests_other{0};
    std::atomic<uint64_t> requests_ok{0};          ///< generation requests that completed (any finish_reason)
    std::atomic<uint64_t> requests_client_error{0};///< answered 4xx
    std::atomic<uint64_t> requests_server_error{0};///< answered 5xx
    std::atomic<uint64_t> requests_cancelled{0};   ///< client went away (queued, prefill or decode)
    // Tokens.
    std::atomic<uint64_t> prompt_tokens{0};        ///< prompt tokens of finished requests
    std::atomic<uint64_t> prompt_tokens_evaluated{0}; ///< prompt tokens run through the model
    std::atomic<uint64_t> prompt_tokens_reused{0}; ///< prompt tokens served from the cached prefix
    std::atomic<uint64_t> generated_tokens{0};
    // Time, microseconds (exported in seconds).
    std::atomic<uint64_t> prompt_us{0}, decode_us{0};
    std::atomic<uint64_t> decode_steps{0};         ///< decode forward passes (tokens after the first)
    /// Grammar-constrained sampling (response_format): tokens sampled under a mask, and the time
    /// spent making the masks and advancing the grammar (not the sampling), microseconds.
    std::atomic<uint64_t> grammar_masks{0}, grammar_mask_us{0};
    // HTTP connections (http_conn.h): open and waiting for a request head (gauges), accepted,
    // refused at a cap, closed for a head or a body too slow (counters).
    std::atomic<int64_t> http_connections_open{0}, http_connections_waiting{0};
    std::atomic<uint64_t> http_connections_accepted{0};
    std::atomic<uint64_t> http_refused_total_cap{0}, http_refused_client_cap{0};
    std::atomic<uint64_t> http_head_timeouts{0}, http_body_too_slow{0};
    // Gauges.
    std::atomic<int64_t> queue_length{0};
    std::atomic<int64_t> active{0};
    /// Last finished request's rates, tokens/s (gauges).
    std::atomic<double> last_prompt_tok_s{0}, last_decode_tok_s{0};

    /// A collector appends complete metric families (with # HELP / # TYPE) to `out`.
    using Collector = std::function<void(std::string& out)>;
    void add_collector(Collector c);

    /// The whole page.
    std::string render() const;

private:
    mutable std::mutex mu_;
    std::vector<Collector> collectors_;
};

}  // namespace nitro::server
