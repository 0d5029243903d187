#include "server/scheduler.h"

#include "core/error.h"
#include "runtime/model.h"
#include "runtime/route_trace.h"
#include "trace/model_header.h"
#include "trace/trace_file.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace nitro::server {

namespace {

using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

/// log p of every token under softmax(logits): the chosen token's, and the top k.
void fill_logprobs(std::span<const float> logits, int k, TokenStep& s) {
    float mx = -std::numeric_limits<float>::infinity();
    for (float l : logits) mx = std::max(mx, l);
    double sum = 0;
    for (float l : logits) sum += std::exp(static_cast<double>(l - mx));
    const float lse = mx + static_cast<float>(std::log(sum));
    s.logprob = logits[static_cast<size_t>(s.id)] - lse;
    if (k > 0)
        for (const TokenProb& t : top_probs(logits, k)) s.top.emplace_back(t.id, logits[static_cast<size_t>(t.id)] - lse);
}

}  // namespace

struct Scheduler::Slot {
    std::shared_ptr<Job> job;
    std::unique_ptr<Sampler> sampler;
    std::vector<float> logits;
    size_t n_evaluated = 0;   ///< prompt tokens in the cache so far (reused + evaluated)
    int64_t budget = 0;       ///< tokens this job may sample
    JobStats stats;
    Clock::time_point t_prompt, t_decode;
    bool prefill_done = false;
};

Scheduler::Scheduler(const Model& model, const SchedulerOptions& opt, Metrics& metrics)
    : model_(model), opt_(opt), metrics_(metrics) {
    session_ = make_engine(opt.mode, model, opt.session, opt.gpu);
    n_ctx_ = session_->n_ctx();
    // A sliding-window layer keeps a ring of window + n_ubatch - 1 positions (kv_cache.h), so a
    // truncation that drops more than n_ubatch - 1 positions would leave the keep-prefix's last
    // `window` positions overwritten. Full-attention models may drop any number.
    bool swa = false;
    for (const auto& l : model.layers()) swa |= l.swa;
    max_rewind_ = swa ? std::max<int64_t>(0, opt.session.n_ubatch - 1) : std::numeric_limits<int64_t>::max();
    if (!opt.trace_path.empty()) {
        trace_ = std::make_unique<TraceWriter>(opt.trace_path, trace_header_from_model(model.gguf(), true));
        capture_routes(*session_, *trace_, [this] { return static_cast<uint32_t>(current_seq_); });
    }
    // Expert placement counters (GPU engines) in /metrics, per layer.
    metrics_.add_collector([this](std::string& out) {
        std::lock_guard<std::mutex> lk(experts_mu_);
        if (experts_.layers.empty()) return;
        auto family = [&](const char* name, const char* help, auto value) {
            out += fmt::format("# HELP {} {}\n# TYPE {} counter\n", name, help, name);
            for (size_t il = 0; il < experts_.layers.size(); ++il) out += fmt::format("{}{{layer=\"{}\"}} {}\n", name, il, value(experts_.layers[il]));
        };
        out += "# HELP nitro_expert_selections_total Selected (token, expert) pairs, by where the expert was computed.\n"
               "# TYPE nitro_expert_selections_total counter\n";
        for (size_t il = 0; il < experts_.layers.size(); ++il) {
            out += fmt::format("nitro_expert_selections_total{{layer=\"{}\",device=\"gpu\"}} {}\n", il, experts_.layers[il].gpu_pairs);
            out += fmt::format("nitro_expert_selections_total{{layer=\"{}\",device=\"cpu\"}} {}\n", il, experts_.layers[il].cpu_pairs);
        }
        family("nitro_expert_cpu_experts_total", "Distinct experts the CPU computed, summed over steps.",
               [](const ExpertLayerCounters& L) { return L.cpu_experts; });
        family("nitro_expert_cpu_read_bytes_total", "Expert weight bytes the CPU read, bytes.",
               [](const ExpertLayerCounters& L) { return L.cpu_bytes; });
        family("nitro_expert_cpu_seconds_total", "CPU time computing experts, seconds.",
               [](const ExpertLayerCounters& L) { return L.cpu_ms / 1e3; });
        family("nitro_expert_gpu_seconds_total", "GPU time on resident experts in decode steps (router result to the wait), seconds.",
               [](const ExpertLayerCounters& L) { return L.gpu_ms / 1e3; });
        family("nitro_expert_gpu_wait_seconds_total", "GPU time waiting for the CPU's experts in decode steps, seconds.",
               [](const ExpertLayerCounters& L) { return L.wait_ms / 1e3; });
    });
    thread_ = std::thread([this] { worker(); });
}

