// Errors raised on bad user input (files, requests, flags).
//
// Every message names what was wrong (file, tensor, field) and what was expected. Programming
// and device faults are not reported this way: they abort with file:line (see NITRO_CHECK).
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace nitro {

/// The one exception type for bad input. `what()` is a complete, user-facing sentence.
class Error : public std::runtime_error {
public:
    explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

/// Throws nitro::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
    throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace nitro

/// Internal invariant (never user data): abort with file:line.
#define NITRO_CHECK(cond)                                                                  \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            std::fprintf(stderr, "%s:%d: internal check failed: %s\n", __FILE__, __LINE__, \
                         #cond);                                                           \
            std::abort();                                                                  \
        }                                                                                  \
    } while (0)
