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
#include <mutex>
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
    void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn);

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
    const std::function<void(int64_t, int64_t, int)>* fn_ = nullptr;
    int64_t n_ = 0, grain_ = 1;
    alignas(64) std::atomic<int64_t> next_{0};
    std::exception_ptr error_;  ///< first exception thrown by fn in the current region (under mu_)
};

}  // namespace nitro::cpu
