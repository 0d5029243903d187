// The types every engine shares with its callers: session options, multi-sequence batches, route
// events, the CPU MoE step's work counters. (runtime/engine.h is the interface; runtime/
// sequence_engine.h the engine above the forward pass.)
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string>

namespace nitro {

struct SessionOptions {
    int64_t n_ctx = 4096;    ///< context length, tokens (capped at the model's training context)
    int64_t n_ubatch = 512;  ///< prompt tokens per forward chunk
    int n_threads = 0;       ///< CPU threads (0 = all hardware threads)
    int n_seq = 1;           ///< sequences held, each with its own K/V of n_ctx positions (server --parallel)
    /// Models with recurrent (Gated DeltaNet) layers: snapshots of a sequence's recurrent state kept
    /// for prefix reuse, the newest ones (runtime/sequence_engine.h SnapshotPolicy: the CPU takes
    /// one after every forward chunk in which the sequence had several rows; the GPU engine one at
    /// the end of every multi-token evaluation). Truncating to a position without one recomputes
    /// from the nearest earlier snapshot.
    int n_checkpoints = 4;
    /// K/V cache element types (-ctk/-ctv, llama.cpp's names). The engines hold f16 only; the
    /// command line refuses any other value (cli/llama_compat.cpp check_cache_type).
    std::string cache_type_k = "f16", cache_type_v = "f16";
};

/// Rows of a multi-sequence batch (Engine::eval_batch): row i appends
/// tokens[i] to sequence seq[i] at that sequence's next position. The rows of one sequence are in
/// order; rows of different sequences may interleave.
struct SeqBatch {
    std::span<const int32_t> tokens;  ///< [n] token ids
    std::span<const int32_t> seq;     ///< [n] sequence of each row, in [0, n_seq)
    std::span<const uint8_t> logits;  ///< [n] nonzero: return this row's logits; empty: no row's
};

/// Checks a batch before an engine touches its cache, so a bad batch changes nothing: rows, their
/// sequence ids (n_past.size() sequences), token ids (< n_vocab), and that no sequence would pass
/// n_ctx positions (n_past: each sequence's positions so far). Returns the number of rows whose
/// logits are wanted. Throws nitro::Error naming the first problem.
int64_t check_seq_batch(const SeqBatch& b, std::span<const int64_t> n_past, int64_t n_vocab, int64_t n_ctx);

/// Routing of one token at one layer, after the router's output is final (what traces record).
struct RouteEvent {
    int64_t pos;                       ///< token position in the sequence
    int layer;
    bool prefill;                      ///< part of a multi-token chunk of its sequence
    std::span<const int32_t> experts;  ///< selected expert ids, router order (n_expert_used)
    std::span<const float> weights;    ///< their weights
    /// Router logit of the last selected expert minus the best unselected one (nats, >= 0): how
    /// close this choice was to a different expert set. Rounding differences between engines or
    /// ISA levels (~1e-3 here) can swap experts only where it is that small.
    float margin = INFINITY;
    int seq = 0;                       ///< the sequence (eval_batch; 0 for eval)
};

/// Routed-expert work of the CPU MoE step, summed over layers and forward chunks since
/// construction: how much batching rows of several sequences shares expert weight reads.
struct MoeWork {
    uint64_t experts = 0;  ///< distinct experts computed, per layer per chunk (each expert's weights read once)
    uint64_t rows = 0;     ///< (token, expert) pairs computed
    uint64_t bytes = 0;    ///< expert weight bytes read
};

}  // namespace nitro
