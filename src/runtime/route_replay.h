// Routing scenarios of `nitro bench` (docs/bench.md, "Routing scenarios") and the replay of a
// router trace into an engine's router (`--routing replay:TRACE`).
//
// A replay is a BENCHMARK-ONLY mode: the engine computes its router logits as usual (so the
// router's cost stays in the timing), then overwrites them with logits that make its own top-k
// select the trace's experts, in the trace's router order, with the trace's weights. Everything
// downstream (expert placement, the CPU/GPU split, hit counters, route events) sees the trace's
// choices, so a synthetic model of a real shape runs with the temporal locality of a trained
// model's routing. The text it generates is NOT the model's output.
//
// Crafted logits (before the engine adds the router bias b): for the selected experts j in router
// order, t_j - b_j with t_j = ln(w_j), made strictly decreasing by at least 1e-4 (so top-k keeps the
// order even after rounding and for equal weights); every other expert -1e4 - b_e. Then softmax over
// the selected logits (gpt-oss) gives w_j / sum(w) and softmax over all experts with renormalisation
// (qwen3moe) gives the same, both to ~1e-4; weights are 1/k for a trace without weights.
#pragma once

#include "runtime/model.h"
#include "trace/trace.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace nitro {

/// The routing the model file itself gives, as a scenario name: "zipf:S" when `nitro synth
/// --router-skew zipf:S` wrote it (metadata nitro.synth.router_skew_zipf), "uniform" for another
/// `nitro synth` file (general.name "synth-*": random router weights, no deliberate skew), and
/// "model" for any other file (the trained router's own routing).
std::string file_routing(const Model& model);

/// The trace file of `replay:TRACE`: TRACE itself when it exists or names a path (has a '/'), else
/// the committed trace bench/traces/TRACE.nmtr of the checkout (e.g. replay:gpt-oss-20b). Throws
/// nitro::Error listing where it looked when neither exists.
std::string resolve_replay_trace(const std::string& trace);

/// One routing scenario of a sweep.
struct RoutingScenario {
    std::string name;   ///< "model", "uniform", "zipf:S" or "replay:TRACE" (named in every record)
    std::string trace;  ///< the trace path of a replay ("" otherwise)
};
/// Parses --routing items against the model: "file" is the file's own routing (file_routing);
/// "uniform", "zipf:S" and "model" must be what the file gives (they name it, they cannot change
/// it: the router bias is in the file; `nitro synth --router-skew` makes such files); "replay:TRACE"
/// replays that trace (resolve_replay_trace; checked now: it must read and match the model's
/// n_layer, n_expert and n_expert_used). Throws nitro::Error saying which item is wrong and why.
std::vector<RoutingScenario> parse_routing_scenarios(const std::string& list, const Model& model);

/// A router trace prepared for replay into an engine (see the top of this file).
class RouteReplay {
public:
    /// Reads and validates `trace_path` (binary .nmtr or JSON Lines) and checks it against the
    /// model's shape. Throws nitro::Error naming the trace: unreadable, invalid, another shape,
    /// a token missing a layer, or no records.
    RouteReplay(const std::string& trace_path, const Model& model);
    /// The same from a trace in memory (`name` is used in messages).
    RouteReplay(const Trace& trace, const Model& model, const std::string& name);

    /// Chooses the trace tokens for the next forward chunk: row i takes the next prefill token of
    /// the trace when prefill[i] is nonzero, else the next decode token. Each list cycles (a trace
    /// without prefill tokens serves prefill rows from its decode tokens, and the other way).
    void next_chunk(std::span<const uint8_t> prefill);
    /// The same for n rows that are all prefill (n > 1) or one decode row (n == 1).
    void next_chunk(int64_t n);
    /// Router logits [rows, n_expert] of layer `layer` for the rows chosen by next_chunk, to be
    /// given to the engine's router in place of its own (the router bias is then added by it).
    void fill_logits(int layer, float* logits) const;
    /// The trace's experts [n_expert_used] of chosen row `row` at `layer`, in router order.
    std::span<const int32_t> row_experts(int64_t row, int layer) const;

    int64_t rows() const { return static_cast<int64_t>(chosen_.size()); }
    int n_layer() const { return n_layer_; }
    int n_expert() const { return n_expert_; }
    int n_expert_used() const { return k_; }
    const std::string& name() const { return name_; }
    /// Tokens of each phase in the trace, and how many have been replayed (counting repeats).
    int64_t prefill_tokens() const { return static_cast<int64_t>(prefill_.size()); }
    int64_t decode_tokens() const { return static_cast<int64_t>(decode_.size()); }
    int64_t prefill_replayed() const { return prefill_used_; }
    int64_t decode_replayed() const { return decode_used_; }

private:
    void init(const Trace& trace, const Model& model);

    std::string name_;
    int n_layer_ = 0, n_expert_ = 0, k_ = 0;
    std::vector<int32_t> ids_;       ///< [tokens, n_layer, k] experts of every trace token
    std::vector<float> target_;      ///< [tokens, n_layer, k] target logits t_j (strictly decreasing)
    std::vector<int64_t> prefill_, decode_;  ///< trace tokens of each phase, in trace order
    int64_t prefill_used_ = 0, decode_used_ = 0;
    std::vector<int64_t> chosen_;    ///< trace token of each row of the current chunk
    std::vector<std::vector<float>> bias_;  ///< [n_layer][n_expert] router bias (empty: none)
};

}  // namespace nitro
