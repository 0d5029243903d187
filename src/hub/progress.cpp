#include "hub/progress.h"

#include "core/text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace nitro::hub {

DownloadProgress::DownloadProgress(std::string label, uint64_t total, uint64_t already, bool draw)
    : label_(std::move(label)), total_(total), already_(already), done_(already), draw_(draw), start_(Clock::now()) {
    window_.emplace_back(start_, already_);
    if (draw_) this->draw(false);
}

DownloadProgress::~DownloadProgress() {
    if (draw_ && !finished_) std::fputc('\n', stderr);
}

void DownloadProgress::update(uint64_t done) {
    done_ = done;
    const auto now = Clock::now();
    if (!draw_ || now - last_draw_ < std::chrono::milliseconds(100)) return;
    window_.emplace_back(now, done);
    while (window_.size() > 2 && now - window_.front().first > std::chrono::seconds(5)) window_.pop_front();
    draw(false);
}

void DownloadProgress::finish() {
    if (!draw_ || finished_) return;
    finished_ = true;
    draw(true);
    std::fputc('\n', stderr);
    std::fflush(stderr);
}

double DownloadProgress::elapsed_s() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

double DownloadProgress::average_rate() const {
    const double s = elapsed_s();
    return s > 0 ? static_cast<double>(done_ - std::min(done_, already_)) / s : 0.0;
}

void DownloadProgress::draw(bool final) {
    last_draw_ = Clock::now();
    const double frac = total_ ? std::min(1.0, static_cast<double>(done_) / static_cast<double>(total_)) : 1.0;
    constexpr int kWidth = 24;
    const int fill = static_cast<int>(frac * kWidth);
    std::string bar(static_cast<size_t>(fill), '=');
    if (fill < kWidth) bar += '>';
    bar.resize(kWidth, ' ');
    double rate = average_rate();
    if (!final && window_.size() >= 2) {
        const double dt = std::chrono::duration<double>(window_.back().first - window_.front().first).count();
        if (dt > 0) rate = static_cast<double>(window_.back().second - window_.front().second) / dt;
    }
    std::string tail;
    if (final) {
        tail = fmt::format("{}/s, {}", format_bytes(static_cast<uint64_t>(rate)), format_duration(elapsed_s()));
    } else if (rate > 0) {
        const double left = static_cast<double>(total_ - std::min(total_, done_)) / rate;
        tail = fmt::format("{}/s  {} left", format_bytes(static_cast<uint64_t>(rate)), format_duration(left));
    } else {
        tail = "starting";
    }
    std::fprintf(stderr, "\r%s %3d%% [%s] %s of %s  %s\033[K", label_.c_str(), static_cast<int>(frac * 100), bar.c_str(),
                 format_bytes(done_).c_str(), format_bytes(total_).c_str(), tail.c_str());
    std::fflush(stderr);
}

std::string format_duration(double seconds) {
    if (seconds < 9.95) return fmt::format("{:.1f} s", std::max(0.0, seconds));
    const long long s = std::llround(seconds);
    if (s < 60) return fmt::format("{} s", s);
    if (s < 3600) return fmt::format("{} min {} s", s / 60, s % 60);
    return fmt::format("{} h {:02d} min", s / 3600, (s % 3600) / 60);
}

}  // namespace nitro::hub
