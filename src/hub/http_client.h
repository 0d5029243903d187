// HTTP(S) GET through libcurl (Debian libcurl4-openssl-dev): what the Hugging Face client needs and
// no more. Redirects are followed (the Hub sends file downloads to a CDN; libcurl does not forward a
// custom Authorization header to another host), response headers are kept with lower-case names,
// and a request that gets no HTTP answer throws NetworkError, so a caller can tell "the server said
// 404" (a status) from "there is no network" (an exception) and fall back to its cache.
#pragma once

#include "core/error.h"

#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace nitro::hub {

/// A request without an HTTP answer, or whose body broke off: host not found, connection refused,
/// reset or cut, a stall past the timeout. `connected` tells whether an HTTP response had begun.
class NetworkError : public Error {
public:
    NetworkError(const std::string& msg, bool connected) : Error(msg), connected_(connected) {}
    bool connected() const { return connected_; }

private:
    bool connected_;
};

struct HttpOptions {
    std::string bearer_token;        ///< sent as "Authorization: Bearer ..." when not empty
    std::string accept;              ///< Accept header, e.g. "application/json"; none when empty
    long connect_timeout_s = 15;     ///< seconds to establish a connection
    long stall_timeout_s = 60;       ///< a transfer below 1 byte/s for this many seconds is cut
};

struct HttpResponse {
    long status = 0;                              ///< of the last response (after redirects)
    std::map<std::string, std::string> headers;   ///< of the last response, names in lower case
    std::string body;                             ///< http_get only (http_stream hands it to the sink)
    std::string url;                              ///< the URL that answered (after redirects)
    std::string header(const std::string& lower_name) const;
};

/// GETs `url` and returns the status, headers and body (at most `max_body` bytes, else
/// NetworkError). HTTP error statuses are returned, not thrown. Throws NetworkError.
HttpResponse http_get(const std::string& url, const HttpOptions& o, size_t max_body = 64u << 20);

/// Where a streamed body goes. `on_start` sees the final status and headers before the first byte
/// and returns false to stop (e.g. an error status); `on_data` returns false to stop.
struct HttpSink {
    std::function<bool(const HttpResponse&)> on_start;
    std::function<bool(const char* data, size_t n)> on_data;
};

/// GETs `url` (from byte `range_from` on when > 0: "Range: bytes=N-") and streams the body into
/// `sink`. Returns the status and headers; a stop asked by the sink is not an error. Throws
/// NetworkError when there is no answer or the body breaks off before its end.
HttpResponse http_stream(const std::string& url, uint64_t range_from, const HttpOptions& o, const HttpSink& sink);

/// `path` percent-encoded for a URL, '/' kept (a repository file name such as "Q4_K_M/a b.gguf").
std::string url_encode_path(const std::string& path);

}  // namespace nitro::hub
