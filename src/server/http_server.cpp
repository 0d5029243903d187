#include "server/http_server.h"

#include "core/error.h"
#include "server/chat_completion.h"
#include "server/completion.h"
#include "server/openai_schema.h"

#include <httplib.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>

namespace nitro::server {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------------
// Client sockets

namespace {

int port_of(const sockaddr_storage& ss) {
    if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(ss).sin_port);
    if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(ss).sin6_port);
    return -1;
}

std::string addr_of(const sockaddr_storage& ss) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (ss.ss_family == AF_INET) inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(ss).sin_addr, buf, sizeof buf);
    else if (ss.ss_family == AF_INET6) inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(ss).sin6_addr, buf, sizeof buf);
    return buf;
}

}  // namespace

int find_connection_socket(const std::string& remote_addr, int remote_port, int local_port) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
        int fd = -1;
        try {
            fd = std::stoi(e.path().filename().string());
        } catch (...) {
            continue;
        }
        sockaddr_storage peer{}, local{};
        socklen_t lp = sizeof peer, ll = sizeof local;
        if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &lp) != 0) continue;
        if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0) continue;
        if (port_of(peer) == remote_port && port_of(local) == local_port && addr_of(peer) == remote_addr) return fd;
    }
    return -1;
}

bool peer_closed(int fd) {
    if (fd < 0) return false;
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
    if (p.revents & POLLIN) {
        char c;
        const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }
    return false;
}

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
    res.set_content(dump(e.to_json()), "application/json");
}

ApiError server_error(const std::string& message) {
    ApiError e;
    e.status = 500;
    e.type = "server_error";
    e.message = message;
    return e;
}

std::string file_stem(const std::string& path) {
    std::string name = std::filesystem::path(path).filename().string();
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".gguf") == 0) name.resize(name.size() - 5);
    return name;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

struct HttpServer::Impl {
    ServerContext ctx;
    ServerOptions opt;
    httplib::Server svr;
    int64_t created = 0;

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

