// ThreadPool (src/cpu/thread_pool.h): coverage of every index exactly once, chunk bounds, thread
// indices, n = 0, pools of one thread, many back-to-back regions (lost wake-ups would hang or
// skip work), and exceptions thrown by the work function.
#include "cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using nitro::cpu::ThreadPool;
using nitro::cpu::WorkRanges;

TEST(WorkRanges, EveryUnitOnceOwnersFrontFirstThievesFromTheBack) {
    WorkRanges r;
    const int64_t split[] = {0, 3, 3, 7};  // worker 1 owns nothing
    r.reset(split);
    int64_t u;
    ASSERT_TRUE(r.pop(0, u));
    EXPECT_EQ(u, 0);
    EXPECT_FALSE(r.pop(1, u));
    ASSERT_TRUE(r.steal(1, u));  // from worker 2's back
    EXPECT_EQ(u, 6);
    ASSERT_TRUE(r.pop(2, u));
    EXPECT_EQ(u, 3);
    // Concurrent: every unit claimed exactly once, whatever the interleaving.
    for (int threads : {2, 3, 8}) {
        for (int64_t n : {1, 10, 1000}) {
            std::vector<int64_t> sp(static_cast<size_t>(threads) + 1);
            for (int w = 0; w <= threads; ++w) sp[static_cast<size_t>(w)] = n * w * w / (threads * threads);  // uneven
            r.reset(sp);
            std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
            std::vector<std::thread> ts;
            for (int w = 0; w < threads; ++w)
                ts.emplace_back([&, w] {
                    for (int64_t v; r.next(w, v);) hits[static_cast<size_t>(v)]++;
                });
            for (auto& t : ts) t.join();
            for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "unit " << i;
        }
    }
}

TEST(ThreadPool, CoversEveryIndexOnceInBoundedChunks) {
    for (int threads : {1, 2, 3, 8}) {
        ThreadPool pool(threads);
        EXPECT_EQ(pool.size(), threads);
        for (int64_t n : {1, 2, 7, 64, 1000}) {
            for (int64_t grain : {1, 3, 16, 5000}) {
                std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
                std::atomic<bool> bad_chunk{false}, bad_thread{false};
                pool.parallel_for(n, grain, [&](int64_t b, int64_t e, int ti) {
                    if (b < 0 || e > n || b >= e || e - b > grain) bad_chunk = true;
                    if (ti < 0 || ti >= threads) bad_thread = true;
                    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
                });
                EXPECT_FALSE(bad_chunk) << threads << " threads, n " << n << ", grain " << grain;
                EXPECT_FALSE(bad_thread);
                for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "index " << i;
            }
        }
    }
}

TEST(ThreadPool, EmptyAndNegativeRangesCallNothing) {
    ThreadPool pool(3);
    int calls = 0;
    pool.parallel_for(0, 4, [&](int64_t, int64_t, int) { ++calls; });
    pool.parallel_for(-5, 4, [&](int64_t, int64_t, int) { ++calls; });
    EXPECT_EQ(calls, 0);
}

TEST(ThreadPool, PoolOfOneRunsOnTheCaller) {
    ThreadPool pool(1);
    const auto me = std::this_thread::get_id();
    bool other = false;
    int64_t total = 0;
    pool.parallel_for(100, 7, [&](int64_t b, int64_t e, int ti) {
        other |= std::this_thread::get_id() != me || ti != 0;
        total += e - b;
    });
    EXPECT_FALSE(other);
    EXPECT_EQ(total, 100);
}

TEST(ThreadPool, ManyBackToBackRegions) {
    // Thousands of short regions: a lost wake-up deadlocks, a stale chunk counter double-counts.
    ThreadPool pool(4);
    std::atomic<int64_t> sum{0};
    int64_t expect = 0;
    for (int rep = 0; rep < 3000; ++rep) {
        const int64_t n = rep % 37;
        pool.parallel_for(n, 2, [&](int64_t b, int64_t e, int) {
            for (int64_t i = b; i < e; ++i) sum += i + 1;
        });
        expect += n * (n + 1) / 2;
    }
    EXPECT_EQ(sum.load(), expect);
}

