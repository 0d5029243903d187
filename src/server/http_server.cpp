#include "server/http_server.h"

#include "core/error.h"
#include "grammar/response_constraint.h"
#include "server/chat_completion.h"
#include "server/completion.h"
#include "server/http_conn.h"
#include "server/http_guard.h"
#include "server/http_pool.h"
#include "server/openai_schema.h"
#include "server/web_ui.h"
#include "server/request_log.h"

#include <httplib.h>

#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>
#include <unordered_map>

namespace nitro::server {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------------
// A request in flight: the sink the worker feeds, and the queue of chunks the HTTP thread sends.

namespace {

class RequestState : public TokenSink {
public:
    explicit RequestState(std::unique_ptr<ResponseBuilder> b) : builder_(std::move(b)) {}

    void begin() {
        std::vector<json> chunks;
        builder_->begin(chunks);
        push(chunks);
    }
    void on_start(int64_t n_reused) override {}
    bool on_token(const TokenStep& step) override {
        std::vector<json> chunks;
        const bool more = builder_->on_token(step, chunks);
        push(chunks);
        return more;
    }
    void on_finish(FinishCause cause, const JobStats& stats, const std::string& error) override {
        std::vector<json> chunks;
        if (cause != FinishCause::CANCELLED && cause != FinishCause::ERROR) {
            Usage u;
            u.prompt_tokens = stats.n_prompt;
            u.completion_tokens = stats.n_generated;
            u.cached_tokens = stats.n_reused;
            builder_->finish(cause, u, chunks);
        }
        std::lock_guard<std::mutex> lk(mu_);
        for (auto& c : chunks) out_.push_back(std::move(c));
        cause_ = cause;
        stats_ = stats;
        error_ = error;
        done_ = true;
        cv_.notify_all();
    }

    /// Waits up to `timeout` for chunks or the finish; moves the chunks out. True when done.
    bool wait(std::chrono::milliseconds timeout, std::vector<json>& chunks) {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait_for(lk, timeout, [&] { return done_ || !out_.empty(); });
        while (!out_.empty()) {
            chunks.push_back(std::move(out_.front()));
            out_.pop_front();
        }
        return done_;
    }
    bool done() {
        std::lock_guard<std::mutex> lk(mu_);
        return done_;
    }
    // Valid once done.
    FinishCause cause() const { return cause_; }
    const JobStats& stats() const { return stats_; }
    const std::string& error() const { return error_; }
    const ResponseBuilder& builder() const { return *builder_; }

private:
    void push(std::vector<json>& chunks) {
        if (chunks.empty()) return;
        std::lock_guard<std::mutex> lk(mu_);
        for (auto& c : chunks) out_.push_back(std::move(c));
        cv_.notify_all();
    }

    std::unique_ptr<ResponseBuilder> builder_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<json> out_;
    bool done_ = false;
    FinishCause cause_ = FinishCause::CANCELLED;
    JobStats stats_;
    std::string error_;
};

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    if (e.status == 429 || e.status == 503) res.set_header("Retry-After", "1");
    res.set_content(dump(e.to_json()), "application/json");
}

ApiError server_error(const std::string& message) {
    ApiError e;
    e.status = 500;
    e.type = "server_error";
    e.message = message;
    return e;
}

/// 503 for a job that ended without its answer: the server is stopping (or the client left, when
/// nobody reads it).
ApiError cancelled_error(const std::string& why) {
    ApiError e = server_error("the request was cancelled: " + why);
    e.status = 503;
    return e;
}

std::string file_stem(const std::string& path) {
    std::string name = std::filesystem::path(path).filename().string();
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".gguf") == 0) name.resize(name.size() - 5);
    return name;
}

ApiError client_error(int status, const std::string& message, const std::string& code, const std::string& param = "") {
    ApiError e;
    e.status = status;
    e.message = message;
    e.code = code;
    e.param = param;
    return e;
}

bool is_generation_path(const std::string& p) {
    return p == "/v1/chat/completions" || p == "/chat/completions" || p == "/v1/completions" || p == "/completions";
}

std::vector<std::string> header_values(const httplib::Request& req, const char* key) {
    std::vector<std::string> out;
    auto [b, e] = req.headers.equal_range(key);  // httplib's header map compares names case-insensitively
    for (auto it = b; it != e; ++it) out.push_back(it->second);
    return out;
}

BodyFraming framing_of(const httplib::Request& req) {
    return body_framing(header_values(req, "Content-Length"), header_values(req, "Transfer-Encoding"));
}

