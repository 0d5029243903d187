// The connection front of `nitro serve`: what happens to a TCP connection before and between the
// requests cpp-httplib parses, so that slow or idle clients cannot exhaust the server.
//
// cpp-httplib 0.11 gives every accepted connection a thread for its whole life and restarts its
// read timeout at every byte, so a client sending its request head one byte per second holds a
// thread forever, and a few hundred such clients lock everyone out (issue 50). Here instead:
//
//  - A connection waiting for a request head (new, or idle between keep-alive requests) holds no
//    thread: one epoll thread reads the bytes of every such connection until the head is
//    complete, then hands the connection to a worker (ElasticThreadPool), which runs cpp-httplib's
//    parser and handlers on it (GatedServer::serve_request) and gives it back when the response
//    is written.
//  - The whole head must arrive within `header_timeout` of the connection's accept (or, on a
//    kept-alive connection, of its first byte); a connection past it is answered 408 and closed,
//    whatever pace its bytes came at. An idle kept-alive connection is closed after
//    `keep_alive_timeout`. A head over `max_head_bytes` is a 431.
//  - A body must come at `body_min_rate` bytes/s or more once `body_timeout` has passed since its
//    head (the k-th byte is due by head + body_timeout + k / body_min_rate, Apache
//    mod_reqtimeout's rule); slower, the read fails and the handler answers 408.
//  - At most `max_connections` connections at once and `max_connections_per_client` per client
//    IP address; one beyond is answered 503 (with Retry-After) and closed at once.
//  - The head is checked (http_parse.h) before cpp-httplib sees it: malformed request lines,
//    bare LFs, folded or nameless headers, and a missing or repeated Host are refused with a
//    message naming what is wrong.
//  - Bytes that follow a request on its connection stay in the connection's buffer, so pipelined
//    requests are answered in order (cpp-httplib 0.11 dropped what its reader had buffered).
//  - A chunked body's trailer fields are dropped (cpp-httplib 0.11 refused such a body).
//  - The listening socket's backlog is as long as max_connections (cpp-httplib's is 5).
// Every limit is counted in /metrics (Metrics::http_*).
#pragma once

#include "server/http_pool.h"
#include "server/metrics.h"

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace nitro::server {

struct ConnectionLimits {
    std::chrono::milliseconds header_timeout{20000};      ///< the whole request head, from accept or first byte
    /// Idle between requests. Responses advertise cpp-httplib's 5 s (`Keep-Alive: timeout=5`), so
    /// clients close first; holding longer costs no thread, and a client that paused past 5 s (a
    /// blocked event loop) would otherwise reuse a connection the server had just closed.
    std::chrono::milliseconds keep_alive_timeout{60000};
    std::chrono::milliseconds body_timeout{20000};        ///< body time before the rate floor applies
    double body_min_rate = 500;                           ///< bytes/s after body_timeout; 0: only body_timeout per read
    std::chrono::milliseconds write_timeout{5000};        ///< a write that cannot progress for this long fails
    size_t max_connections = 1024;                        ///< open at once (all clients)
    size_t max_connections_per_client = 64;               ///< open at once from one IP address; 0: no cap
    size_t max_head_bytes = 64 * 1024;                    ///< request line and headers
};

/// The socket of the connection whose request the calling thread is serving (-1 outside one).
int current_connection_socket();
/// True when the calling thread's request body read failed because it came in under the rate floor.
bool current_body_too_slow();

class ConnectionGate;

/// cpp-httplib's Server with its connection handling replaced by a ConnectionGate: listen() still
/// binds and accepts, but each accepted socket goes to the gate instead of a thread of its own.
class GatedServer : public httplib::Server {
public:
    GatedServer();
    void set_gate(ConnectionGate* gate) { gate_ = gate; }
    /// Parses and answers one request from `stream` (cpp-httplib's request processing).
    bool serve_request(httplib::Stream& stream, bool close_connection, bool& connection_closed);
    /// Requests served on one connection before it is closed (cpp-httplib's keep-alive count).
    size_t keep_alive_max_count() const { return keep_alive_max_count_; }
    /// Lengthens the bound socket's queue of connections not yet accepted: cpp-httplib 0.11 listens
    /// with a backlog of 5, so a burst of connections has its SYNs dropped and retried after 1 s.
    void set_backlog(int n);
    /// stop() that also works before listening has begun (cpp-httplib's stop() does nothing until
    /// then, so a signal during startup would leave the server listening): the bound socket is
    /// shut down, so the accept loop ends at once whenever it starts.
    void halt();

private:
    bool process_and_close_socket(socket_t sock) override;
    ConnectionGate* gate_ = nullptr;
};

class ConnectionGate {
public:
    /// Serves one request of a connection: GatedServer::serve_request.
    using ServeFn = std::function<bool(httplib::Stream&, bool close_connection, bool& connection_closed)>;

    /// Starts the epoll thread; requests run on a pool of `min_threads`..`max_threads` workers.
    ConnectionGate(const ConnectionLimits& limits, Metrics& metrics, ServeFn serve, size_t keep_alive_max,
                   size_t min_threads, size_t max_threads);
    ~ConnectionGate();  ///< shutdown()

    /// Takes an accepted socket (any thread). After shutdown() it is closed at once.
    void adopt(int fd);
    /// Closes every connection waiting for a head, lets the requests being served finish (their
    /// connections then close), and joins the threads.
    void shutdown();

    const ConnectionLimits& limits() const { return limits_; }

    struct Conn;

private:
    void loop();
    void admit(int fd);
    void on_readable(Conn& c);
    void try_dispatch(Conn& c);
    void work(Conn* c);
    void returned(Conn& c);
    void refuse(Conn& c, int status, const std::string& message, const std::string& code, bool retry_after = false);
    void begin_close(Conn& c);
    void close_now(Conn& c);
    void expire();
    void watch(Conn& c);
    void unwatch(Conn& c);
    void hand_back(Conn* c);
    void set_deadline(Conn& c, std::chrono::steady_clock::time_point t);

    const ConnectionLimits limits_;
    Metrics& metrics_;
    const ServeFn serve_;
    const size_t keep_alive_max_;
    ElasticThreadPool pool_;
    int epoll_fd_ = -1, wake_fd_ = -1;

    // Handed over from other threads (under mu_).
    std::mutex mu_;
    std::vector<int> adopted_;
    std::vector<Conn*> handed_back_;
    bool stopping_ = false;

    // Owned by the epoll thread.
    std::unordered_map<int, std::unique_ptr<Conn>> conns_;
    std::unordered_map<std::string, size_t> per_client_;
    size_t n_open_ = 0, n_closing_ = 0, n_busy_ = 0;
    std::chrono::steady_clock::time_point next_deadline_;
    std::thread thread_;
};

}  // namespace nitro::server
