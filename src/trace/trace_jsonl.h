// Router traces as JSON Lines: one object per (token, layer).
//
//   {"problem_id": 3, "token_idx": 17, "layer": 5, "experts": [12, 7, 40, 2],
//    "gating_probs": [0.41, 0.27, 0.19, 0.13], "phase": "decode"}
//
// problem_id   the sequence: an integer in [0, 2^32) or any other JSON value (strings are mapped
//              to 0, 1, 2, ... in order of first appearance; then every id is mapped that way)
// token_idx    token position within the sequence, integer >= 0
// layer        MoE layer, integer >= 0
// experts      selected expert ids in router order (n_expert_used of them, the same in every line)
// gating_probs optional: the router weights of `experts` (same length), or the full distribution
//              over all n_expert experts (then the weights of `experts` are taken from it). Either
//              every line has it or none does.
// phase        optional, "prefill" or "decode" (default "decode"); nitro's export writes it.
// Blank lines are skipped. Layers may be missing for some tokens (gaps). Records must follow the
// rules of trace.h (positions increase per (problem, layer), ids in range, no duplicates).
#pragma once

#include "trace/trace.h"

#include <istream>
#include <ostream>
#include <string>

namespace nitro {

/// How to fill the header of an imported trace.
struct JsonlImportOptions {
    /// Shape and identity from a model (trace_header_from_model); when set, n_layer / n_expert /
    /// n_expert_used must agree with the lines. When absent: n_layer = max layer + 1, n_expert =
    /// max id + 1 (or the options below), n_expert_used = length of the first `experts`.
    const TraceHeader* model = nullptr;
    uint32_t n_layer = 0;   ///< overrides the inferred n_layer when > 0
    uint32_t n_expert = 0;  ///< overrides the inferred n_expert when > 0
};

/// Reads JSON Lines from `in` (`name` is used in messages). Throws nitro::Error "NAME:LINE: ..."
/// for malformed JSON, a missing or mistyped field, or a record that breaks a trace rule.
Trace import_jsonl(std::istream& in, const std::string& name, const JsonlImportOptions& opt = {});
/// Same, from a file.
Trace import_jsonl_file(const std::string& path, const JsonlImportOptions& opt = {});

/// Writes one line per record in file order with problem_id (= sequence id), token_idx, layer,
/// experts, gating_probs (if the trace has weights) and phase.
void export_jsonl(const Trace& trace, std::ostream& out);

}  // namespace nitro
