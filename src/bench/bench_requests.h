// Request replay of `nitro bench -o DIR --requests FILE.jsonl` (docs/bench.md): saved OpenAI
// request bodies sent one at a time, streamed, to `nitro serve` (started here, or already running)
// and to any OpenAI-compatible peer URL (llama-server, ...), with the time to first token of each
// request and decode rates weighted as timed tokens / timed seconds. The HTTP client is
// cpp-httplib's (plain http: the library is built without TLS).
#pragma once

#include "bench/bench_sweep.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <sys/types.h>
#include <vector>

namespace nitro {

/// One saved request of a --requests file. A line is either a request body (an object with
/// "messages": /v1/chat/completions, or "prompt": /v1/completions) or a wrapper
/// {"body": {...}, "url" or "endpoint": "/v1/chat/completions", "conversation": ID, "custom_id": ID}
/// (the OpenAI Batch API's input lines are such wrappers). Requests with the same conversation id
/// are the turns of one conversation, in file order; a request without one is a conversation of
/// its own.
struct SavedRequest {
    int line = 0;               ///< 1-based line in the file
    std::string id;             ///< custom_id, or "line N"
    std::string conversation;   ///< conversation id ("line N" when the line names none)
    int turn = 0;               ///< 0-based index within the conversation
    std::string endpoint;       ///< "/v1/chat/completions" or "/v1/completions"
    nlohmann::json body;        ///< as saved (the replay sets stream and stream_options, see replay_request)
};

/// Reads a --requests file. Blank lines are skipped. Throws nitro::Error "FILE:LINE: ..." for
/// malformed JSON, a line that is not an object, a body with neither or both of "messages" and
/// "prompt", an endpoint other than the two above, or a file without requests.
std::vector<SavedRequest> read_saved_requests(const std::string& path);

/// An OpenAI-compatible server: http://HOST:PORT[/PREFIX] (a trailing "/v1" of an OpenAI base URL
/// is dropped: requests go to PREFIX/v1/...).
struct HttpTarget {
    std::string url;      ///< as given (for messages)
    std::string host;
    int port = 80;
    std::string prefix;   ///< path before /v1, "" or "/..."
    std::string api_key;  ///< sent as "Authorization: Bearer KEY" when not empty
    std::string model;    ///< "model" field of every request ("" = the field is removed)
};
/// Parses an http:// URL. `what` names the option in messages (e.g. "--peer-url"). Throws
/// nitro::Error for another scheme (https needs TLS, which this build's HTTP library lacks), a
/// missing host, a bad port, or a query/fragment.
HttpTarget parse_http_url(const std::string& url, const std::string& what);

/// Checks that a server answers at `t` (GET PREFIX/v1/models), failing within about `timeout_s`
/// seconds. Throws nitro::Error naming `what` and the URL: nothing listens (connection refused),
/// no answer in time, or an HTTP error status.
void check_server_up(const HttpTarget& t, const std::string& what, double timeout_s);

/// Server-sent events from a byte stream: feed() the bytes as they arrive with the time they
/// arrived; every complete event's data (the "data:" lines joined by '\n') is passed to the
/// handler with the arrival time of the bytes that completed it. Events end at a blank line
/// ("\n\n" or "\r\n\r\n"); comments and other fields are ignored.
class SseParser {
public:
    explicit SseParser(std::function<void(const std::string& data, double t)> on_event) : on_event_(std::move(on_event)) {}
    void feed(const char* p, size_t n, double t);
    /// An event still open when the stream ends (no blank line after it) is delivered.
    void finish(double t);

private:
    std::function<void(const std::string&, double)> on_event_;
    std::string buf_, data_;
    bool have_data_ = false;
};

/// What one streamed request measured. Times are seconds from just before the request was sent.
struct RequestTiming {
    int http_status = 0;        ///< 0: no HTTP answer
    std::string error;          ///< "" when the request succeeded
    double first_text_s = -1;   ///< first event carrying generated text (TTFT); -1: none
    double last_text_s = -1;    ///< last event carrying generated text
    double total_s = 0;         ///< until the stream ended
    int64_t text_events = 0;    ///< events carrying generated text
    bool usage = false;         ///< the server sent usage (token counts below are its own)
    int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
    /// Tokens whose time is measured between the first and the last text event: completion
    /// tokens - 1 (the first token's time is in the TTFT), with usage; else text events - 1.
    int64_t decode_tokens() const;
    /// last_text_s - first_text_s when decode_tokens() > 0, else 0.
    double decode_seconds() const;
};

/// Applies one stream event (the data of an SSE event) to `r`: generated text (chat deltas
/// content / reasoning_content / reasoning / tool_calls, completion text) at time t, usage, or an
/// error object. Returns false for "[DONE]".
bool apply_stream_event(const std::string& data, double t, RequestTiming& r);

/// The body the replay sends: the saved one with "stream": true, "stream_options":
/// {"include_usage": true}, and "model" set to t.model (removed when it is empty).
nlohmann::json replay_body(const SavedRequest& q, const HttpTarget& t);

/// Sends one request (streamed) and measures it. Never throws for server-side problems: they
/// are in RequestTiming::error (connection refused, HTTP status with the server's message, an
/// error event, no generated text, a read that waited more than timeout_s).
RequestTiming replay_request(const HttpTarget& t, const SavedRequest& q, double timeout_s);

/// Totals of one replay of a request file, all CALCULATED from the RequestTimings.
struct ReplayTotals {
    int requests = 0, failed = 0;
    int64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
    RateSample decode;        ///< summed timed tokens and seconds of the successful requests
    RateSample prompt;        ///< prompt tokens not served from a cache, and the sum of the TTFTs
    std::vector<double> ttft_s;  ///< per successful request
    double ttft_first_turn_s = 0, ttft_later_turns_s = 0;  ///< means (0: none)
    int first_turns = 0, later_turns = 0;
};
ReplayTotals replay_totals(const std::vector<SavedRequest>& reqs, const std::vector<RequestTiming>& timings);

/// A `nitro serve` child process on 127.0.0.1 with a free port, for the replay.
class ServeProcess {
public:
    /// Runs `nitro_binary serve --host 127.0.0.1 --port 0 ARGS...` in its own process group with
    /// stdout and stderr to `log_path`, and waits until it prints its "listening on" line. Throws
    /// nitro::Error with the tail of the log if it exits first or is not listening after
    /// timeout_s seconds (it is killed then).
    ServeProcess(const std::string& nitro_binary, const std::vector<std::string>& args, const std::string& log_path,
                 double timeout_s);
    /// Stops the server (SIGTERM, then SIGKILL after 10 s).
    ~ServeProcess();
    ServeProcess(const ServeProcess&) = delete;
    ServeProcess& operator=(const ServeProcess&) = delete;
    int port() const { return port_; }
    pid_t pid() const { return pid_; }

private:
    pid_t pid_ = -1;
    int port_ = 0;
};

}  // namespace nitro