/// One region of 30 slow (1 ms) chunks on a pool of 3: every index once, and more than one
/// thread takes part (a worker that never woke would leave it all to the caller).
void expect_slow_region_uses_workers(ThreadPool& pool) {
    std::vector<std::atomic<int>> by_thread(static_cast<size_t>(pool.size()));
    std::atomic<int64_t> count{0};
    pool.parallel_for(30, 1, [&](int64_t b, int64_t e, int ti) {
        by_thread[static_cast<size_t>(ti)]++;
        count += e - b;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    EXPECT_EQ(count.load(), 30);
    int active = 0;
    for (auto& c : by_thread) active += c.load() > 0;
    EXPECT_GE(active, 2);
}

TEST(ThreadPool, SleepingWorkersWakeForTheNextRegion) {
    // After an idle pause the workers have left their spin and sleep on the condition variable;
    // the next region must wake them (a lost wake-up would leave the work to the caller alone,
    // which WorkersParticipate-style counting detects, or hang at the done count).
    ThreadPool pool(3);
    for (int rep = 0; rep < 5; ++rep) {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        SCOPED_TRACE("repetition " + std::to_string(rep));
        expect_slow_region_uses_workers(pool);
    }
}

TEST(ThreadPool, HeldWorkersSpinThroughGapsAndReleaseAndStop) {
    // hold(true): workers spin through gaps longer than their usual spin instead of sleeping; the
    // regions must still cover everything and use the workers, hold(false) must let them sleep and
    // wake again, and a pool destroyed while held must not hang (its workers are spinning).
    for (int destroy_held : {0, 1}) {
        ThreadPool pool(3);
        pool.hold(true);
        for (int rep = 0; rep < 4; ++rep) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));  // far beyond the ~0.1-0.5 ms spin
            SCOPED_TRACE("held repetition " + std::to_string(rep));
            expect_slow_region_uses_workers(pool);
        }
        if (destroy_held) continue;  // the destructor stops spinning workers too
        pool.hold(false);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // they go to sleep now
        std::atomic<int64_t> count{0};
        pool.parallel_for(1000, 7, [&](int64_t b, int64_t e, int) { count += e - b; });
        EXPECT_EQ(count.load(), 1000);
    }
}

TEST(ThreadPool, WorkersParticipate) {
    // With slow chunks, more than one thread must take part (the pool is not serial).
    ThreadPool pool(3);
    std::vector<std::atomic<int>> by_thread(3);
    pool.parallel_for(60, 1, [&](int64_t, int64_t, int ti) {
        by_thread[static_cast<size_t>(ti)]++;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    int active = 0;
    for (auto& c : by_thread) active += c.load() > 0;
    EXPECT_GE(active, 2);
}

TEST(ThreadPool, MaxThreadsLimitsWhoTakesChunks) {
    // max_threads = 2 on a pool of 4: every index once, only threads 0 and 1 run fn; the next
    // region without a limit uses the others again (slow chunks, so more than two take part).
    ThreadPool pool(4);
    std::vector<std::atomic<int>> by_thread(4), seen(200);
    pool.parallel_for(200, 1, [&](int64_t b, int64_t e, int ti) {
        by_thread[static_cast<size_t>(ti)]++;
        for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)]++;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }, 2);
    for (auto& c : seen) EXPECT_EQ(c.load(), 1);
    EXPECT_EQ(by_thread[2].load(), 0);
    EXPECT_EQ(by_thread[3].load(), 0);
    for (auto& c : by_thread) c = 0;
    pool.parallel_for(80, 1, [&](int64_t, int64_t, int ti) {
        by_thread[static_cast<size_t>(ti)]++;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    int active = 0;
    for (auto& c : by_thread) active += c.load() > 0;
    EXPECT_GE(active, 3);
}

TEST(ThreadPool, ExceptionIsRethrownAndPoolStaysUsable) {
    for (int threads : {1, 4}) {
        ThreadPool pool(threads);
        EXPECT_THROW(pool.parallel_for(100, 1,
                                       [&](int64_t b, int64_t, int) {
                                           if (b == 42) throw std::runtime_error("boom");
                                       }),
                     std::runtime_error);
        std::atomic<int64_t> count{0};
        pool.parallel_for(100, 1, [&](int64_t b, int64_t e, int) { count += e - b; });
        EXPECT_EQ(count.load(), 100);
    }
}

}  // namespace
