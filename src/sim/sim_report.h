// Output forms of a simulation: text table, JSON, CSV and an SVG chart (hit rate vs capacity).
// Schemas: docs/sim.md.
#pragma once

#include "sim/simulator.h"

#include <nlohmann/json_fwd.hpp>

#include <string>

namespace nitro {

/// The readable report: trace summary, results table (one row per policy and capacity), best
/// policy per VRAM budget, router statistics. Every figure carries its unit and its label
/// (SIMULATED / MEASURED).
std::string sim_report_text(const SimReport& r);
/// {"trace": {...}, "results": [...], "best": [...], "router": {...}}.
nlohmann::json sim_report_json(const SimReport& r);
/// One header line, then one line per result (policy, capacity, ... as in the JSON results).
std::string sim_report_csv(const SimReport& r);
/// A standalone SVG: hit rate (%) against capacity (slots per layer; VRAM GiB when known), one
/// line per policy.
std::string sim_report_svg(const SimReport& r);

}  // namespace nitro
