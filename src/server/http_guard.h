// Checks the HTTP front applies to every request before any handler work, and the client-socket
// probes it uses while a request runs. Pure functions over header values and sockets, so each
// rule is unit-tested without a server (tests/unit/test_server_http_guard.cpp).
//
//  - Framing: a request whose body length is ambiguous (two different Content-Length values,
//    Content-Length with Transfer-Encoding, a Transfer-Encoding other than chunked, a length that
//    is not a number) is refused and its connection closed: the bytes after it cannot be told
//    apart from a next request (request smuggling).
//  - API key: `Authorization: <scheme> KEY` with the scheme "Bearer" in any case (HTTP auth
//    schemes are case-insensitive), or `x-api-key: KEY`; compared in constant time.
//  - Host (only when no API key is set): the Host header must name an IP address, localhost
//    (or a name under .localhost), the --host name, or a name given with --allowed-host. A web
//    page on attacker.example can make a browser resolve its own name to 127.0.0.1 (DNS
//    rebinding) and then read the server's answers; the browser still sends
//    `Host: attacker.example`, which this refuses.
//  - Peer state: a client that half-closed its socket after sending the request (FIN) is still
//    waiting for the answer; one that closed or reset it is gone. The two look the same until
//    something is written, so the server writes a probe (an interim `100 Continue` before the
//    response, an SSE comment in a stream): a closed peer answers it with a reset.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nitro::server {

/// How the body of a request is framed, from its headers.
struct BodyFraming {
    bool chunked = false;
    std::optional<uint64_t> content_length;
    std::string error;  ///< non-empty: the framing is ambiguous or invalid (say why)
    /// The request carries body bytes (chunked, or a length above 0).
    bool has_body() const { return chunked || (content_length && *content_length > 0); }
};

/// Reads the framing of a request from all its Content-Length and Transfer-Encoding values.
BodyFraming body_framing(const std::vector<std::string>& content_lengths, const std::vector<std::string>& transfer_encodings);

/// Constant-time equality (the time depends on the lengths only).
bool constant_time_equal(std::string_view a, std::string_view b);

/// True if the Authorization header value (`Bearer KEY`, any case of the scheme, any run of
/// spaces) or the x-api-key value carries `key`.
bool api_key_matches(std::string_view authorization, std::string_view x_api_key, std::string_view key);

/// The host part of a Host header value: "[::1]:8080" -> "::1", "Example.COM.:80" -> "example.com";
/// "" when it is malformed ("[::1").
std::string host_of_header(std::string_view host_header);

/// The Host check without an API key (see above). `bound_host` is --host; `allowed` the
/// --allowed-host names ("*" allows any). An empty Host header is allowed (HTTP/1.0 clients;
/// browsers always send one).
bool host_allowed(std::string_view host_header, std::string_view bound_host, const std::vector<std::string>& allowed);

/// True if a --host value listens on loopback only: "localhost" (or a name under .localhost), an
/// IPv4 address in 127.0.0.0/8, or "::1" (bracketed or not). "0.0.0.0", "::", a LAN address or
/// another name reach the network: a server there without an API key serves anyone who can reach
/// the port (the Host check admits every IP address).
bool is_loopback_host(std::string_view host);

/// What is known about the client end of a connected socket without reading from it.
enum class PeerState {
    OPEN,         ///< nothing received, or more request bytes
    HALF_CLOSED,  ///< the client sent FIN: it may still read the response (or may be gone)
    GONE,         ///< reset, error or hang-up: nobody reads the response
};
PeerState peer_state(int fd);

/// Writes `bytes` to the socket without blocking and without SIGPIPE; false if it failed.
bool write_probe(int fd, std::string_view bytes);

/// The socket of the connection a request arrived on, found by its local and remote ports
/// (cpp-httplib 0.11 does not hand the socket to handlers). -1 if not found. The server's own
/// handlers use current_connection_socket() (http_conn.h), which needs no scan of /proc.
int find_connection_socket(const std::string& remote_addr, int remote_port, int local_port);

/// Host and port as a URL authority: IPv6 addresses in brackets ("[::1]:8080").
std::string url_authority(const std::string& host, int port);

}  // namespace nitro::server
