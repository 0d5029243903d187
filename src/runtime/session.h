// A decoding session on the CPU: n_seq sequences (each with its own position and K/V), the KV
// cache, and the forward pass. eval/n_past/truncate work on sequence 0; eval_batch runs rows of
// several sequences in one forward chunk (continuous batching in the server): every op but
// attention is row-wise, so each row gets the logits it would get evaluated alone, bit for bit.
//
// The forward pass is layer-major over a chunk of up to n_ubatch tokens (prefill) or one token
// (decode). Per layer (llama.cpp llm_build_openai_moe_iswa / llm_build_qwen3moe):
//   h = rms_norm(x) ; q,k,v = h W (+ b) ; [q,k = rms_norm per head] ; rope(q, k) ;
//   x += attention(q, K/V cache) W_o (+ b_o) ;
//   h = rms_norm(x) ; router -> top-k experts and weights ; x += sum_j w_j * expert_j(h).
// Finally logits = rms_norm(x) W_out.
#pragma once

#include "cpu/matmul.h"
#include "cpu/moe.h"
#include "cpu/ops.h"
#include "runtime/forward.h"
#include "runtime/kv_cache.h"
#include "runtime/model.h"
#include "runtime/model_spec.h"
#include "runtime/recurrent_state.h"

#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace nitro {

class RouteReplay;

struct SessionOptions {
    int64_t n_ctx = 4096;    ///< context length, tokens (capped at the model's training context)
    int64_t n_ubatch = 512;  ///< prompt tokens per forward chunk
    int n_threads = 0;       ///< CPU threads (0 = all hardware threads)
    int n_seq = 1;           ///< sequences held, each with its own K/V of n_ctx positions (server --parallel)
    /// Models with recurrent (Gated DeltaNet) layers: snapshots of a sequence's recurrent state kept
    /// for prefix reuse, the newest ones (the CPU takes one after every forward chunk in which the
    /// sequence had several rows; the GPU engine one at the end of every multi-token evaluation).
    /// Truncating to a position without one recomputes from the nearest earlier snapshot.
    int n_checkpoints = 4;
    /// K/V cache element types (-ctk/-ctv, llama.cpp's names). The engines hold f16 only; the
    /// command line refuses any other value (cli/llama_compat.cpp check_cache_type).
    std::string cache_type_k = "f16", cache_type_v = "f16";
};

/// Rows of a multi-sequence batch (Session::eval_batch, Engine::eval_batch): row i appends
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
    int seq = 0;                       ///< the sequence (Session::eval_batch; 0 for eval)
};

/// Routed-expert work of the CPU MoE step, summed over layers and forward chunks since
/// construction: how much batching rows of several sequences shares expert weight reads.
struct MoeWork {
    uint64_t experts = 0;  ///< distinct experts computed, per layer per chunk (each expert's weights read once)
    uint64_t rows = 0;     ///< (token, expert) pairs computed
    uint64_t bytes = 0;    ///< expert weight bytes read
};

/// Parts of the forward pass timed by Session (wall-clock seconds, summed over layers and calls).
enum class Phase : int {
    Embed,         ///< token_embd rows, RoPE tables
    AttnProj,      ///< attn_norm, q/k/v projections (+ bias, q/k norm, RoPE, K/V cache append)
    Attention,     ///< scores, softmax and V sum over the KV cache
    AttnOut,       ///< attn_output projection and residual
    SsmProj,       ///< Gated DeltaNet: attn_norm, q/k/v, z, beta/alpha projections, decay and beta
    DeltaNet,      ///< Gated DeltaNet: causal conv1d, q/k l2 norm, the gated delta rule
    SsmOut,        ///< Gated DeltaNet: gated RMSNorm, ssm_out projection and residual
    Router,        ///< ffn_norm, ffn_gate_inp, top-k and expert weights
    ExpertGateUp,  ///< ffn_gate_exps and ffn_up_exps products (MUL_MAT_ID), grouping
    ExpertDown,    ///< activation, ffn_down_exps products
    MoeSum,        ///< weighted sum of the experts' outputs and residual
    SharedExpert,  ///< the shared expert (gate/up/down) and its sigmoid gate
    LmHead,        ///< output_norm and the output (LM head) product
    Count
};
/// Name of a phase as `nitro bench` prints it, e.g. "expert gate/up".
const char* phase_name(Phase p);
using PhaseTimes = std::array<double, static_cast<size_t>(Phase::Count)>;