Scheduler::~Scheduler() { stop(); }

void Scheduler::submit(const std::shared_ptr<Job>& job) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (!stopping_) {
            job->id = next_id_++;
            job->enqueued = Clock::now();
            queue_.push_back(job);
            metrics_.queue_length = static_cast<int64_t>(queue_.size());
            cv_.notify_one();
            return;
        }
    }
    job->sink->on_finish(FinishCause::CANCELLED, JobStats{}, "the server is shutting down");
}

void Scheduler::cancel(const std::shared_ptr<Job>& job) {
    job->cancelled = true;
    bool removed = false;
    {
        std::lock_guard<std::mutex> lk(mu_);
        auto it = std::find(queue_.begin(), queue_.end(), job);
        if (it != queue_.end()) {
            queue_.erase(it);
            metrics_.queue_length = static_cast<int64_t>(queue_.size());
            removed = true;
        }
    }
    if (removed) {
        metrics_.requests_cancelled++;
        JobStats st;
        st.n_prompt = static_cast<int64_t>(job->prompt.size());
        st.queue_ms = ms_between(job->enqueued, Clock::now());
        job->sink->on_finish(FinishCause::CANCELLED, st, "cancelled while queued");
    }
}

void Scheduler::stop() {
    std::deque<std::shared_ptr<Job>> left;
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (stopping_ && !thread_.joinable()) return;
        stopping_ = true;
        stop_requested_ = true;
        left.swap(queue_);
        metrics_.queue_length = 0;
        for (auto& j : left) j->cancelled = true;
        cv_.notify_all();
    }
    for (auto& j : left) j->sink->on_finish(FinishCause::CANCELLED, JobStats{}, "the server is shutting down");
    if (thread_.joinable()) thread_.join();
    if (trace_) {
        trace_->close();
        trace_.reset();
    }
}

size_t Scheduler::queue_length() const {
    std::lock_guard<std::mutex> lk(mu_);
    return queue_.size();
}

int64_t Scheduler::reusable_prefix(const std::vector<int32_t>& prompt) const {
    size_t p = 0;
    while (p < cached_.size() && p < prompt.size() && cached_[p] == prompt[p]) ++p;
    // The last prompt token is always evaluated: its logits start the generation.
    if (p >= prompt.size()) p = prompt.empty() ? 0 : prompt.size() - 1;
    if (static_cast<int64_t>(cached_.size() - p) > max_rewind_) return 0;
    return static_cast<int64_t>(p);
}

void Scheduler::worker() {
    Slot slot;
    for (;;) {
        if (!slot.job) {
            std::unique_lock<std::mutex> lk(mu_);
            cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
            if (stopping_) break;
            slot = Slot{};
            slot.job = queue_.front();
            queue_.pop_front();
            metrics_.queue_length = static_cast<int64_t>(queue_.size());
            lk.unlock();
            if (!admit(slot)) continue;
        }
        if (stop_requested_.load(std::memory_order_relaxed)) break;  // the running job ends at the next step
        step(slot);
    }
    if (slot.job) finish(slot, FinishCause::CANCELLED, "the server is shutting down");
}

bool Scheduler::admit(Slot& slot) {
    Job& job = *slot.job;
    metrics_.active++;
    slot.stats.n_prompt = static_cast<int64_t>(job.prompt.size());
    slot.stats.queue_ms = ms_between(job.enqueued, Clock::now());
    if (job.prompt.empty()) {
        finish(slot, FinishCause::ERROR, "the prompt is empty");
        return false;
    }
    if (static_cast<int64_t>(job.prompt.size()) > n_ctx_) {
        finish(slot, FinishCause::ERROR,
               fmt::format("the prompt has {} tokens but the context holds {}", job.prompt.size(), n_ctx_));
        return false;
    }
    const int64_t reuse = reusable_prefix(job.prompt);
    session_->truncate(reuse);
    cached_.resize(static_cast<size_t>(reuse));
    slot.n_evaluated = static_cast<size_t>(reuse);
    slot.stats.n_reused = reuse;
    // Every sampled token but the last needs a position after the prompt.
    const int64_t room = n_ctx_ - static_cast<int64_t>(job.prompt.size()) + 1;
    slot.budget = job.max_tokens < 0 ? room : std::min(job.max_tokens, room);
    slot.sampler = std::make_unique<Sampler>(job.sampling);
    current_seq_ = job.id;
    slot.t_prompt = Clock::now();
    job.sink->on_start(reuse);
    return true;
}

