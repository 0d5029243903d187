#include "server/http_conn.h"

#include "server/http_parse.h"
#include "server/openai_schema.h"

#include <fmt/format.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace nitro::server {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// ---------------------------------------------------------------------------------------------
// A connection and its unread bytes.

struct ConnectionGate::Conn {
    enum class State { HEAD, BUSY, CLOSING };
    int fd = -1;
    std::string peer_ip, local_ip;
    int peer_port = 0, local_port = 0;
    State state = State::HEAD;
    bool counted = false;   ///< counts against the caps (refused connections do not)
    bool watched = false;   ///< registered with epoll
    bool got_bytes = false; ///< a byte of the next head has arrived
    bool close_after = false;
    size_t served = 0;
    Clock::time_point deadline;

    std::string buf;  ///< received, not yet read by the parser: buf[off..]
    size_t off = 0;

    // The request being served (set when its head is complete).
    size_t head_left = 0;  ///< bytes of the head the parser has not read yet
    bool chunked = false;
    ChunkedTrailerFilter filter;
    std::string filtered;  ///< chunked: bytes past the filter, not yet read: filtered[filtered_off..]
    size_t filtered_off = 0;
    Clock::time_point body_start;
    uint64_t body_received = 0;
    bool body_too_slow = false;

    size_t unread() const { return buf.size() - off; }
    std::string_view pending() const { return std::string_view(buf).substr(off); }
    void compact() {
        buf.erase(0, off);
        off = 0;
    }
    /// Drops empty lines before a request line (RFC 9112 section 2.2).
    void skip_empty_lines() { off += leading_empty_lines(pending()); }

    /// The head of the next request is buffered and accepted: the parser may read it.
    void begin_request(size_t head_bytes, bool is_chunked) {
        head_left = head_bytes;
        chunked = is_chunked;
        filter = ChunkedTrailerFilter();
        filtered.clear();
        filtered_off = 0;
        body_start = Clock::now();
        body_received = unread() - head_bytes;
        body_too_slow = false;
    }
    /// After the request: bytes past the filter that the parser did not read go back in front.
    void end_request() {
        if (chunked && filtered_off < filtered.size()) {
            buf = filtered.substr(filtered_off) + buf.substr(off);
            off = 0;
        }
        filtered.clear();
        filtered_off = 0;
        chunked = false;
        head_left = 0;
    }
};

namespace {

thread_local ConnectionGate::Conn* tl_conn = nullptr;

std::string ip_of(const sockaddr_storage& ss, int& port) {
    char buf[INET6_ADDRSTRLEN] = {};
    port = 0;
    if (ss.ss_family == AF_INET) {
        const auto& a = reinterpret_cast<const sockaddr_in&>(ss);
        inet_ntop(AF_INET, &a.sin_addr, buf, sizeof buf);
        port = ntohs(a.sin_port);
    } else if (ss.ss_family == AF_INET6) {
        const auto& a = reinterpret_cast<const sockaddr_in6&>(ss);
        inet_ntop(AF_INET6, &a.sin6_addr, buf, sizeof buf);
        port = ntohs(a.sin6_port);
    }
    return buf;
}

int ms_until(Clock::time_point t) {
    const auto d = std::chrono::duration_cast<milliseconds>(t - Clock::now()).count();
    return static_cast<int>(std::clamp<int64_t>(d, 0, 1000));
}

const char* reason(int status) {
    switch (status) {
        case 400: return "Bad Request";
        case 408: return "Request Timeout";
        case 414: return "URI Too Long";
        case 431: return "Request Header Fields Too Large";
        case 501: return "Not Implemented";
        case 503: return "Service Unavailable";
        case 505: return "HTTP Version Not Supported";
        default: return "Error";
    }
}

/// A whole error response in OpenAI's shape that ends the connection.
std::string error_response(int status, const std::string& message, const std::string& code, bool retry_after) {
    ApiError e;
    e.status = status;
    e.message = message;
    e.code = code;
    if (status >= 500 && status != 501 && status != 505) e.type = "server_error";
    const std::string body = e.to_json().dump();
    return fmt::format("HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n{}", status,
                       reason(status), body.size(), retry_after ? "Retry-After: 1\r\n" : "", body);
}

/// Writes without blocking (the answers the epoll thread writes are small; a client that does
/// not take them loses them).
void send_now(int fd, const std::string& s) { (void)::send(fd, s.data(), s.size(), MSG_NOSIGNAL | MSG_DONTWAIT); }

/// Writes all of `s`, waiting up to `timeout` for each stall.
bool send_all(int fd, std::string_view s, milliseconds timeout) {
    while (!s.empty()) {
        const ssize_t n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            s.remove_prefix(static_cast<size_t>(n));
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            pollfd p{fd, POLLOUT, 0};
            if (poll(&p, 1, static_cast<int>(timeout.count())) > 0) continue;
        }
        return false;
    }
    return true;
}