class Session {
public:
    /// Throws nitro::Error if n_ctx, n_ubatch or n_seq is not positive.
    Session(const Model& model, const SessionOptions& opt);
    ~Session();

    /// Runs `tokens` at positions n_past() .. n_past() + n - 1 of sequence 0 and appends them to
    /// its cache, in chunks of n_ubatch tokens. logits: [n, n_vocab] when all_logits, else
    /// [1, n_vocab] for the last token. Throws nitro::Error if a token id is out of range or the
    /// context would overflow (the message gives both numbers); the session is unchanged then.
    void eval(std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits);

    /// Runs the rows of `b` (each appended to its own sequence) in forward chunks of at most
    /// n_ubatch rows. logits: [r, n_vocab], one row per batch row with a nonzero logits flag, in
    /// row order (r = 0: empty). A row's logits equal those of the same token evaluated alone in
    /// its sequence (bit-identical: no op mixes rows, attention reads only the row's sequence).
    /// Throws nitro::Error (naming the row or sequence) if the sizes disagree, a sequence id or
    /// token id is out of range, or a sequence would overflow the context; the session is
    /// unchanged then.
    void eval_batch(const SeqBatch& b, std::vector<float>& logits);

    int64_t n_past() const { return n_past_[0]; }
    int64_t n_ctx() const { return spec_.n_ctx; }
    /// Forgets positions >= n of sequence 0 (keeps a shared prefix). n <= n_past(). See seq_truncate.
    void truncate(int64_t n) { seq_truncate(0, n); }

    int n_seq() const { return static_cast<int>(n_past_.size()); }
    /// Positions held by sequence `seq` (tokens evaluated and not truncated).
    int64_t seq_n_past(int seq) const;
    /// Forgets positions >= n of sequence `seq`. Throws nitro::Error unless 0 <= n <= its n_past
    /// and seq is in [0, n_seq). With recurrent (DeltaNet) layers, whose state cannot be cut back,
    /// the sequence's state is restored from its newest snapshot at a position <= n (or the initial
    /// state) and the tokens from there to n are evaluated again (their ids are kept), so the
    /// session then holds exactly the state of a run over the first n tokens.
    void seq_truncate(int seq, int64_t n);
    /// Positions at which sequence `seq` has recurrent-state snapshots, oldest first (empty without
    /// DeltaNet layers). For tests and diagnostics.
    std::vector<int64_t> seq_checkpoints(int seq) const;
    /// Tokens evaluated again by seq_truncate since construction (recomputation after a truncation
    /// to a position without a snapshot).
    int64_t recomputed_tokens() const { return recomputed_tokens_; }

    const Model& model() const { return model_; }
    const ModelSpec& spec() const { return spec_; }
    cpu::ThreadPool& pool() { return *pool_; }
    const KvCache& kv_cache() const { return *kv_; }
    /// Bytes of the recurrent state of all sequences plus their snapshots (0 without DeltaNet layers).
    uint64_t recurrent_bytes() const;

    /// Seconds spent in each phase since construction or the last reset_phase_times() (a few
    /// clock reads per layer; always on).
    const PhaseTimes& phase_times() const { return phase_s_; }
    void reset_phase_times() { phase_s_.fill(0.0); }
    /// Routed-expert work since construction (MoeWork).
    const MoeWork& moe_work() const { return moe_work_; }

