#include "server/scheduler.h"

#include "core/error.h"
#include "runtime/model.h"
#include "runtime/route_replay.h"
#include "runtime/route_trace.h"
#include "trace/model_header.h"
#include "trace/trace_file.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
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

void check_slots(const Engine& engine, int n_slots) {
    if (n_slots < 1) fail("--parallel must be at least 1 (got {})", n_slots);
    if (engine.n_seq() < n_slots)
        fail("--parallel {} needs an engine that holds {} sequences, but {} holds {}: use --parallel {}", n_slots, n_slots,
             engine.describe(), engine.n_seq(), engine.n_seq());
}

struct Scheduler::Slot {
    int seq = 0;                  ///< the engine sequence this slot owns
    std::vector<int32_t> cached;  ///< tokens whose K/V are in the sequence (== its n_past)
    uint64_t last_used = 0;       ///< admissions_ when this slot last took a job (0: never)
    // /metrics (read by the collector from HTTP threads).
    std::atomic<uint64_t> requests{0}, generated{0};
    std::atomic<int64_t> n_cached{0};
    std::atomic<bool> busy{false};

    // The running job (null: the slot is free).
    std::shared_ptr<Job> job;
    std::unique_ptr<Sampler> sampler;
    std::vector<uint64_t> allowed;  ///< the job's constraint's token mask (bitset over the vocabulary)
    std::vector<float> logits;    ///< [n_vocab] of the last evaluated token
    bool fresh = false;           ///< logits not sampled yet
    int32_t pending = -1;         ///< sampled token that the next batch evaluates (-1: none)
    size_t n_evaluated = 0;       ///< prompt tokens in the cache so far (reused + evaluated)
    int64_t budget = 0;           ///< tokens this job may sample
    JobStats stats;
    Clock::time_point t_prompt, t_decode;
    bool prefill_done = false;

    /// Forgets the job, keeps the sequence and what it caches.
    void clear_job() {
        job.reset();
        sampler.reset();
        fresh = false;
        pending = -1;
        n_evaluated = 0;
        budget = 0;
        stats = JobStats{};
        t_prompt = t_decode = Clock::time_point{};
        prefill_done = false;
    }
};

