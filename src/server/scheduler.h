// The request scheduler of `nitro serve`: a FIFO queue of generation jobs and one worker thread
// that owns the engine (the model's K/V cache) and runs them in N slots (`--parallel N`), one
// engine sequence each.
//
// Continuous batching: the worker is a step loop. Each step (1) admits queued jobs into free
// slots, (2) checks every running slot's cancellation flag, (3) samples one token for every slot
// whose logits are fresh (each job has its own Sampler, so a job's tokens do not depend on what
// else runs), (4) runs one Engine::eval_batch over all slots: one row per decoding slot (its
// sampled token) plus prompt chunks of prefilling slots, oldest first, at most n_ubatch rows in
// all (a long prompt is prefilled in chunks between decode steps). Rows are independent in the
// forward pass, so a job's tokens equal what it would get alone (tested). With one slot this is
// exactly the single-sequence loop: one prompt chunk or one token per step. A lone prompt (no
// other slot prefilling or decoding) goes to the engine in batches of its layer-major group
// (Engine::prompt_group_tokens, docs/hybrid.md "Layer-major groups") when it has one.
//
// Prefix reuse, per slot: a slot remembers the tokens whose K/V are in its sequence. A new job
// goes to the free slot that holds the longest reusable prefix of its prompt (ties: the slot
// used least recently), keeps that prefix (Engine::seq_truncate) and evaluates only the rest;
// the number reused is reported to the job's sink and in /metrics.
//
// Constrained jobs (Job::constraint): the worker asks the job's constraint for the allowed tokens
// before sampling its slot and gives it the token after, so each slot's grammar state is its own;
// the time this takes is in /metrics (nitro_grammar_mask_seconds_total).
//
// Cancellation: a queued job is removed from the queue at once; a running job stops at the next
// step (the next prompt chunk or the next token) and frees its slot; the other slots go on.
#pragma once

#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "runtime/token_constraint.h"
#include "server/live_stats.h"
#include "server/metrics.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace nitro {
class TraceWriter;
}

namespace nitro::server {

/// One generated token, as the worker hands it to a sink.
struct TokenStep {
    int32_t id = -1;
    bool end_of_generation = false;          ///< an end-of-generation token (last step)
    float logprob = 0;                       ///< log p(id) at temperature 1 (when logprobs were asked)
    std::vector<std::pair<int32_t, float>> top;  ///< the most likely tokens and their log p
};

enum class FinishCause {
    END_OF_GENERATION,  ///< the model emitted an end-of-generation token
    LENGTH,             ///< max_tokens reached or the context is full
    SINK_STOP,          ///< the sink asked to stop (stop sequence, tool-call limit)
    CANCELLED,          ///< the client went away or the server is stopping
    ERROR,              ///< the engine raised; the message says why
};

/// What a job cost, reported with its finish.
struct JobStats {
    int64_t n_prompt = 0;     ///< prompt tokens
    int64_t n_reused = 0;     ///< of which served from the cached prefix
    int64_t n_generated = 0;  ///< tokens sampled (including an end-of-generation token)
    double queue_ms = 0, prompt_ms = 0, decode_ms = 0;
};

/// Receives a job's tokens in the worker thread. Must not block for long.
class TokenSink {
public:
    virtual ~TokenSink() = default;
    /// Called before the first prompt chunk, with how many prompt tokens were reused.
    virtual void on_start(int64_t n_reused) {}
    /// One sampled token. Return false to stop generating (the job finishes with SINK_STOP).
    virtual bool on_token(const TokenStep& step) = 0;
    /// Called exactly once per submitted job, last.
    virtual void on_finish(FinishCause cause, const JobStats& stats, const std::string& error) = 0;
};

struct Job {
    std::vector<int32_t> prompt;
    SamplerParams sampling;
    int64_t max_tokens = -1;  ///< -1: until end of generation or the context is full
    int top_logprobs = -1;    ///< -1: no log probabilities; 0: the chosen token's only; k: top k too
    bool ignore_eos = false;
    /// Test-only (`nitro serve --debug-scripted-output`): the tokens to emit instead of sampling,
    /// then an end-of-generation token. The model still evaluates every token it emits.
    std::vector<int32_t> scripted;
    /// Grammar-constrained sampling (response_format): each sampled token comes from the tokens it
    /// allows, and is then given to it. Null: unconstrained. Not applied to `scripted` output.
    std::unique_ptr<TokenConstraint> constraint;
    std::shared_ptr<TokenSink> sink;
    std::atomic<bool> cancelled{false};
    /// The request's id as the client sees it ("chatcmpl-..."), for the log line of a failure.
    std::string request_id;

