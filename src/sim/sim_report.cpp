#include "sim/sim_report.h"

#include "arch/summary.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>

namespace nitro {

namespace {

std::string bytes_or_dash(double b, bool known) { return known ? format_bytes(static_cast<uint64_t>(b + 0.5)) : "-"; }

std::string pct(double x) { return fmt::format("{:.2f} %", 100.0 * x); }

std::string xml_escape(const std::string& s) {
    std::string o;
    for (char c : s) {
        switch (c) {
            case '<': o += "&lt;"; break;
            case '>': o += "&gt;"; break;
            case '&': o += "&amp;"; break;
            case '"': o += "&quot;"; break;
            default: o += c;
        }
    }
    return o;
}

}  // namespace

std::string sim_report_text(const SimReport& r) {
    const bool known = r.bytes_per_slot_all_layers > 0;
    std::string o;
    const TraceHeader& h = r.header;
    o += fmt::format("trace: model '{}' (file hash {:016x}), {} layers x {} experts, top-{}\n",
                     h.model_name.empty() ? "?" : h.model_name, h.model_hash, h.n_layer, h.n_expert, h.n_expert_used);
    o += fmt::format("       {} records, {} tokens, {} expert requests\n", r.records, r.tokens, r.accesses);
    if (known)
        o += fmt::format("expert bytes: {} per slot (largest layer), {} for one slot in every layer\n",
                         format_bytes(h.bytes_per_expert()), format_bytes(r.bytes_per_slot_all_layers));
    else
        o += "expert bytes: unknown (no sizes in the trace header; give -m MODEL for bytes and VRAM)\n";
    o += fmt::format("static profile: {}; working-set window {} tokens\n", r.profile_source, r.ws_window);
    o += "Hit rates, bytes and coverage are SIMULATED from the trace's routing; replay speed is MEASURED.\n\n";

    o += fmt::format("{:<16} {:>6} {:>11} {:>9} {:>10} {:>12} {:>12} {:>9} {:>11} {:>14}\n", "policy", "slots",
                     "VRAM", "hit rate", "gap to OPT", "H2D/token", "CPU/token", "WS cover", "admissions",
                     "replay speed");
    for (const SimResult& s : r.results)
        o += fmt::format("{:<16} {:>6} {:>11} {:>9} {:>7.2f} pt {:>12} {:>12} {:>9} {:>11} {:>8.1f} M/s\n", s.policy,
                         s.capacity, bytes_or_dash(static_cast<double>(s.vram_bytes), known), pct(s.hit_rate),
                         s.gap_to_opt_points, bytes_or_dash(s.h2d_bytes_per_token, known),
                         bytes_or_dash(s.cpu_bytes_per_token, known), r.ws_window ? pct(s.ws_coverage) : "-",
                         s.admissions, s.accesses_per_second() / 1e6);
    bool any_preload = false;
    for (const SimResult& s : r.results) any_preload |= s.preloaded > 0 && s.policy != "opt";
    if (any_preload)
        o += "(static slots are filled once before the first token; their bytes are not in H2D/token)\n";

    o += "\nBest online policy per VRAM budget (OPT is the offline upper bound):\n";
    o += fmt::format("{:>6} {:>11} {:<16} {:>9} {:>9}\n", "slots", "VRAM", "policy", "hit rate", "OPT");
    for (const BestPolicy& b : r.best)
        o += fmt::format("{:>6} {:>11} {:<16} {:>9} {:>9}\n", b.capacity,
                         bytes_or_dash(static_cast<double>(b.vram_bytes), known), b.policy, pct(b.hit_rate),
                         pct(b.opt_hit_rate));

    o += "\nRouter statistics per layer (shares of selections; entropy normalised to [0, 1]):\n";
    o += fmt::format("{:>6} {:>8} {:>8} {:>8} {:>8} {:>11} {:>8} {:>11} {:>13}\n", "layer", "tokens", "top10%",
                     "top20%", "top30%", "tok∩top10%", "entropy", "same 1st", "top-2 overlap");
    auto row = [&](const std::string& name, const LayerRouterStats& l) {
        o += fmt::format("{:>6} {:>8} {:>8} {:>8} {:>8} {:>11} {:>8.3f} {:>11} {:>13}\n", name, l.steps,
                         pct(l.top_share[0]), pct(l.top_share[1]), pct(l.top_share[2]), pct(l.tokens_touching_top10),
                         l.entropy, pct(l.same_first), pct(l.top2_overlap));
    };
    for (size_t i = 0; i < r.router.layers.size(); ++i) row(std::to_string(i), r.router.layers[i]);
    row("mean", r.router.mean);
    o += "(same 1st / top-2 overlap: token i+1 vs token i of the same sequence at the same layer)\n";

    o += "\nReuse distance (tokens since the same expert was last selected at that layer), all layers:\n";
    uint64_t total = 0;
    for (uint64_t c : r.router.mean.reuse) total += c;
    for (int b = 0; b < kReuseBuckets; ++b) {
        const uint64_t c = r.router.mean.reuse[b];
        const double share = total ? static_cast<double>(c) / total : 0;
        o += fmt::format("  {:>9}: {:>10} {:>8}  {}\n", reuse_bucket_label(b), c, pct(share),
                         std::string(static_cast<size_t>(share * 50 + 0.5), '#'));
    }
    return o;
}

nlohmann::json sim_report_json(const SimReport& r) {
    nlohmann::json results = nlohmann::json::array();
    for (const SimResult& s : r.results)
        results.push_back({{"policy", s.policy},
                           {"capacity", s.capacity},
                           {"vram_bytes", s.vram_bytes},
                           {"hits", s.hits},
                           {"accesses", s.accesses},
                           {"hit_rate", s.hit_rate},
                           {"admissions", s.admissions},
                           {"preloaded", s.preloaded},
                           {"bytes", {{"h2d_per_token", s.h2d_bytes_per_token},
                                      {"cpu_read_per_token", s.cpu_bytes_per_token},
                                      {"preload", s.preload_bytes}}},
                           {"gap_to_opt_points", s.gap_to_opt_points},
                           {"ws_coverage", s.ws_coverage},
                           {"replay_seconds", s.seconds},
                           {"replay_accesses_per_second", s.accesses_per_second()}});
    nlohmann::json best = nlohmann::json::array();
    for (const BestPolicy& b : r.best)
        best.push_back({{"capacity", b.capacity},
                        {"vram_bytes", b.vram_bytes},
                        {"policy", b.policy},
                        {"hit_rate", b.hit_rate},
                        {"opt_hit_rate", b.opt_hit_rate}});
    const TraceHeader& h = r.header;
    return {{"trace",
             {{"model_name", h.model_name},
              {"model_hash", fmt::format("{:016x}", h.model_hash)},
              {"n_layer", h.n_layer},
              {"n_expert", h.n_expert},
              {"n_expert_used", h.n_expert_used},
              {"records", r.records},
              {"tokens", r.tokens},
              {"accesses", r.accesses},
              {"bytes_per_expert_per_layer", h.bytes_per_expert_per_layer},
              {"bytes_per_slot_all_layers", r.bytes_per_slot_all_layers}}},
            {"profile", r.profile_source},
            {"ws_window", r.ws_window},
            {"results", results},
            {"best", best},
            {"router", router_stats_to_json(r.router)}};
}

std::string sim_report_csv(const SimReport& r) {
    std::string o =
        "policy,capacity,vram_bytes,hits,accesses,hit_rate,admissions,preloaded,h2d_bytes_per_token,"
        "cpu_bytes_per_token,gap_to_opt_points,ws_coverage\n";
    for (const SimResult& s : r.results)
        o += fmt::format("{},{},{},{},{},{:.6f},{},{},{:.1f},{:.1f},{:.4f},{:.6f}\n", s.policy, s.capacity, s.vram_bytes,
                         s.hits, s.accesses, s.hit_rate, s.admissions, s.preloaded, s.h2d_bytes_per_token,
                         s.cpu_bytes_per_token, s.gap_to_opt_points, s.ws_coverage);
    return o;
}

std::string sim_report_svg(const SimReport& r) {
    const int W = 760, H = 460, left = 70, right = 200, top = 50, bottom = 70;
    const int pw = W - left - right, ph = H - top - bottom;
    std::map<std::string, std::vector<std::pair<int, double>>> lines;
    std::vector<std::string> order;
    int cmin = 1 << 30, cmax = 0;
    for (const SimResult& s : r.results) {
        if (!lines.count(s.policy)) order.push_back(s.policy);
        lines[s.policy].push_back({s.capacity, s.hit_rate});
        cmin = std::min(cmin, s.capacity);
        cmax = std::max(cmax, s.capacity);
    }
    if (cmax == cmin) cmax = cmin + 1;
    auto X = [&](double c) { return left + pw * (c - cmin) / (cmax - cmin); };
    auto Y = [&](double rate) { return top + ph * (1.0 - rate); };
    static const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                   "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
    std::string o = fmt::format(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
        "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
        W, H, W, H);
    o += fmt::format("<text x=\"{}\" y=\"24\" font-size=\"15\">Expert cache hit rate vs capacity (SIMULATED): {}</text>\n",
                     left, xml_escape(r.header.model_name.empty() ? "trace" : r.header.model_name));
    // Grid and y axis (0..100 %).
    for (int i = 0; i <= 10; ++i) {
        const double y = Y(i / 10.0);
        o += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#e0e0e0\"/>\n", left, y,
                         left + pw, y);
        o += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{} %</text>\n", left - 6, y + 4, i * 10);
    }
    // X axis ticks: at most ~12 labels.
    const int span = cmax - cmin;
    const int step = std::max(1, (span + 11) / 12);
    const bool known = r.bytes_per_slot_all_layers > 0;
    for (int c = cmin; c <= cmax; c += step) {
        const double x = X(c);
        o += fmt::format("<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" stroke=\"#e0e0e0\"/>\n", x, top, x,
                         top + ph);
        o += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", x, top + ph + 16, c);
        if (known)
            o += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\" fill=\"#666\">{:.2g}</text>\n", x,
                             top + ph + 30, c * static_cast<double>(r.bytes_per_slot_all_layers) / 1073741824.0);
    }
    o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"black\"/>\n", left,
                     top, pw, ph);
    o += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", left + pw / 2, H - 14,
                     known ? "slots per layer (grey: VRAM for expert slots, GiB)" : "slots per layer");
    o += fmt::format("<text transform=\"translate(18,{}) rotate(-90)\" text-anchor=\"middle\">hit rate</text>\n",
                     top + ph / 2);
    for (size_t i = 0; i < order.size(); ++i) {
        const std::string& name = order[i];
        const char* color = colors[i % (sizeof colors / sizeof colors[0])];
        auto pts = lines[name];
        std::sort(pts.begin(), pts.end());
        std::string path;
        for (const auto& [c, rate] : pts) path += fmt::format("{:.1f},{:.1f} ", X(c), Y(rate));
        const bool dashed = name == "opt";
        o += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{} points=\"{}\"/>\n", color,
                         dashed ? " stroke-dasharray=\"6,4\"" : "", path);
        for (const auto& [c, rate] : pts)
            o += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", X(c), Y(rate), color);
        const int ly = top + 10 + 20 * static_cast<int>(i);
        o += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"2\"{}/>\n",
                         left + pw + 14, ly, left + pw + 40, ly, color, dashed ? " stroke-dasharray=\"6,4\"" : "");
        o += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", left + pw + 46, ly + 4, xml_escape(name));
    }
    o += "</svg>\n";
    return o;
}

}  // namespace nitro