Scheduler::Scheduler(const Model& model, const SchedulerOptions& opt, Metrics& metrics)
    : model_(model), opt_(opt), metrics_(metrics) {
    if (opt.n_slots < 1) fail("--parallel must be at least 1 (got {})", opt.n_slots);
    // A build without CUDA is refused before anything loads. Every engine (CPU, GPU-all, hybrid)
    // holds SessionOptions::n_seq sequences; check_slots guards an engine that would hold fewer.
    require_gpu_engine(opt.mode);
    SessionOptions so = opt.session;
    so.n_seq = opt.n_slots;
    session_ = make_engine(opt.mode, model, so, opt.gpu);
    check_slots(*session_, opt.n_slots);
    if (!opt.route_replay.empty() &&
        !session_->set_route_replay(std::make_shared<RouteReplay>(resolve_replay_trace(opt.route_replay), model)))
        fail("--route-replay: this engine ({}) cannot replay routing", session_->describe());
    n_ctx_ = session_->n_ctx();
    // A sliding-window layer keeps a ring of window + n_ubatch - 1 positions (kv_cache.h), so a
    // truncation that drops more than n_ubatch - 1 positions would leave the keep-prefix's last
    // `window` positions overwritten. Full-attention models may drop any number.
    bool swa = false;
    for (const auto& l : model.layers()) swa |= l.shape.swa;
    max_rewind_ = swa ? std::max<int64_t>(0, opt.session.n_ubatch - 1) : std::numeric_limits<int64_t>::max();
    for (int i = 0; i < opt.n_slots; ++i) {
        slots_.push_back(std::make_unique<Slot>());
        slots_.back()->seq = i;
    }
    // Routing goes to the trace file (--trace) and to the live statistics of the web page, which
    // count it only where the router's output reaches the host anyway (LiveStats::wants_routes).
    LiveShape shape;
    shape.n_layer = static_cast<int>(model.hp().n_layer);
    shape.n_expert = static_cast<int>(model.hp().n_expert);
    shape.n_expert_used = static_cast<int>(model.hp().n_expert_used);
    for (const auto& l : model.layers()) shape.moe_layer.push_back(l.moe());
    live_ = std::make_unique<LiveStats>(std::move(shape));
    std::function<void(const RouteEvent&)> write_trace;
    if (!opt.trace_path.empty()) {
        trace_ = std::make_unique<TraceWriter>(opt.trace_path, trace_header_from_model(model.gguf(), true));
        // Trace sequence = request number: the job running in the event's slot (read in the worker,
        // which also admits jobs).
        write_trace = route_record_writer(*trace_, [this](const RouteEvent& e) {
            const Slot& s = *slots_[static_cast<size_t>(e.seq)];
            return static_cast<uint32_t>(s.job ? s.job->id : 0);
        });
    }
    // (With --trace the routing reaches the host anyway, so it is counted on every engine.)
    if (write_trace || LiveStats::wants_routes(*session_)) {
        LiveStats* live = live_.get();
        const bool ok = session_->set_route_callback([write_trace, live](const RouteEvent& e) {
            if (write_trace) write_trace(e);
            live->on_route(e);
        });
        if (!ok && write_trace) fail("--trace: routing capture is not available with this engine ({})", session_->describe());
        live_->set_routing(ok);
    }
    publish_live();
    // Slots and batches in /metrics.
    metrics_.add_collector([this](std::string& out) {
        int64_t busy = 0;
        for (const auto& s : slots_) busy += s->busy.load();
        out += fmt::format("# HELP nitro_slots Slots (--parallel): requests served at once.\n# TYPE nitro_slots gauge\nnitro_slots {}\n",
                           slots_.size());
        out += fmt::format("# HELP nitro_slots_busy Slots running a request.\n# TYPE nitro_slots_busy gauge\nnitro_slots_busy {}\n", busy);
        auto per_slot = [&](const char* name, const char* type, const char* help, auto value) {
            out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
            for (size_t i = 0; i < slots_.size(); ++i) out += fmt::format("{}{{slot=\"{}\"}} {}\n", name, i, value(*slots_[i]));
        };
        per_slot("nitro_slot_busy", "gauge", "1 while the slot runs a request.", [](const Slot& s) { return s.busy.load() ? 1 : 0; });
        per_slot("nitro_slot_requests_total", "counter", "Requests the slot admitted.", [](const Slot& s) { return s.requests.load(); });
        per_slot("nitro_slot_generated_tokens_total", "counter", "Tokens the slot generated.", [](const Slot& s) { return s.generated.load(); });
        per_slot("nitro_slot_cached_tokens", "gauge", "Tokens whose K/V the slot's sequence holds (prefix reuse).",
                 [](const Slot& s) { return s.n_cached.load(); });
        out += fmt::format("# HELP nitro_batch_steps_total Batched forward steps (all slots at once).\n"
                           "# TYPE nitro_batch_steps_total counter\nnitro_batch_steps_total {}\n",
                           steps_.load());
        out += fmt::format("# HELP nitro_batch_rows_total Rows of the batched steps: decode tokens and prompt tokens.\n"
                           "# TYPE nitro_batch_rows_total counter\nnitro_batch_rows_total{{kind=\"decode\"}} {}\n"
                           "nitro_batch_rows_total{{kind=\"prompt\"}} {}\n",
                           decode_rows_.load(), prompt_rows_.load());
        out += fmt::format("# HELP nitro_batch_prompt_group_steps_total Steps that handed a lone prompt to the engine as one "
                           "layer-major group of more than n_ubatch rows.\n"
                           "# TYPE nitro_batch_prompt_group_steps_total counter\nnitro_batch_prompt_group_steps_total {}\n",
                           group_steps_.load());
        if (!session_->moe_work()) return;  // the GPU engines do not count it
        out += fmt::format("# HELP nitro_moe_experts_total Distinct routed experts computed, summed over layers and steps (each expert's "
                           "weights read once per layer per step, for every row routed to it).\n"
                           "# TYPE nitro_moe_experts_total counter\nnitro_moe_experts_total {}\n",
                           moe_experts_.load());
        out += fmt::format("# HELP nitro_moe_expert_rows_total (token, expert) products computed.\n"
                           "# TYPE nitro_moe_expert_rows_total counter\nnitro_moe_expert_rows_total {}\n",
                           moe_rows_.load());
        out += fmt::format("# HELP nitro_moe_expert_bytes_total Routed-expert weight bytes read.\n"
                           "# TYPE nitro_moe_expert_bytes_total counter\nnitro_moe_expert_bytes_total {}\n",
                           moe_bytes_.load());
        out += fmt::format("# HELP nitro_decode_steps_total Steps with decode rows only (no prompt rows).\n"
                           "# TYPE nitro_decode_steps_total counter\nnitro_decode_steps_total {}\n",
                           decode_steps_.load());
        out += fmt::format("# HELP nitro_decode_step_experts_total Distinct routed experts of those steps, summed over layers.\n"
                           "# TYPE nitro_decode_step_experts_total counter\nnitro_decode_step_experts_total {}\n",
                           decode_step_experts_.load());
    });
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
            out += fmt::format("nitro_expert_selections_total{{layer=\"{}\",device=\"staged\"}} {}\n", il, experts_.layers[il].staged_pairs);
        }
        out += fmt::format("# HELP nitro_prompt_groups_total Layer-major prompt groups the engine ran.\n"
                           "# TYPE nitro_prompt_groups_total counter\nnitro_prompt_groups_total {}\n"
                           "# HELP nitro_prompt_group_tokens_total Prompt tokens evaluated in layer-major groups.\n"
                           "# TYPE nitro_prompt_group_tokens_total counter\nnitro_prompt_group_tokens_total {}\n",
                           experts_.prompt_groups, experts_.prompt_group_tokens);
        family("nitro_prompt_staged_experts_total", "Experts staged to a GPU scratch slot for prompt chunks.",
               [](const ExpertLayerCounters& L) { return L.staged_experts; });
        family("nitro_prompt_staged_bytes_total", "Bytes staged host-to-device for prompt chunks.",
               [](const ExpertLayerCounters& L) { return L.staged_bytes; });
        family("nitro_prompt_stage_seconds_total", "Host time staging experts for prompt chunks, seconds.",
               [](const ExpertLayerCounters& L) { return L.stage_ms / 1e3; });
        family("nitro_prompt_cpu_experts_total", "Distinct experts the CPU computed for prompt chunks, summed over chunks.",
               [](const ExpertLayerCounters& L) { return L.prompt_cpu_experts; });
        family("nitro_prompt_gpu_idle_seconds_total", "GPU time waiting for staged copies and the CPU in prompt chunks, seconds.",
               [](const ExpertLayerCounters& L) { return L.prompt_idle_ms / 1e3; });
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
        // The expert cache (adaptive residency, cache/expert_cache.h), per layer with experts on the CPU.
        family("nitro_expert_cache_hits_total", "Selections whose expert was in a ready VRAM slot.",
               [](const ExpertLayerCounters& L) { return L.cache.hits; });
        family("nitro_expert_cache_misses_total", "Selections computed by the CPU.",
               [](const ExpertLayerCounters& L) { return L.cache.misses; });
        family("nitro_expert_cache_admissions_total", "Missed experts admitted into a slot (copied as the CPU computed them).",
               [](const ExpertLayerCounters& L) { return L.cache.admissions; });
        family("nitro_expert_cache_evictions_total", "Admissions that displaced a cached expert.",
               [](const ExpertLayerCounters& L) { return L.cache.evictions; });
        out += "# HELP nitro_expert_cache_refused_total Requested misses not admitted, by reason.\n"
               "# TYPE nitro_expert_cache_refused_total counter\n";
        for (size_t il = 0; il < experts_.layers.size(); ++il) {
            const CacheCounters& k = experts_.layers[il].cache;
            out += fmt::format("nitro_expert_cache_refused_total{{layer=\"{}\",reason=\"rate\"}} {}\n", il, k.refused_rate);
            out += fmt::format("nitro_expert_cache_refused_total{{layer=\"{}\",reason=\"staging\"}} {}\n", il, k.refused_staging);
            out += fmt::format("nitro_expert_cache_refused_total{{layer=\"{}\",reason=\"policy\"}} {}\n", il, k.refused_policy);
        }
        family("nitro_expert_cache_late_copies_total", "Admission copies not landed at the next step (the expert stayed on the CPU longer).",
               [](const ExpertLayerCounters& L) { return L.cache.late_copies; });
        family("nitro_expert_cache_failed_copies_total", "Admission copies that failed (the expert was dropped from its slot).",
               [](const ExpertLayerCounters& L) { return L.cache.failed_copies; });
        family("nitro_expert_h2d_bytes_total", "Expert bytes copied host-to-device by admissions, bytes.",
               [](const ExpertLayerCounters& L) { return L.cache.h2d_bytes; });
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
    live_->close();  // ends the web page's event streams
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

