// The engine above the forward pass, written once (docs/architecture.md, "The engine"): what an
// engine does with the sequences it holds, whatever runs the forward pass underneath.
//
//   - sequences: each one's positions, and for models with a recurrent state (Gated DeltaNet) its
//     token history and snapshots of its state for prefix reuse;
//   - eval: one sequence's tokens in forward chunks of n_ubatch rows, or in layer-major groups
//     where the executor plans them (the hybrid's long prompts);
//   - eval_batch: rows of several sequences, checked before anything changes, in chunks of n_ubatch
//     rows whose rows are grouped by sequence (ChunkArgs::groups), logits in the batch's order;
//   - truncation: a sequence forgets positions; a recurrent state, which cannot be cut back, is
//     restored from the newest snapshot at or before the cut and the tokens after it are evaluated
//     again;
//   - route events (traces, the web page) and route replay (benchmarks).
//
// An executor derives from it and supplies the forward pass over a chunk (exec_chunk, and
// exec_group for layer-major groups) and save / restore / reset of one sequence's recurrent state:
// the CPU Session (runtime/session.h) and the CUDA GpuSession (gpu/gpu_session.h).
#pragma once

#include "runtime/engine.h"
#include "runtime/forward.h"
#include "runtime/model_spec.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace nitro {

/// When the engine copies a sequence's recurrent state for prefix reuse: the copy costs a memcpy
/// on the CPU and a device-to-host copy and a synchronisation on the GPU.
enum class SnapshotPolicy {
    EveryChunk,     ///< after every forward chunk in which the sequence had several rows (CPU)
    EndOfEval,      ///< at the end of every eval / eval_batch that gave the sequence several rows (GPU)
};

class SequenceEngine : public Engine {
public:
    ~SequenceEngine() override;

    void eval(std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits) final;
    int64_t n_past() const final { return n_past_[0]; }
    int64_t n_ctx() const final { return spec_.n_ctx; }
    void truncate(int64_t n) final { seq_truncate(0, n); }
    int n_seq() const final { return static_cast<int>(n_past_.size()); }
    /// Rows of several sequences in forward chunks of at most n_ubatch rows (rows grouped by
    /// sequence inside a chunk). logits: [r, n_vocab], one row per batch row with a nonzero logits
    /// flag, in row order (r = 0: empty). Throws nitro::Error (naming the row or sequence) if the
    /// sizes disagree, a sequence or token id is out of range, or a sequence would overflow the
    /// context; the engine is unchanged then.
    void eval_batch(const SeqBatch& b, std::vector<float>& logits) final;
    int64_t seq_n_past(int seq) const final;
    /// Forgets positions >= n of sequence `seq`. Throws nitro::Error unless 0 <= n <= its n_past
    /// and seq is in [0, n_seq). With recurrent layers the sequence's state is restored from its
    /// newest snapshot at a position <= n (or the initial state) and the tokens from there to n are
    /// evaluated again (their ids are kept), so the engine then holds exactly the state of a run
    /// over the first n tokens.
    void seq_truncate(int seq, int64_t n) final;
    /// Positions at which sequence `seq` has recurrent-state snapshots, oldest first (empty without
    /// recurrent layers). For tests and diagnostics.
    std::vector<int64_t> seq_checkpoints(int seq) const;
    /// Tokens evaluated again by seq_truncate since construction.
    int64_t recomputed_tokens() const { return recomputed_tokens_; }
    /// Host bytes of the snapshots of every sequence.
    uint64_t snapshot_bytes() const;

    bool set_route_callback(std::function<void(const RouteEvent&)> cb) final;
    bool set_route_replay(std::shared_ptr<RouteReplay> replay) final;
    /// The routing replay in use (null: the router's own choices).
    const std::shared_ptr<RouteReplay>& route_replay() const { return replay_; }
    /// The executor's layer-major group size when it is more than n_ubatch (and no replay is set),
    /// else 0.
    int64_t prompt_group_tokens() const final;

    const ModelSpec& spec() const { return spec_; }

