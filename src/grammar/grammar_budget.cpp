#include "grammar/grammar_budget.h"

#include <fmt/format.h>

#include <malloc.h>

#include <algorithm>

#include <mutex>

namespace nitro::grammar {

namespace {

std::string mib(size_t bytes) { return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1024.0 * 1024.0)); }

/// Below this, freeing a grammar does not trim the heap (the trim costs more than it gives).
constexpr size_t kTrimAbove = 4u << 20;

}  // namespace

MemoryLease::~MemoryLease() {
    if (budget_) budget_->used_ -= held_;
    return_freed_memory(peak_);
}

void MemoryLease::charge(size_t bytes) {
    if (!budget_) {
        held_ += bytes;
        peak_ = std::max(peak_, held_);
        return;
    }
    if (budget_->per_request_ && held_ + bytes > budget_->per_request_)
        throw GrammarMemoryError(fmt::format("the schema needs more than {} of grammar state, the most one request may take "
                                             "(nitro serve --grammar-memory); use a smaller schema (fewer or shorter enum "
                                             "values, fewer properties)",
                                             mib(budget_->per_request_)),
                                 false);
    const size_t before = budget_->used_.fetch_add(bytes);
    if (before + bytes > budget_->total_) {
        budget_->used_ -= bytes;
        budget_->refused_busy_++;
        throw GrammarMemoryError(fmt::format("the server holds {} of response_format grammars for requests in progress, and this "
                                             "one would pass its limit of {} (nitro serve --grammar-memory-total); retry shortly",
                                             mib(before), mib(budget_->total_)),
                                 true);
    }
    held_ += bytes;
    peak_ = std::max(peak_, held_);
}

void MemoryLease::release(size_t bytes) {
    bytes = std::min(bytes, held_);
    held_ -= bytes;
    if (budget_) budget_->used_ -= bytes;
}

void return_freed_memory(size_t bytes) {
    if (bytes < kTrimAbove) return;
    // One trim at a time (it walks every arena); a free during it is covered by the next one.
    static std::mutex mu;
    std::unique_lock<std::mutex> lk(mu, std::try_to_lock);
    if (lk.owns_lock()) malloc_trim(0);
}

}  // namespace nitro::grammar
