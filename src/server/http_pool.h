// The thread pool requests are served on (ConnectionGate, http_conn.h): `min_threads` always
// ready, more started when every thread is busy (up to `max_threads` requests at once), the extra
// ones ending after `idle` without work. A request holds its thread while it waits or streams, so
// a fixed pool lets a burst of clients shut out everyone else, /health included; this one only
// does so at `max_threads`. (Connections waiting for a request head hold no thread.)
#pragma once

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <thread>

namespace nitro::server {

class ElasticThreadPool : public httplib::TaskQueue {
public:
    ElasticThreadPool(size_t min_threads, size_t max_threads, std::chrono::milliseconds idle = std::chrono::seconds(10));
    ~ElasticThreadPool() override;

    void enqueue(std::function<void()> fn) override;
    /// Runs what is queued, then joins every thread.
    void shutdown() override;

    /// Threads alive now (for tests and the startup line).
    size_t threads() const;

private:
    struct Worker {
        std::thread thread;
        bool done = false;
    };
    void run(Worker* self, bool permanent);
    void start_locked(bool permanent);

    const size_t min_, max_;
    const std::chrono::milliseconds idle_timeout_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> jobs_;
    std::list<Worker> workers_;
    size_t alive_ = 0, idle_ = 0;
    bool shutdown_ = false;
};

}  // namespace nitro::server