void Scheduler::step(Slot& slot) {
    Job& job = *slot.job;
    if (job.cancelled) return finish(slot, FinishCause::CANCELLED, "cancelled");
    try {
        if (!slot.prefill_done) {
            const size_t n = std::min(job.prompt.size() - slot.n_evaluated, static_cast<size_t>(opt_.session.n_ubatch));
            std::span<const int32_t> chunk(job.prompt.data() + slot.n_evaluated, n);
            session_->eval(chunk, false, slot.logits);
            cached_.insert(cached_.end(), chunk.begin(), chunk.end());
            slot.n_evaluated += n;
            if (slot.n_evaluated == job.prompt.size()) {
                slot.prefill_done = true;
                slot.t_decode = Clock::now();
                slot.stats.prompt_ms = ms_between(slot.t_prompt, slot.t_decode);
            }
            return;
        }
        std::span<const float> logits(slot.logits.data(), static_cast<size_t>(model_.n_vocab()));
        TokenStep s;
        const size_t k = static_cast<size_t>(slot.stats.n_generated);
        if (job.scripted.empty()) s.id = slot.sampler->sample(logits);
        else s.id = k < job.scripted.size() ? job.scripted[k] : (opt_.end_of_generation.empty() ? 0 : opt_.end_of_generation[0]);
        if (job.top_logprobs >= 0) fill_logprobs(logits, job.top_logprobs, s);
        s.end_of_generation = !job.ignore_eos && std::find(opt_.end_of_generation.begin(), opt_.end_of_generation.end(), s.id) !=
                                                     opt_.end_of_generation.end();
        slot.stats.n_generated++;
        const bool more = job.sink->on_token(s);
        if (s.end_of_generation) return finish(slot, FinishCause::END_OF_GENERATION);
        if (!more) return finish(slot, FinishCause::SINK_STOP);
        if (slot.stats.n_generated >= slot.budget) return finish(slot, FinishCause::LENGTH);
        const int32_t one[1] = {s.id};
        session_->eval(one, false, slot.logits);
        cached_.push_back(s.id);
    } catch (const std::exception& e) {
        // The session is unchanged by a failed eval, but start the next job from a clean cache.
        session_->truncate(0);
        cached_.clear();
        finish(slot, FinishCause::ERROR, e.what());
    }
}

void Scheduler::finish(Slot& slot, FinishCause cause, const std::string& error) {
    const auto now = Clock::now();
    JobStats st = slot.stats;  // a copy: the slot is reset before the sink hears of it
    if (slot.prefill_done) st.decode_ms = ms_between(slot.t_decode, now);
    else if (slot.t_prompt != Clock::time_point{}) st.prompt_ms = ms_between(slot.t_prompt, now);
    const int64_t evaluated = static_cast<int64_t>(slot.n_evaluated) - st.n_reused;
    metrics_.prompt_tokens_evaluated += static_cast<uint64_t>(std::max<int64_t>(0, evaluated));
    metrics_.prompt_tokens_reused += static_cast<uint64_t>(st.n_reused);
    metrics_.prompt_tokens += static_cast<uint64_t>(st.n_prompt);
    metrics_.generated_tokens += static_cast<uint64_t>(st.n_generated);
    metrics_.prompt_us += static_cast<uint64_t>(st.prompt_ms * 1000);
    metrics_.decode_us += static_cast<uint64_t>(st.decode_ms * 1000);
    const int64_t steps = std::max<int64_t>(0, st.n_generated - 1);
    metrics_.decode_steps += static_cast<uint64_t>(steps);
    if (st.prompt_ms > 0 && evaluated > 0) metrics_.last_prompt_tok_s = 1000.0 * static_cast<double>(evaluated) / st.prompt_ms;
    if (st.decode_ms > 0 && steps > 0) metrics_.last_decode_tok_s = 1000.0 * static_cast<double>(steps) / st.decode_ms;
    if (cause == FinishCause::CANCELLED) metrics_.requests_cancelled++;
    metrics_.active--;
    if (const ExpertCounters* c = session_->expert_counters()) {
        std::lock_guard<std::mutex> lk(experts_mu_);
        experts_ = *c;
    }
    std::shared_ptr<Job> job = std::move(slot.job);
    slot = Slot{};
    job->sink->on_finish(cause, st, error);
}

}  // namespace nitro::server
