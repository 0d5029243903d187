#include "bench/bench_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace nitro {

namespace {

const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};

/// The value of figure `key` of a step record, or NaN when it has none.
double fig(const nlohmann::json& r, const char* key) {
    if (!r.contains("figures") || !r["figures"].contains(key)) return NAN;
    const auto& f = r["figures"][key];
    return f.contains("value") && f["value"].is_number() ? f["value"].get<double>() : NAN;
}

std::string cell(double v, const char* f = "{:.2f}") {
    return std::isnan(v) ? std::string("-") : fmt::format(fmt::runtime(f), v);
}

std::string series_name(const nlohmann::json& r, bool with_routing) {
    std::string s = r.value("mode", std::string("?"));
    if (r.contains("vram_budget_gib") && r["vram_budget_gib"].is_number())
        s += fmt::format(" {:g} GiB", r["vram_budget_gib"].get<double>());
    if (with_routing) s += ", " + r.value("routing", std::string("?"));
    return s;
}

/// "ladder", or "requests (N)" for a request-replay step.
std::string workload(const nlohmann::json& r) {
    if (r.value("workload", std::string("ladder")) != "requests") return "ladder";
    const int64_t n = r.contains("requests_file") ? r["requests_file"].value("requests", int64_t{0}) : 0;
    return fmt::format("requests ({})", n);
}

std::string md_escape(std::string s) {
    std::string r;
    for (char c : s) {
        if (c == '|') r += "\\|";
        else if (c == '\n') r += ' ';
        else r += c;
    }
    return r;
}

std::string ctx_label(double x) {
    const auto v = static_cast<int64_t>(x);
    return v >= 1024 && v % 1024 == 0 ? fmt::format("{}k", v / 1024) : std::to_string(v);
}

}  // namespace

std::string xml_escape(const std::string& s) {
    std::string r;
    for (char c : s) {
        switch (c) {
            case '&': r += "&amp;"; break;
            case '<': r += "&lt;"; break;
            case '>': r += "&gt;"; break;
            case '"': r += "&quot;"; break;
            case '\'': r += "&apos;"; break;
            default: r += c;
        }
    }
    return r;
}

std::string svg_line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                           const std::vector<ChartSeries>& series, const std::string& x_unit) {
    const double W = 720, H = 420, L = 70, R = 180, T = 40, B = 60;
    double x0 = INFINITY, x1 = -INFINITY, y1 = 0;
    for (const auto& s : series)
        for (const auto& [x, y] : s.points) {
            if (!(x > 0) || !std::isfinite(y)) continue;
            x0 = std::min(x0, std::log2(x));
            x1 = std::max(x1, std::log2(x));
            y1 = std::max(y1, y);
        }
    if (!std::isfinite(x0)) x0 = 0, x1 = 1;
    if (x1 - x0 < 1e-9) x0 -= 0.5, x1 += 0.5;
    if (y1 <= 0) y1 = 1;
    y1 *= 1.1;
    auto px = [&](double x) { return L + (std::log2(x) - x0) / (x1 - x0) * (W - L - R); };
    auto py = [&](double y) { return H - B - y / y1 * (H - T - B); };
    std::string o = fmt::format(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
        "font-family=\"sans-serif\" font-size=\"12\">\n"
        "<rect x=\"0\" y=\"0\" width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
        "<text x=\"{2}\" y=\"22\" font-size=\"15\">{3}</text>\n",
        W, H, L, xml_escape(title));
    // Axes, y grid (5 steps) and x ticks at every power of two in range.
    o += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"black\"/>\n", L, H - B, W - R);
    o += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"black\"/>\n", L, T, H - B);
    for (int i = 0; i <= 5; ++i) {
        const double y = y1 * i / 5;
        o += fmt::format("<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#ddd\"/>\n"
                         "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
                         L, py(y), W - R, L - 6, py(y) + 4, fmt::format("{:.4g}", y));
    }
    for (double e = std::ceil(x0 - 1e-9); e <= x1 + 1e-9; e += 1) {
        const double x = std::exp2(e);
        o += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"black\"/>\n"
                         "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
                         px(x), H - B, H - B + 5, H - B + 18, ctx_label(x));
    }
    o += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", (L + W - R) / 2, H - 15,
                     xml_escape(x_label));
    o += fmt::format("<text x=\"18\" y=\"{0}\" text-anchor=\"middle\" transform=\"rotate(-90 18 {0})\">{1}</text>\n",
                     (T + H - B) / 2, xml_escape(y_label));
    for (size_t i = 0; i < series.size(); ++i) {
        const char* c = kColors[i % std::size(kColors)];
        std::vector<std::pair<double, double>> pts;
        for (const auto& p : series[i].points)
            if (p.first > 0 && std::isfinite(p.second)) pts.push_back(p);
        std::sort(pts.begin(), pts.end());
        if (pts.size() > 1) {
            o += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"", c);
            for (size_t k = 0; k < pts.size(); ++k)
                o += fmt::format("{}{:.1f},{:.1f}", k ? " " : "", px(pts[k].first), py(pts[k].second));
            o += "\"/>\n";
        }
        for (const auto& [x, y] : pts)
            o += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"><title>{}: {:g} {}, {:.3g}</title></circle>\n",
                             px(x), py(y), c, xml_escape(series[i].name), x, xml_escape(x_unit), y);
        const double ly = T + 10 + 18.0 * static_cast<double>(i);
        o += fmt::format("<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"{3}\" stroke-width=\"2\"/>"
                         "<text x=\"{4}\" y=\"{5:.1f}\">{6}</text>\n",
                         W - R + 10, ly, W - R + 30, c, W - R + 36, ly + 4, xml_escape(series[i].name));
    }
    o += "</svg>\n";
    return o;
}