    /// Route replay (benchmarks): the trace's router logits [rows of the chunk, n_expert] of layer
    /// `layer` for the chunk being run, to replace the router's own (runtime/route_replay.h).
    bool replaying() const { return static_cast<bool>(replay_); }
    void replay_logits(int layer, float* logits) const;
    /// ", routing replayed from TRACE (outputs are not the model's)" while replaying, else "".
    std::string replay_note() const;

protected:
    /// n_seq sequences of spec.n_ctx positions; recurrent: the spec has recurrent layers (then the
    /// executor's state_* hooks are used and a history is kept); opt.n_checkpoints snapshots at most
    /// per sequence. Throws nitro::Error for a bad n_seq or n_checkpoints.
    SequenceEngine(ModelSpec spec, const SessionOptions& opt, SnapshotPolicy policy);

    // ---- what an executor supplies
    /// Runs one forward chunk (runtime/forward.h forward_chunk): logits as c.logits says, to `out`
    /// (host memory, [rows, n_vocab]; null: nowhere).
    virtual void exec_chunk(const ChunkArgs& c, float* out) = 0;
    /// Tokens of one layer-major group of a sequence's rows (runtime/forward.h forward_blocks), or 0
    /// when the executor runs none.
    virtual int64_t exec_group_tokens() const { return 0; }
    /// Runs c (rows of one sequence, more than n_ubatch, at most exec_group_tokens(); logits All,
    /// Last or None) as one layer-major group.
    virtual void exec_group(const ChunkArgs& c, float* out);
    /// One sequence's recurrent state: zeros (the initial state), to and from host memory.
    virtual void state_reset(int seq) {}
    virtual void state_save(int seq, std::vector<float>& out) {}
    virtual void state_restore(int seq, const std::vector<float>& in) {}
    /// Called after set_route_callback / set_route_replay (an executor that captured the old ones
    /// into CUDA graphs recaptures them).
    virtual void routing_changed() {}

    // ---- for executors
    /// Passes one routing decision to the callback installed with set_route_callback, if any.
    void route_event(const RouteEvent& e) const {
        if (on_route_) on_route_(e);
    }
    bool has_route_callback() const { return static_cast<bool>(on_route_); }

    const std::function<void(const RouteEvent&)>& route_callback() const { return on_route_; }
    /// Every sequence empty again (positions, history, snapshots, recurrent states): after an
    /// executor's warm-up.
    void reset_sequences();

    ModelSpec spec_;

private:
    struct Snapshot {
        int64_t pos;
        std::vector<float> state;
    };
    /// One sequence's rows (tokens) at its next positions: groups while more than a block is left
    /// and the executor plans groups, else n_ubatch chunks. logits: All (every row, [n, n_vocab]),
    /// Last (the last row) or None, to `out`.
    void eval_rows(int seq, std::span<const int32_t> tokens, ChunkArgs::Logits logits, float* out);
    /// Runs one chunk through the executor (exec_group when `group`), then advances the positions,
    /// keeps the history and takes the EveryChunk snapshots.
    void run(const ChunkArgs& c, bool group, float* out);
    /// A snapshot of sequence q's state at its current position.
    void snapshot(int q);

    SnapshotPolicy policy_;
    bool recurrent_ = false;
    int n_checkpoints_ = 0;
    std::vector<int64_t> n_past_;                     ///< [n_seq]
    std::vector<std::vector<int32_t>> history_;       ///< [n_seq] token ids held (recurrent models only)
    std::vector<std::vector<Snapshot>> snapshots_;    ///< [n_seq] newest last
    int64_t recomputed_tokens_ = 0;
    std::function<void(const RouteEvent&)> on_route_;
    std::shared_ptr<RouteReplay> replay_;
    // The chunk being built (reused).
    std::vector<int32_t> tok_, seq_;
    std::vector<int64_t> pos_, logit_rows_;
    std::vector<uint8_t> prefill_;
    std::vector<SeqGroup> groups_;
};

}  // namespace nitro
