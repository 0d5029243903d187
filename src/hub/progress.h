// The progress of one download on a terminal: a bar redrawn in place, at most 10 times a second,
//   gpt-oss-20b-mxfp4.gguf   45% [=========>           ] 5.21 GiB of 11.6 GiB  85.3 MiB/s  1 min 17 s left
// with the rate over the last 5 seconds. Off a terminal it draws nothing (the caller logs lines).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>

namespace nitro::hub {

class DownloadProgress {
public:
    /// `total` bytes of the file, `already` of them present before this transfer; `draw` = a
    /// terminal to draw on (stderr).
    DownloadProgress(std::string label, uint64_t total, uint64_t already, bool draw);
    /// Ends the bar's line if finish() was not called (an error message then starts on its own line).
    ~DownloadProgress();
    DownloadProgress(const DownloadProgress&) = delete;
    DownloadProgress& operator=(const DownloadProgress&) = delete;
    /// `done` bytes of the file are present now.
    void update(uint64_t done);
    /// Draws the final state and ends the line (nothing off a terminal).
    void finish();
    /// Bytes per second over this transfer so far (the resumed part not counted).
    double average_rate() const;
    double elapsed_s() const;

private:
    void draw(bool final);
    using Clock = std::chrono::steady_clock;
    std::string label_;
    uint64_t total_, already_, done_;
    bool draw_, finished_ = false;
    Clock::time_point start_, last_draw_;
    std::deque<std::pair<Clock::time_point, uint64_t>> window_;  ///< (time, done) samples, last 5 s
};

/// "0.4 s", "42 s", "3 min 12 s", "1 h 02 min": a duration people read.
std::string format_duration(double seconds);

}  // namespace nitro::hub
