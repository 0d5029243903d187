// CUDA error checks usable from host-only C++ files (no kernels): device and programming faults
// abort with file:line (docs/architecture.md, "Errors").
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

#define NITRO_CUDA_CHECK(expr)                                                                      \
    do {                                                                                            \
        cudaError_t err_ = (expr);                                                                  \
        if (err_ != cudaSuccess) {                                                                  \
            std::fprintf(stderr, "%s:%d: CUDA error %s: %s (%s)\n", __FILE__, __LINE__,            \
                         cudaGetErrorName(err_), cudaGetErrorString(err_), #expr);                  \
            std::abort();                                                                           \
        }                                                                                           \
    } while (0)

/// After a kernel launch: launch-configuration errors surface here.
#define NITRO_CUDA_LAUNCH_CHECK() NITRO_CUDA_CHECK(cudaGetLastError())


#include <sstream>
#include <string>
#include <utility>

/// Internal invariant in src/cuda (NITRO_CHECK without fmt, which nvcc cannot compile).
#define NITRO_CUDA_ASSERT(cond)                                                                   \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            std::fprintf(stderr, "%s:%d: internal check failed: %s\n", __FILE__, __LINE__, #cond); \
            std::abort();                                                                         \
        }                                                                                         \
    } while (0)

namespace nitro::cuda {

/// Throws nitro::Error(msg) (defined in context.cpp, so .cu files need no fmt).
[[noreturn]] void raise_error(const std::string& msg);

namespace detail {
inline void format_to(std::ostringstream& o, const char* f) { o << f; }
template <typename A, typename... R>
void format_to(std::ostringstream& o, const char* f, A&& a, R&&... r) {
    for (; *f; ++f) {
        if (f[0] == '{' && f[1] == '}') {
            o << a;
            format_to(o, f + 2, std::forward<R>(r)...);
            return;
        }
        o << *f;
    }
}
}  // namespace detail

/// nitro::fail for .cu files: "{}" placeholders filled in order.
template <typename... A>
[[noreturn]] void cfail(const char* f, A&&... a) {
    std::ostringstream o;
    detail::format_to(o, f, std::forward<A>(a)...);
    raise_error(o.str());
}

}  // namespace nitro::cuda