int64_t Scheduler::reusable_prefix(const std::vector<int32_t>& cached, const std::vector<int32_t>& prompt) const {
    size_t p = 0;
    while (p < cached.size() && p < prompt.size() && cached[p] == prompt[p]) ++p;
    // The last prompt token is always evaluated: its logits start the generation.
    if (p >= prompt.size()) p = prompt.empty() ? 0 : prompt.size() - 1;
    if (static_cast<int64_t>(cached.size() - p) > max_rewind_) return 0;
    return static_cast<int64_t>(p);
}

std::vector<Scheduler::Slot*> Scheduler::take_jobs() {
    std::vector<Slot*> taken;
    while (!queue_.empty()) {
        // The free slot holding the longest reusable prefix; ties: the least recently used.
        const std::vector<int32_t>& prompt = queue_.front()->prompt;
        Slot* best = nullptr;
        int64_t best_reuse = -1;
        for (auto& s : slots_) {
            if (s->job) continue;
            const int64_t r = reusable_prefix(s->cached, prompt);
            if (r > best_reuse || (r == best_reuse && s->last_used < best->last_used)) best = s.get(), best_reuse = r;
        }
        if (!best) break;
        best->job = queue_.front();
        queue_.pop_front();
        best->last_used = ++admissions_;
        taken.push_back(best);
    }
    metrics_.queue_length = static_cast<int64_t>(queue_.size());
    return taken;
}

