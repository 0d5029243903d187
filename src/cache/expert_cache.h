// Adaptive expert residency: the one component that owns the slot tables of every MoE layer and
// decides, step by step, which experts hold a VRAM slot (docs/hybrid.md, "Adaptive residency").
//
// The GPU engine drives it on the token path; the simulator (`nitro sim`) replays traces through
// the same object with a copy backend that lands every copy at once, so a simulated hit count on
// the routing the engine captured equals the engine's own count (tests/unit/test_expert_cache.cpp;
// tests/cuda/test_adaptive.cpp on the GPU).
//
// Slots of a layer are static (the first n_static of the initial residents, from the plan: never
// evicted) or adaptive (under an eviction policy of cache/expert_cache_policy.h). A step is one
// decode token or one prompt chunk; the engine calls, per step:
//
//   begin_step(n_tokens)       copies that have landed flip their slot to ready; the snapshot of
//                              ready slots is what every layer of the step computes against
//   access(layer, ids)         hit mask (ready slots) for the layer's selections; the policy's
//                              statistics; admissions of missed experts (slot, victim, staging
//                              buffer) under the rate limit and the free staging buffers
//   ... the CPU computes the missed experts and writes each admitted one's bytes into its
//       staging buffer as it reads them (copy-on-compute: cpu::moe_ffn's `copy_to`) ...
//   commit(layer)              the copies start (CopyBackend::submit)
//
// Rules that make it exact and safe:
//   - A victim is chosen only among experts the step does not compute (requested or protected),
//     so no kernel of the current step reads a slot that is being overwritten; from the next step
//     on the victim is not in the snapshot, and the new expert is in it only once its copy landed.
//   - Staging buffers are recycled only at step boundaries: a step may admit at most as many
//     experts as there were free buffers when it began (a copy that has not landed keeps its
//     buffer). With copies that land within a step, this is deterministic, and the simulator
//     models it exactly; a copy that is late (not landed at the next step) is counted.
//   - Nothing waits: no free buffer or an exhausted rate budget means the expert is computed by
//     the CPU and not admitted this time.
//   - A prompt chunk of n > 1 tokens requests only its round(prefill_weight x n_expert_used)
//     most selected experts (ties: lower id); its other experts are protected from eviction but
//     gain no recency, so a long prompt cannot flush the decode working set.
//   - The rate limit: at most max(1, round(admit_per_token x refresh_every)) admissions per layer
//     in each window of refresh_every tokens (a chunk advances the token clock by its n tokens;
//     layer l's windows start l tokens later, so the layers' budgets renew on different tokens);
//     refresh_every = 0 freezes residency (no admission ever: bit-exact A/B runs).
#pragma once

#include "cache/expert_cache_policy.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace nitro {

/// The adaptive-residency options (`nitro run/serve --mode hybrid`, `nitro sim`): docs/hybrid.md.
struct ResidencyOptions {
    // Defaults chosen by simulation on the trained routing traces at the shapes of gpt-oss-20b,
    // gpt-oss-120b and qwen3-30b-a3b (bench/traces/, docs/hybrid.md "Choosing the defaults").
    /// Eviction among adaptive slots: lru | lfu | lru-freq | freq-decay[:HALF_LIFE_TOKENS].
    std::string policy = "freq-decay:256";
    /// Share of each layer's slots that are static (the plan's first residents), in [0, 1].
    double static_share = 0.25;
    /// Window of the rate limit, tokens; 0 = frozen residency (no admissions).
    int refresh_every = 4;
    /// Admissions per layer per token (the window's budget is max(1, round(A x refresh_every))).
    double admit_per_token = 0.25;
    /// Weight of a prompt chunk in decode tokens: it requests its round(W x n_expert_used) most
    /// selected experts; 0 = prompts never change residency.
    double prefill_weight = 1.0;
    /// Pinned staging buffers (one expert each): the most admissions one step can start.
    /// < 0 = unlimited (the simulator's idealised model).
    int staging_buffers = 16;

    bool frozen() const { return refresh_every == 0; }
    /// Admissions per layer per window, 0 when frozen.
    int admissions_per_window() const;
    /// "lru, static 50%, 1 admission/layer every 4 tokens, prefill weight 1, 8 staging buffers".
    std::string describe() const;
    /// Throws nitro::Error naming the option (its command-line flag) and the accepted range.
    void validate() const;
};

