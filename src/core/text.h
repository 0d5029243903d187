// Small text helpers for messages people read.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace nitro {

/// "1 thread", "2 threads", "0 threads": the count and the noun, plural (with an s) unless it is 1.
inline std::string count_noun(long long n, std::string_view noun) { return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s"); }

}  // namespace nitro
