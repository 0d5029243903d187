// Small text helpers for messages people read.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace nitro {

/// "1 thread", "2 threads", "0 threads": the count and the noun, plural (with an s) unless it is 1.
inline std::string count_noun(long long n, std::string_view noun) { return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s"); }

/// "1.23 GiB" style sizes (binary units: B, KiB, MiB, GiB).
inline std::string format_bytes(uint64_t n) {
    const double d = static_cast<double>(n);
    if (n >= (1ull << 30)) return fmt::format("{:.2f} GiB", d / (1ull << 30));
    if (n >= (1ull << 20)) return fmt::format("{:.2f} MiB", d / (1ull << 20));
    if (n >= (1ull << 10)) return fmt::format("{:.2f} KiB", d / (1ull << 10));
    return fmt::format("{} B", n);
}

}  // namespace nitro
