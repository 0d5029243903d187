// Progress on stderr for long steps (reading the weights, writing a synth model): a line that
// rewrites itself on a terminal, with the rate and the time left.
//   loading weights  42% (5.04 GiB of 12.00 GiB, 1.61 GiB/s, 4 s left)
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace nitro::cli {

/// "42% (5.04 GiB of 12.00 GiB, 1.61 GiB/s, 4 s left)": the figures of a progress line. The rate
/// needs elapsed_s > 0; the time left also needs done > 0.
std::string progress_figures(uint64_t done, uint64_t total, double elapsed_s);

class ProgressLine {
public:
    /// `label` starts the line. `live`: rewrite one line (a terminal); otherwise `every_pct` > 0
    /// prints a line per that many percent (logs), 0 prints nothing until finish().
    ProgressLine(std::string label, bool live, int every_pct = 0);
    /// Reports progress; prints at most every 100 ms on a terminal.
    void update(uint64_t done, uint64_t total);
    /// Ends the live line (a newline) so the next message starts clean.
    void finish();
    double elapsed_s() const;

private:
    std::string label_;
    bool live_;
    int every_pct_;
    int last_pct_ = -1;
    bool printed_ = false;
    std::chrono::steady_clock::time_point t0_, last_;
};

}  // namespace nitro::cli
