// CLI11 validators for numeric flags, with messages that name the bound and the value given
// ("--n-prompt: must be at least 1, got -1"). CLI11's own Range and PositiveNumber accept nan
// (every comparison with nan is false) and print their bounds as 0.000000; these reject anything
// that is not a finite number.
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <thread>

namespace nitro::cli {

/// A finite number in [lo, hi] (the server's bounds for the sampling fields are written this way).
inline CLI::Validator number_in(double lo, double hi) {
    return CLI::Validator(
        [lo, hi](std::string& s) -> std::string {
            double v = 0;
            if (!CLI::detail::lexical_cast(s, v)) return fmt::format("'{}' is not a number", s);
            if (!std::isfinite(v) || v < lo || v > hi) return fmt::format("must be between {} and {}, got {}", lo, hi, s);
            return {};
        },
        fmt::format("in [{}, {}]", lo, hi));
}

/// A finite number greater than 0 (seconds, GiB, MiB).
inline CLI::Validator positive_number() {
    return CLI::Validator(
        [](std::string& s) -> std::string {
            double v = 0;
            if (!CLI::detail::lexical_cast(s, v)) return fmt::format("'{}' is not a number", s);
            if (!std::isfinite(v) || !(v > 0)) return fmt::format("must be greater than 0, got {}", s);
            return {};
        },
        "> 0");
}

/// An integer >= lo (counts).
inline CLI::Validator integer_at_least(long long lo) {
    return CLI::Validator(
        [lo](std::string& s) -> std::string {
            long long v = 0;
            if (!CLI::detail::lexical_cast(s, v)) return fmt::format("'{}' is not an integer", s);
            if (v < lo) return fmt::format("must be at least {}, got {}", lo, s);
            return {};
        },
        fmt::format(">= {}", lo));
}

/// -t N above the machine's hardware threads: a warning, not an error (the flag may be shared with
/// a larger machine; threads beyond the hardware share cores and usually slow a run down).
inline void warn_threads_over_hardware(long long n_threads) {
    const unsigned hw = std::thread::hardware_concurrency();
    if (hw > 0 && n_threads > static_cast<long long>(hw))
        std::fprintf(stderr,
                     "warning: -t %lld is more than the %u hardware threads of this machine; the extra threads share "
                     "cores and usually slow the run down\n",
                     n_threads, hw);
}

}  // namespace nitro::cli