/// Shuts the write side after the response and reads what the client still sends, for up to a
/// second (lingering close): closing a socket with unread input resets it, and a reset can make
/// the client drop the answer before reading it.
void linger(int fd) {
    if (fd < 0) return;
    shutdown(fd, SHUT_WR);
    const auto until = Clock::now() + std::chrono::seconds(1);
    char buf[16384];
    size_t dropped = 0;
    while (Clock::now() < until && dropped < (64u << 20)) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, static_cast<int>(std::max<int64_t>(1, left))) <= 0) break;
        const ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n <= 0) break;
        dropped += static_cast<size_t>(n);
    }
}

/// Makes `res` (an error with its body set) the last response of its connection: sent with
/// `Connection: close`, after which cpp-httplib closes the socket (the content provider that
/// wrote the body reports failure, which ends the keep-alive loop). For requests whose body was
/// not read: nothing the client sent after the headers is ever parsed as a request.
void close_after(httplib::Response& res, int fd) {
    std::string body = std::move(res.body);
    res.body.clear();
    if (body.empty()) body = "{}";
    const size_t n = body.size();
    res.headers.erase("Content-Type");
    res.set_header("Connection", "close");
    res.set_content_provider(n, "application/json", [body = std::move(body), fd](size_t offset, size_t length, httplib::DataSink& sink) {
        sink.write(body.data() + offset, length);
        linger(fd);
        return false;
    });
}

/// Writes all of `data` to the socket (blocking up to 5 s per stall, no SIGPIPE).
bool send_all(int fd, std::string_view data) {
    while (!data.empty()) {
        const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            data.remove_prefix(static_cast<size_t>(n));
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            pollfd p{fd, POLLOUT, 0};
            if (poll(&p, 1, 5000) > 0 && !(p.revents & (POLLERR | POLLHUP))) continue;
        }
        return false;
    }
    return true;
}

const char* reason_phrase(int status) {
    switch (status) {
        case 200: return "OK";
        case 400: return "Bad Request";
        case 401: return "Unauthorized";
        case 403: return "Forbidden";
        case 404: return "Not Found";
        case 408: return "Request Timeout";
        case 413: return "Payload Too Large";
        case 415: return "Unsupported Media Type";
        case 429: return "Too Many Requests";
        case 500: return "Internal Server Error";
        case 503: return "Service Unavailable";
        default: return "Status";
    }
}

/// cpp-httplib 0.11 writes nothing to a socket whose client has half-closed it (it takes the FIN
/// for a disconnect), yet such a client may be waiting for the answer. These write it on the
/// socket directly, as the last response of the connection (which cpp-httplib then closes).
bool send_raw_response(int fd, const httplib::Response& res) {
    const std::string type = res.get_header_value("Content-Type");
    return send_all(fd, fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                                    res.status, reason_phrase(res.status), type.empty() ? "application/json" : type,
                                    res.body.size()) +
                            res.body);
}