/// Builds one layer's eviction policy from its name (ResidencyOptions::policy). Throws
/// nitro::Error for an unknown name or a bad parameter.
std::unique_ptr<ExpertCachePolicy> make_eviction_policy(const std::string& name, int n_expert, int capacity);

/// The initial state of one layer's slots.
struct LayerSlots {
    /// The layer's routed experts: -1 = the cache's n_expert; 0 = a layer without routed experts
    /// (a dense FFN layer: no slots, never accessed).
    int n_expert = -1;
    std::vector<int32_t> resident;  ///< slot s initially holds resident[s]
    int capacity = -1;              ///< slots of the layer (>= resident.size()); -1 = resident.size()
    int n_static = 0;               ///< the first n_static residents are pinned (never evicted)
    uint64_t expert_bytes = 0;      ///< bytes of one expert (what an admission copies)
};

/// Everything an ExpertCache starts from: the options and each layer's initial slots. The GPU engine
/// writes its own next to a `--trace FILE` (FILE.residency.json, setup_to_json) so that `nitro sim
/// FILE --engine` replays exactly what the engine ran.
struct CacheSetup {
    ResidencyOptions opt;
    std::vector<LayerSlots> layers;
};

/// {"options": {...}, "layers": [{"n_expert": N, "resident": [...], "capacity": C, "n_static": S, "expert_bytes": B}]}
/// (n_expert -1: the cache's; 0: no routed experts; read as -1 when absent).
nlohmann::json setup_to_json(const CacheSetup& setup);
/// The inverse; throws nitro::Error naming the field that is missing or out of range.
CacheSetup setup_from_json(const nlohmann::json& j);

/// One admission decided in a step: `expert` goes into `slot` (replacing `evicted`, or kNoExpert
/// for a free slot) through staging buffer `buffer`.
struct Admission {
    ExpertId expert = kNoExpert;
    ExpertId evicted = kNoExpert;
    int32_t slot = -1;
    int32_t buffer = -1;
};

/// Counters of one layer (or the total). Selections are (token, expert) pairs.
struct CacheCounters {
    uint64_t hits = 0;              ///< selections whose expert was in a ready slot
    uint64_t misses = 0;            ///< selections computed elsewhere (the CPU)
    uint64_t admissions = 0;        ///< experts admitted (a copy started or was decided)
    uint64_t evictions = 0;         ///< admissions that displaced a cached expert
    uint64_t refused_rate = 0;      ///< requested misses not admitted: the rate budget was used up
    uint64_t refused_staging = 0;   ///< ... no staging buffer was free
    uint64_t refused_policy = 0;    ///< ... the policy declined (no evictable victim)
    uint64_t late_copies = 0;       ///< copies not landed at the first step boundary after them
    uint64_t failed_copies = 0;     ///< copies that failed (the expert was dropped from its slot)
    uint64_t flips = 0;             ///< copies that landed and made their slot ready
    uint64_t h2d_bytes = 0;         ///< bytes of the copies started (admissions x expert bytes)
    void add(const CacheCounters& o);
    double hit_rate() const { return hits + misses ? static_cast<double>(hits) / static_cast<double>(hits + misses) : 0.0; }
};

/// How admitted experts' bytes reach their slots. The engine's backend copies a pinned staging
/// buffer into a VRAM slot on a copy stream (gpu/gpu_session.cpp); the simulator's lands every
/// copy at once (InstantCopyBackend); tests inject delays and failures.
class CopyBackend {
public:
    enum class State { Pending, Landed, Failed };
    virtual ~CopyBackend() = default;
    /// Staging buffers available (fixed after construction).
    virtual int n_buffers() const = 0;
    /// Host memory of `buffer` (at least one expert's bytes), or null when nothing is copied
    /// (the simulator): then the CPU does not write it.
    virtual uint8_t* buffer_data(int buffer) = 0;
    /// Starts copying `buffer` (expert `expert`'s bytes, written by the CPU) into `slot` of `layer`.
    /// Returns false if the copy could not be started.
    virtual bool submit(int buffer, int layer, int slot, ExpertId expert) = 0;
    /// State of the last copy submitted from `buffer`.
    virtual State poll(int buffer) = 0;
};