// ---------------------------------------------------------------------------------------------
// The stream cpp-httplib reads a request from and writes its response to.

class ConnStream : public httplib::Stream {
public:
    ConnStream(ConnectionGate::Conn& c, const ConnectionLimits& lim) : c_(c), lim_(lim) {}

    bool is_readable() const override {
        if (c_.unread() > 0 || c_.filtered_off < c_.filtered.size()) return true;
        pollfd p{c_.fd, POLLIN, 0};
        return poll(&p, 1, 0) > 0;
    }

    /// As cpp-httplib's SocketStream: writable within the write timeout, and the peer has not
    /// closed its side (a FIN reads as 0 bytes). http_server.cpp answers half-closed clients itself.
    bool is_writable() const override {
        pollfd w{c_.fd, POLLOUT, 0};
        if (poll(&w, 1, static_cast<int>(lim_.write_timeout.count())) <= 0) return false;
        pollfd r{c_.fd, POLLIN, 0};
        const int v = poll(&r, 1, 0);
        if (v == 0) return true;
        if (v < 0) return false;
        char b;
        return ::recv(c_.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
    }

    ssize_t read(char* ptr, size_t size) override {
        for (;;) {
            if (c_.head_left > 0) {  // the head is whole in the buffer
                const size_t n = std::min({size, c_.head_left, c_.unread()});
                std::copy_n(c_.buf.data() + c_.off, n, ptr);
                c_.off += n;
                c_.head_left -= n;
                return static_cast<ssize_t>(n);
            }
            if (c_.chunked) {
                if (c_.filtered_off < c_.filtered.size()) {
                    const size_t n = std::min(size, c_.filtered.size() - c_.filtered_off);
                    std::copy_n(c_.filtered.data() + c_.filtered_off, n, ptr);
                    c_.filtered_off += n;
                    return static_cast<ssize_t>(n);
                }
                if (c_.unread() > 0) {
                    c_.filtered.clear();
                    c_.filtered_off = 0;
                    const bool ok = c_.filter.feed(c_.pending(), c_.filtered);
                    c_.off = c_.buf.size();
                    c_.compact();
                    if (!ok) return -1;  // trailer section too large
                    continue;
                }
            } else if (c_.unread() > 0) {
                const size_t n = std::min(size, c_.unread());
                std::copy_n(c_.buf.data() + c_.off, n, ptr);
                c_.off += n;
                if (c_.off == c_.buf.size()) c_.compact();
                return static_cast<ssize_t>(n);
            }
            const ssize_t got = fill();
            if (got <= 0) return got;
        }
    }

    ssize_t write(const char* ptr, size_t size) override {
        if (!is_writable()) return -1;
        return ::send(c_.fd, ptr, size, MSG_NOSIGNAL);
    }

    void get_remote_ip_and_port(std::string& ip, int& port) const override {
        ip = c_.peer_ip;
        port = c_.peer_port;
    }
    void get_local_ip_and_port(std::string& ip, int& port) const override {
        ip = c_.local_ip;
        port = c_.local_port;
    }
    socket_t socket() const override { return c_.fd; }

private:
    /// Receives more body bytes, waiting no longer than the rate floor allows: the k-th body
    /// byte is due by body_start + body_timeout + k / body_min_rate.
    ssize_t fill() {
        // Without a floor, each read may wait body_timeout.
        auto due = (lim_.body_min_rate > 0 ? c_.body_start : Clock::now()) + lim_.body_timeout;
        if (lim_.body_min_rate > 0)
            due += std::chrono::duration_cast<Clock::duration>(
                std::chrono::duration<double>(static_cast<double>(c_.body_received + 1) / lim_.body_min_rate));
        for (;;) {
            const auto left = std::chrono::duration_cast<milliseconds>(due - Clock::now()).count();
            pollfd p{c_.fd, POLLIN, 0};
            const int v = left > 0 ? poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000))) : 0;
            if (v == 0) {
                if (left > 1000) continue;
                c_.body_too_slow = true;
                return -1;
            }
            if (v < 0) {
                if (errno == EINTR) continue;
                return -1;
            }
            char tmp[16384];
            const ssize_t n = ::recv(c_.fd, tmp, sizeof tmp, MSG_DONTWAIT);
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
            if (n <= 0) return n;
            c_.buf.append(tmp, static_cast<size_t>(n));
            c_.body_received += static_cast<uint64_t>(n);
            return n;
        }
    }

    ConnectionGate::Conn& c_;
    const ConnectionLimits& lim_;
};

