// The scheduler with several slots (nitro serve --parallel N): concurrent jobs give the tokens
// they give one at a time (greedy and seeded sampling, prompts chunked, past the sliding window),
// the steps are really batched, cancelling one slot leaves the others unharmed and frees the
// slot, prefix reuse works per slot (also with a recurrent state: qwen3next), an engine with one
// sequence refuses --parallel 2, and --mode gpu/hybrid take --parallel N from the GPU engine factory.
#include "arch/synth.h"
#include "core/error.h"
#include "gguf_bytes.h"
#include "runtime/generate.h"
#include "runtime/model.h"
#include "server/scheduler.h"
#include "tokenizer_fixtures.h"

#include <gtest/gtest.h>

#include <functional>
#include <future>
#include <set>

namespace nitro::server {
namespace {

using test::tokenizer_for;

std::vector<int32_t> ids_of(const Tokenizer& tok, const std::string& text) {
    EncodeOptions enc;
    enc.parse_special = true;
    return tok.encode(text, enc);
}

struct Collect : TokenSink {
    std::vector<int32_t> ids;
    int64_t reused = -1;
    FinishCause cause{};
    JobStats stats;
    std::promise<void> done;
    std::function<void(size_t)> after_token;  ///< called with the number of tokens so far
    void on_start(int64_t n) override { reused = n; }
    bool on_token(const TokenStep& s) override {
        ids.push_back(s.id);
        if (after_token) after_token(ids.size());
        return true;
    }
    void on_finish(FinishCause c, const JobStats& st, const std::string&) override {
        cause = c;
        stats = st;
        done.set_value();
    }
};

struct JobRun {
    std::shared_ptr<Job> job;
    std::shared_ptr<Collect> sink;
    std::future<void> done;
};

JobRun make_run(const std::vector<int32_t>& prompt, int64_t max_tokens, const SamplerParams& sp = {}) {
    JobRun r;
    r.sink = std::make_shared<Collect>();
    r.job = std::make_shared<Job>();
    r.job->prompt = prompt;
    r.job->max_tokens = max_tokens;
    r.job->ignore_eos = true;
    r.job->sampling = sp;
    r.job->sink = r.sink;
    r.done = r.sink->done.get_future();
    return r;
}

/// A counter or gauge of the /metrics page, by its full name with labels.
double metric(const Metrics& m, const std::string& name) {
    const std::string page = m.render();
    const size_t at = page.find("\n" + name + " ");
    if (at == std::string::npos) ADD_FAILURE() << name << " is not on the /metrics page";
    return at == std::string::npos ? -1 : std::stod(page.substr(at + name.size() + 2));
}

SchedulerOptions options(const Model& model, const Tokenizer& tok, int slots) {
    SchedulerOptions so;
    so.session.n_ctx = 256;
    so.session.n_threads = 2;
    so.session.n_ubatch = 8;  // the longer prompts are prefilled in chunks between decode steps
    so.end_of_generation = end_of_generation_tokens(model, tok);
    so.n_slots = slots;
    return so;
}

/// Prompts of different lengths (5..~50 tokens: beyond the gpt-oss fixture's window of 16).
std::vector<std::vector<int32_t>> prompts(const Tokenizer& tok) {
    return {ids_of(tok, "Hello there."),
            ids_of(tok, "The quick brown fox jumps over the lazy dog, and then the dog sleeps in the sun all afternoon."),
            ids_of(tok, "def add(a, b):\n    return a + b\n"),
            ids_of(tok, "Once upon a time, in a land far away, there lived a king who had three daughters; the youngest was "
                        "the cleverest of them all, and she could speak with the birds of the forest and the fish of the sea.")};
}

/// Each prompt alone, one after the other, on a one-slot scheduler: the reference tokens.
std::vector<std::vector<int32_t>> sequential(const Model& model, const Tokenizer& tok, const std::vector<std::vector<int32_t>>& ps,
                                             int64_t max_tokens, const std::vector<SamplerParams>& sp, double* steps) {
    Metrics m;
    Scheduler s(model, options(model, tok, 1), m);
    std::vector<std::vector<int32_t>> out;
    for (size_t i = 0; i < ps.size(); ++i) {
        JobRun r = make_run(ps[i], max_tokens, sp[i]);
        s.submit(r.job);
        r.done.wait();
        EXPECT_EQ(r.sink->cause, FinishCause::LENGTH);
        out.push_back(r.sink->ids);
    }
    if (steps) *steps = metric(m, "nitro_batch_steps_total");
    return out;
}

}  // namespace

TEST(ServerScheduler, FourConcurrentJobsGiveTheTokensTheyGiveAlone) {
    for (const char* family : {"gpt-oss", "qwen3"}) {
        Model model(test::fixture_for(family));
        const Tokenizer& tok = tokenizer_for(family);
        const auto ps = prompts(tok);
        ASSERT_GT(ps[3].size(), 40u) << "one prompt spans several chunks and the sliding window";
        // Greedy, then seeded sampling at temperature 1 (per-request samplers: a job's draws do
        // not depend on the other slots).
        for (bool greedy : {true, false}) {
            std::vector<SamplerParams> sp(ps.size());
            for (size_t i = 0; i < sp.size(); ++i)
                if (!greedy) sp[i].temperature = 1.0f, sp[i].top_k = 0, sp[i].seed = 1000 + i;
            const int64_t n = 24;
            double seq_steps = 0;
            const auto ref = sequential(model, tok, ps, n, sp, &seq_steps);
            Metrics m;
            Scheduler s(model, options(model, tok, 4), m);
            EXPECT_EQ(metric(m, "nitro_slots"), 4);
            std::vector<JobRun> runs;
            for (size_t i = 0; i < ps.size(); ++i) runs.push_back(make_run(ps[i], n, sp[i]));
            for (auto& r : runs) s.submit(r.job);
            for (auto& r : runs) r.done.wait();
            for (size_t i = 0; i < runs.size(); ++i) {
                EXPECT_EQ(runs[i].sink->cause, FinishCause::LENGTH) << family << " job " << i;
                EXPECT_EQ(runs[i].sink->ids.size(), static_cast<size_t>(n));
                EXPECT_EQ(runs[i].sink->ids, ref[i]) << family << (greedy ? " greedy" : " sampled") << ": job " << i
                                                     << " differs from the same job run alone";
            }
            if (!greedy) { EXPECT_NE(ref[0], ref[1]) << "seeded sampling must differ between jobs for the test to mean anything"; }
            // Really batched: far fewer forward steps than one at a time, several decode rows per step.
            const double steps = metric(m, "nitro_batch_steps_total");
            const double decode_rows = metric(m, "nitro_batch_rows_total{kind=\"decode\"}");
            EXPECT_EQ(decode_rows, 4 * (n - 1));
            EXPECT_EQ(metric(m, "nitro_batch_rows_total{kind=\"prompt\"}"),
                      static_cast<double>(ps[0].size() + ps[1].size() + ps[2].size() + ps[3].size()));
            EXPECT_LT(steps, 0.5 * seq_steps) << family << ": " << steps << " batched steps vs " << seq_steps << " sequential";
            EXPECT_GT(decode_rows / steps, 2.0) << "decode rows per step";
            // The MoE counters: every row computes n_expert_used experts per layer; rows of one
            // step routed to the same expert share its weight read (fewer distinct experts).
            const double rows = decode_rows + metric(m, "nitro_batch_rows_total{kind=\"prompt\"}");
            const double per_row = static_cast<double>(model.hp().n_expert_used * model.hp().n_layer);
            EXPECT_EQ(metric(m, "nitro_moe_expert_rows_total"), rows * per_row);
            EXPECT_LT(metric(m, "nitro_moe_experts_total"), rows * per_row);
            const double dsteps = metric(m, "nitro_decode_steps_total");
            EXPECT_GT(dsteps, 0);
            EXPECT_LT(metric(m, "nitro_decode_step_experts_total"), 4 * dsteps * per_row)
                << "4 decode rows per step share some experts";
            double slot_requests = 0;
            for (int i = 0; i < 4; ++i) slot_requests += metric(m, fmt::format("nitro_slot_requests_total{{slot=\"{}\"}}", i));
            EXPECT_EQ(slot_requests, 4);
            EXPECT_EQ(metric(m, "nitro_slots_busy"), 0);
        }
    }
}

TEST(ServerScheduler, CancellingOneSlotLeavesTheOthersUnharmed) {
    Model model(test::fixture_for("gpt-oss"));
    const Tokenizer& tok = tokenizer_for("gpt-oss");
    const auto ps = prompts(tok);
    const int64_t n = 20;
    const std::vector<SamplerParams> sp(ps.size());
    const auto ref = sequential(model, tok, ps, n, sp, nullptr);
    Metrics m;
    Scheduler s(model, options(model, tok, 4), m);
    std::vector<JobRun> runs;
    for (size_t i = 0; i < ps.size(); ++i) runs.push_back(make_run(ps[i], n));
    // Job 1 is cancelled (as the HTTP thread does when its client goes away) after its 3rd token;
    // the scheduler checks the flag at the next step, before sampling a 4th.
    std::shared_ptr<Job> victim = runs[1].job;
    runs[1].sink->after_token = [&s, victim](size_t k) {
        if (k == 3) std::thread([&s, victim] { s.cancel(victim); }).join();
    };
    for (auto& r : runs) s.submit(r.job);
    for (auto& r : runs) r.done.wait();
    EXPECT_EQ(runs[1].sink->cause, FinishCause::CANCELLED);
    EXPECT_EQ(runs[1].sink->ids, std::vector<int32_t>(ref[1].begin(), ref[1].begin() + 3));
    for (size_t i : {0u, 2u, 3u}) {
        EXPECT_EQ(runs[i].sink->cause, FinishCause::LENGTH) << "job " << i;
        EXPECT_EQ(runs[i].sink->ids, ref[i]) << "job " << i << " was disturbed by the cancellation of job 1";
    }
    EXPECT_EQ(m.requests_cancelled.load(), 1u);
    // The freed slot serves the next job at once, with the right tokens.
    JobRun again = make_run(ps[1], n);
    s.submit(again.job);
    ASSERT_EQ(again.done.wait_for(std::chrono::seconds(60)), std::future_status::ready);
    EXPECT_EQ(again.sink->cause, FinishCause::LENGTH);
    EXPECT_EQ(again.sink->ids, ref[1]);
    // A cancelled queued job never takes a slot: 4 long jobs hold the slots, a 5th waits and goes.
    std::vector<JobRun> hold;
    for (size_t i = 0; i < 4; ++i) hold.push_back(make_run(ps[i], 200));
    for (auto& r : hold) s.submit(r.job);
    JobRun queued = make_run(ps[0], n);
    s.submit(queued.job);
    s.cancel(queued.job);
    ASSERT_EQ(queued.done.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    EXPECT_EQ(queued.sink->cause, FinishCause::CANCELLED);
    EXPECT_TRUE(queued.sink->ids.empty());
    for (auto& r : hold) s.cancel(r.job);
    for (auto& r : hold) r.done.wait();
    EXPECT_EQ(m.requests_cancelled.load(), 6u);
}

TEST(ServerScheduler, PrefixReuseIsPerSlot) {
    // Two conversations at once on two slots; their follow-ups each find their own prefix.
    Model model(test::fixture_for("qwen3"));
    const Tokenizer& tok = tokenizer_for("qwen3");
    const auto a = ids_of(tok, "The quick brown fox jumps over the lazy dog.");
    const auto b = ids_of(tok, "Tell me about the history of the Roman empire, please.");
    auto a2 = a, b2 = b;
    for (int32_t t : ids_of(tok, " And then it ran away.")) a2.push_back(t);
    for (int32_t t : ids_of(tok, " Start with Augustus.")) b2.push_back(t);
    const std::vector<SamplerParams> sp(2);
    const auto ref = sequential(model, tok, {a2, b2}, 6, sp, nullptr);
    Metrics m;
    Scheduler s(model, options(model, tok, 2), m);
    std::vector<JobRun> first;
    first.push_back(make_run(a, 6));
    first.push_back(make_run(b, 6));
    for (auto& r : first) s.submit(r.job);
    for (auto& r : first) r.done.wait();
    EXPECT_EQ(first[0].sink->reused, 0);
    EXPECT_EQ(first[1].sink->reused, 0);
    // Follow-ups in the other order: each goes to the slot holding its conversation.
    std::vector<JobRun> second;
    second.push_back(make_run(b2, 6));
    second.push_back(make_run(a2, 6));
    for (auto& r : second) s.submit(r.job);
    for (auto& r : second) r.done.wait();
    EXPECT_EQ(second[0].sink->reused, static_cast<int64_t>(b.size()));
    EXPECT_EQ(second[1].sink->reused, static_cast<int64_t>(a.size()));
    EXPECT_EQ(second[1].sink->ids, ref[0]) << "reusing the prefix must not change the output";
    EXPECT_EQ(second[0].sink->ids, ref[1]);
    EXPECT_EQ(m.prompt_tokens_reused.load(), a.size() + b.size());
    EXPECT_EQ(metric(m, "nitro_slot_cached_tokens{slot=\"0\"}") + metric(m, "nitro_slot_cached_tokens{slot=\"1\"}"),
              static_cast<double>(a2.size() + b2.size() + 2 * 5));
}

namespace {

class OneSequenceEngine final : public Engine {
public:
    void eval(std::span<const int32_t>, bool, std::vector<float>&) override {}
    int64_t n_past() const override { return 0; }
    int64_t n_ctx() const override { return 16; }
    void truncate(int64_t) override {}
    std::string describe() const override { return "gpu (test)"; }
};

}  // namespace

TEST(ServerScheduler, ParallelNeedsAnEngineThatHoldsTheSequences) {
    OneSequenceEngine e;
    EXPECT_NO_THROW(check_slots(e, 1));
    try {
        check_slots(e, 2);
        FAIL() << "--parallel 2 accepted on a one-sequence engine";
    } catch (const Error& err) {
        const std::string msg = err.what();
        EXPECT_NE(msg.find("--parallel 2 needs an engine that holds 2 sequences, but gpu (test) holds 1: use --parallel 1"),
                  std::string::npos)
            << msg;
    }
    EXPECT_THROW(check_slots(e, 0), Error);
    // nitro serve --mode gpu / hybrid in a build without CUDA: that is named before anything loads.
    if (gpu_engine_available()) return;
    Model model(test::fixture_for("qwen3"));
    for (EngineMode mode : {EngineMode::Gpu, EngineMode::Hybrid}) {
        Metrics m;
        SchedulerOptions so = options(model, tokenizer_for("qwen3"), 2);
        so.mode = mode;
        try {
            Scheduler s(model, so, m);
            FAIL() << "--mode " << engine_mode_name(mode) << " accepted without a GPU engine";
        } catch (const Error& err) {
            const std::string msg = err.what();
            EXPECT_NE(msg.find(fmt::format("--mode {} needs a build with the CUDA backend", engine_mode_name(mode))),
                      std::string::npos)
                << msg;
        }
    }
}

namespace {

/// Installs a GPU engine factory for one test and removes it again.
struct FactoryGuard {
    explicit FactoryGuard(GpuEngineFactory f) { set_gpu_engine_factory(std::move(f), [] { return 1; }); }
    ~FactoryGuard() { set_gpu_engine_factory(nullptr, nullptr); }
};

}  // namespace

TEST(ServerScheduler, GpuModesServeParallelSlotsWithAnEngineThatBatches) {
    // --mode gpu / hybrid --parallel 3 is no longer refused before the engine is made: the
    // scheduler asks the GPU factory for an engine of 3 sequences and batches the slots through it.
    // The factory here stands in for the CUDA one (CI has no GPU): the CPU engine with the
    // sequences it is asked for. A factory whose engine holds fewer is refused by check_slots.
    ASSERT_FALSE(gpu_engine_available()) << "this test installs its own GPU engine factory";
    Model model(test::fixture_for("gpt-oss"));
    const Tokenizer& tok = tokenizer_for("gpt-oss");
    auto ps = prompts(tok);
    ps.resize(3);
    const int64_t n = 12;
    std::vector<SamplerParams> sp(ps.size());
    sp[2].temperature = 1.0f, sp[2].top_k = 0, sp[2].seed = 7;  // per-request sampling on a GPU-mode server
    const auto ref = sequential(model, tok, ps, n, sp, nullptr);
    for (EngineMode mode : {EngineMode::Gpu, EngineMode::Hybrid}) {
        std::vector<int> asked;
        std::vector<EngineMode> modes;
        FactoryGuard guard([&](const Model& md, const SessionOptions& so, const GpuOptions& go) {
            asked.push_back(so.n_seq);
            modes.push_back(go.mode);
            return make_engine(EngineMode::Cpu, md, so, go);
        });
        Metrics m;
        SchedulerOptions so = options(model, tok, 3);
        so.mode = mode;
        Scheduler s(model, so, m);
        ASSERT_EQ(asked, std::vector<int>{3}) << engine_mode_name(mode);
        EXPECT_EQ(modes, std::vector<EngineMode>{mode});
        std::vector<JobRun> runs;
        for (size_t i = 0; i < ps.size(); ++i) runs.push_back(make_run(ps[i], n, sp[i]));
        for (auto& r : runs) s.submit(r.job);
        for (auto& r : runs) r.done.wait();
        for (size_t i = 0; i < runs.size(); ++i) {
            EXPECT_EQ(runs[i].sink->cause, FinishCause::LENGTH);
            EXPECT_EQ(runs[i].sink->ids, ref[i]) << engine_mode_name(mode) << ": job " << i << " differs from the job run alone";
        }
        EXPECT_GT(metric(m, "nitro_batch_rows_total{kind=\"decode\"}") / metric(m, "nitro_batch_steps_total"), 1.5)
            << "decode rows per step: the slots were not batched";
    }
    // An engine that holds one sequence whatever it is asked for: refused with the numbers.
    FactoryGuard one([](const Model&, const SessionOptions&, const GpuOptions&) -> std::unique_ptr<Engine> {
        return std::make_unique<OneSequenceEngine>();
    });
    Metrics m;
    SchedulerOptions so = options(model, tok, 2);
    so.mode = EngineMode::Gpu;
    try {
        Scheduler s(model, so, m);
        FAIL() << "--parallel 2 accepted on an engine of one sequence";
    } catch (const Error& err) {
        EXPECT_NE(std::string(err.what()).find("holds 1: use --parallel 1"), std::string::npos) << err.what();
    }
}

TEST(ServerScheduler, PrefixReuseRestoresTheRecurrentState) {
    // qwen3next (Gated DeltaNet layers): a follow-up that reuses the prompt and 8 of the 12
    // evaluated generated tokens of a finished request. The DeltaNet state cannot be cut back to
    // the reused length, so the slot's sequence restores its snapshot after the prompt and
    // evaluates those 8 tokens again. The lengths are multiples of n_ubatch (8), so the reused path
    // evaluates the same chunks as a fresh run, and the tokens must be equal (with the state left
    // at 52 tokens they are not).
    const std::string dir = test::temp_dir("sched-qwen3next");
    SynthOptions syn;
    syn.arch = "qwen3next";
    syn.preset = "tiny";
    syn.out = dir + "/q.gguf";
    synth_model(syn);
    Model model(syn.out);
    const int32_t V = static_cast<int32_t>(model.n_vocab());
    std::vector<int32_t> a, extra;
    for (int i = 0; i < 40; ++i) a.push_back((i * 37 + 5) % V);
    for (int i = 0; i < 12; ++i) extra.push_back((i * 11 + 3) % V);
    SchedulerOptions so;
    so.session.n_ctx = 256;
    so.session.n_threads = 2;
    so.session.n_ubatch = 8;
    so.n_slots = 1;
    Metrics m;
    Scheduler s(model, so, m);
    JobRun first = make_run(a, 13);  // 12 generated tokens are evaluated (the 13th only sampled)
    s.submit(first.job);
    first.done.wait();
    ASSERT_EQ(first.sink->ids.size(), 13u);
    auto follow = a;
    follow.insert(follow.end(), first.sink->ids.begin(), first.sink->ids.begin() + 8);
    follow.insert(follow.end(), extra.begin(), extra.end());
    JobRun second = make_run(follow, 10);
    s.submit(second.job);
    second.done.wait();
    EXPECT_EQ(second.sink->reused, 48);
    Metrics m2;
    Scheduler fresh(model, so, m2);
    JobRun ref = make_run(follow, 10);
    fresh.submit(ref.job);
    ref.done.wait();
    EXPECT_EQ(ref.sink->reused, 0);
    EXPECT_EQ(second.sink->ids, ref.sink->ids) << "the reused prefix must give the tokens of a fresh run";
}

}  // namespace nitro::server

namespace nitro::server {
namespace {

/// The CPU engine, reporting a layer-major prompt group of `group` tokens (as the hybrid GPU
/// engine does, Engine::prompt_group_tokens) and recording every batch the scheduler hands it.
class GroupingEngine final : public Engine {
public:
    struct Batch {
        size_t rows = 0;
        std::set<int32_t> seqs;
    };
    GroupingEngine(std::unique_ptr<Engine> inner, int64_t group, std::vector<Batch>& log)
        : inner_(std::move(inner)), group_(group), log_(log) {}
    void eval(std::span<const int32_t> t, bool all, std::vector<float>& l) override { inner_->eval(t, all, l); }
    int64_t n_past() const override { return inner_->n_past(); }
    int64_t n_ctx() const override { return inner_->n_ctx(); }
    void truncate(int64_t n) override { inner_->truncate(n); }
    int n_seq() const override { return inner_->n_seq(); }
    void eval_batch(const SeqBatch& b, std::vector<float>& l) override {
        log_.push_back({b.tokens.size(), std::set<int32_t>(b.seq.begin(), b.seq.end())});
        inner_->eval_batch(b, l);
    }
    int64_t seq_n_past(int seq) const override { return inner_->seq_n_past(seq); }
    void seq_truncate(int seq, int64_t n) override { inner_->seq_truncate(seq, n); }
    std::string describe() const override { return "hybrid (test, groups of " + std::to_string(group_) + ")"; }
    int64_t prompt_group_tokens() const override { return group_; }

private:
    std::unique_ptr<Engine> inner_;
    int64_t group_;
    std::vector<Batch>& log_;
};

}  // namespace

TEST(ServerScheduler, ALonePromptGoesToTheEngineInLayerMajorGroups) {
    // A prompt with no other slot busy goes to the engine in batches of its prompt group (32 rows
    // here, n_ubatch 8), so the hybrid engine can run it layer-major; while another slot decodes,
    // prompts go in n_ubatch blocks between its steps. Tokens equal each job's alone either way.
    ASSERT_FALSE(gpu_engine_available()) << "this test installs its own GPU engine factory";
    Model model(test::fixture_for("gpt-oss"));
    const Tokenizer& tok = tokenizer_for("gpt-oss");
    const auto ps = prompts(tok);
    const std::vector<int32_t>& longp = ps[3];  // ~50 tokens: a group of 32, then the rest
    ASSERT_GT(longp.size(), 40u);
    const int64_t n = 10;
    const auto ref = sequential(model, tok, {longp, ps[0]}, n, std::vector<SamplerParams>(2), nullptr);
    std::vector<GroupingEngine::Batch> log;
    FactoryGuard guard([&](const Model& md, const SessionOptions& so, const GpuOptions& go) -> std::unique_ptr<Engine> {
        return std::make_unique<GroupingEngine>(make_engine(EngineMode::Cpu, md, so, go), 32, log);
    });
    Metrics m;
    SchedulerOptions so = options(model, tok, 2);
    so.mode = EngineMode::Hybrid;
    Scheduler s(model, so, m);
    // Alone: the prompt in two batches (32 rows, then the rest), then one row per step.
    {
        JobRun r = make_run(longp, n);
        s.submit(r.job);
        r.done.wait();
        EXPECT_EQ(r.sink->ids, ref[0]);
        ASSERT_GE(log.size(), 2u);
        EXPECT_EQ(log[0].rows, 32u);
        EXPECT_EQ(log[1].rows, longp.size() - 32);
        EXPECT_EQ(metric(m, "nitro_batch_prompt_group_steps_total"), 2);
    }
    // Beside a decoding slot: every batch with rows of both sequences has at most n_ubatch rows.
    log.clear();
    JobRun dec = make_run(ps[0], 40);
    std::promise<void> decoding;
    dec.sink->after_token = [&](size_t k) {
        if (k == 2) decoding.set_value();
    };
    s.submit(dec.job);
    decoding.get_future().wait();
    JobRun r = make_run(longp, n);
    s.submit(r.job);
    r.done.wait();
    dec.done.wait();
    EXPECT_EQ(r.sink->ids, ref[0]) << "the prompt beside a decoding slot";
    EXPECT_EQ(std::vector<int32_t>(dec.sink->ids.begin(), dec.sink->ids.begin() + n), ref[1]);
    size_t mixed = 0;
    for (const auto& b : log) {
        if (b.seqs.size() < 2) continue;
        ++mixed;
        EXPECT_LE(b.rows, 8u) << "a prompt group beside a decoding slot";
    }
    EXPECT_GT(mixed, 0u) << "the two jobs never shared a step";
}

}  // namespace nitro::server