/// A stream's chunks in HTTP/1.1 chunked framing, on the socket directly (see above).
class RawChunkWriter {
public:
    explicit RawChunkWriter(int fd) : fd_(fd) {}
    bool head() {
        return send_all(fd_, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                             "X-Accel-Buffering: no\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
    }
    bool chunk(std::string_view data) { return send_all(fd_, fmt::format("{:x}\r\n", data.size()) + std::string(data) + "\r\n"); }
    bool end() { return send_all(fd_, "0\r\n\r\n"); }

private:
    int fd_;
};

/// True when the client of `fd` is gone. A client that half-closed its socket may still read, so
/// it is probed once with `probe` (bytes it must accept); one that closed the socket answers the
/// probe with a reset, seen at the next check.
template <typename Probe>
bool client_gone(int fd, bool& probed, Probe probe) {
    switch (peer_state(fd)) {
        case PeerState::GONE: return true;
        case PeerState::HALF_CLOSED:
            if (!probed) {
                probed = true;
                if (!probe()) return true;
            }
            return false;
        case PeerState::OPEN: return false;
    }
    return false;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

struct HttpServer::Impl {
    ServerContext ctx;
    ServerOptions opt;
    GatedServer svr;
    std::unique_ptr<ConnectionGate> gate;  ///< the connections (after svr: destroyed first, its workers use svr)
    int64_t created = 0;

    std::once_flag vocab_once;
    std::shared_ptr<const grammar::VocabIndex> vocab_index;  ///< built at the first response_format request
    std::shared_ptr<grammar::MemoryBudget> grammar_budget;   ///< response_format grammars' memory

    ParseLimits parse_limits() const {
        ParseLimits lim;
        lim.grammar_budget = grammar_budget.get();
        lim.n_vocab = ctx.model->n_vocab();
        return lim;
    }

    /// The generation of each response being written, for its log line (server/request_log.h):
    /// added by run_job, taken by the logger cpp-httplib calls once the response is written.
    std::mutex log_mu;
    std::unordered_map<const httplib::Response*, std::shared_ptr<RequestState>> log_jobs;
    void log_request(const httplib::Request& req, const httplib::Response& res) {
        std::shared_ptr<RequestState> state;
        {
            std::lock_guard<std::mutex> lk(log_mu);
            if (auto it = log_jobs.find(&res); it != log_jobs.end()) {
                state = std::move(it->second);
                log_jobs.erase(it);
            }
        }
        const bool ran = state && state->done();
        std::fprintf(stderr, "%s\n", request_log_line(req.method, req.path, res.status, ran ? &state->stats() : nullptr).c_str());
    }

    size_t max_body_bytes() const { return static_cast<size_t>(opt.max_body_mib * 1024.0 * 1024.0); }

    /// The constraint of a JSON response_format: the request's compiled value inside the output
    /// envelope `go` (chat format or raw), with its reasoning budget.
    std::unique_ptr<TokenConstraint> make_constraint(const GenerationRequest& g, grammar::ResponseGrammarOptions go) {
        const ResponseFormat& rf = g.response_format;
        go.end_of_generation = ctx.scheduler->end_of_generation();
        try {
            grammar::add_response_program(*rf.grammar, rf.root, ctx.tokenizer->vocab(), go);
        } catch (const grammar::GrammarMemoryError& e) {
            grammar_memory_error(e);
        } catch (const Error& e) {
            bad_request("response_format", e.what(), "unsupported_parameter");
        }
        std::call_once(vocab_once, [&] { vocab_index = std::make_shared<grammar::VocabIndex>(ctx.tokenizer->vocab()); });
        return std::make_unique<grammar::ResponseConstraint>(vocab_index, rf.grammar, g.reasoning_budget.value_or(opt.reasoning_budget));
    }

    void check_model(const std::string& requested) const {
        if (requested.empty() || requested == opt.model_id || requested == std::filesystem::path(ctx.model->path()).filename().string())
            return;
        ApiError e;
        e.status = 404;
        e.message = fmt::format("The model '{}' does not exist (this server serves '{}')", requested, opt.model_id);
        e.param = "model";
        e.code = "model_not_found";
        throw ApiException(e);
    }

    void check_fits(size_t n_prompt, const char* param) const {
        const int64_t n_ctx = ctx.scheduler->n_ctx();
        if (static_cast<int64_t>(n_prompt) < n_ctx) return;
        // -c is capped at the model's training context: past it, only a shorter prompt helps
        const int64_t n_train = ctx.model->hp().n_ctx_train;
        const std::string fix =
            n_train > 0 && n_ctx >= n_train
                ? fmt::format("Shorten the prompt ({} tokens is the model's training context, the most -c gives).", n_ctx)
            : n_train > 0 ? fmt::format("Shorten the prompt or start the server with a larger -c (up to the model's "
                                        "training context of {} tokens).", n_train)
                          : std::string("Shorten the prompt or start the server with a larger -c.");
        bad_request(param,
                    fmt::format("This model's maximum context length is {} tokens, but the prompt has {} tokens (at "
                                "least one position must be left to generate). {}", n_ctx, n_prompt, fix),
                    "context_length_exceeded");
    }

    /// The Host check (without an API key) and the API key (with one); /health and the web page's
    /// files (web_ui.h: a browser cannot send a key when it navigates) need neither.
    std::optional<ApiError> check_access(const httplib::Request& req) const {
        if (req.path == "/health" || is_web_page_path(req.path)) return std::nullopt;
        if (opt.api_key.empty()) {
            const std::string host = req.get_header_value("Host");
            if (host_allowed(host, opt.host, opt.allowed_hosts)) return std::nullopt;
            return client_error(403,
                                fmt::format("Host '{}' is not allowed. Without an API key this server answers only requests "
                                            "addressed to an IP address, localhost or a name given with --allowed-host "
                                            "(this stops web pages from reaching it through DNS rebinding). Start it "
                                            "with --allowed-host {} or --api-key KEY.",
                                            host.substr(0, 200), host_of_header(host).substr(0, 200)),
                                "host_not_allowed");
        }
        const std::string auth = req.get_header_value("Authorization");
        if (api_key_matches(auth, req.get_header_value("x-api-key"), opt.api_key)) return std::nullopt;
        return client_error(401,
                            auth.empty() && !req.has_header("x-api-key")
                                ? "You didn't provide an API key. Send it as 'Authorization: Bearer KEY'."
                                : "Incorrect API key provided.",
                            "invalid_api_key");
    }

    ApiError too_large() const {
        return client_error(413,
                            fmt::format("The request body is larger than this server's limit of {} bytes ({} MiB; "
                                        "nitro serve --max-body-size).", max_body_bytes(), opt.max_body_mib),
                            "request_too_large");
    }

    void answer_early(httplib::Response& res, const ApiError& e, bool close, int fd) {
        (e.status >= 500 ? ctx.metrics->requests_server_error : ctx.metrics->requests_client_error)++;
        send_error(res, e);
        if (close) close_after(res, fd);
    }

    /// A generation route: reads the body (whatever its Content-Type, up to the limit), then
    /// checks access, then calls `handle`. The body is read before any answer, a 401 included,
    /// so the connection stays in step; a body that cannot be read whole closes it.
    template <typename Handle>
    void with_body(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader, Handle handle) {
        const int fd = current_connection_socket();
        const BodyFraming framing = framing_of(req);  // valid: checked before routing
        const size_t limit = max_body_bytes();
        if (framing.content_length && *framing.content_length > limit) return answer_early(res, too_large(), true, fd);
        if (req.get_header_value("Content-Type").starts_with("multipart/")) {
            return answer_early(res, client_error(415, "The request body must be JSON (this server does not read multipart bodies).",
                                                  "unsupported_media_type"), true, fd);
        }
        std::string body;
        if (framing.has_body()) {
            bool over = false;
            const bool ok = reader([&](const char* data, size_t n) {
                if (body.size() + n > limit) {
                    over = true;
                    return false;
                }
                body.append(data, n);
                return true;
            });
            if (!ok) {
                const auto& lim = gate->limits();
                const ApiError slow = client_error(
                    408,
                    fmt::format("The request body came too slowly ({} bytes arrived): after its first {} s it must come at {} bytes/s "
                                "or more (nitro serve --body-timeout, --body-min-rate).",
                                body.size(), lim.body_timeout.count() / 1000.0, lim.body_min_rate),
                    "request_timeout");
                return answer_early(res,
                                    over                      ? too_large()
                                    : current_body_too_slow() ? slow
                                                              : client_error(400, "The request body could not be read whole.", "invalid_body"),
                                    true, fd);
            }
        }
        if (auto e = check_access(req)) return answer_early(res, *e, false, fd);
        handle(body, fd);
    }

    void apply_script(const GenerationRequest& g, Job& job) const {
        if (!g.scripted_output) return;
        if (!opt.allow_scripted_output)
            bad_request("debug_scripted_output", "'debug_scripted_output' is a test-only field; the server was not started with --debug-scripted-output",
                        "unsupported_parameter");
        EncodeOptions enc;
        enc.parse_special = true;
        job.scripted = ctx.tokenizer->encode(*g.scripted_output, enc);
    }

    /// Submits a job and answers: SSE stream or one JSON body.
    void run_job(const httplib::Request& req, httplib::Response& res, int fd, std::shared_ptr<Job> job,
                 std::shared_ptr<RequestState> state, bool stream) {
        Scheduler* sched = ctx.scheduler;
        Metrics* metrics = ctx.metrics;
        state->begin();
        job->sink = state;
        {
            std::lock_guard<std::mutex> lk(log_mu);
            log_jobs[&res] = state;
        }
        sched->submit(job);
        if (!stream) {
            // A half-closed client is probed with an interim "100 Continue", which HTTP/1.1
            // clients must accept before any response (never sent to HTTP/1.0 clients).
            const bool http11 = req.version == "HTTP/1.1";
            bool probed = false;
            std::vector<json> ignored;
            while (!state->wait(std::chrono::milliseconds(50), ignored)) {
                ignored.clear();
                if (client_gone(fd, probed, [&] { return !http11 || write_probe(fd, "HTTP/1.1 100 Continue\r\n\r\n"); })) {
                    sched->cancel(job);
                    res.status = 499;  // nginx's "client closed request"; nobody reads it
                    return;
                }
            }
            finish_body(res, *state);  // a half-closed client gets it in the post-routing handler
            return;
        }
        res.set_header("Cache-Control", "no-cache");
        res.set_header("X-Accel-Buffering", "no");
        // A client half-closed already gets the whole stream from our own writes; one that
        // half-closes during the stream, the rest of it (cpp-httplib stops writing at its FIN).
        // (A FIN in the microseconds between this check and cpp-httplib writing the headers
        // would leave the stream without them; clients half-close right after sending.)
        const bool raw_from_start = peer_state(fd) == PeerState::HALF_CLOSED;
        res.set_chunked_content_provider(
            "text/event-stream",
            [state, job, sched, metrics, fd, probed = false, raw = raw_from_start, head = raw_from_start](
                size_t, httplib::DataSink& sink) mutable {
                RawChunkWriter out(fd);
                auto write = [&](const std::string& s) {
                    if (!raw && sink.write(s.data(), s.size())) return true;
                    if (!raw && peer_state(fd) != PeerState::HALF_CLOSED) return false;
                    raw = true;
                    if (head && !out.head()) return false;
                    head = false;
                    return out.chunk(s);
                };
                for (;;) {
                    std::vector<json> chunks;
                    const bool done = state->wait(std::chrono::milliseconds(50), chunks);
                    for (const auto& c : chunks)
                        if (!write("data: " + dump(c) + "\n\n")) {
                            sched->cancel(job);
                            return false;
                        }
                    if (done) {
                        if (state->cause() == FinishCause::ERROR) {
                            metrics->requests_server_error++;
                            write("data: " + dump(server_error(state->error()).to_json()) + "\n\n");
                        } else if (state->cause() == FinishCause::CANCELLED) {
                            // The server is stopping (a client that left reads nothing): say so, or
                            // the stream would look complete.
                            write("data: " + dump(cancelled_error(state->error()).to_json()) + "\n\n");
                        } else {
                            metrics->requests_ok++;
                        }
                        write("data: [DONE]\n\n");
                        if (raw) {
                            out.end();
                            return false;  // cpp-httplib cannot finish it; it closes the connection
                        }
                        sink.done();
                        return true;
                    }
                    // The probe of a half-closed client is an SSE comment, which clients skip.
                    if (client_gone(fd, probed, [&] { return write(": keep-alive\n\n"); })) {
                        sched->cancel(job);
                        return false;
                    }
                }
            },
            [state, job, sched](bool) {
                if (!state->done()) sched->cancel(job);
            });
    }

    void finish_body(httplib::Response& res, RequestState& state) {
        switch (state.cause()) {
            case FinishCause::CANCELLED:
                send_error(res, cancelled_error(state.error()));
                break;
            case FinishCause::ERROR:
                ctx.metrics->requests_server_error++;
                send_error(res, server_error(state.error()));
                break;
            default:
                ctx.metrics->requests_ok++;
                res.status = 200;
                res.set_content(dump(state.builder().response()), "application/json");
        }
    }

    void chat(const httplib::Request& req, httplib::Response& res, const std::string& body, int fd) {
        ctx.metrics->requests_chat++;
        ChatRequest r = parse_chat_request(body, parse_limits());
        check_model(r.gen.model);
        if (!ctx.chat_format) bad_request("messages", "this model's vocabulary has no known chat format; use /v1/completions", "no_chat_format");
        PreparedChat p = prepare_chat(r, *ctx.tokenizer, *ctx.chat_format, opt.chat_date);
        check_fits(p.prompt_ids.size(), "messages");
        ChatResponseConfig cfg;
        cfg.format = *ctx.chat_format;
        cfg.parse = p.parse;
        cfg.forced_ids = p.forced_ids;
        cfg.stop = r.gen.stop;
        cfg.parallel_tool_calls = r.parallel_tool_calls;
        cfg.logprobs = r.gen.logprobs;
        cfg.stream = r.gen.stream;
        cfg.include_usage = r.gen.include_usage;
        cfg.id = random_id("chatcmpl-");
        cfg.model = opt.model_id;
        cfg.created = static_cast<int64_t>(std::time(nullptr));
        auto job = std::make_shared<Job>();
        job->request_id = cfg.id;
        job->prompt = std::move(p.prompt_ids);
        job->sampling = r.gen.sampling;
        job->max_tokens = r.gen.max_tokens;
        job->top_logprobs = r.gen.logprobs ? r.gen.top_logprobs : -1;
        if (r.gen.response_format.json()) {
            grammar::ResponseGrammarOptions go;
            go.envelope = *ctx.chat_format == ChatFormat::HARMONY ? grammar::Envelope::HARMONY : grammar::Envelope::CHATML;
            go.reasoning_open = p.parse.reasoning_open;
            job->constraint = make_constraint(r.gen, go);
            cfg.parse.plain_content = true;  // the answer is the JSON value, whatever text its strings hold
        }
        apply_script(r.gen, *job);
        auto state = std::make_shared<RequestState>(std::make_unique<ChatResponseBuilder>(*ctx.tokenizer, cfg));
        run_job(req, res, fd, job, state, r.gen.stream);
    }

    void completion(const httplib::Request& req, httplib::Response& res, const std::string& body, int fd) {
        ctx.metrics->requests_completion++;
        CompletionRequest r = parse_completion_request(body, parse_limits());
        check_model(r.gen.model);
        std::vector<int32_t> ids = completion_prompt_ids(r, *ctx.tokenizer);
        check_fits(ids.size(), "prompt");
        CompletionResponseConfig cfg;
        cfg.stop = r.gen.stop;
        cfg.logprobs = r.gen.logprobs;
        cfg.top_logprobs = r.gen.top_logprobs;
        cfg.stream = r.gen.stream;
        cfg.include_usage = r.gen.include_usage;
        if (r.echo) cfg.echo_text = r.prompt_ids.empty() ? r.prompt : ctx.tokenizer->decode(ids);
        cfg.id = random_id("cmpl-");
        cfg.model = opt.model_id;
        cfg.created = static_cast<int64_t>(std::time(nullptr));
        auto job = std::make_shared<Job>();
        job->request_id = cfg.id;
        job->prompt = std::move(ids);
        job->sampling = r.gen.sampling;
        job->max_tokens = r.gen.max_tokens < 0 ? 16 : r.gen.max_tokens;  // OpenAI's default for completions
        job->ignore_eos = r.gen.ignore_eos;
        job->top_logprobs = r.gen.logprobs ? r.gen.top_logprobs : -1;
        if (r.gen.response_format.json()) job->constraint = make_constraint(r.gen, grammar::ResponseGrammarOptions{});
        apply_script(r.gen, *job);
        auto state = std::make_shared<RequestState>(std::make_unique<CompletionResponseBuilder>(*ctx.tokenizer, cfg));
        run_job(req, res, fd, job, state, r.gen.stream);
    }

    json model_object() const {
        const ModelHparams& hp = ctx.model->hp();
        return {{"id", opt.model_id},
                {"object", "model"},
                {"created", created},
                {"owned_by", "nitro"},
                {"meta",
                 {{"architecture", ctx.model->gguf().metadata().get_string("general.architecture").value_or("")},
                  {"n_ctx", ctx.scheduler->n_ctx()},
                  {"n_ctx_train", hp.n_ctx_train},
                  {"n_vocab", ctx.model->n_vocab()},
                  {"chat_format", ctx.chat_format ? chat_format_name(*ctx.chat_format) : ""}}}};
    }

    void routes() {
        // Before routing: framing, then (for every route but the POST ones, which read their
        // body first) access. A request with a body that no route reads is answered and its
        // connection closed, so its body is never taken for a next request.
        svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
            const BodyFraming framing = framing_of(req);
            auto fd = [&] { return current_connection_socket(); };
            if (!framing.error.empty()) {
                answer_early(res, client_error(400, "The request's body length is ambiguous: " + framing.error + ".", "invalid_framing"), true, fd());
                return httplib::Server::HandlerResponse::Handled;
            }
            if (req.method == "POST" && is_generation_path(req.path)) return httplib::Server::HandlerResponse::Unhandled;
            std::optional<ApiError> e = check_access(req);
            if (!e && framing.has_body()) {
                const bool known = req.path == "/health" || req.path == "/metrics" || req.path.starts_with("/v1/models") ||
                                   req.path.starts_with("/v1/nitro/") || is_web_page_path(req.path);
                e = known ? client_error(400, fmt::format("{} {} takes no request body.", req.method, req.path), "unexpected_body")
                          : client_error(404, fmt::format("Unknown endpoint: {} {}", req.method, req.path), "unknown_url");
            }
            if (!e) return httplib::Server::HandlerResponse::Unhandled;
            answer_early(res, *e, framing.has_body(), framing.has_body() ? fd() : -1);
            return httplib::Server::HandlerResponse::Handled;
        });
        // The last step before cpp-httplib writes a response: a client that half-closed its
        // socket is answered with our own writes, since cpp-httplib would write nothing.
        svr.set_post_routing_handler([](const httplib::Request& req, httplib::Response& res) {
            if (res.content_provider_ || req.method == "HEAD") return;  // streams and closing answers write their own way
            const int fd = current_connection_socket();
            if (peer_state(fd) == PeerState::HALF_CLOSED) send_raw_response(fd, res);
        });
        svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) { log_request(req, res); });
        svr.set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
            try {
                std::rethrow_exception(ep);
            } catch (const ApiException& e) {
                (e.error.status >= 500 ? ctx.metrics->requests_server_error : ctx.metrics->requests_client_error)++;
                send_error(res, e.error);
            } catch (const Error& e) {  // bad input that reached the engine
                ctx.metrics->requests_client_error++;
                ApiError a;
                a.message = e.what();
                send_error(res, a);
            } catch (const std::exception& e) {
                ctx.metrics->requests_server_error++;
                send_error(res, server_error(e.what()));
            } catch (...) {
                ctx.metrics->requests_server_error++;
                send_error(res, server_error("unknown error"));
            }
        });
        svr.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
            if (!res.body.empty() || res.content_provider_ || res.status == 499) return httplib::Server::HandlerResponse::Unhandled;
            ApiError e;
            e.status = res.status;
            if (res.status == 404) {
                e.message = fmt::format("Unknown endpoint: {} {}", req.method, req.path);
                e.code = "unknown_url";
            } else if (res.status == 413) {
                e = too_large();
            } else if (req.method.empty()) {  // (the connection front refuses malformed heads before they get here)
                e.message = fmt::format("HTTP {}: the request could not be parsed.", res.status);
            } else {
                e.message = fmt::format("HTTP {} for {} {}", res.status, req.method, req.path);
            }
            send_error(res, e);
            return httplib::Server::HandlerResponse::Handled;
        }));
        auto chat_route = [this](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
            with_body(req, res, reader, [&](const std::string& body, int fd) { chat(req, res, body, fd); });
        };
        auto completion_route = [this](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
            with_body(req, res, reader, [&](const std::string& body, int fd) { completion(req, res, body, fd); });
        };
        svr.Post("/v1/chat/completions", chat_route);
        svr.Post("/chat/completions", chat_route);
        svr.Post("/v1/completions", completion_route);
        svr.Post("/completions", completion_route);
        svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
            ctx.metrics->requests_other++;
            res.set_content(dump({{"object", "list"}, {"data", json::array({model_object()})}}), "application/json");
        });
        svr.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
            check_model(req.matches[1].str());
            res.set_content(dump(model_object()), "application/json");
        });
        svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
            res.set_content(dump({{"status", "ok"}, {"model", opt.model_id}, {"queue_length", ctx.scheduler->queue_length()}}),
                            "application/json");
        });
        svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
            res.set_content(ctx.metrics->render(), "text/plain; version=0.0.4");
        });
        add_web_routes(svr, WebRoutesContext{ctx.scheduler, ctx.metrics, opt.model_id});  // GET /, /web/*, /v1/nitro/*
    }
};