void Scheduler::worker() {
    for (;;) {
        std::vector<Slot*> admitted;
        {
            std::unique_lock<std::mutex> lk(mu_);
            const bool running = std::any_of(slots_.begin(), slots_.end(), [](const auto& s) { return s->job != nullptr; });
            if (!running) cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
            if (stopping_) break;
            admitted = take_jobs();
        }
        for (Slot* s : admitted) admit(*s);
        if (stop_requested_.load(std::memory_order_relaxed)) break;  // running jobs end at the next step
        step();
    }
    for (auto& s : slots_)
        if (s->job) finish(*s, FinishCause::CANCELLED, "the server is shutting down");
}

bool Scheduler::admit(Slot& slot) {
    Job& job = *slot.job;
    metrics_.active++;
    slot.busy = true;
    slot.requests++;
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
    const int64_t reuse = reusable_prefix(slot.cached, job.prompt);
    session_->seq_truncate(slot.seq, reuse);
    slot.cached.resize(static_cast<size_t>(reuse));
    slot.n_cached = reuse;
    slot.n_evaluated = static_cast<size_t>(reuse);
    slot.stats.n_reused = reuse;
    // Every sampled token but the last needs a position after the prompt.
    const int64_t room = n_ctx_ - static_cast<int64_t>(job.prompt.size()) + 1;
    slot.budget = job.max_tokens < 0 ? room : std::min(job.max_tokens, room);
    slot.sampler = std::make_unique<Sampler>(job.sampling);
    slot.t_prompt = Clock::now();
    job.sink->on_start(reuse);
    return true;
}

