// What the connection front (http_conn.h) checks in a request's bytes before cpp-httplib parses
// them, as pure functions (tests/unit/test_server_http_conn.cpp):
//
//  - Where a request head ends: at the first empty line, the same place cpp-httplib's line reader
//    stops (a line is "\r\n" right after a '\n'), so the front and the parser always agree on
//    where the body starts.
//  - Whether the head is one the server should read at all (RFC 9112): a request line
//    `METHOD SP TARGET SP HTTP/1.x` (a 400 naming what is wrong, 501 for an unknown method, 505 for
//    another HTTP version), CRLF line endings (a bare LF would make cpp-httplib skip the line:
//    refused), header lines `name: value` without whitespace before the colon and without line
//    folding, and exactly one Host header in HTTP/1.1 (at most one in HTTP/1.0).
//  - A chunked body's trailer section: cpp-httplib 0.11 expects "\r\n" right after the last
//    chunk and refuses a body with trailer fields; ChunkedTrailerFilter drops the trailer fields
//    (RFC 9112 section 7.1.2 lets a recipient discard them) and passes every other byte as it is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nitro::server {

/// Longest request line cpp-httplib reads (CPPHTTPLIB_REQUEST_URI_MAX_LENGTH).
inline constexpr size_t kMaxRequestLine = 8192;

/// The end of the request head in `buf` (the offset just past its empty line), or nullopt when
/// the head is not complete yet.
std::optional<size_t> find_head_end(std::string_view buf);

/// How many empty lines ("\r\n" or "\n") start `buf`: RFC 9112 section 2.2 asks a server to
/// ignore them before a request line (some clients send one after a POST body).
size_t leading_empty_lines(std::string_view buf);

/// What the connection front needs from a head it accepts, or the error to answer.
struct RequestHead {
    std::string method, target, version;
    bool chunked = false;  ///< Transfer-Encoding names chunked (the framing itself is checked later)
    int status = 0;        ///< 0: the head may be parsed; else the HTTP status to answer
    std::string error;     ///< what is wrong (for the error's message)
    std::string code;      ///< OpenAI-style error code
};

/// Checks a complete head (as find_head_end delimits it).
RequestHead check_request_head(std::string_view head);

/// Drops the trailer fields of a chunked body, mirroring cpp-httplib 0.11's chunked reader so
/// both see the same chunk boundaries. Bytes go in as they arrive from the socket; what comes out
/// is what cpp-httplib reads. After the body (or when the framing is malformed, which the
/// parser then refuses itself) bytes pass unchanged.
class ChunkedTrailerFilter {
public:
    /// Most bytes of trailer fields accepted; more fails the body.
    static constexpr size_t kMaxTrailerBytes = 8192;

    /// Filters `in` into `out` (appended). False when the trailer section is too large.
    bool feed(std::string_view in, std::string& out);
    /// The body's final empty line has been seen.
    bool done() const { return state_ == State::DONE; }
    size_t trailer_fields() const { return n_trailers_; }

private:
    enum class State { SIZE_LINE, DATA, DATA_END_LINE, TRAILER_LINE, DONE };
    State state_ = State::SIZE_LINE;
    std::string line_;       ///< the current size or trailer line
    uint64_t remaining_ = 0; ///< DATA: bytes of the chunk left
    size_t trailer_bytes_ = 0, n_trailers_ = 0;
};

}  // namespace nitro::server
