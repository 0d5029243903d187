// The web page of `nitro serve` (GET /) and the live-statistics endpoints it reads:
//   GET /                   the page (src/server/web/index.html), and its files under /web/
//   GET /v1/nitro/status    throughput, TTFT, K/V cache use, queue, CPU/GPU split, hit rate, history
//   GET /v1/nitro/experts   per layer and expert: selections (since start, recent) and where it runs
//   GET /v1/nitro/events    Server-Sent Events: `status` and `experts` events as they change
// The page's files are embedded in the binary at build time (cmake/embed_web.cmake turns
// src/server/web/* into a generated .cpp); nothing is fetched from elsewhere, and the page's
// Content-Security-Policy allows this server only. The page is public (a browser cannot send an
// API key when it navigates); the /v1/nitro/* endpoints obey the API key and Host checks like
// every other route, and the page sends the key a user typed (docs/server.md).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace httplib {
class Server;
}

namespace nitro::server {

class Scheduler;
class Metrics;

/// One embedded file of the page.
struct WebAsset {
    std::string_view path;          ///< URL path: "/web/app.js" ("/" serves /web/index.html)
    std::string_view content_type;  ///< "text/javascript; charset=utf-8"
    std::string_view etag;          ///< quoted sha256 prefix of the content
    std::span<const unsigned char> body;
};

/// Every embedded file (generated at build time).
std::span<const WebAsset> web_assets();
/// The file served at `path` ("/" is /web/index.html), or null.
const WebAsset* find_web_asset(std::string_view path);
/// True for the paths of the page itself, which need no API key.
bool is_web_page_path(std::string_view path);

/// Most /v1/nitro/events streams open at once (each holds an HTTP thread); more are answered 503.
inline constexpr int kMaxEventStreams = 16;

struct WebRoutesContext {
    Scheduler* scheduler = nullptr;
    Metrics* metrics = nullptr;
    std::string model_id;
};

/// Registers GET / and /web/* (the page) and GET /v1/nitro/{status,experts,events} on `svr`.
/// Access checks are the caller's (its pre-routing handler).
void add_web_routes(httplib::Server& svr, const WebRoutesContext& ctx);

}  // namespace nitro::server
