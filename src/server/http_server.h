// The HTTP front of `nitro serve` (cpp-httplib): OpenAI routes, API-key and Host checks, body
// limits, SSE streaming, client-disconnect detection, and errors in OpenAI's shape.
//
// Routes: POST /v1/chat/completions, POST /v1/completions, GET /v1/models[/ID], GET /health,
// GET /metrics, and the web page with its live statistics (server/web_ui.h). Each generation request is validated and tokenized on its HTTP thread (so a bad
// request never waits in the queue), then submitted to the Scheduler; the HTTP thread relays the
// response builder's chunks (SSE) or waits for the whole body, watching the client's socket: when
// the client goes away the job is cancelled (dropped from the queue, or stopped at the next prompt
// chunk / decode step).
//
// Connections reach cpp-httplib's parser through the connection front (http_conn.h): no thread
// for a connection waiting for its request head, a deadline for the whole head, a body-rate
// floor, caps on connections (all and per client address), pipelined requests in order.
//
// Every request is answered on a connection that stays in step: the POST routes read their body
// themselves (any Content-Type, up to --max-body-size) before answering, even a 401; a request
// whose body is not read (too large, unknown route, a GET with a body, ambiguous framing) is
// answered and its connection closed, so no body byte is ever parsed as a next request.
#pragma once

#include "runtime/model.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "tokenizer/bpe.h"
#include "tokenizer/chat.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace nitro::server {

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8080;          ///< 0: any free port (printed at startup)
    std::string api_key;      ///< "" = no authentication
    std::string model_id;     ///< the name clients use ("" = the file name without .gguf)
    std::string chat_date;    ///< gpt-oss template date, YYYY-MM-DD ("" = today)
    int http_threads = 32;    ///< HTTP threads kept ready; up to 4x as many start under load
    double max_body_mib = 16; ///< request bodies above this many MiB are answered 413
    // Slow and idle clients (http_conn.h): the whole request head within header_timeout_s (408
    // after), a body at body_min_rate bytes/s or more once body_timeout_s has passed, and at most
    // max_connections open (max_connections_per_client from one IP address; 0 = no per-client cap).
    double header_timeout_s = 20;
    double body_timeout_s = 20;
    double body_min_rate = 500;
    int max_connections = 1024;
    int max_connections_per_client = 64;
    /// Memory of response_format grammars (grammar/grammar_budget.h): one request's (a 400
    /// beyond) and all requests' in progress together (a 429 beyond), MiB.
    double grammar_memory_mib = 64;
    double grammar_memory_total_mib = 512;
    /// Tokens of reasoning a JSON response_format request may take before its answer, unless it
    /// says (reasoning_budget_tokens): -1 unlimited, 0 none (llama.cpp's --reasoning-budget).
    int64_t reasoning_budget = -1;
    /// Host names accepted without an API key besides IP addresses, localhost and `host`
    /// ("*": any; see http_guard.h on DNS rebinding).
    std::vector<std::string> allowed_hosts;
    /// Test-only: accept the request field "debug_scripted_output" (tokens to emit instead of
    /// sampling), so client tests can drive tool calls, reasoning and stop sequences through the
    /// real HTTP/SSE path with a random-weight model. Never enable it for users.
    bool allow_scripted_output = false;
};

/// What the handlers need, owned by the caller (cmd_serve) and alive while the server runs.
struct ServerContext {
    const Model* model = nullptr;
    const Tokenizer* tokenizer = nullptr;
    std::optional<ChatFormat> chat_format;  ///< none: /v1/chat/completions answers 400
    Scheduler* scheduler = nullptr;
    Metrics* metrics = nullptr;
};

class HttpServer {
public:
    HttpServer(ServerContext ctx, ServerOptions opt);
    ~HttpServer();

    /// Binds host:port. Returns the port bound. Throws nitro::Error if it cannot bind.
    int bind();
    /// Serves until stop(). Call after bind().
    void run();
    /// Stops accepting and returns from run() (thread-safe).
    void stop();
    const std::string& model_id() const { return opt_.model_id; }
    /// The options in force (max_connections lowered to what the file-descriptor limit allows).
    const ServerOptions& options() const { return opt_; }

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    ServerOptions opt_;
};

}  // namespace nitro::server
