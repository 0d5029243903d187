// Router traces: for every (sequence, token, layer) the experts the router selected, in router
// order, and optionally their weights. The binary file format is in trace_file.h and
// docs/trace-format.md; JSON Lines import/export in trace_jsonl.h.
//
// Validation rules (the same on write, on read and on import; see validate_record):
//   - layer < n_layer, a layer with routed experts; phase is prefill or decode;
//   - exactly n_expert_used ids, each < the layer's n_expert, no id twice in a record;
//   - weights (if the trace has them) finite and >= 0;
//   - for each (sequence, layer), token positions strictly increase in file order.
// Steps: records are grouped into steps by (sequence, position) in order of first appearance;
// a step may lack some layers (gaps), and the simulator replays each layer's records in file order.
#pragma once

#include "core/ids.h"

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace nitro {

/// Whether a record was produced while evaluating the prompt or while generating.
enum class TracePhase : uint8_t { Prefill = 0, Decode = 1 };
const char* trace_phase_name(TracePhase p);

/// What a trace was captured from: model identity and shape.
struct TraceHeader {
    std::string model_name;             ///< general.name or the file name; may be empty
    uint64_t model_hash = 0;            ///< XXH3-64 of the model file(s) (model_file_hash); 0 = unknown
    uint32_t n_layer = 0;               ///< the model's layers (record.layer < n_layer)
    uint32_t n_expert = 0;              ///< routed experts of a layer that has them (ids < n_expert), 1..65534
    uint32_t n_expert_used = 0;         ///< experts per record (top-k), 1..n_expert
    bool has_weights = false;           ///< records carry router weights
    /// Bytes of one expert in each layer (gate+up+down weights and biases); empty or zeros = unknown.
    std::vector<uint64_t> bytes_per_expert_per_layer;
    /// Routed experts of each layer: n_expert, or 0 for a layer without routed experts (a dense FFN
    /// layer, e.g. DeepSeek's first three), which has no records. Empty: every layer has n_expert
    /// (version 1 files).
    std::vector<uint32_t> layer_n_expert;

    /// Routed experts of `layer` (0: none).
    uint32_t experts_of(uint32_t layer) const {
        return layer_n_expert.empty() ? n_expert : layer < layer_n_expert.size() ? layer_n_expert[layer] : 0;
    }

    /// Bytes of one expert of `layer`, 0 if unknown.
    uint64_t expert_bytes(uint32_t layer) const {
        return layer < bytes_per_expert_per_layer.size() ? bytes_per_expert_per_layer[layer] : 0;
    }
    /// Max over layers (the size of one VRAM slot), bytes; 0 if unknown.
    uint64_t bytes_per_expert() const;
    /// Throws nitro::Error (prefixed by `where`) if the shape is out of range.
    void validate(const std::string& where) const;
};

/// One record as the engine produces it (a view; nothing is owned).
struct TraceRecordIn {
    uint32_t seq = 0;                   ///< sequence (request / problem) id
    uint32_t pos = 0;                   ///< token position within the sequence
    TracePhase phase = TracePhase::Decode;
    uint32_t layer = 0;
    std::span<const ExpertId> ids;      ///< [n_expert_used] router order
    std::span<const float> weights;     ///< [n_expert_used] or empty when the trace has none
};

/// Checks one record against the header (not position order). Returns an empty string if valid,
/// else what is wrong ("expert id 17 >= n_expert 16").
std::string validate_record(const TraceHeader& h, const TraceRecordIn& r);

/// Tracks the last position of each (sequence, layer) to enforce increasing positions.
class PositionOrder {
public:
    explicit PositionOrder(uint32_t n_layer = 0) : n_layer_(n_layer) {}
    /// Returns an empty string and records `pos`, or says why the position is out of order.
    std::string check(uint32_t seq, uint32_t layer, uint32_t pos);

private:
    uint32_t n_layer_;
    std::unordered_map<uint32_t, std::vector<int64_t>> last_;  // seq -> [n_layer] last pos (-1)
};

/// A whole trace in memory, column by column (record i: seq[i], pos[i], ...).
class Trace {
public:
    TraceHeader header;
    std::vector<uint32_t> seq;
    std::vector<uint32_t> pos;
    std::vector<TracePhase> phase;
    std::vector<uint16_t> layer;
    std::vector<ExpertId> ids;          ///< [size() * n_expert_used]
    std::vector<float> weights;         ///< [size() * n_expert_used] or empty (no weights)

    size_t size() const { return seq.size(); }
    /// The ids of record i.
    std::span<const ExpertId> record_ids(size_t i) const {
        return {ids.data() + i * header.n_expert_used, header.n_expert_used};
    }
    std::span<const float> record_weights(size_t i) const {
        if (weights.empty()) return {};
        return {weights.data() + i * header.n_expert_used, header.n_expert_used};
    }
    TraceRecordIn record(size_t i) const {
        return {seq[i], pos[i], phase[i], layer[i], record_ids(i), record_weights(i)};
    }
    /// Appends a record after validating it (record rules and position order). Throws
    /// nitro::Error "record N: ..." naming the first broken rule.
    void append(const TraceRecordIn& r);
    /// Validates every record (for traces built column by column). Throws like append().
    void validate_all() const;
    /// Step index of every record: records are grouped by (seq, pos) in order of first appearance.
    /// `n_steps` receives the number of distinct steps (tokens).
    std::vector<uint32_t> step_index(size_t* n_steps) const;

private:
    PositionOrder order_;
    size_t order_records_ = 0;  // records order_ has seen
};

}  // namespace nitro
