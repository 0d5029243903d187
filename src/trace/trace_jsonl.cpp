#include "trace/trace_jsonl.h"

#include "core/error.h"
#include "core/user_file.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <limits>
#include <map>

namespace nitro {

namespace {

struct Line {
    size_t line_no = 0;
    nlohmann::json problem;
    uint32_t pos = 0;
    uint32_t layer = 0;
    TracePhase phase = TracePhase::Decode;
    std::vector<int64_t> experts;
    std::vector<double> probs;
    bool has_probs = false;
};

int64_t get_int_field(const nlohmann::json& j, const char* key, const std::string& where, int64_t max) {
    auto it = j.find(key);
    if (it == j.end()) fail("{}: missing field \"{}\"", where, key);
    if (!it->is_number_integer()) fail("{}: field \"{}\" must be an integer, got {}", where, key, it->dump());
    const int64_t v = it->get<int64_t>();
    if (v < 0 || v > max) fail("{}: field \"{}\" = {} is out of range (0..{})", where, key, v, max);
    return v;
}

}  // namespace

Trace import_jsonl(std::istream& in, const std::string& name, const JsonlImportOptions& opt) {
    std::vector<Line> lines;
    std::string text;
    size_t line_no = 0;
    bool all_int_problems = true;
    while (std::getline(in, text)) {
        ++line_no;
        if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
        const std::string where = fmt::format("{}:{}", name, line_no);
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(text);
        } catch (const nlohmann::json::parse_error& e) {
            fail("{}: not valid JSON: {}", where, e.what());
        }
        if (!j.is_object()) fail("{}: expected a JSON object per line", where);
        Line l;
        l.line_no = line_no;
        auto pid = j.find("problem_id");
        if (pid == j.end()) fail("{}: missing field \"problem_id\"", where);
        l.problem = *pid;
        if (!(pid->is_number_integer() && pid->get<int64_t>() >= 0 &&
              pid->get<int64_t>() <= std::numeric_limits<uint32_t>::max()))
            all_int_problems = false;
        l.pos = static_cast<uint32_t>(get_int_field(j, "token_idx", where, std::numeric_limits<uint32_t>::max()));
        l.layer = static_cast<uint32_t>(get_int_field(j, "layer", where, 65534));
        auto ex = j.find("experts");
        if (ex == j.end() || !ex->is_array() || ex->empty())
            fail("{}: field \"experts\" must be a non-empty array of expert ids", where);
        for (const auto& e : *ex) {
            // n_expert is at most kNoExpert - 1 (trace.cpp), so an id is at most kNoExpert - 2.
            if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() >= kNoExpert - 1)
                fail("{}: expert id {} is not an integer in 0..{}", where, e.dump(), kNoExpert - 2);
            l.experts.push_back(e.get<int64_t>());
        }
        if (auto gp = j.find("gating_probs"); gp != j.end() && !gp->is_null()) {
            if (!gp->is_array()) fail("{}: field \"gating_probs\" must be an array of numbers", where);
            for (const auto& p : *gp) {
                if (!p.is_number()) fail("{}: gating_probs entry {} is not a number", where, p.dump());
                l.probs.push_back(p.get<double>());
            }
            l.has_probs = true;
        }
        if (auto ph = j.find("phase"); ph != j.end()) {
            if (*ph == "prefill") l.phase = TracePhase::Prefill;
            else if (*ph == "decode") l.phase = TracePhase::Decode;
            else fail("{}: field \"phase\" must be \"prefill\" or \"decode\", got {}", where, ph->dump());
        }
        lines.push_back(std::move(l));
    }
    if (in.bad()) fail("{}: cannot read the input after line {}", name, line_no);
    if (lines.empty()) fail("{}: no records", name);

    // Header: from the model, else inferred from the lines.
    Trace t;
    TraceHeader& h = t.header;
    uint32_t max_layer = 0, max_id = 0;
    for (const Line& l : lines) {
        max_layer = std::max(max_layer, l.layer);
        for (int64_t e : l.experts) max_id = std::max(max_id, static_cast<uint32_t>(e));
    }
    const size_t k = lines.front().experts.size();
    h.has_weights = lines.front().has_probs;
    if (opt.model) {
        h = *opt.model;
        h.has_weights = lines.front().has_probs;
        if (k != h.n_expert_used)
            fail("{}:{}: {} experts per record but model '{}' uses {}", name, lines.front().line_no, k,
                 h.model_name, h.n_expert_used);
    } else {
        h.n_layer = opt.n_layer ? opt.n_layer : max_layer + 1;
        h.n_expert = opt.n_expert ? opt.n_expert : max_id + 1;
        h.n_expert_used = static_cast<uint32_t>(k);
        // A full distribution in gating_probs tells n_expert even if the top ids never reach it.
        if (!opt.n_expert && h.has_weights && lines.front().probs.size() != k)
            h.n_expert = std::max<uint32_t>(h.n_expert, static_cast<uint32_t>(lines.front().probs.size()));
    }
    h.validate(name);

    std::map<std::string, uint32_t> problem_ids;
    std::vector<ExpertId> ids(k);
    std::vector<float> w;
    PositionOrder order(h.n_layer);
    for (const Line& l : lines) {
        const std::string where = fmt::format("{}:{}", name, l.line_no);
        if (l.experts.size() != k)
            fail("{}: {} experts, but the first record has {} (n_expert_used must be the same everywhere)", where,
                 l.experts.size(), k);
        if (l.has_probs != h.has_weights)
            fail("{}: gating_probs {} here but {} in the first record (either every line has them or none)", where,
                 l.has_probs ? "present" : "absent", h.has_weights ? "present" : "absent");
        uint32_t seq;
        if (all_int_problems) {
            seq = static_cast<uint32_t>(l.problem.get<int64_t>());
        } else {
            auto [it, inserted] = problem_ids.try_emplace(l.problem.dump(), static_cast<uint32_t>(problem_ids.size()));
            seq = it->second;
        }
        for (size_t i = 0; i < k; ++i) ids[i] = static_cast<ExpertId>(l.experts[i]);
        w.clear();
        if (h.has_weights) {
            if (l.probs.size() == k) {
                for (double p : l.probs) w.push_back(static_cast<float>(p));
            } else if (l.probs.size() == h.n_expert) {
                for (ExpertId e : ids) w.push_back(static_cast<float>(l.probs[e]));
            } else {
                fail("{}: gating_probs has {} entries, expected {} (one per selected expert) or {} (n_expert)", where,
                     l.probs.size(), k, h.n_expert);
            }
        }
        const TraceRecordIn r{seq, l.pos, l.phase, l.layer, ids, w};
        std::string why = validate_record(h, r);
        if (why.empty()) why = order.check(seq, l.layer, l.pos);
        if (!why.empty()) fail("{}: {}", where, why);
        t.append(r);
    }
    return t;
}

Trace import_jsonl_file(const std::string& path, const JsonlImportOptions& opt) {
    std::ifstream f = open_user_file(path, "JSON Lines trace");
    return import_jsonl(f, path, opt);
}

void export_jsonl(const Trace& t, std::ostream& out) {
    std::string line;
    for (size_t i = 0; i < t.size(); ++i) {
        line = fmt::format("{{\"problem_id\":{},\"token_idx\":{},\"layer\":{},\"experts\":[{}]", t.seq[i], t.pos[i],
                           t.layer[i], fmt::join(t.record_ids(i), ","));
        if (!t.weights.empty()) {
            line += ",\"gating_probs\":[";
            const auto w = t.record_weights(i);
            for (size_t j = 0; j < w.size(); ++j) {
                if (j) line += ',';
                line += fmt::format("{}", w[j]);  // shortest round-trip form of the float
            }
            line += ']';
        }
        line += fmt::format(",\"phase\":\"{}\"}}\n", trace_phase_name(t.phase[i]));
        out << line;
    }
}

}  // namespace nitro
