#include "cli/progress.h"

#include "arch/summary.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>

namespace nitro::cli {

std::string progress_figures(uint64_t done, uint64_t total, double elapsed_s) {
    const int pct = total ? static_cast<int>(100 * done / total) : 100;
    std::string s = fmt::format("{:3d}% ({} of {}", pct, format_bytes(done), format_bytes(total));
    if (elapsed_s > 0 && done > 0) {
        const double rate = static_cast<double>(done) / elapsed_s;  // bytes/s
        s += fmt::format(", {}/s", format_bytes(static_cast<uint64_t>(rate)));
        if (done < total) s += fmt::format(", {:.0f} s left", std::ceil(static_cast<double>(total - done) / rate));
    }
    return s + ")";
}

ProgressLine::ProgressLine(std::string label, bool live, int every_pct)
    : label_(std::move(label)), live_(live), every_pct_(every_pct), t0_(std::chrono::steady_clock::now()), last_(t0_) {}

double ProgressLine::elapsed_s() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

void ProgressLine::update(uint64_t done, uint64_t total) {
    const auto now = std::chrono::steady_clock::now();
    const int pct = total ? static_cast<int>(100 * done / total) : 100;
    if (live_) {
        if (printed_ && done < total && now - last_ < std::chrono::milliseconds(100)) return;
        // \33[K clears what a longer earlier line left
        std::fprintf(stderr, "\r%s %s\33[K", label_.c_str(), progress_figures(done, total, elapsed_s()).c_str());
        std::fflush(stderr);
        printed_ = true;
        last_ = now;
        return;
    }
    if (every_pct_ > 0 && pct / every_pct_ != last_pct_ / every_pct_) {
        std::fprintf(stderr, "%s %s\n", label_.c_str(), progress_figures(done, total, elapsed_s()).c_str());
        last_pct_ = pct;
    }
}

void ProgressLine::finish() {
    if (live_ && printed_) std::fputc('\n', stderr);
    printed_ = false;
}

}  // namespace nitro::cli
