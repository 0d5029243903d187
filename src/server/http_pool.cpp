#include "server/http_pool.h"

#include <algorithm>

namespace nitro::server {

ElasticThreadPool::ElasticThreadPool(size_t min_threads, size_t max_threads, std::chrono::milliseconds idle)
    : min_(std::max<size_t>(1, min_threads)), max_(std::max(min_, max_threads)), idle_timeout_(idle) {
    std::lock_guard<std::mutex> lk(mu_);
    for (size_t i = 0; i < min_; ++i) start_locked(true);
}

ElasticThreadPool::~ElasticThreadPool() { shutdown(); }

void ElasticThreadPool::start_locked(bool permanent) {
    // Threads that ended are joined here, so the list stays as long as the threads alive.
    for (auto it = workers_.begin(); it != workers_.end();) {
        if (it->done) {
            it->thread.join();
            it = workers_.erase(it);
        } else {
            ++it;
        }
    }
    Worker& w = workers_.emplace_back();
    ++alive_;
    w.thread = std::thread([this, p = &w, permanent] { run(p, permanent); });
}

void ElasticThreadPool::enqueue(std::function<void()> fn) {
    std::lock_guard<std::mutex> lk(mu_);
    if (shutdown_) return;
    jobs_.push_back(std::move(fn));
    // More work than idle threads to take it: one more thread, up to the cap.
    if (jobs_.size() > idle_ && alive_ < max_) start_locked(false);
    cv_.notify_one();
}

void ElasticThreadPool::run(Worker* self, bool permanent) {
    for (;;) {
        std::function<void()> fn;
        {
            std::unique_lock<std::mutex> lk(mu_);
            ++idle_;
            auto ready = [&] { return shutdown_ || !jobs_.empty(); };
            if (permanent) cv_.wait(lk, ready);
            else cv_.wait_for(lk, idle_timeout_, ready);
            --idle_;
            if (jobs_.empty()) {
                if (shutdown_ || !permanent) {  // stopping, or an extra thread that found no work
                    --alive_;
                    self->done = true;
                    return;
                }
                continue;
            }
            fn = std::move(jobs_.front());
            jobs_.pop_front();
        }
        fn();
    }
}

void ElasticThreadPool::shutdown() {
    std::list<Worker> workers;
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (shutdown_ && workers_.empty()) return;
        shutdown_ = true;
        cv_.notify_all();
        workers.swap(workers_);
    }
    for (auto& w : workers) w.thread.join();
}

size_t ElasticThreadPool::threads() const {
    std::lock_guard<std::mutex> lk(mu_);
    return alive_;
}

}  // namespace nitro::server
