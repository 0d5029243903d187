// A decoding session on the CPU: one sequence, its KV cache, and the forward pass.
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

#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

namespace nitro {

struct SessionOptions {
    int64_t n_ctx = 4096;    ///< context length, tokens (capped at the model's training context)
    int64_t n_ubatch = 512;  ///< prompt tokens per forward chunk
    int n_threads = 0;       ///< CPU threads (0 = all hardware threads)
};

/// Routing of one token at one layer, after the router's output is final (what traces record).
struct RouteEvent {
    int64_t pos;                       ///< token position in the sequence
    int layer;
    bool prefill;                      ///< part of a multi-token prompt chunk
    std::span<const int32_t> experts;  ///< selected expert ids, router order (n_expert_used)
    std::span<const float> weights;    ///< their weights
    /// Router logit of the last selected expert minus the best unselected one (nats, >= 0): how
    /// close this choice was to a different expert set. Rounding differences between engines or
    /// ISA levels (~1e-3 here) can swap experts only where it is that small.
    float margin = INFINITY;
};

/// Parts of the forward pass timed by Session (wall-clock seconds, summed over layers and calls).
enum class Phase : int {
    Embed,         ///< token_embd rows, RoPE tables
    AttnProj,      ///< attn_norm, q/k/v projections (+ bias, q/k norm, RoPE, K/V cache append)
    Attention,     ///< scores, softmax and V sum over the KV cache
    AttnOut,       ///< attn_output projection and residual
    Router,        ///< ffn_norm, ffn_gate_inp, top-k and expert weights
    ExpertGateUp,  ///< ffn_gate_exps and ffn_up_exps products (MUL_MAT_ID), grouping
    ExpertDown,    ///< activation, ffn_down_exps products
    MoeSum,        ///< weighted sum of the experts' outputs and residual
    LmHead,        ///< output_norm and the output (LM head) product
    Count
};
/// Name of a phase as `nitro bench` prints it, e.g. "expert gate/up".
const char* phase_name(Phase p);
using PhaseTimes = std::array<double, static_cast<size_t>(Phase::Count)>;

class Session {
public:
    /// Throws nitro::Error if n_ctx or n_ubatch is not positive.
    Session(const Model& model, const SessionOptions& opt);
    ~Session();

    /// Runs `tokens` at positions n_past() .. n_past() + n - 1 and appends them to the cache.
    /// logits: [n, n_vocab] when all_logits, else [1, n_vocab] for the last token.
    /// Throws nitro::Error if a token id is out of range or the context would overflow (the
    /// message gives both numbers); the session is unchanged then.
    void eval(std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits);

    int64_t n_past() const { return n_past_; }
    int64_t n_ctx() const { return spec_.n_ctx; }
    /// Forgets positions >= n (keeps a shared prefix). n <= n_past().
    void truncate(int64_t n);

    const Model& model() const { return model_; }
    const ModelSpec& spec() const { return spec_; }
    cpu::ThreadPool& pool() { return *pool_; }
    const KvCache& kv_cache() const { return *kv_; }

    /// Seconds spent in each phase since construction or the last reset_phase_times() (a few
    /// clock reads per layer; always on).
    const PhaseTimes& phase_times() const { return phase_s_; }
    void reset_phase_times() { phase_s_.fill(0.0); }

    /// Called for every (token, layer) with the final routing, if set.
    std::function<void(const RouteEvent&)> on_route;

private:
    struct Scratch;
    template <class B>
    friend void forward_chunk(B& b, const ModelSpec& spec, const ChunkArgs& c);
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
    /// h = rms_norm(x) * w for the chunk's n rows.
    void norm_rows(const GgufTensorInfo* w, int64_t n);
    /// Adds the time since the previous mark to phase p.
    void mark(Phase p);

    const Model& model_;
    ModelSpec spec_;
    int64_t n_past_ = 0;
    std::unique_ptr<cpu::ThreadPool> pool_;
    std::unique_ptr<KvCache> kv_;
    std::unique_ptr<Scratch> s_;
    std::vector<cpu::ExpertWeights> experts_;  ///< per layer
    std::span<const int32_t> tokens_;          ///< ids of the chunk being run
    float* logits_out_ = nullptr;              ///< where lm_head writes the chunk's logits
    PhaseTimes phase_s_{};
    std::chrono::steady_clock::time_point phase_t_;
};

}  // namespace nitro
