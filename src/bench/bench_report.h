// The report of a `nitro bench -o DIR` sweep (docs/bench.md): a Markdown table and SVG charts
// rendered from the step records of records.jsonl, with plain string formatting.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

namespace nitro {

struct ReportFiles {
    std::string markdown;                                    ///< report.md
    std::vector<std::pair<std::string, std::string>> svgs;  ///< (file name, SVG text)
};

/// Renders the records of a sweep (the "step" records are used; others are ignored): report.md
/// with one table row per step (figures labelled MEASURED or CALCULATED, skipped steps with
/// their reason), report-prompt.svg and report-decode.svg (tok/s vs context, one line per mode
/// and budget, and routing when there are several), report-ratio.svg and report-ratio-prompt.svg
/// (nitro / peer vs context) when a step has a peer ratio, and report-hit-rate.svg (expert hit
/// rate vs VRAM budget) when steps with a budget have one.
ReportFiles render_report(const std::vector<nlohmann::json>& records);

/// A line chart as a standalone SVG document: x on a log2 axis (context tokens), y linear from 0.
/// Text is XML-escaped. A series with no points draws nothing.
struct ChartSeries {
    std::string name;
    std::vector<std::pair<double, double>> points;  ///< (x, y), x > 0
};
/// `x_unit` names x in the points' tooltips.
std::string svg_line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                           const std::vector<ChartSeries>& series, const std::string& x_unit = "tokens");

/// `s` with & < > " ' as XML entities.
std::string xml_escape(const std::string& s);

}  // namespace nitro