    void check_fits(size_t n_prompt) const {
        const int64_t n_ctx = ctx.scheduler->n_ctx();
        if (static_cast<int64_t>(n_prompt) >= n_ctx)
            bad_request("messages",
                        fmt::format("This model's maximum context length is {} tokens, but the prompt has {} tokens "
                                    "(at least one position must be left to generate). Shorten the prompt or start "
                                    "the server with a larger -c.", n_ctx, n_prompt),
                        "context_length_exceeded");
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
    void run_job(const httplib::Request& req, httplib::Response& res, std::shared_ptr<Job> job,
                 std::shared_ptr<RequestState> state, bool stream) {
        Scheduler* sched = ctx.scheduler;
        Metrics* metrics = ctx.metrics;
        const int fd = find_connection_socket(req.remote_addr, req.remote_port, req.local_port);
        state->begin();
        job->sink = state;
        sched->submit(job);
        if (!stream) {
            std::vector<json> ignored;
            while (!state->wait(std::chrono::milliseconds(50), ignored)) {
                ignored.clear();
                if (peer_closed(fd)) {
                    sched->cancel(job);
                    res.status = 499;  // nginx's "client closed request"; nobody reads it
                    return;
                }
            }
            finish_body(res, *state);
            return;
        }
        res.set_header("Cache-Control", "no-cache");
        res.set_header("X-Accel-Buffering", "no");
        res.set_chunked_content_provider(
            "text/event-stream",
            [state, job, sched, metrics, fd](size_t, httplib::DataSink& sink) {
                auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
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
                        } else if (state->cause() != FinishCause::CANCELLED) {
                            metrics->requests_ok++;
                        }
                        write("data: [DONE]\n\n");
                        sink.done();
                        return true;
                    }
                    if (peer_closed(fd)) {
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
                send_error(res, server_error("the request was cancelled: " + state.error()));
                res.status = 503;
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

    void chat(const httplib::Request& req, httplib::Response& res) {
        ctx.metrics->requests_chat++;
        ChatRequest r = parse_chat_request(req.body);
        check_model(r.gen.model);
        if (!ctx.chat_format) bad_request("messages", "this model's vocabulary has no known chat format; use /v1/completions", "no_chat_format");
        PreparedChat p = prepare_chat(r, *ctx.tokenizer, *ctx.chat_format, opt.chat_date);
        check_fits(p.prompt_ids.size());
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
        job->prompt = std::move(p.prompt_ids);
        job->sampling = r.gen.sampling;
        job->max_tokens = r.gen.max_tokens;
        job->top_logprobs = r.gen.logprobs ? r.gen.top_logprobs : -1;
        apply_script(r.gen, *job);
        auto state = std::make_shared<RequestState>(std::make_unique<ChatResponseBuilder>(*ctx.tokenizer, cfg));
        run_job(req, res, job, state, r.gen.stream);
    }

    void completion(const httplib::Request& req, httplib::Response& res) {
        ctx.metrics->requests_completion++;
        CompletionRequest r = parse_completion_request(req.body);
        check_model(r.gen.model);
        std::vector<int32_t> ids = completion_prompt_ids(r, *ctx.tokenizer);
        check_fits(ids.size());
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
        job->prompt = std::move(ids);
        job->sampling = r.gen.sampling;
        job->max_tokens = r.gen.max_tokens < 0 ? 16 : r.gen.max_tokens;  // OpenAI's default for completions
        job->top_logprobs = r.gen.logprobs ? r.gen.top_logprobs : -1;
        apply_script(r.gen, *job);
        auto state = std::make_shared<RequestState>(std::make_unique<CompletionResponseBuilder>(*ctx.tokenizer, cfg));
        run_job(req, res, job, state, r.gen.stream);
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
        svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
            if (opt.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
            const std::string auth = req.get_header_value("Authorization");
            if (auth == "Bearer " + opt.api_key || req.get_header_value("x-api-key") == opt.api_key)
                return httplib::Server::HandlerResponse::Unhandled;
            ApiError e;
            e.status = 401;
            e.message = auth.empty() ? "You didn't provide an API key. Send it as 'Authorization: Bearer KEY'."
                                     : "Incorrect API key provided.";
            e.code = "invalid_api_key";
            send_error(res, e);
            ctx.metrics->requests_client_error++;
            return httplib::Server::HandlerResponse::Handled;
        });
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
        svr.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
            if (!res.body.empty() || res.status == 499) return httplib::Server::HandlerResponse::Unhandled;
            ApiError e;
            e.status = res.status;
            e.message = res.status == 404 ? fmt::format("Unknown endpoint: {} {}", req.method, req.path)
                                          : fmt::format("HTTP {} for {} {}", res.status, req.method, req.path);
            e.code = res.status == 404 ? "unknown_url" : "";
            send_error(res, e);
            return httplib::Server::HandlerResponse::Handled;
        }));
        svr.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { chat(req, res); });
        svr.Post("/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { chat(req, res); });
        svr.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { completion(req, res); });
        svr.Post("/completions", [this](const httplib::Request& req, httplib::Response& res) { completion(req, res); });
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
    }
};

HttpServer::HttpServer(ServerContext ctx, ServerOptions opt) : impl_(std::make_unique<Impl>()), opt_(std::move(opt)) {
    if (opt_.model_id.empty()) opt_.model_id = file_stem(ctx.model->path());
    impl_->ctx = ctx;
    impl_->opt = opt_;
    impl_->created = static_cast<int64_t>(std::time(nullptr));
    const int n = std::max(2, opt_.http_threads);
    impl_->svr.new_task_queue = [n] { return new httplib::ThreadPool(static_cast<size_t>(n)); };
    impl_->svr.set_payload_max_length(64u << 20);
    impl_->svr.set_tcp_nodelay(true);
    impl_->routes();
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
    return port;
}

void HttpServer::run() { impl_->svr.listen_after_bind(); }

void HttpServer::stop() { impl_->svr.stop(); }

}  // namespace nitro::server
