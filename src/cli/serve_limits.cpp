#include "cli/serve_limits.h"

#include <fmt/format.h>

namespace nitro::cli {

void add_serve_limit_flags(CLI::App* sub, server::ServerOptions& o) {
    sub->add_option("--header-timeout", o.header_timeout_s,
                    "Seconds a client has to send a whole request head (request line and headers), from its connection "
                    "(or, on a kept-alive connection, its first byte); later: 408, connection closed")
        ->check(CLI::PositiveNumber)
        ->capture_default_str()
        ->envname("NITRO_HEADER_TIMEOUT");
    sub->add_option("--body-timeout", o.body_timeout_s,
                    "Seconds a request body may take before --body-min-rate applies (with a rate of 0: the longest wait "
                    "for any body bytes)")
        ->check(CLI::PositiveNumber)
        ->capture_default_str()
        ->envname("NITRO_BODY_TIMEOUT");
    sub->add_option("--body-min-rate", o.body_min_rate,
                    "Bytes/s a request body must keep up after --body-timeout (the k-th byte is due by body-timeout + "
                    "k / rate seconds); slower: 408, connection closed; 0 = no floor")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str()
        ->envname("NITRO_BODY_MIN_RATE");
    sub->add_option("--max-connections", o.max_connections,
                    "Connections open at once, all clients (capped below the open-file limit); one more gets 503")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str()
        ->envname("NITRO_MAX_CONNECTIONS");
    sub->add_option("--max-connections-per-client", o.max_connections_per_client,
                    "Connections open at once from one client IP address; one more gets 503 (0 = no per-client cap; raise it "
                    "behind a reverse proxy, whose connections all come from one address)")
        ->check(CLI::Range(0, 1 << 20))
        ->capture_default_str()
        ->envname("NITRO_MAX_CONNECTIONS_PER_CLIENT");
    sub->add_option("--grammar-memory", o.grammar_memory_mib,
                    "MiB of grammar state one response_format request may build (its compiled schema); a larger schema gets 400")
        ->check(CLI::PositiveNumber)
        ->capture_default_str()
        ->envname("NITRO_GRAMMAR_MEMORY");
    sub->add_option("--grammar-memory-total", o.grammar_memory_total_mib,
                    "MiB of grammar state all requests in progress may hold together; a request that would pass it gets 429")
        ->check(CLI::PositiveNumber)
        ->capture_default_str()
        ->envname("NITRO_GRAMMAR_MEMORY_TOTAL");
}

std::string serve_limits_summary(const server::ServerOptions& o) {
    const std::string per_client = o.max_connections_per_client > 0 ? fmt::format("{} per client address", o.max_connections_per_client)
                                                                     : std::string("no per-client cap");
    return fmt::format("connections up to {} ({}); request head within {} s, body at >= {} bytes/s after {} s\n"
                       "grammars   response_format state up to {} MiB per request, {} MiB in all\n",
                       o.max_connections, per_client, o.header_timeout_s, o.body_min_rate, o.body_timeout_s, o.grammar_memory_mib,
                       o.grammar_memory_total_mib);
}

}  // namespace nitro::cli
