// Persistent worker team: see thread_pool.h.
//
// Protocol. The caller publishes a region (fn_, n_, grain_, next_ = 0, busy_ = n_threads - 1)
// and bumps generation_ under mu_, then notifies cv_start_. A worker waits, after a short spin on
// generation_, for generation_ to differ from the last one it served (the predicate is checked
// under mu_, so a bump between the check and the wait cannot be lost). Everyone, the caller
// included, claims chunks with next_.fetch_add(grain) until the range is exhausted; a worker then
// decrements busy_ under mu_ and the last one signals cv_done_. The caller returns only when
// busy_ == 0, so no worker still reads fn_ or next_ when the next region is published.
#include "cpu/thread_pool.h"


#include <immintrin.h>

namespace nitro::cpu {
namespace {

/// Spin iterations (each a pause, ~40-140 cycles) before a worker sleeps on the condition
/// variable: long enough to catch back-to-back regions of one layer, short enough not to burn a
/// core shared with others (~10-50 us).
constexpr int kSpinIterations = 400;

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
    threads_.reserve(static_cast<size_t>(n_threads_ - 1));
    for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    cv_start_.notify_all();
    for (std::thread& t : threads_) t.join();
}

void ThreadPool::run_chunks(int thread_index) {
    const int64_t n = n_, grain = grain_;
    for (;;) {
        const int64_t begin = next_.fetch_add(grain, std::memory_order_relaxed);
        if (begin >= n) return;
        const int64_t end = begin + grain < n ? begin + grain : n;
        try {
            (*fn_)(begin, end, thread_index);
        } catch (...) {
            std::lock_guard<std::mutex> lk(mu_);
            if (!error_) error_ = std::current_exception();
            next_.store(n, std::memory_order_relaxed);  // nobody starts another chunk
            return;
        }
    }
}

void ThreadPool::worker(int index) {
    uint64_t seen = 0;
    for (;;) {
        for (int i = 0; i < kSpinIterations && generation_.load(std::memory_order_acquire) == seen; ++i) {
            _mm_pause();
        }
        {
            std::unique_lock<std::mutex> lk(mu_);
            cv_start_.wait(lk, [&] { return stop_ || generation_.load(std::memory_order_relaxed) != seen; });
            if (stop_) return;
            seen = generation_.load(std::memory_order_relaxed);
        }
        run_chunks(index);
        {
            std::lock_guard<std::mutex> lk(mu_);
            if (--busy_ == 0) cv_done_.notify_one();
        }
    }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t, int)>& fn) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (n_threads_ == 1 || n <= grain) {
        // One chunk or one thread: no hand-off. Still in order, still chunked by grain.
        for (int64_t b = 0; b < n; b += grain) fn(b, b + grain < n ? b + grain : n, 0);
        return;
    }
    {
        std::lock_guard<std::mutex> lk(mu_);
        fn_ = &fn;
        n_ = n;
        grain_ = grain;
        next_.store(0, std::memory_order_relaxed);
        busy_ = n_threads_ - 1;
        error_ = nullptr;
        generation_.fetch_add(1, std::memory_order_release);
    }
    cv_start_.notify_all();
    run_chunks(0);
    std::exception_ptr err;
    {
        std::unique_lock<std::mutex> lk(mu_);
        cv_done_.wait(lk, [&] { return busy_ == 0; });
        fn_ = nullptr;
        err = error_;
        error_ = nullptr;
    }
    if (err) std::rethrow_exception(err);
}

}  // namespace nitro::cpu