/// A backend whose copies land at once (the simulator; `buffers` < 0 = unlimited, modelled as
/// one buffer per possible admission).
class InstantCopyBackend final : public CopyBackend {
public:
    explicit InstantCopyBackend(int buffers) : n_(buffers) {}
    int n_buffers() const override { return n_; }
    uint8_t* buffer_data(int) override { return nullptr; }
    bool submit(int, int, int, ExpertId) override { return true; }
    State poll(int) override { return State::Landed; }

private:
    int n_;
};

/// The slot tables of every layer and the residency decisions (see the file comment).
/// Not thread-safe: one thread drives it (the engine's CPU side, or the simulator).
class ExpertCache {
public:
    /// `layers`: initial slots per layer (all layers of the model, in order); `n_expert`,
    /// `n_expert_used`: the model's; `backend` may be null only when opt.frozen(). With
    /// opt.staging_buffers >= 0 the backend's n_buffers() is used (the engine may have pinned
    /// fewer than asked). Throws nitro::Error on bad options or initial slots (an expert id out of
    /// range or twice in a layer).
    ExpertCache(std::vector<LayerSlots> layers, int n_expert, int n_expert_used, const ResidencyOptions& opt,
                CopyBackend* backend);
    ExpertCache(const CacheSetup& setup, int n_expert, int n_expert_used, CopyBackend* backend)
        : ExpertCache(setup.layers, n_expert, n_expert_used, setup.opt, backend) {}
    /// The setup this cache started from.
    const CacheSetup& setup() const { return setup_; }
    ~ExpertCache();
    ExpertCache(const ExpertCache&) = delete;
    ExpertCache& operator=(const ExpertCache&) = delete;

    /// Starts a step of `n_tokens` tokens (1: a decode token; > 1: a prompt chunk): polls the
    /// copies in flight, flips landed ones, recycles their buffers.
    void begin_step(int64_t n_tokens);
    /// Layer `layer` of the current step. `ids`: [n * n_expert_used] selections in router order per
    /// token, n <= n_tokens (a trace may lack a token's record for a layer). Returns the step's decisions for the layer (valid until the next access
    /// of the same layer): resident()[e] = 1 when expert e is computed from its slot.
    struct LayerStep {
        std::span<const uint8_t> resident;        ///< [n_expert]
        std::span<const Admission> admissions;    ///< staging buffers to fill, then commit()
    };
    LayerStep access(int layer, std::span<const int32_t> ids);
    /// Starts the copies of `layer`'s admissions of this step (after the CPU filled their buffers).
    /// A copy that cannot start drops its expert from the slot (counted as failed).
    void commit(int layer);
    /// Abandons `layer`'s admissions of this step instead of commit() (the CPU failed before their
    /// buffers were filled): the experts leave their slots, counted as failed copies.
    void abandon(int layer);

    /// Ready slot of each expert of `layer` ([n_expert], -1 = not resident): the snapshot of the
    /// current step. The engine mirrors it to the device before each step.
    std::span<const int32_t> slot_of(int layer) const;
    /// The expert in each slot of `layer` as the policy sees it (kNoExpert = free), for tests.
    std::span<const ExpertId> slots(int layer) const;
    int capacity(int layer) const;
    int n_layer() const { return static_cast<int>(layers_.size()); }
    /// Whether `layer`'s snapshot changed since the last call of take_changed(layer).
    bool take_changed(int layer);
    const CacheCounters& counters(int layer) const;
    CacheCounters total() const;
    const ResidencyOptions& options() const { return opt_; }
    /// Steps begun so far.
    uint64_t steps() const { return step_; }
    /// Buffers whose copies are in flight now.
    int in_flight() const { return static_cast<int>(flight_.size()); }

private:
    struct Layer;
    struct Flight {
        int buffer, layer, slot;
        ExpertId expert;
        uint64_t gen;
        uint64_t step;
        bool late_counted;
    };
    void land(const Flight& f, CopyBackend::State st);

    CacheSetup setup_;
    ResidencyOptions opt_;
    int n_expert_, k_;
    CopyBackend* backend_;
    std::vector<std::unique_ptr<Layer>> layers_;
    std::vector<int> free_buffers_;
    std::vector<Flight> flight_;
    int buffers_at_start_ = 0;    // free buffers when the step began (the step's admission cap)
    int buffers_taken_ = 0;
    int64_t n_tokens_ = 0;        // tokens of the current step
    int64_t clock_ = 0;           // tokens before the current step
    uint64_t step_ = 0;
    bool unlimited_ = false;
};

}  // namespace nitro