namespace {

/// The connection limits of `opt`, with the total cap kept below the file descriptors the process
/// may open (raising its soft limit to the hard one first, as servers commonly do).
ConnectionLimits connection_limits(const ServerOptions& opt) {
    auto ms = [](double s) { return std::chrono::milliseconds(static_cast<int64_t>(s * 1000.0)); };
    if (!(opt.header_timeout_s > 0)) fail("--header-timeout must be above 0 s, got {}", opt.header_timeout_s);
    if (!(opt.body_timeout_s > 0)) fail("--body-timeout must be above 0 s, got {}", opt.body_timeout_s);
    if (!(opt.body_min_rate >= 0)) fail("--body-min-rate must be 0 or more bytes/s, got {}", opt.body_min_rate);
    if (opt.max_connections < 1) fail("--max-connections must be at least 1, got {}", opt.max_connections);
    if (opt.max_connections_per_client < 0) fail("--max-connections-per-client must be 0 (no cap) or more, got {}", opt.max_connections_per_client);
    ConnectionLimits lim;
    lim.header_timeout = ms(opt.header_timeout_s);
    lim.body_timeout = ms(opt.body_timeout_s);
    lim.body_min_rate = opt.body_min_rate;
    lim.max_connections_per_client = static_cast<size_t>(opt.max_connections_per_client);
    rlimit rl{};
    size_t fds = 1024;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (rl.rlim_cur < rl.rlim_max) {
            rl.rlim_cur = rl.rlim_max;
            setrlimit(RLIMIT_NOFILE, &rl);
            getrlimit(RLIMIT_NOFILE, &rl);
        }
        fds = rl.rlim_cur == RLIM_INFINITY ? size_t{1} << 20 : static_cast<size_t>(rl.rlim_cur);
    }
    // Room for the model's files, the trace, stdio and the listening socket.
    const size_t room = fds > 128 ? fds - 64 : fds / 2;
    lim.max_connections = std::min(static_cast<size_t>(opt.max_connections), room);
    return lim;
}

}  // namespace

