#include "server/web_ui.h"

#include "server/http_guard.h"
#include "server/live_stats.h"
#include "server/metrics.h"
#include "server/scheduler.h"

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <memory>

namespace nitro::server {

using json = nlohmann::json;

namespace {

// Only this server: scripts, styles, images and connections of the page's own origin. Nothing
// inline, nothing from elsewhere (a CDN included), no framing.
constexpr const char* kPagePolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void serve_asset(const WebAsset& a, const httplib::Request& req, httplib::Response& res) {
    res.set_header("ETag", std::string(a.etag));
    res.set_header("Cache-Control", "no-cache");  // revalidate: a new build serves new files
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("Referrer-Policy", "no-referrer");
    if (a.content_type.starts_with("text/html")) {
        res.set_header("Content-Security-Policy", kPagePolicy);
        res.set_header("X-Frame-Options", "DENY");
    }
    if (req.get_header_value("If-None-Match") == a.etag) {
        res.status = 304;
        return;
    }
    res.set_content(reinterpret_cast<const char*>(a.body.data()), a.body.size(), std::string(a.content_type));
}

json status_of(const WebRoutesContext& ctx, const LiveSnapshot& s) {
    json j = live_status_json(s, static_cast<int64_t>(ctx.scheduler->queue_length()), ctx.metrics->active.load());
    j["model"]["id"] = ctx.model_id;
    j["kv_cache"]["n_slots"] = ctx.scheduler->n_slots();
    return j;
}

/// Decrements the open-stream count when the last copy of the stream's state goes.
class StreamTicket {
public:
    explicit StreamTicket(std::shared_ptr<std::atomic<int>> open) : open_(std::move(open)) {}
    StreamTicket(const StreamTicket&) = delete;
    StreamTicket& operator=(const StreamTicket&) = delete;
    ~StreamTicket() { open_->fetch_sub(1); }

private:
    std::shared_ptr<std::atomic<int>> open_;
};

}  // namespace

const WebAsset* find_web_asset(std::string_view path) {
    if (path == "/") path = "/web/index.html";
    for (const WebAsset& a : web_assets())
        if (a.path == path) return &a;
    return nullptr;
}

bool is_web_page_path(std::string_view path) { return find_web_asset(path) != nullptr; }

void add_web_routes(httplib::Server& svr, const WebRoutesContext& ctx) {
    auto asset_route = [](const httplib::Request& req, httplib::Response& res) {
        const WebAsset* a = find_web_asset(req.path);
        if (!a) {
            res.status = 404;  // the error handler writes the body
            return;
        }
        serve_asset(*a, req, res);
    };
    svr.Get("/", asset_route);
    svr.Get(R"(/web/.+)", asset_route);

    svr.Get("/v1/nitro/status", [ctx](const httplib::Request&, httplib::Response& res) {
        ctx.metrics->requests_other++;
        res.set_header("Cache-Control", "no-store");
        res.set_content(dump(status_of(ctx, *ctx.scheduler->live().snapshot())), "application/json");
    });
    svr.Get("/v1/nitro/experts", [ctx](const httplib::Request&, httplib::Response& res) {
        ctx.metrics->requests_other++;
        res.set_header("Cache-Control", "no-store");
        res.set_content(dump(live_experts_json(*ctx.scheduler->live().snapshot())), "application/json");
    });

    auto open = std::make_shared<std::atomic<int>>(0);
    svr.Get("/v1/nitro/events", [ctx, open](const httplib::Request& req, httplib::Response& res) {
        ctx.metrics->requests_other++;
        if (open->fetch_add(1) >= kMaxEventStreams) {
            open->fetch_sub(1);
            res.status = 503;
            res.set_header("Retry-After", "5");
            res.set_content(dump({{"error",
                                   {{"message", fmt::format("Too many /v1/nitro/events streams are open (at most {}); close one "
                                                            "(another page of this server) or retry later.",
                                                            kMaxEventStreams)},
                                    {"type", "server_error"},
                                    {"param", nullptr},
                                    {"code", "too_many_event_streams"}}}}),
                            "application/json");
            return;
        }
        auto ticket = std::make_shared<StreamTicket>(open);
        const int fd = find_connection_socket(req.remote_addr, req.remote_port, req.local_port);
        res.set_header("Cache-Control", "no-cache");
        res.set_header("X-Accel-Buffering", "no");
        res.set_chunked_content_provider(
            "text/event-stream", [ctx, ticket, fd](size_t, httplib::DataSink& sink) {
                const LiveStats& live = ctx.scheduler->live();
                auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
                uint64_t sent = 0;
                int64_t queued = -1, active = -1;
                auto last_write = std::chrono::steady_clock::now();
                // The first events at once, then each new snapshot (at most every
                // LiveStats::kPublishInterval) and each change of the queue; a comment every 15 s.
                for (;;) {
                    std::shared_ptr<const LiveSnapshot> s = live.wait_newer(sent, std::chrono::milliseconds(250));
                    if (live.closed()) {
                        sink.done();  // the server is stopping
                        return true;
                    }
                    const int64_t q = static_cast<int64_t>(ctx.scheduler->queue_length()), a = ctx.metrics->active.load();
                    std::string out;
                    if (s->version != sent || q != queued || a != active)
                        out += "event: status\ndata: " + dump(status_of(ctx, *s)) + "\n\n";
                    if (s->version != sent) out += "event: experts\ndata: " + dump(live_experts_json(*s)) + "\n\n";
                    const auto now = std::chrono::steady_clock::now();
                    if (out.empty() && now - last_write >= std::chrono::seconds(15)) out = ": keep-alive\n\n";
                    if (!out.empty()) {
                        if (!write(out)) return false;
                        last_write = now;
                    }
                    sent = s->version;
                    queued = q;
                    active = a;
                    // A client that closed (or half-closed: cpp-httplib writes nothing to it any
                    // more) is done with the stream; its place is freed at once.
                    if (peer_state(fd) != PeerState::OPEN) return false;
                }
            });
    });
}

}  // namespace nitro::server