ReportFiles render_report(const std::vector<nlohmann::json>& records) {
    ReportFiles rep;
    std::vector<const nlohmann::json*> steps;
    for (const auto& r : records)
        if (r.value("record", std::string()) == "step") steps.push_back(&r);
    bool peer = false, peer_ttft = false, requests = false;
    std::vector<std::string> routings;
    for (const auto* s : steps) {
        if (!std::isnan(fig(*s, "ratio_decode_tok_s")) || !std::isnan(fig(*s, "ratio_prompt_tok_s"))) peer = true;
        if (!std::isnan(fig(*s, "peer_ttft_ms"))) peer_ttft = true;
        if (s->value("workload", std::string()) == "requests") requests = true;
        const std::string r = s->value("routing", std::string());
        if (std::find(routings.begin(), routings.end(), r) == routings.end()) routings.push_back(r);
    }
    const bool many_routings = routings.size() > 1;
    std::string& m = rep.markdown;
    m += "# nitro bench report\n\n";
    if (!records.empty() && records.front().contains("model")) {
        const auto& md = records.front()["model"];
        const nlohmann::json sha = md.value("file_sha256", nlohmann::json());
        m += fmt::format("Model `{}` (SHA-256 {}, n_ctx_train {}).", md.value("path", std::string()),
                         sha.is_string() ? sha.get<std::string>() : sha.dump(), md.value("n_ctx_train", int64_t{0}));
        if (records.front().contains("machine")) {
            const auto& mc = records.front()["machine"];
            m += fmt::format(" Machine: {} ({} cores, kernels {}).", mc.value("cpu_model", std::string()),
                             mc.value("cores", 0), mc.value("isa", std::string()));
        }
        m += "\n\n";
    }
    m += "A `ladder` step prefills a prompt of `context` tokens (the KV cache then holds that many positions) and decodes "
         "the generated tokens at that depth. MEASURED: read from a clock or a counter in the runs; CALCULATED: "
         "derived from measured figures (rates over several runs are total tokens / total seconds; ratios are "
         "nitro / peer from the mirrored runs of the step).";
    if (requests)
        m += " A `requests` step replays the saved requests one at a time against a nitro serve of `context` tokens: "
             "TTFT is the mean time to the first streamed text, decode tok/s the timed tokens (completion tokens - 1) "
             "over the timed seconds (first to last streamed text) of all requests, prompt tok/s the prompt tokens not "
             "served from a cache over the summed TTFTs.";
    m += " The routing column names the routing scenario (`replay:TRACE`: expert choices replayed from a trace, a "
         "benchmark-only mode whose outputs are not the model's; a peer routes as the file does).\n\n";
    m += "| mode | routing | VRAM budget | workload | context | runs | prompt tok/s (CALCULATED) | decode tok/s (CALCULATED) | TTFT ms (CALCULATED, mean) |";
    if (peer) m += " peer prompt tok/s (CALCULATED) | peer decode tok/s (CALCULATED) | ratio prompt (CALCULATED) | ratio decode (CALCULATED) |";
    if (peer_ttft) m += " peer TTFT ms (CALCULATED, mean) |";
    m += " status |\n|---|---|---|---|---:|---:|---:|---:|---:|";
    if (peer) m += "---:|---:|---:|---:|";
    if (peer_ttft) m += "---:|";
    m += "---|\n";
    for (const auto* s : steps) {
        const std::string budget = (*s).contains("vram_budget_gib") && (*s)["vram_budget_gib"].is_number()
                                       ? fmt::format("{:g} GiB", (*s)["vram_budget_gib"].get<double>())
                                       : std::string("-");
        std::string status = s->value("status", std::string("?"));
        if (!s->value("reason", std::string()).empty()) status += ": " + s->value("reason", std::string());
        if (!s->value("note", std::string()).empty()) status += " (" + s->value("note", std::string()) + ")";
        m += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} |", s->value("mode", std::string("?")),
                         md_escape(s->value("routing", std::string("-"))), budget, workload(*s), s->value("ctx", int64_t{0}),
                         s->value("runs", 0), cell(fig(*s, "prompt_tok_s")), cell(fig(*s, "decode_tok_s")),
                         cell(fig(*s, "ttft_ms"), "{:.1f}"));
        if (peer)
            m += fmt::format(" {} | {} | {} | {} |", cell(fig(*s, "peer_prompt_tok_s")), cell(fig(*s, "peer_decode_tok_s")),
                             cell(fig(*s, "ratio_prompt_tok_s"), "{:.3f}"), cell(fig(*s, "ratio_decode_tok_s"), "{:.3f}"));
        if (peer_ttft) m += fmt::format(" {} |", cell(fig(*s, "peer_ttft_ms"), "{:.1f}"));
        m += fmt::format(" {} |\n", md_escape(status));
    }
    // Charts: one line per mode and budget.
    auto chart = [&](const char* key, const char* title, const char* y_label, const char* file) {
        std::map<std::string, ChartSeries> by;
        std::vector<std::string> order;
        for (const auto* s : steps) {
            const double v = fig(*s, key);
            if (std::isnan(v)) continue;
            const std::string n = series_name(*s, many_routings);
            if (!by.count(n)) order.push_back(n), by[n].name = n;
            by[n].points.emplace_back(static_cast<double>(s->value("ctx", int64_t{0})), v);
        }
        std::vector<ChartSeries> ss;
        for (const auto& n : order) ss.push_back(by[n]);
        rep.svgs.emplace_back(file, svg_line_chart(title, "context (tokens, KV cache depth)", y_label, ss));
        m += fmt::format("\n![{0}]({1})\n", title, file);
    };
    m += "\n## Charts\n";
    chart("prompt_tok_s", "prompt (prefill) tok/s vs context, CALCULATED", "tok/s", "report-prompt.svg");
    chart("decode_tok_s", "decode tok/s vs context, CALCULATED", "tok/s", "report-decode.svg");
    if (peer) {
        chart("ratio_decode_tok_s", "decode ratio nitro / peer vs context, CALCULATED", "ratio", "report-ratio.svg");
        chart("ratio_prompt_tok_s", "prompt ratio nitro / peer vs context, CALCULATED", "ratio", "report-ratio-prompt.svg");
    }
    // Hit rate vs budget: one line per mode, routing and context, over the steps with a budget.
    {
        std::map<std::string, ChartSeries> by;
        std::vector<std::string> order;
        for (const auto* s : steps) {
            const double v = fig(*s, "expert_hit_rate");
            if (std::isnan(v) || !(*s).contains("vram_budget_gib") || !(*s)["vram_budget_gib"].is_number()) continue;
            const std::string n = fmt::format("{}, {}, ctx {}", s->value("mode", std::string("?")),
                                              s->value("routing", std::string("?")), ctx_label(static_cast<double>(s->value("ctx", int64_t{0}))));
            if (!by.count(n)) order.push_back(n), by[n].name = n;
            by[n].points.emplace_back((*s)["vram_budget_gib"].get<double>(), 100.0 * v);
        }
        if (!order.empty()) {
            std::vector<ChartSeries> ss;
            for (const auto& n : order) ss.push_back(by[n]);
            const char* title = "expert hit rate vs VRAM budget, CALCULATED (GPU selections / all)";
            rep.svgs.emplace_back("report-hit-rate.svg", svg_line_chart(title, "VRAM budget (GiB, log2 axis)", "% on the GPU", ss, "GiB"));
            m += fmt::format("\n![{0}]({1})\n", title, "report-hit-rate.svg");
        }
    }
    return rep;
}

}  // namespace nitro