    // Set by the scheduler.
    uint64_t id = 0;
    std::chrono::steady_clock::time_point enqueued;
};

struct SchedulerOptions {
    SessionOptions session;
    EngineMode mode = EngineMode::Cpu;       ///< --mode cpu|gpu
    GpuOptions gpu;                          ///< --gpu, --vram-budget (GPU mode)
    std::vector<int32_t> end_of_generation;  ///< tokens that end generation
    std::string trace_path;                  ///< capture routing of every job to this trace file ("" = off)
    std::string route_replay;                ///< BENCHMARK ONLY: expert choices from this trace (route_replay.h)
    int n_slots = 1;                         ///< --parallel: jobs run at once, one engine sequence each
};

/// Throws nitro::Error (naming the engine and the sequences it holds) unless
/// 1 <= n_slots <= engine.n_seq(): what `nitro serve --parallel N` checks at startup.
void check_slots(const Engine& engine, int n_slots);

class Scheduler {
public:
    /// Creates the engine (with n_slots sequences) and starts the worker. Throws nitro::Error for
    /// bad options, n_slots above what the engine holds, or a
    /// trace file that cannot be created.
    Scheduler(const Model& model, const SchedulerOptions& opt, Metrics& metrics);
    ~Scheduler();  ///< stop()

    /// Queues a job (its sink gets on_finish exactly once, from the worker or from cancel/stop).
    void submit(const std::shared_ptr<Job>& job);
    /// Cancels a job: removed now if still queued, else stopped at the worker's next step.
    void cancel(const std::shared_ptr<Job>& job);
    /// Cancels everything (running jobs at their next step), stops the worker and closes the
    /// trace file.
    void stop();

    int64_t n_ctx() const { return n_ctx_; }
    /// The tokens that end a generation (SchedulerOptions::end_of_generation).
    const std::vector<int32_t>& end_of_generation() const { return opt_.end_of_generation; }
    /// Slots (jobs run at once).
    int n_slots() const { return static_cast<int>(slots_.size()); }
    /// Bytes of the engine's K/V cache (all slots).
    uint64_t kv_bytes() const { return session_->kv_host_bytes(); }
    /// What runs where (the engine's own description).
    std::string placement() const { return session_->describe(); }
    size_t queue_length() const;
    /// Live statistics for the web page and /v1/nitro/* (server/live_stats.h); closed by stop().
    const LiveStats& live() const { return *live_; }

private:
    struct Slot;
    void worker();
    /// Moves queued jobs into free slots (under mu_); returns the slots that got one.
    std::vector<Slot*> take_jobs();
    bool admit(Slot& slot);
    /// One step over every running slot: cancellation, sampling, one batched forward.
    void step();
    /// Samples and emits the token of a slot whose logits are fresh; false if the job finished.
    bool emit(Slot& slot);
    void finish(Slot& slot, FinishCause cause, const std::string& error = "");
    /// Hands live_ a new snapshot (the slots' K/V use, the engine's counters and residency).
    void publish_live();
    /// Longest prefix of `prompt` whose cached K/V (`cached`) may be kept (see the SWA note in the .cpp).
    int64_t reusable_prefix(const std::vector<int32_t>& cached, const std::vector<int32_t>& prompt) const;

    const Model& model_;
    SchedulerOptions opt_;
    Metrics& metrics_;
    /// The engine's expert counters as of the last finished request (read by the /metrics collector).
    mutable std::mutex experts_mu_;
    ExpertCounters experts_;
    std::unique_ptr<Engine> session_;
    std::unique_ptr<TraceWriter> trace_;
    std::unique_ptr<LiveStats> live_;
    std::vector<SlotLoad> slot_loads_;  ///< publish_live's buffer
    int64_t n_ctx_ = 0;
    int64_t max_rewind_ = 0;           ///< most tokens a truncation may drop (SWA ring bound)
    std::vector<std::unique_ptr<Slot>> slots_;  ///< slot i uses engine sequence i
    uint64_t admissions_ = 0;          ///< jobs admitted so far (orders slots by last use)
    std::atomic<uint64_t> steps_{0}, decode_rows_{0}, prompt_rows_{0};  ///< batched forwards and their rows
    std::atomic<uint64_t> group_steps_{0};  ///< steps with more than n_ubatch prompt rows (a lone prompt's group)
    /// Routed-expert work (Engine::moe_work, copied after each step for /metrics); decode-only steps.
    std::atomic<uint64_t> moe_experts_{0}, moe_rows_{0}, moe_bytes_{0}, decode_steps_{0}, decode_step_experts_{0};
    // The current batch (reused between steps).
    std::vector<int32_t> batch_tokens_, batch_seq_;
    std::vector<uint8_t> batch_logits_;
    std::vector<float> batch_out_;

    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::shared_ptr<Job>> queue_;
    uint64_t next_id_ = 1;
    bool stopping_ = false;
    std::atomic<bool> stop_requested_{false};  ///< stopping_, read by the worker between steps
    std::thread thread_;
};

}  // namespace nitro::server