/// Runs what listen() hands it at once, on the accept thread: the gate's adopt() only queues.
class InlineTaskQueue : public httplib::TaskQueue {
public:
    void enqueue(std::function<void()> fn) override { fn(); }
    void shutdown() override {}
};

}  // namespace

int current_connection_socket() { return tl_conn ? tl_conn->fd : -1; }

bool current_body_too_slow() { return tl_conn && tl_conn->body_too_slow; }

// ---------------------------------------------------------------------------------------------

GatedServer::GatedServer() {
    new_task_queue = [] { return new InlineTaskQueue; };
}

bool GatedServer::serve_request(httplib::Stream& stream, bool close_connection, bool& connection_closed) {
    return process_request(stream, close_connection, connection_closed, nullptr);
}

void GatedServer::set_backlog(int n) {
    if (svr_sock_ != INVALID_SOCKET) ::listen(svr_sock_, n);  // (listen again on a listening socket sets its backlog)
}

void GatedServer::halt() {
    // Listening: stop() closes the socket and marks it gone. Not yet: the socket is only shut
    // down (never closed here: the accept loop closes it once its accept fails).
    stop();
    const socket_t sock = svr_sock_;
    if (sock != INVALID_SOCKET) ::shutdown(sock, SHUT_RDWR);
}

bool GatedServer::process_and_close_socket(socket_t sock) {
    if (gate_) {
        gate_->adopt(sock);
    } else {
        ::shutdown(sock, SHUT_RDWR);
        ::close(sock);
    }
    return true;
}

// ---------------------------------------------------------------------------------------------

ConnectionGate::ConnectionGate(const ConnectionLimits& limits, Metrics& metrics, ServeFn serve, size_t keep_alive_max,
                               size_t min_threads, size_t max_threads)
    : limits_(limits), metrics_(metrics), serve_(std::move(serve)), keep_alive_max_(std::max<size_t>(1, keep_alive_max)),
      pool_(min_threads, max_threads) {
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = wake_fd_;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
    next_deadline_ = Clock::now() + std::chrono::hours(1);
    thread_ = std::thread([this] { loop(); });
}

ConnectionGate::~ConnectionGate() {
    shutdown();
    ::close(epoll_fd_);
    ::close(wake_fd_);
}

void ConnectionGate::adopt(int fd) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (!stopping_) {
            adopted_.push_back(fd);
            fd = -1;
        }
    }
    if (fd >= 0) {
        ::close(fd);
        return;
    }
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
}

void ConnectionGate::hand_back(Conn* c) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        handed_back_.push_back(c);
    }
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
}

void ConnectionGate::shutdown() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (stopping_ && !thread_.joinable()) return;
        stopping_ = true;
    }
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
    if (thread_.joinable()) thread_.join();
    pool_.shutdown();
}

void ConnectionGate::watch(Conn& c) {
    if (c.watched) return;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = c.fd;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c.fd, &ev);
    c.watched = true;
}

void ConnectionGate::unwatch(Conn& c) {
    if (!c.watched) return;
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
    c.watched = false;
}

void ConnectionGate::set_deadline(Conn& c, Clock::time_point t) {
    c.deadline = t;
    next_deadline_ = std::min(next_deadline_, t);
}