    /// Called for every (token, layer) with the final routing, if set.
    std::function<void(const RouteEvent&)> on_route;
    /// BENCHMARK ONLY (runtime/route_replay.h): when set, every forward chunk takes its expert
    /// choices from the replay (the router's logits are computed, then replaced); null: the router.
    std::shared_ptr<RouteReplay> route_replay;

private:
    struct Scratch;
    template <class B>
    friend void forward_chunk(B& b, const ModelSpec& spec, const ChunkArgs& c);
    template <class B>
    friend void forward_layer(B& b, const ModelSpec& spec, int il, const ChunkArgs& c);
    // The ops of forward_chunk (runtime/forward.h), on the CPU.
    void embed(const ChunkArgs& c);
    void attn_norm(int il, const ChunkArgs& c);
    void qkv(int il, const ChunkArgs& c);
    void rope_kv_store(int il, const ChunkArgs& c);
    void attention(int il, const ChunkArgs& c);
    void attn_out(int il, const ChunkArgs& c);
    void ffn_norm(int il, const ChunkArgs& c);
    void route(int il, const ChunkArgs& c);
    void moe(int il, const ChunkArgs& c);
    void lm_head(const ChunkArgs& c);
    void ssm_in(int il, const ChunkArgs& c);
    void ssm_conv(int il, const ChunkArgs& c);
    void delta_net(int il, const ChunkArgs& c);
    void ssm_out(int il, const ChunkArgs& c);
    void shared_expert(int il, const ChunkArgs& c);
    /// h = rms_norm(x) * w for the chunk's n rows.
    void norm_rows(const GgufTensorInfo* w, int64_t n);
    /// One weight and its output [n, w rows] for project().
    struct Proj {
        const GgufTensorInfo* w;
        float* out;
    };
    /// out = x W^T for every projection, x [n, ne0]; x is converted once per weight type and all
    /// products run in one parallel region.
    void project(const float* x, int64_t n, int64_t ne0, std::span<const Proj> ps);
    /// Appends the chunk's tokens to the sequences' histories and takes recurrent-state snapshots
    /// of the sequences that had several rows in it (after the chunk ran).
    void after_chunk(std::span<const int32_t> tokens, std::span<const int32_t> seq);
    /// Runs tokens_ as one chunk: row i in sequence seq[i] at position pos[i]; logits as `lg`
    /// (Rows: the rows listed in logit_rows) into logits_out_.
    void run_chunk(std::span<const int32_t> seq, std::span<const int64_t> pos, ChunkArgs::Logits lg,
                   std::span<const int64_t> logit_rows);
    /// Adds the time since the previous mark to phase p.
    void mark(Phase p);

    const Model& model_;
    ModelSpec spec_;
    std::vector<int64_t> n_past_;              ///< [n_seq] positions held per sequence
    std::unique_ptr<cpu::ThreadPool> pool_;
    std::unique_ptr<KvCache> kv_;
    std::unique_ptr<RecurrentState> rs_;       ///< DeltaNet layers' state (empty without them)
    struct Checkpoint {
        int64_t pos;
        std::vector<float> state;
    };
    std::vector<std::vector<Checkpoint>> checkpoints_;  ///< [n_seq] newest last, at most n_checkpoints each
    std::vector<std::vector<int32_t>> history_;         ///< [n_seq] token ids held (recurrent models only)
    int n_checkpoints_ = 0;
    int64_t recomputed_tokens_ = 0;
    /// Rows of the chunk grouped by sequence, in row order: group g is sequence group_seq_[g] with
    /// rows group_rows_[group_off_[g] .. group_off_[g + 1]).
    std::vector<int32_t> group_seq_;
    std::vector<int64_t> group_off_, group_rows_;
    std::unique_ptr<Scratch> s_;
    std::vector<cpu::ExpertWeights> experts_;  ///< per layer
    std::span<const int32_t> tokens_;          ///< ids of the chunk being run
    std::vector<int32_t> chunk_seq_;           ///< [n] sequence of each row of the chunk
    std::vector<int64_t> chunk_pos_;           ///< [n] position of each row
    std::vector<int64_t> chunk_logit_rows_;    ///< rows of the chunk that produce logits
    std::vector<uint8_t> row_prefill_;         ///< [n] the row's sequence has several rows in the chunk
    float* logits_out_ = nullptr;              ///< where lm_head writes the chunk's logits
    PhaseTimes phase_s_{};
    MoeWork moe_work_;
    std::chrono::steady_clock::time_point phase_t_;
};

}  // namespace nitro