bool Scheduler::emit(Slot& slot) {
    Job& job = *slot.job;
    std::span<const float> logits(slot.logits.data(), static_cast<size_t>(model_.n_vocab()));
    TokenStep s;
    const size_t k = static_cast<size_t>(slot.stats.n_generated);
    if (!job.scripted.empty()) {
        s.id = k < job.scripted.size() ? job.scripted[k] : (opt_.end_of_generation.empty() ? 0 : opt_.end_of_generation[0]);
    } else if (job.constraint) {
        double us = 0;
        try {
            auto t0 = Clock::now();
            job.constraint->allowed_tokens(slot.allowed);
            us += std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
            s.id = slot.sampler->sample(logits, &slot.allowed);
            if (s.id < 0) throw Error("internal error in the grammar engine: the response format allows no token at this point");
            t0 = Clock::now();
            job.constraint->accept(s.id);
            us += std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        } catch (const std::exception& e) {
            return finish(slot, FinishCause::ERROR, e.what()), false;
        }
        metrics_.grammar_masks++;
        metrics_.grammar_mask_us += static_cast<uint64_t>(us);
    } else {
        s.id = slot.sampler->sample(logits);
    }
    if (job.top_logprobs >= 0) fill_logprobs(logits, job.top_logprobs, s);
    s.end_of_generation = !job.ignore_eos && std::find(opt_.end_of_generation.begin(), opt_.end_of_generation.end(), s.id) !=
                                                 opt_.end_of_generation.end();
    slot.fresh = false;
    slot.stats.n_generated++;
    slot.generated++;
    const bool more = job.sink->on_token(s);
    if (s.end_of_generation) return finish(slot, FinishCause::END_OF_GENERATION), false;
    if (!more) return finish(slot, FinishCause::SINK_STOP), false;
    if (slot.stats.n_generated >= slot.budget) return finish(slot, FinishCause::LENGTH), false;
    slot.pending = s.id;
    return true;
}

