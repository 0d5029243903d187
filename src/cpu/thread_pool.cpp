// Persistent worker team: see thread_pool.h.
//
// Protocol (lock-free on the hot path, like ggml's CPU threadpool). The caller publishes a region
// (fn_, n_, grain_, next_ = 0, pending_ = n_threads - 1), then bumps generation_ (release). A
// worker spins on generation_ for a while after each region, so back-to-back regions of one
// token start without a system call; only a worker idle for longer sleeps on cv_start_, counted
// in sleepers_, and the caller takes mu_ to wake it only when sleepers_ > 0. Everyone, the caller
// included, claims chunks with next_.fetch_add(grain) until the range is exhausted; a worker then
// decrements pending_ (release), and the caller spins until pending_ == 0 (acquire), so no worker
// still reads fn_ or next_ when the next region is published.
//
// Sleeping without a lost wake-up: the worker increments sleepers_ and re-checks generation_ under
// mu_ before waiting; the caller bumps generation_ then reads sleepers_. Both are sequentially
// consistent, so either the worker sees the new generation or the caller sees the sleeper and
// notifies under mu_ (which it cannot do between the worker's check and its wait).
#include "cpu/thread_pool.h"

#include <immintrin.h>

namespace nitro::cpu {
namespace {

/// Spin iterations (each a pause, ~40-140 cycles) before a worker sleeps on the condition
/// variable: long enough to bridge the serial work between the regions of one decode token
/// (norms, top-k, quantizing activations: microseconds), short enough not to burn an idle core
/// (~0.1-0.5 ms).
constexpr int kSpinIterations = 4000;

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
    threads_.reserve(static_cast<size_t>(n_threads_ - 1));
    for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_.store(true, std::memory_order_relaxed);
        generation_.fetch_add(1, std::memory_order_seq_cst);  // release: stop_ is seen with it
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
            failed_.store(true, std::memory_order_relaxed);
            next_.store(n, std::memory_order_relaxed);  // nobody starts another chunk
            return;
        }
    }
}

void ThreadPool::worker(int index) {
    uint64_t seen = 0;
    for (;;) {
        uint64_t g = generation_.load(std::memory_order_acquire);
        for (int i = 0; (i < kSpinIterations || hold_.load(std::memory_order_relaxed)) && g == seen; ++i) {
            _mm_pause();
            g = generation_.load(std::memory_order_acquire);
        }
        if (g == seen) {
            std::unique_lock<std::mutex> lk(mu_);
            sleepers_.fetch_add(1, std::memory_order_seq_cst);
            cv_start_.wait(lk, [&] { return generation_.load(std::memory_order_seq_cst) != seen; });
            sleepers_.fetch_sub(1, std::memory_order_relaxed);
            g = generation_.load(std::memory_order_acquire);
        }
        seen = g;
        if (stop_.load(std::memory_order_relaxed)) return;  // ordered by the acquire of generation_
        if (index < active_) run_chunks(index);
        pending_.fetch_sub(1, std::memory_order_release);
    }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn,
                              int max_threads) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (n_threads_ == 1 || n <= grain || max_threads == 1) {
        // One chunk or one thread: no hand-off. Still in order, still chunked by grain.
        for (int64_t b = 0; b < n; b += grain) fn(b, b + grain < n ? b + grain : n, 0);
        return;
    }
    fn_ = &fn;
    n_ = n;
    grain_ = grain;
    active_ = max_threads > 0 ? max_threads : n_threads_;
    next_.store(0, std::memory_order_relaxed);
    pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_seq_cst);  // publishes everything above
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
        { std::lock_guard<std::mutex> lk(mu_); }
        cv_start_.notify_all();
    }
    run_chunks(0);
    for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
        if (spins < kSpinIterations) _mm_pause();
        else std::this_thread::yield();  // a worker was descheduled: give it the core
    }
    fn_ = nullptr;
    if (failed_.load(std::memory_order_relaxed)) {  // ordered by the acquire of pending_
        std::exception_ptr err;
        {
            std::lock_guard<std::mutex> lk(mu_);
            err = error_;
            error_ = nullptr;
        }
        failed_.store(false, std::memory_order_relaxed);
        std::rethrow_exception(err);
    }
}

void WorkRanges::reset(std::span<const int64_t> split) {
    const int w = static_cast<int>(split.size()) - 1;
    if (w > cap_) {
        slots_ = std::make_unique<Slot[]>(static_cast<size_t>(w));
        cap_ = w;
    }
    n_ = w;
    for (int i = 0; i < w; ++i) {
        const auto f = static_cast<uint64_t>(split[static_cast<size_t>(i)]);
        const auto b = static_cast<uint64_t>(split[static_cast<size_t>(i) + 1]);
        slots_[static_cast<size_t>(i)].fb.store(f | b << 32, std::memory_order_relaxed);
    }
}

bool WorkRanges::pop(int w, int64_t& unit) {
    std::atomic<uint64_t>& a = slots_[static_cast<size_t>(w)].fb;
    uint64_t v = a.load(std::memory_order_relaxed);
    for (;;) {
        const uint64_t f = v & 0xFFFFFFFFu, b = v >> 32;
        if (f >= b) return false;
        if (a.compare_exchange_weak(v, (f + 1) | b << 32, std::memory_order_relaxed)) {
            unit = static_cast<int64_t>(f);
            return true;
        }
    }
}

bool WorkRanges::steal(int w, int64_t& unit) {
    for (int k = 1; k < n_; ++k) {
        std::atomic<uint64_t>& a = slots_[static_cast<size_t>((w + k) % n_)].fb;
        uint64_t v = a.load(std::memory_order_relaxed);
        for (;;) {
            const uint64_t f = v & 0xFFFFFFFFu, b = v >> 32;
            if (f >= b) break;
            if (a.compare_exchange_weak(v, f | (b - 1) << 32, std::memory_order_relaxed)) {
                unit = static_cast<int64_t>(b - 1);
                return true;
            }
        }
    }
    return false;
}

}  // namespace nitro::cpu
