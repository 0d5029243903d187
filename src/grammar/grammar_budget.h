// Memory for response_format grammars (issue 50): each request's compiled schema (nodes and
// literal tries) is charged, as it is built, to a lease on the server's budget. A request whose
// grammar would pass the per-request limit is refused (GrammarMemoryError, a 400), one that would
// pass the total of the grammars alive at once waits for none and is refused too (busy: a 429);
// the bytes go back when the request's grammar is freed, and when the request built a large one
// (its peak: the parsed schema, the literal texts and the trie build were freed before it), the
// freed memory is handed back to the operating system (malloc_trim), so a burst of large schemas
// does not leave the server's resident memory high.
#pragma once

#include "core/error.h"

#include <atomic>
#include <cstddef>
#include <memory>

namespace nitro::grammar {

class GrammarMemoryError : public Error {
public:
    GrammarMemoryError(const std::string& message, bool busy) : Error(message), busy(busy) {}
    bool busy;  ///< the total budget is taken by other requests (retry later); else this one is too large
};

class MemoryBudget {
public:
    /// `total`: bytes of all grammars alive at once; `per_request`: bytes of one (0: no limit).
    MemoryBudget(size_t total, size_t per_request) : total_(total), per_request_(per_request) {}
    size_t total() const { return total_; }
    size_t per_request() const { return per_request_; }
    size_t in_use() const { return used_.load(); }
    /// Requests refused because the total was taken.
    uint64_t refused_busy() const { return refused_busy_.load(); }

private:
    friend class MemoryLease;
    const size_t total_, per_request_;
    std::atomic<size_t> used_{0};
    std::atomic<uint64_t> refused_busy_{0};
};

/// One request's share. Without a budget it only counts.
class MemoryLease {
public:
    explicit MemoryLease(MemoryBudget* budget) : budget_(budget) {}
    ~MemoryLease();
    MemoryLease(const MemoryLease&) = delete;
    MemoryLease& operator=(const MemoryLease&) = delete;

    /// Takes `bytes` more; throws GrammarMemoryError past the per-request limit or the total.
    void charge(size_t bytes);
    /// Gives back `bytes` of what was charged (an estimate that turned out high).
    void release(size_t bytes);
    size_t bytes() const { return held_; }
    /// The most held at once (building a trie holds more than the trie keeps).
    size_t peak() const { return peak_; }

private:
    MemoryBudget* budget_;
    size_t held_ = 0, peak_ = 0;
};

/// Hands freed heap memory back to the operating system when at least 4 MiB (`bytes`) were just
/// freed (glibc keeps freed memory in its per-thread arenas otherwise).
void return_freed_memory(size_t bytes);

}  // namespace nitro::grammar
