// A persistent team of worker threads (no thread creation or OpenMP team per call).
//
// parallel_for hands out chunks of an index range dynamically; the caller thread works too.
// Work must be written so each output is produced by exactly one task, in a fixed order, so
// results never depend on the number of threads or on scheduling.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

namespace nitro::cpu {

class ThreadPool {
public:
    /// `n_threads` >= 1 threads in total, including the caller of parallel_for.
    explicit ThreadPool(int n_threads);
    /// Stops and joins the workers (must not be called while parallel_for runs).
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    /// Threads in total, the caller included.
    int size() const { return n_threads_; }

    /// Calls fn(begin, end, thread_index) on disjoint chunks covering [0, n), each chunk at most
    /// `grain` long (grain < 1 counts as 1), and returns when all are done. thread_index is 0 for
    /// the caller and 1..size()-1 for the workers. n <= 0 calls nothing. If fn throws, the
    /// remaining chunks are skipped and the first exception is rethrown here once every thread
    /// has left fn. Not reentrant: do not call from inside fn, nor from two threads at once.
    /// max_threads > 0: only threads 0..max_threads-1 take chunks (the others wake and return),
    /// e.g. a copy team that leaves cores to work running beside it; 0 = all.
    void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn, int max_threads = 0);

    /// While held (hold(true) until hold(false)), idle workers keep spinning between regions
    /// instead of going to sleep after their usual spin, so a region that follows a long serial gap
    /// starts without waking sleeping threads (a futex wake per worker, tens of microseconds, and
    /// the workers arrive staggered). For a caller that runs regions at a known, frequent rhythm
    /// with gaps longer than the spin, e.g. the hybrid's CPU experts once per layer of a decode step
    /// while the GPU runs the rest of the layer. Burns the pool's cores while held. Any thread.
    void hold(bool on) { hold_.store(on, std::memory_order_relaxed); }

private:
    void worker(int index);
    void run_chunks(int thread_index);

    int n_threads_;
    std::vector<std::thread> threads_;
    std::mutex mu_;                  ///< guards sleeping (cv_start_) and error_
    std::condition_variable cv_start_;
    std::atomic<uint64_t> generation_{0};  ///< bumped once per parallel region
    std::atomic<int> sleepers_{0};         ///< workers blocked on cv_start_
    std::atomic<int> pending_{0};          ///< workers not yet done with the current region
    std::atomic<bool> stop_{false};
    std::atomic<bool> failed_{false};  ///< error_ was set in the current region
    std::atomic<bool> hold_{false};    ///< workers spin instead of sleeping (hold)
    const std::function<void(int64_t, int64_t, int)>* fn_ = nullptr;
    int64_t n_ = 0, grain_ = 1;
    int active_ = 0;  ///< threads that take chunks in the current region
    alignas(64) std::atomic<int64_t> next_{0};
    std::exception_ptr error_;  ///< first exception thrown by fn in the current region (under mu_)
};

/// Units [0, n) cut into one contiguous range per worker, so each worker streams contiguous memory;
/// a worker takes its own units from the front, and once its range is empty steals single units
/// from the back of the others' ranges, so a slow or descheduled thread does not hold the region.
/// Each range is one 64-bit word (front, back), updated by compare-and-swap.
class WorkRanges {
public:
    /// Ranges for `workers` workers: worker w gets [split[w], split[w + 1]) (split has workers + 1
    /// nondecreasing entries, split[workers] = n < 2^31).
    void reset(std::span<const int64_t> split);
    /// The next unit of worker w's own range, front first; false when it is empty.
    bool pop(int w, int64_t& unit);
    /// A unit from the back of another worker's range (scanning from w + 1); false when all are empty.
    bool steal(int w, int64_t& unit);
    /// pop, else steal.
    bool next(int w, int64_t& unit) { return pop(w, unit) || steal(w, unit); }
    int workers() const { return n_; }

private:
    struct alignas(64) Slot {
        std::atomic<uint64_t> fb{0};  ///< front | back << 32
    };
    std::unique_ptr<Slot[]> slots_;
    int n_ = 0, cap_ = 0;
};

}  // namespace nitro::cpu
