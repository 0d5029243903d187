// The request scheduler of `nitro serve`: a FIFO queue of generation jobs and one worker thread
// that owns the Session (the model's K/V cache) and runs them.
//
// The worker is written as a step loop over sequence slots: each step either evaluates one
// prompt chunk (n_ubatch tokens) or decodes one token for a slot, then checks the slot's
// cancellation flag. Today there is one slot (one sequence decodes at a time); continuous
// batching adds slots (one KV sequence each) and makes a step run one batched forward over
// every active slot, with the same admission, cancellation and finish code.
//
// Prefix reuse: the worker remembers the tokens whose K/V are in the session. A new prompt
// that starts with part of them keeps that prefix (Session::truncate) and evaluates only the
// rest; the number reused is reported to the job's sink and in /metrics.
//
// Cancellation: a queued job is removed from the queue at once; a running job stops at the next
// step (the next prompt chunk or the next token), so the next job starts right after.
#pragma once

#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
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
    std::shared_ptr<TokenSink> sink;
    std::atomic<bool> cancelled{false};

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
};

class Scheduler {
public:
    /// Creates the session and starts the worker. Throws nitro::Error for bad options or a trace
    /// file that cannot be created.
    Scheduler(const Model& model, const SchedulerOptions& opt, Metrics& metrics);
    ~Scheduler();  ///< stop()

    /// Queues a job (its sink gets on_finish exactly once, from the worker or from cancel/stop).
    void submit(const std::shared_ptr<Job>& job);
    /// Cancels a job: removed now if still queued, else stopped at the worker's next step.
    void cancel(const std::shared_ptr<Job>& job);
    /// Cancels everything (the running job at its next step), stops the worker and closes the
    /// trace file.
    void stop();

    int64_t n_ctx() const { return n_ctx_; }
    /// Bytes of the session's K/V cache.
    uint64_t kv_bytes() const { return session_->kv_host_bytes(); }
    /// What runs where (the engine's own description).
    std::string placement() const { return session_->describe(); }
    size_t queue_length() const;

private:
    struct Slot;
    void worker();
    bool admit(Slot& slot);
    void step(Slot& slot);
    void finish(Slot& slot, FinishCause cause, const std::string& error = "");
    /// Longest prefix of `prompt` whose cached K/V may be kept (see the SWA note in the .cpp).
    int64_t reusable_prefix(const std::vector<int32_t>& prompt) const;

    const Model& model_;
    SchedulerOptions opt_;
    Metrics& metrics_;
    /// The engine's expert counters as of the last finished request (read by the /metrics collector).
    mutable std::mutex experts_mu_;
    ExpertCounters experts_;
    std::unique_ptr<Engine> session_;
    std::unique_ptr<TraceWriter> trace_;
    int64_t n_ctx_ = 0;
    int64_t max_rewind_ = 0;           ///< most tokens a truncation may drop (SWA ring bound)
    std::vector<int32_t> cached_;      ///< tokens whose K/V are in the session (== n_past)
    uint64_t current_seq_ = 0;         ///< trace sequence id of the running job

    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::shared_ptr<Job>> queue_;
    uint64_t next_id_ = 1;
    bool stopping_ = false;
    std::atomic<bool> stop_requested_{false};  ///< stopping_, read by the worker between steps
    std::thread thread_;
};

}  // namespace nitro::server