HttpServer::HttpServer(ServerContext ctx, ServerOptions opt) : impl_(std::make_unique<Impl>()), opt_(std::move(opt)) {
    if (opt_.model_id.empty()) opt_.model_id = file_stem(ctx.model->path());
    if (!(opt_.max_body_mib > 0)) fail("--max-body-size must be above 0 MiB, got {}", opt_.max_body_mib);
    const ConnectionLimits limits = connection_limits(opt_);
    opt_.max_connections = static_cast<int>(limits.max_connections);
    impl_->ctx = ctx;
    impl_->opt = opt_;
    impl_->created = static_cast<int64_t>(std::time(nullptr));
    if (!(opt_.grammar_memory_mib > 0)) fail("--grammar-memory must be above 0 MiB, got {}", opt_.grammar_memory_mib);
    if (!(opt_.grammar_memory_total_mib >= opt_.grammar_memory_mib))
        fail("--grammar-memory-total ({} MiB) must be at least --grammar-memory ({} MiB)", opt_.grammar_memory_total_mib, opt_.grammar_memory_mib);
    impl_->grammar_budget = std::make_shared<grammar::MemoryBudget>(static_cast<size_t>(opt_.grammar_memory_total_mib * 1048576.0),
                                                                    static_cast<size_t>(opt_.grammar_memory_mib * 1048576.0));
    const size_t n = static_cast<size_t>(std::max(2, opt_.http_threads));
    Impl* impl = impl_.get();
    impl_->gate = std::make_unique<ConnectionGate>(
        limits, *ctx.metrics,
        [impl](httplib::Stream& s, bool close_connection, bool& closed) { return impl->svr.serve_request(s, close_connection, closed); },
        impl_->svr.keep_alive_max_count(), n, 4 * n);
    impl_->svr.set_gate(impl_->gate.get());
    impl_->svr.set_payload_max_length(impl_->max_body_bytes());
    impl_->svr.set_tcp_nodelay(true);
    // cpp-httplib's default socket options add SO_REUSEPORT, which lets a second server bind a
    // port this one holds and silently take half its connections. Keep SO_REUSEADDR only (a
    // restart can rebind a port in TIME_WAIT), so a port in use is a startup error.
    impl_->svr.set_socket_options([](socket_t sock) {
        int yes = 1;
        ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<const void*>(&yes), sizeof yes);
    });
    impl_->routes();
    // The grammars' memory in /metrics (the collector keeps the budget alive with it).
    std::shared_ptr<grammar::MemoryBudget> budget = impl_->grammar_budget;
    ctx.metrics->add_collector([budget](std::string& out) {
        out += fmt::format("# HELP nitro_grammar_memory_bytes Memory of the response_format grammars of requests in progress, bytes "
                           "(limit --grammar-memory-total).\n# TYPE nitro_grammar_memory_bytes gauge\nnitro_grammar_memory_bytes {}\n",
                           budget->in_use());
        out += fmt::format("# HELP nitro_grammar_memory_refused_total Requests answered 429 because the grammars in progress held "
                           "--grammar-memory-total.\n# TYPE nitro_grammar_memory_refused_total counter\n"
                           "nitro_grammar_memory_refused_total {}\n",
                           budget->refused_busy());
    });
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
    int port = opt_.port;
    if (port == 0) {
        port = impl_->svr.bind_to_any_port(opt_.host);
        if (port < 0) fail("cannot bind {} to a free port", opt_.host);
    } else if (!impl_->svr.bind_to_port(opt_.host, port)) {
        fail("cannot bind {}:{} (in use, or not an address of this machine)", opt_.host, port);
    }
    impl_->svr.set_backlog(std::max(128, opt_.max_connections));  // (the kernel caps it at net.core.somaxconn)
    return port;
}

void HttpServer::run() {
    impl_->svr.listen_after_bind();
    impl_->gate->shutdown();  // the requests being served finish; idle connections close
}

void HttpServer::stop() { impl_->svr.halt(); }

}  // namespace nitro::server
