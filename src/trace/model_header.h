// Trace headers from a GGUF model: name, file hash and the shape the trace must match.
#pragma once

#include "gguf/gguf.h"
#include "trace/trace.h"

#include <cstdint>

namespace nitro {

/// XXH3-64 of the model's bytes: every shard's whole file, in shard order, as one stream.
/// Reads the whole model once (about a second per 10 GB from the page cache).
uint64_t model_file_hash(const GgufModel& model);

/// A header for traces of `model`: general.name (or the file name), model_file_hash, n_layer,
/// n_expert, n_expert_used and routed-expert bytes per layer from summarize_model. Throws
/// nitro::Error naming the file if it is not a MoE model nitro can read (no expert_count).
TraceHeader trace_header_from_model(const GgufModel& model, bool has_weights);

/// Checks that `trace` was captured from a model of `model_header`'s shape (n_layer, n_expert,
/// n_expert_used); throws nitro::Error naming both otherwise. Returns false (and changes nothing)
/// if both hashes are known and differ: same shape, different file.
bool check_trace_matches_model(const TraceHeader& trace, const TraceHeader& model_header);

}  // namespace nitro
