// Synthetic router traces for a model's shape: Zipf-skewed expert popularity per layer, optional
// temporal locality and per-sequence drift. They let the simulator be exercised and demonstrated
// before live capture exists; they are not a substitute for real routing (label results SIMULATED
// on synthetic routing).
#pragma once

#include "trace/trace.h"

#include <cstdint>

namespace nitro {

/// Parameters of a synthetic trace.
struct SynthOptions {
    uint32_t n_sequences = 4;     ///< sequences (requests), written one after another
    uint32_t prompt_tokens = 32;  ///< prefill tokens per sequence (written layer-major, as the engine
                                  ///< evaluates a prompt block)
    uint32_t decode_tokens = 128; ///< generated tokens per sequence (written token by token)
    double zipf_s = 1.0;          ///< popularity skew: P(rank r) proportional to 1 / r^s, s >= 0
    double locality = 0.0;        ///< probability in [0, 1] that a pick repeats an expert of the same
                                  ///< layer's previous token (temporal locality)
    double drift = 0.0;           ///< share in [0, 1] of each layer's popularity ranking that is
                                  ///< reshuffled for each sequence (topic drift between requests)
    uint64_t seed = 1;            ///< same seed, same options, same shape: same trace, on any machine
    bool weights = true;          ///< write router weights (descending, summing to 1)
};

/// Generates a trace of `shape` (n_layer, n_expert, n_expert_used, bytes, model name/hash are
/// copied into the header). Throws nitro::Error for out-of-range options.
Trace synth_trace(const TraceHeader& shape, const SynthOptions& opt);

}  // namespace nitro