void ConnectionGate::loop() {
    std::vector<epoll_event> events(256);
    for (;;) {
        const int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), ms_until(next_deadline_));
        std::vector<int> adopted;
        std::vector<Conn*> back;
        bool stopping = false;
        {
            std::lock_guard<std::mutex> lk(mu_);
            adopted.swap(adopted_);
            back.swap(handed_back_);
            stopping = stopping_;
        }
        uint64_t drained = 0;
        (void)!::read(wake_fd_, &drained, sizeof drained);
        for (Conn* c : back) returned(*c);
        for (int fd : adopted) admit(fd);
        for (int i = 0; i < n; ++i) {
            const int fd = events[static_cast<size_t>(i)].data.fd;
            if (fd == wake_fd_) continue;
            auto it = conns_.find(fd);
            if (it != conns_.end()) on_readable(*it->second);
        }
        if (Clock::now() >= next_deadline_) expire();
        if (stopping) {
            // Nothing new waits for a head; the connections being served close when handed back.
            std::vector<Conn*> idle;
            for (auto& [fd, c] : conns_)
                if (c->state != Conn::State::BUSY) idle.push_back(c.get());
            for (Conn* c : idle) close_now(*c);
            if (conns_.empty()) return;
        }
    }
}

void ConnectionGate::admit(int fd) {
    auto owned = std::make_unique<Conn>();
    Conn& c = *owned;
    c.fd = fd;
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) c.peer_ip = ip_of(ss, c.peer_port);
    len = sizeof ss;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) c.local_ip = ip_of(ss, c.local_port);
    conns_.emplace(fd, std::move(owned));
    metrics_.http_connections_accepted++;
    if (n_open_ >= limits_.max_connections) {
        metrics_.http_refused_total_cap++;
        return refuse(c, 503,
                      fmt::format("The server has {} connections open, its limit (nitro serve --max-connections); retry later.", n_open_),
                      "too_many_connections", true);
    }
    const auto mine_it = per_client_.find(c.peer_ip);
    const size_t mine = mine_it == per_client_.end() ? 0 : mine_it->second;
    if (limits_.max_connections_per_client > 0 && mine >= limits_.max_connections_per_client) {
        metrics_.http_refused_client_cap++;
        return refuse(c, 503,
                      fmt::format("Your address {} has {} connections open, the most one client may (nitro serve "
                                  "--max-connections-per-client); close some or retry later.",
                                  c.peer_ip, mine),
                      "too_many_connections", true);
    }
    ++per_client_[c.peer_ip];
    ++n_open_;
    c.counted = true;
    metrics_.http_connections_open = static_cast<int64_t>(n_open_);
    metrics_.http_connections_waiting++;
    c.state = Conn::State::HEAD;
    set_deadline(c, Clock::now() + limits_.header_timeout);
    watch(c);
}