void Scheduler::step() {
    // Cancellation and sampling, per slot.
    for (auto& sp : slots_) {
        Slot& slot = *sp;
        if (!slot.job) continue;
        if (slot.job->cancelled) {
            finish(slot, FinishCause::CANCELLED, "cancelled");
            continue;
        }
        if (slot.fresh) emit(slot);
    }
    // One batch: a row per decoding slot, then prompt chunks (oldest job first) up to n_ubatch rows.
    batch_tokens_.clear();
    batch_seq_.clear();
    batch_logits_.clear();
    struct Part {
        Slot* slot;
        size_t n;      // rows
        bool prompt;   // prompt chunk (else one decode row)
    };
    std::vector<Part> parts;
    for (auto& sp : slots_) {
        Slot& slot = *sp;
        if (!slot.job || slot.pending < 0) continue;
        batch_tokens_.push_back(slot.pending);
        batch_seq_.push_back(slot.seq);
        batch_logits_.push_back(1);
        parts.push_back({&slot, 1, false});
    }
    const size_t n_decode = batch_tokens_.size();
    const size_t n_ubatch = static_cast<size_t>(std::max<int64_t>(1, opt_.session.n_ubatch));
    size_t room = n_ubatch > n_decode ? n_ubatch - n_decode : 1;  // a prompt always advances
    std::vector<Slot*> prefilling;
    for (auto& sp : slots_)
        if (sp->job && !sp->prefill_done) prefilling.push_back(sp.get());
    // A lone prompt (no other slot prefilling or decoding): up to the engine's layer-major group
    // in one batch (docs/hybrid.md "Layer-major groups"), so each off-GPU expert crosses PCIe once
    // per layer per group instead of once per n_ubatch block. With other slots decoding, prompts
    // go in n_ubatch blocks between their steps so that their tokens keep coming.
    const size_t group = static_cast<size_t>(std::max<int64_t>(0, session_->prompt_group_tokens()));
    if (n_decode == 0 && prefilling.size() == 1 && group > n_ubatch) room = group;
    std::sort(prefilling.begin(), prefilling.end(), [](const Slot* a, const Slot* b) { return a->job->id < b->job->id; });
    for (Slot* sl : prefilling) {
        if (room == 0) break;
        const Job& job = *sl->job;
        const size_t n = std::min(job.prompt.size() - sl->n_evaluated, room);
        for (size_t i = 0; i < n; ++i) {
            batch_tokens_.push_back(job.prompt[sl->n_evaluated + i]);
            batch_seq_.push_back(sl->seq);
            batch_logits_.push_back(i + 1 == n && sl->n_evaluated + n == job.prompt.size());
        }
        parts.push_back({sl, n, true});
        room -= n;
    }
    if (parts.empty()) return;
    const auto t_step = Clock::now();
    try {
        session_->eval_batch(SeqBatch{batch_tokens_, batch_seq_, batch_logits_}, batch_out_);
    } catch (const std::exception& e) {
        // The engine is unchanged by a failed batch, but start these slots from a clean cache.
        for (const Part& p : parts) {
            session_->seq_truncate(p.slot->seq, 0);
            p.slot->cached.clear();
            p.slot->n_cached = 0;
            finish(*p.slot, FinishCause::ERROR, e.what());
        }
        return;
    }
    live_->on_step(n_decode, batch_tokens_.size() - n_decode, std::chrono::duration<double>(Clock::now() - t_step).count());
    steps_++;
    if (batch_tokens_.size() - n_decode > n_ubatch) group_steps_++;
    decode_rows_ += n_decode;
    prompt_rows_ += batch_tokens_.size() - n_decode;
    if (const MoeWork* w = session_->moe_work()) {
        // Distinct experts of steps with decode rows only (what a decode step reads), and in all.
        if (n_decode == batch_tokens_.size()) {
            decode_steps_++;
            decode_step_experts_ += w->experts - moe_experts_.load();
        }
        moe_experts_ = w->experts;
        moe_rows_ = w->rows;
        moe_bytes_ = w->bytes;
    }
    // Hand each slot its rows' results.
    const size_t V = static_cast<size_t>(model_.n_vocab());
    size_t row = 0, out = 0;
    for (const Part& p : parts) {
        Slot& slot = *p.slot;
        slot.cached.insert(slot.cached.end(), batch_tokens_.begin() + static_cast<long>(row),
                           batch_tokens_.begin() + static_cast<long>(row + p.n));
        slot.n_cached = static_cast<int64_t>(slot.cached.size());
        const bool has_logits = batch_logits_[row + p.n - 1] != 0;
        row += p.n;
        if (p.prompt) {
            slot.n_evaluated += p.n;
            if (slot.n_evaluated == slot.job->prompt.size()) {
                slot.prefill_done = true;
                slot.t_decode = Clock::now();
                slot.stats.prompt_ms = ms_between(slot.t_prompt, slot.t_decode);
            }
        } else {
            slot.pending = -1;
        }
        if (has_logits) {
            slot.logits.assign(batch_out_.begin() + static_cast<long>(out * V), batch_out_.begin() + static_cast<long>((out + 1) * V));
            slot.fresh = true;
            ++out;
        }
    }
    if (live_->due()) publish_live();
}

void Scheduler::publish_live() {
    slot_loads_.resize(slots_.size());
    for (size_t i = 0; i < slots_.size(); ++i) slot_loads_[i] = SlotLoad{slots_[i]->job != nullptr, slots_[i]->n_cached.load()};
    live_->publish(*session_, slot_loads_, n_ctx_);
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
    slot.busy = false;
    if (const ExpertCounters* c = session_->expert_counters()) {
        std::lock_guard<std::mutex> lk(experts_mu_);
        experts_ = *c;
    }
    std::shared_ptr<Job> job = std::move(slot.job);
    slot.clear_job();
    // An engine or grammar failure is a fault of the server (bad requests are refused before
    // they queue): say which request hit it.
    if (cause == FinishCause::ERROR)
        std::fprintf(stderr, "nitro serve: request %s (job %llu) failed after %lld tokens: %s\n",
                     job->request_id.empty() ? "-" : job->request_id.c_str(), static_cast<unsigned long long>(job->id),
                     static_cast<long long>(st.n_generated), error.c_str());
    live_->on_finish(st, cause == FinishCause::CANCELLED ? "cancelled"
                         : cause == FinishCause::ERROR   ? "error"
                         : cause == FinishCause::LENGTH  ? "length"
                                                         : "stop");
    publish_live();
    job->sink->on_finish(cause, st, error);
}

}  // namespace nitro::server