void ConnectionGate::on_readable(Conn& c) {
    char tmp[16384];
    const ssize_t n = ::recv(c.fd, tmp, sizeof tmp, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (n <= 0) return close_now(c);  // the client closed (or reset) before a whole head
    if (c.state != Conn::State::HEAD) return;  // draining what a closing connection still gets
    c.buf.append(tmp, static_cast<size_t>(n));
    if (!c.got_bytes) {
        c.got_bytes = true;
        // A kept-alive connection's head deadline starts at its first byte.
        if (c.served > 0) set_deadline(c, Clock::now() + limits_.header_timeout);
    }
    try_dispatch(c);
}

void ConnectionGate::try_dispatch(Conn& c) {
    c.skip_empty_lines();
    if (c.unread() == 0) {
        c.compact();
        return;
    }
    const auto end = find_head_end(c.pending());
    if (!end) {
        if (c.unread() > limits_.max_head_bytes) {
            metrics_.requests_client_error++;
            refuse(c, 431, fmt::format("The request head is larger than the {} bytes this server reads.", limits_.max_head_bytes),
                   "request_header_too_large");
        }
        return;
    }
    if (*end > limits_.max_head_bytes) {
        metrics_.requests_client_error++;
        return refuse(c, 431, fmt::format("The request head is {} bytes, more than the {} this server reads.", *end, limits_.max_head_bytes),
                      "request_header_too_large");
    }
    const RequestHead h = check_request_head(c.pending().substr(0, *end));
    if (h.status) {
        metrics_.requests_client_error++;
        return refuse(c, h.status, h.error, h.code);
    }
    unwatch(c);
    c.state = Conn::State::BUSY;
    c.got_bytes = false;
    c.begin_request(*end, h.chunked);
    metrics_.http_connections_waiting--;
    ++n_busy_;
    pool_.enqueue([this, p = &c] { work(p); });
}

void ConnectionGate::work(Conn* c) {
    ConnStream stream(*c, limits_);
    tl_conn = c;
    for (;;) {
        bool stopping;
        {
            std::lock_guard<std::mutex> lk(mu_);
            stopping = stopping_;
        }
        const bool last = stopping || c->served + 1 >= keep_alive_max_;
        bool closed = false;
        bool ok = false;
        try {
            ok = serve_(stream, last, closed);
        } catch (const std::exception&) {  // (cpp-httplib answers what the handlers throw; this is its own failure)
            ok = false;
        }
        ++c->served;
        if (c->body_too_slow) metrics_.http_body_too_slow++;
        c->end_request();
        if (!ok || closed || last) {
            c->close_after = true;
            break;
        }
        // A pipelined request already here is served now, in order.
        c->skip_empty_lines();
        const auto end = c->unread() ? find_head_end(c->pending()) : std::nullopt;
        if (!end || *end > limits_.max_head_bytes) break;  // the epoll thread waits for (or refuses) the rest
        const RequestHead h = check_request_head(c->pending().substr(0, *end));
        if (h.status) {
            metrics_.requests_client_error++;
            send_all(c->fd, error_response(h.status, h.error, h.code, false), limits_.write_timeout);
            c->close_after = true;
            break;
        }
        c->begin_request(*end, h.chunked);
    }
    tl_conn = nullptr;
    hand_back(c);
}

void ConnectionGate::returned(Conn& c) {
    --n_busy_;
    if (c.close_after) return begin_close(c);
    c.state = Conn::State::HEAD;
    c.compact();
    if (c.buf.capacity() > 64 * 1024) std::string(c.buf).swap(c.buf);  // a large body's buffer is not kept while idle
    c.got_bytes = c.unread() > 0;
    metrics_.http_connections_waiting++;
    set_deadline(c, Clock::now() + (c.got_bytes ? limits_.header_timeout : limits_.keep_alive_timeout));
    watch(c);
    if (c.got_bytes) try_dispatch(c);  // a partial (or oversized) head is already here
}

void ConnectionGate::refuse(Conn& c, int status, const std::string& message, const std::string& code, bool retry_after) {
    send_now(c.fd, error_response(status, message, code, retry_after));
    begin_close(c);
}

void ConnectionGate::begin_close(Conn& c) {
    // Lingering close: shut the write side and read what the client still sends for up to a
    // second, so the answer is not lost to a reset (closing with unread input resets). Beyond
    // 256 such connections, the next closes at once.
    if (c.state == Conn::State::HEAD && c.counted) metrics_.http_connections_waiting--;
    c.state = Conn::State::CLOSING;
    ::shutdown(c.fd, SHUT_WR);
    if (++n_closing_ > 256) return close_now(c);
    c.buf.clear();
    c.off = 0;
    set_deadline(c, Clock::now() + std::chrono::seconds(1));
    watch(c);
}

void ConnectionGate::close_now(Conn& c) {
    unwatch(c);
    if (c.state == Conn::State::CLOSING) --n_closing_;
    else if (c.state == Conn::State::HEAD && c.counted) metrics_.http_connections_waiting--;
    if (c.counted) {
        --n_open_;
        auto it = per_client_.find(c.peer_ip);
        if (it != per_client_.end() && --it->second == 0) per_client_.erase(it);
        metrics_.http_connections_open = static_cast<int64_t>(n_open_);
    }
    ::close(c.fd);
    conns_.erase(c.fd);
}

void ConnectionGate::expire() {
    const auto now = Clock::now();
    next_deadline_ = now + std::chrono::hours(1);
    std::vector<Conn*> due;
    for (auto& [fd, c] : conns_) {
        if (c->state == Conn::State::BUSY) continue;
        if (c->deadline <= now) due.push_back(c.get());
        else next_deadline_ = std::min(next_deadline_, c->deadline);
    }
    for (Conn* c : due) {
        if (c->state == Conn::State::CLOSING) {
            close_now(*c);
        } else if (c->unread() > 0 || (c->served == 0 && c->got_bytes)) {
            metrics_.http_head_timeouts++;
            refuse(*c, 408,
                   fmt::format("The request head did not arrive whole within {} ms (nitro serve --header-timeout).",
                               limits_.header_timeout.count()),
                   "request_timeout");
        } else if (c->served == 0) {
            metrics_.http_head_timeouts++;  // connected and sent nothing
            close_now(*c);
        } else {
            close_now(*c);  // an idle kept-alive connection
        }
    }
}

}  // namespace nitro::server
